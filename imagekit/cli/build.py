"""Commands that build and verify images and show the result: build, verify, report.

``build --verify`` runs the stages together (``build_and_verify``): build, then verify what was
built or found unchanged, in one report. It lives here, above both stages: the builder knows
nothing of verification, the harness nothing of builds.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from imagekit.cli.app import (
    DEFAULT_LOCK,
    DEFAULT_MATRIX,
    GpusOption,
    JsonOption,
    Launch,
    LockOption,
    MatrixOption,
    OnlyOption,
    RegistryOption,
    StateDirOption,
    VerifyTimeoutOption,
    app,
    parse_mapping,
    path_option,
    registry_host,
    reports_errors,
    say,
    select_cells,
)
from imagekit.core.clock import today
from imagekit.core.errors import ExitCode, InputError
from imagekit.core.limits import MAX_TIMEOUT_S
from imagekit.core.naming import LABEL_PREFIX
from imagekit.core.text import elided, printable, redact
from imagekit.report.state import DEFAULT_STATE_DIR

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import docker

    from imagekit.build.builder import Builder, BuildOutcome
    from imagekit.plan.cells import Cell
    from imagekit.plan.schema import Matrix
    from imagekit.report.store import ReportStore
    from imagekit.report.verification import Verification
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


def _echo_note(note: str | None) -> None:
    if note:
        typer.echo(f"imagekit: {note}", err=True)


def _harness(
    api: docker.APIClient, gpus: str, timeout: float, memory: str, logs: Path | None, pull: bool = False
) -> Harness:
    from imagekit.verify.gpus import GpuRequest
    from imagekit.verify.harness import Harness, Limits

    limits = Limits(timeout_s=timeout, memory=memory)
    return Harness(api, GpuRequest.parse(gpus), limits, logs_dir=logs, pull=pull)


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


@dataclass(frozen=True)
class BuildCommand:
    """Every option of ``imagekit build`` as parsed, one field per parameter of ``build`` (which
    makes it from its own arguments, so an option added there and not here fails every build).

    The key of the no-change record is made of all its fields (``imagekit.build.no_change.options_key``):
    an option added later counts without anyone listing it, and a record left by a run with other
    options never answers this one.
    """

    matrix: Path
    only: list[str] | None
    jobs: int
    force: bool
    timeout: float | None
    fail_fast: bool
    pin_base_digests: bool
    mirror: list[str] | None
    cache_from: bool
    push: bool
    registry: str | None
    network: str | None
    builder: str | None
    compression: str | None
    buildx_builder: str | None
    secret: list[str] | None
    label: list[str] | None
    state_dir: Path
    as_json: bool
    then_verify: bool
    gpus: str
    verify_timeout: float


def _builder_options(
    matrix: Matrix,
    builder: str | None,
    compression: str | None,
    buildx_builder: str | None,
    secret: list[str],
) -> dict[str, Any]:
    """The builder settings: the command line's over the matrix's ``build``, checked together."""
    from imagekit.plan.rules import check_build_settings
    from imagekit.plan.schema import BuildSettings

    chosen = builder or matrix.build.builder
    if chosen not in ("classic", "buildkit"):
        raise InputError(f"--builder {printable(chosen)!r}: the builders are classic and buildkit")
    packed = compression or matrix.build.compression
    if packed not in ("gzip", "zstd"):
        raise InputError(f"--compression {printable(packed)!r}: the compressions are gzip and zstd")
    given = [flag for flag, value in (("--buildx-builder", buildx_builder), ("--secret", secret)) if value]
    if chosen == "classic" and given:
        raise InputError(f"{', '.join(given)} needs the BuildKit builder: add --builder buildkit")
    # the matrix's own refusals (credentials, zstd) on the settings this run uses, before any work
    settings = BuildSettings(builder=chosen, compression=packed)
    check_build_settings(matrix, settings, "imagekit build")
    secrets: dict[str, Path] = {}
    for item in secret:
        secret_id, sep, file = item.partition("=")
        if not sep or not secret_id or not file:
            raise InputError(f"--secret {printable(item)!r}: expected ID=FILE (the value is read from FILE)")
        secrets[secret_id] = Path(file)
    known = {c.secret for c in matrix.sources.pip.credentials}
    unknown = sorted(set(secrets) - known)
    if unknown:
        raise InputError(
            f"--secret {unknown[0]}: the matrix names no such secret (sources.pip.credentials:"
            f" {', '.join(sorted(known)) or 'none'})"
        )
    return {
        "builder": settings.builder,
        "compression": settings.compression,
        "buildx_builder": buildx_builder,
        "secret_files": tuple(sorted(secrets.items())),
    }


@app.command()
@reports_errors
def build(
    matrix: MatrixOption = DEFAULT_MATRIX,
    only: OnlyOption = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, max=64, help="Builds running at once.")] = 1,
    force: Annotated[bool, typer.Option("--force", help="Rebuild cells whose image is up to date.")] = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", min=1, max=MAX_TIMEOUT_S, help="Seconds one image may take to build."),
    ] = None,
    fail_fast: Annotated[
        bool, typer.Option("--fail-fast", help="Stop every build at the first failure.")
    ] = False,
    pin_base_digests: Annotated[
        bool,
        typer.Option(
            "--pin-base-digests",
            help="Build FROM image@sha256:... (the previous report's digest, else the engine's).",
        ),
    ] = False,
    mirror: Annotated[
        list[str] | None,
        typer.Option("--mirror", help="SRC=DST base image prefix mapping; overrides the matrix's `mirrors`."),
    ] = None,
    cache_from: Annotated[
        bool,
        typer.Option(
            "--cache-from/--no-cache-from",
            help="Reuse what the registry holds: the image staged from this input digest (pulled,"
            " not built), else the last staged or published image's layers (pulled by digest);"
            " with --builder buildkit the registry cache instead, and nothing pulled.",
        ),
    ] = True,
    push: Annotated[
        bool,
        typer.Option(
            "--push",
            help="Stage each cell built or unchanged in the registry (staging-<input digest>) and"
            " record the manifest digest, for verify --pull and engine-free publish. With"
            " --builder buildkit, BuildKit pushes it itself (no archive, not loaded).",
        ),
    ] = False,
    registry: RegistryOption = None,
    network: Annotated[
        str | None,
        typer.Option(
            "--network",
            help="Network mode of RUN steps (default: the engine's); buildkit: of steps without their"
            " own RUN --network= (default: none).",
        ),
    ] = None,
    builder: Annotated[
        str | None,
        typer.Option(
            "--builder",
            help="classic (docker-py, the default) or buildkit (docker buildx: cache and secret mounts,"
            " registry cache, zstd); default: the matrix's build.builder.",
        ),
    ] = None,
    compression: Annotated[
        str | None,
        typer.Option("--compression", help="gzip or zstd layers (buildkit); default: build.compression."),
    ] = None,
    buildx_builder: Annotated[
        str | None,
        typer.Option(
            "--buildx-builder",
            help="Build on this buildx builder or Docker context (a remote BuildKit); default: buildx's.",
        ),
    ] = None,
    secret: Annotated[
        list[str] | None,
        typer.Option(
            "--secret",
            help="ID=FILE: the value of secret ID (sources.pip.credentials) read from FILE; default:"
            " $IMAGEKIT_SECRET_<ID>.",
        ),
    ] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", help="KEY=VALUE label added to every image (repeatable).")
    ] = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    as_json: JsonOption = False,
    then_verify: Annotated[
        bool, typer.Option("--verify", help="Verify the built cells afterwards (see `imagekit verify`).")
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
    from imagekit.build import no_change as unchanged

    day = today()
    # Only a run that may build, push and verify nothing is answered from the record of the last
    # full run that changed nothing (`imagekit.build.no_change`): the nightly where nothing changed.
    run_key = None
    if not (force or push or then_verify):
        run_key = unchanged.options_key(command)
        answered = unchanged.answer(state_dir, run_key, day, matrix)
        if answered is not None:
            answered.show()
            return

    from imagekit.build.builder import Builder, BuildOptions
    from imagekit.build.progress import make_progress
    from imagekit.engine.client import connect
    from imagekit.plan.source import source_state
    from imagekit.report.store import open_store
    from imagekit.report.text import summary_line

    extra_labels = _checked_labels(label or [])
    mirrors = _checked_mirrors(mirror or [])
    with unchanged.ReadRecorder(unchanged.ignored_dirs(state_dir)) as reads:
        the_plan, cells = select_cells(matrix, only)
        reads.mark_plan()  # what the plan read: a record must name each (`unchanged.names_its_plan`)
        if push or registry is not None:
            host: str | None = registry_host(registry, the_plan, matrix)
        else:
            host = the_plan.matrix.publish.registry
        # The checkout's commit, time and origin label an image and are no input of it
        # (imagekit.plan.source): git's reads are not recorded, so a no-change record is still left.
        with unchanged.unrecorded():
            source = source_state(the_plan.root)
        options = BuildOptions(
            today=day,
            jobs=jobs,
            force=force,
            timeout_s=timeout,
            fail_fast=fail_fast,
            pin_base_digests=pin_base_digests,
            mirrors=mirrors,
            cache_from=cache_from,
            network_mode=network,
            extra_labels=extra_labels,
            push=push,
            registry=host,
            source=source,
            **_builder_options(the_plan.matrix, builder, compression, buildx_builder, secret or []),
        )
        api = connect(pool_size=jobs + 8)
        with open_store(state_dir) as store:
            unchanged.forget(state_dir)  # this run may change the report and the engine
            progress = make_progress(live=sys.stderr.isatty() and not as_json)
            # BuildKit's --push leaves the engine without the image (pushed, or reused from the
            # registry unpulled): verify the staged digest, pulled where this engine lacks it
            pull = push and options.builder == "buildkit"
            harness = _harness(api, gpus, verify_timeout, "16g", store.logs, pull) if then_verify else None
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
                keys = (run_key,) if Launch.argv is None else (run_key, unchanged.argv_key(Launch.argv))
                unchanged.record(
                    state_dir, keys, as_json, reads, outcome, unchanged.Names.of_plan(the_plan), day, matrix
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


def _checked_labels(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    from imagekit.core.safetypes import LABEL_KEY, LABEL_VALUE
    from imagekit.core.text import shown

    extra_labels = parse_mapping(pairs, "--label")
    for key, value in extra_labels:
        problem = LABEL_KEY.problem(key) or LABEL_VALUE.problem(value)
        if problem is not None:
            raise InputError(f"--label {shown(key)}: {problem}")
        if key.startswith(LABEL_PREFIX):
            raise InputError(
                f"--label {key}: labels under {LABEL_PREFIX}* are imagekit's own (what it checks,"
                " skips and publishes by); choose another key"
            )
    return extra_labels


def _checked_mirrors(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    from imagekit.core.text import shown
    from imagekit.plan.schema_values import IMAGE_PREFIX

    mirrors = parse_mapping(pairs, "--mirror")
    for pair in mirrors:
        for prefix in pair:
            problem = IMAGE_PREFIX.problem(prefix)
            if problem is not None:
                raise InputError(f"--mirror {shown('='.join(pair))}: {problem}")
    return mirrors


@app.command()
@reports_errors
def report(
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="GitHub-flavoured Markdown (for $GITHUB_STEP_SUMMARY).")
    ] = False,
    as_json: JsonOption = False,
    html: Annotated[
        Path | None,
        path_option(
            "--html",
            help="Also write one self-contained HTML page of the report here.",
        ),
    ] = None,
    lock: LockOption = DEFAULT_LOCK,
) -> None:
    """Print the last build's report as a table, and what the lock says was published (each
    image index's platforms and the ones it left out); exit 1 when a cell failed.

    Example: imagekit report --markdown >> "$GITHUB_STEP_SUMMARY"
    Example: imagekit report --html site/index.html
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from imagekit.report import text as report_text
    from imagekit.report.lockfile import read_lock
    from imagekit.report.store import check_output_path, read_report

    if html is not None:
        for kept in {DEFAULT_LOCK, lock}:  # the default lock, and the one --lock names
            check_output_path(html, state_dir, "--html", kept)
    the_report = read_report(state_dir)
    published = read_lock(lock)  # an absent lock: nothing published yet
    if html is not None:
        from imagekit.core.atomic import atomic_write
        from imagekit.report.html import render_html

        atomic_write(html, render_html(the_report, published))
        typer.echo(f"imagekit: HTML report: {html}", err=True)
    if as_json:
        typer.echo(json.dumps(the_report.as_json(), indent=2, sort_keys=True))
    elif markdown:
        typer.echo(report_text.markdown(the_report, published), nl=False)
    else:
        table = Table(box=None, header_style="bold")
        for header in report_text.ROW_HEADERS:
            table.add_column(header, overflow="fold")
        for row in report_text.rows(the_report):
            # Text, not a string: a value like "[red]" or "[/]" is shown as written, never as markup
            table.add_row(*(Text(value) for value in row))
        console = Console(width=None if sys.stdout.isatty() else 200)
        console.print(table)
        console.print(Text(report_text.summary_line(the_report)))
        pulled = report_text.pull_rows(the_report)
        for title, headers, rows in (
            ("vulnerability scans", report_text.SCAN_HEADERS, report_text.scan_rows(the_report)),
            (report_text.pull_line(the_report), report_text.PULL_HEADERS, pulled),
            ("published", report_text.PUBLISHED_HEADERS, report_text.published_rows(published)),
        ):
            if rows:
                listed = Table(box=None, header_style="bold", title=Text(title or ""), title_justify="left")
                for header in headers:
                    listed.add_column(header, overflow="fold")
                for row in rows:
                    listed.add_row(*(Text(value) for value in row))
                console.print(listed)
    if the_report.failed:
        raise typer.Exit(int(ExitCode.CELL_FAILED))


@app.command()
@reports_errors
def verify(
    images: Annotated[
        list[str] | None,
        typer.Argument(help="Images to verify instead of a matrix's cells.", show_default=False),
    ] = None,
    matrix: Annotated[
        Path | None,
        path_option(
            "--matrix",
            "-m",
            help="Verify this matrix's built cells.",
        ),
    ] = None,
    only: OnlyOption = None,
    gpus: GpusOption = "all",
    timeout: VerifyTimeoutOption = 900.0,
    memory: Annotated[str, typer.Option("--memory", help="Memory limit of a check container.")] = "16g",
    junit: Annotated[
        Path | None,
        path_option(
            "--junit",
            help="Write JUnit XML here (one test case per check).",
        ),
    ] = None,
    pull: Annotated[
        bool,
        typer.Option(
            "--pull",
            help="Verify each cell's staged image (build --push) by its digest, pulling it when this"
            " engine lacks it; IMAGEs are pulled when missing.",
        ),
    ] = False,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            max=64,
            help="Images verified at once. With GPUs, each on a GPU of its own (at most one per GPU),"
            " then each image's all-GPU checks (NCCL, GEMM on every GPU) one at a time.",
        ),
    ] = 1,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    as_json: JsonOption = False,
) -> None:
    """Start each image with --gpus and run its in-image checks; validated needs a visible GPU.

    Example: imagekit verify --matrix matrix.yaml --gpus all --jobs 8 --junit verify.xml
    Example: imagekit verify --matrix matrix.yaml --only "$CELL" --pull --gpus all
    Example: imagekit verify 2.1.2-cuda12.1-cudnn8-devel-ubuntu22.04 --gpus none
    """
    from imagekit.core.clock import timestamp
    from imagekit.engine.client import connect
    from imagekit.report.junit import write_junit
    from imagekit.report.store import check_output_path, open_store
    from imagekit.report.text import verify_cost
    from imagekit.report.verification import VerifyRun
    from imagekit.verify.gpus import GpuRequest
    from imagekit.verify.harness import Target
    from imagekit.verify.schedule import schedule, verify_all, verify_cells

    GpuRequest.parse(gpus)  # a bad --gpus is bad input (exit 2), whether an engine answers or not
    if junit is not None:  # refused now, not after an hour of checks
        check_output_path(junit, state_dir, "--junit", DEFAULT_LOCK)
    if images and matrix is not None:
        raise InputError("give images or --matrix, not both")
    started, clock = timestamp(), time.monotonic()
    if images:
        harness = _harness(connect(jobs + 2), gpus, timeout, memory, None, pull)
        plan = schedule(harness, jobs)
        _echo_note(plan.note)
        targets = [Target(i, i) for i in images]
        results = verify_all(harness, targets, on_result=_echo_verification, plan=plan)
    else:
        _, cells = select_cells(matrix or DEFAULT_MATRIX, only)
        api = connect(jobs + 2)  # a connection per running check, and one to spare
        with open_store(state_dir) as store:
            harness = _harness(api, gpus, timeout, memory, store.logs, pull)
            plan = schedule(harness, jobs)
            _echo_note(plan.note)
            results = verify_cells(harness, cells, store, on_result=_echo_verification, plan=plan)
    if junit is not None:
        write_junit(junit, results)
    if as_json:
        typer.echo(json.dumps([r.as_json() for r in results], indent=2, sort_keys=True))
    counts = {
        label: sum(1 for r in results if r.label == label)
        for label in ("validated", "checked without GPU", "failed")
    }
    typer.echo("imagekit: " + ", ".join(f"{n} {label}" for label, n in counts.items() if n), err=True)
    wall_s = time.monotonic() - clock
    run = VerifyRun.of(started, wall_s, plan.width, harness.gpus.text, plan.devices, results)
    typer.echo(f"imagekit: {verify_cost(run)}", err=True)
    if counts["failed"]:
        raise typer.Exit(int(ExitCode.CELL_FAILED))
