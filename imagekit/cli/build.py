"""build: every cell (local bases first) on the engine, and a report.

``build --verify`` runs the stages together (``build_and_verify``): build, then verify what was
built or found unchanged, in one report. It lives here, above both stages: the builder knows
nothing of verification, the harness nothing of builds.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from imagekit.builds.command_line import DEFAULT_MATRIX, BuildCommand, spellings
from imagekit.cli.app import Launch, app, gpu_request, reports_errors, say, select_cells
from imagekit.cli.flags import (
    GpusOption,
    JsonOption,
    MatrixOption,
    OnlyOption,
    RegistryOption,
    StateDirOption,
    VerifyTimeoutOption,
    parse_mapping,
)
from imagekit.core.clock import today
from imagekit.core.errors import ExitCode
from imagekit.core.limits import MAX_TIMEOUT_S
from imagekit.core.text import elided, printable, redact
from imagekit.report.state import DEFAULT_STATE_DIR

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import docker

    from imagekit.builds.builder import Builder
    from imagekit.builds.outcome import BuildOutcome
    from imagekit.plan.cells import Cell
    from imagekit.report.store import ReportStore
    from imagekit.report.verification import Verification
    from imagekit.verify.gpus import GpuRequest
    from imagekit.verify.harness import Harness


def _echo_verification(result: Verification) -> None:
    line = f"{result.label:<20} {result.target}"
    if result.verdict == "failed":
        failed = result.failed_checks()
        reason = result.error or "; ".join(
            f"{c.name}: {c.cause or c.reason or 'failed'}" + (f" (fix: {c.fix})" if c.fix else "")
            for c in failed[:3]
        )
        line += f": {reason}"
    typer.echo(elided(printable(redact(line))))  # the reasons are what an image printed: any length


def _harness(
    api: docker.APIClient,
    gpus: GpuRequest,
    timeout: float,
    memory: str,
    logs: Path | None,
    pull: bool = False,
) -> Harness:
    from imagekit.verify.harness import Harness, Limits

    limits = Limits(timeout_s=timeout, memory=memory)
    return Harness(api, gpus, limits, logs_dir=logs, pull=pull)


def build_and_verify(
    builder: Builder,
    cells: Sequence[Cell],
    store: ReportStore,
    harness: Harness | None = None,
    on_verified: Callable[[Verification], None] = lambda _: None,
) -> BuildOutcome:
    """Build ``cells`` and record the report; with a harness, then verify what was built or found
    unchanged, each verdict landing in the same report as it comes."""
    # Imported here, not at the top: `imagekit --help` and every other command load this module.
    from imagekit.verify.schedule import verify_cells

    outcome = builder.run(tuple(cells))
    store.save(outcome.report)
    if harness is None or outcome.interrupted:
        return outcome
    ready = {r.id for r in outcome.report.cells if r.status in ("built", "skipped")}
    verifications = verify_cells(harness, [c for c in cells if c.id in ready], store, on_verified)
    return replace(outcome, verifications=tuple(verifications))


@app.command()
@reports_errors
def build(
    matrix: MatrixOption = DEFAULT_MATRIX,
    only: OnlyOption = None,
    jobs: Annotated[int, typer.Option(*spellings("jobs"), min=1, max=64, help="Builds running at once.")] = 1,
    force: Annotated[
        bool, typer.Option(*spellings("force"), help="Rebuild cells whose image is up to date.")
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            *spellings("timeout"), min=1, max=MAX_TIMEOUT_S, help="Seconds one image may take to build."
        ),
    ] = None,
    fail_fast: Annotated[
        bool, typer.Option(*spellings("fail_fast"), help="Stop every build at the first failure.")
    ] = False,
    pin_base_digests: Annotated[
        bool,
        typer.Option(
            *spellings("pin_base_digests"),
            help="Build FROM image@sha256:... (the previous report's digest, else the engine's).",
        ),
    ] = False,
    mirror: Annotated[
        list[str] | None,
        typer.Option(
            *spellings("mirror"), help="SRC=DST base image prefix mapping; overrides the matrix's `mirrors`."
        ),
    ] = None,
    cache_from: Annotated[
        bool,
        typer.Option(
            *spellings("cache_from"),
            help="Reuse what the registry holds: the image staged from this input digest (pulled,"
            " not built), else the last staged or published image's layers (pulled by digest);"
            " with --builder buildkit the registry cache instead, and nothing pulled.",
        ),
    ] = True,
    push: Annotated[
        bool,
        typer.Option(
            *spellings("push"),
            help="Stage each cell built or unchanged in the registry (staging-<input digest>) and"
            " record the manifest digest, for verify --pull and engine-free publish. With"
            " --builder buildkit, BuildKit pushes it itself (no archive, not loaded).",
        ),
    ] = False,
    registry: RegistryOption = None,
    network: Annotated[
        str | None,
        typer.Option(
            *spellings("network"),
            help="Network mode of RUN steps (default: the engine's); buildkit: of steps without their"
            " own RUN --network= (default: none).",
        ),
    ] = None,
    builder: Annotated[
        str | None,
        typer.Option(
            *spellings("builder"),
            help="classic (docker-py, the default) or buildkit (docker buildx: cache and secret mounts,"
            " registry cache, zstd); default: the matrix's build.builder.",
        ),
    ] = None,
    compression: Annotated[
        str | None,
        typer.Option(
            *spellings("compression"),
            help="gzip or zstd layers (buildkit); default: build.compression, else zstd with buildkit.",
        ),
    ] = None,
    buildx_builder: Annotated[
        str | None,
        typer.Option(
            *spellings("buildx_builder"),
            help="Build on this buildx builder or Docker context (a remote BuildKit); default: buildx's.",
        ),
    ] = None,
    secret: Annotated[
        list[str] | None,
        typer.Option(
            *spellings("secret"),
            help="ID=FILE: the value of secret ID (sources.pip.credentials) read from FILE; default:"
            " $IMAGEKIT_SECRET_<ID>.",
        ),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(*spellings("label"), help="KEY=VALUE label added to every image (repeatable)."),
    ] = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    as_json: JsonOption = False,
    then_verify: Annotated[
        bool,
        typer.Option(
            *spellings("then_verify"), help="Verify the built cells afterwards (see `imagekit verify`)."
        ),
    ] = False,
    gpus: GpusOption = "all",
    verify_timeout: VerifyTimeoutOption = 900.0,
) -> None:
    """Build every cell (local bases first) on the Docker engine at DOCKER_HOST and write a report.

    A run where nothing changed since the last one that built nothing is answered from its record
    (STATE_DIR/unchanged.json): a stat of each input and an inspect of each image, no build.

    Example: imagekit build --matrix matrix.yaml --only '*cu121*' --jobs 2 --verify --gpus all
    Example: imagekit build --matrix matrix.yaml --only "$CELL" --push
    """
    # first, while the locals are the parameters and nothing else
    command = BuildCommand(**locals())
    from imagekit.builds import no_change
    from imagekit.builds.read_recorder import ReadRecorder, ignored_dirs, unrecorded
    from imagekit.builds.run_key import argv_key, options_key

    requested = gpu_request(gpus) if then_verify else None  # a bad --gpus is exit 2 before any work
    day = today()
    # Only a run that may build, push and verify nothing is answered from the record of the last
    # full run that changed nothing (`imagekit.builds.no_change`): the nightly where nothing changed.
    run_key = None
    if not (force or push or then_verify):
        run_key = options_key(command)
        answered = no_change.answer(state_dir, run_key, day, matrix)
        if answered is not None:
            answered.show()
            return

    from imagekit.builds.backends.choose import BACKENDS
    from imagekit.builds.builder import Builder
    from imagekit.builds.options import checked_labels, checked_mirrors, resolve
    from imagekit.builds.progress import make_progress
    from imagekit.engine.client import connect
    from imagekit.plan.source import source_state
    from imagekit.report.store import open_store
    from imagekit.report.text import summary_line

    extra_labels = checked_labels(parse_mapping(label or [], "--label"))
    mirrors = checked_mirrors(parse_mapping(mirror or [], "--mirror"))
    with ReadRecorder(ignored_dirs(state_dir)) as reads:
        the_plan, cells = select_cells(matrix, only)
        reads.mark_plan()  # what the plan read: a record must name each (`no_change.names_its_plan`)
        # The checkout's commit, time and origin label an image and are no input of it
        # (imagekit.plan.source): git's reads are not recorded, so a no-change record is still left.
        with unrecorded():
            source = source_state(the_plan.root)
        options = resolve(command, the_plan, today=day, source=source, mirrors=mirrors, labels=extra_labels)
        api = connect(pool_size=jobs + 8)
        with open_store(state_dir) as store:
            no_change.forget(state_dir)  # this run may change the report and the engine
            progress = make_progress(live=sys.stderr.isatty() and not as_json)
            # BuildKit's --push leaves the engine without the image (pushed, or reused from the
            # registry unpulled): verify the staged digest, pulled where this engine lacks it
            pull = push and BACKENDS[options.builder].pushes_past_the_engine
            harness = (
                None
                if requested is None
                else _harness(api, requested, verify_timeout, "16g", store.logs, pull)
            )
            try:
                outcome = build_and_verify(
                    Builder(api, the_plan, options, progress, store),
                    cells,
                    store,
                    harness,
                    _echo_verification,
                )
            finally:
                progress.close()
            if run_key is not None:
                keys = (run_key,) if Launch.argv is None else (run_key, argv_key(Launch.argv))
                no_change.record(
                    state_dir, keys, as_json, reads, outcome, no_change.Names.of_plan(the_plan), day, matrix
                )
    if as_json:
        typer.echo(store.text(), nl=False)
    typer.echo(f"imagekit: {summary_line(outcome.report)}; report: {store.path}", err=True)
    if outcome.interrupted:
        say("error", "interrupted; finished images are kept, unfinished ones carry no tag")
        raise typer.Exit(130)
    for result in (*outcome.report.bases, *outcome.report.cells):
        if result.status in ("failed", "cancelled"):
            say(result.status, f"{result.id}: {result.error} (log: {result.log})")
    if outcome.failed:
        raise typer.Exit(int(ExitCode.CELL_FAILED))
