"""The command line: a thin layer that parses options, calls a stage, and prints.

Exit codes everywhere: 0 success; 1 a cell failed (or drift); 2 invalid input or usage;
3 the environment (Docker engine or registry unreachable, no GPU runtime).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer

from imagekit.errors import ExitCode, ImagekitError, InputError
from imagekit.export_format import ExportFormat

# The stages are imported inside the commands that use them: `imagekit verify IMAGE` or
# `imagekit report` should not pay for pydantic models and Jinja (process start is measured).
if TYPE_CHECKING:
    from imagekit.matrix import Cell, Plan
    from imagekit.verify import Verification

app = typer.Typer(
    name="imagekit",
    help="Build, verify and publish GPU container images for PyTorch from one matrix.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)

P = ParamSpec("P")
R = TypeVar("R")

MatrixOption = Annotated[
    Path,
    typer.Option("--matrix", "-m", help="The matrix file.", dir_okay=False, show_default=True),
]


def _err(kind: str, message: str) -> None:
    typer.echo(f"imagekit: {kind}: {message}", err=True)


def reports_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn an ImagekitError into its one line on stderr and its exit code."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ImagekitError as exc:
            _err("error", exc.message)
            raise typer.Exit(int(exc.exit_code)) from None

    return wrapper


def today() -> date:
    """UTC today, or SOURCE_DATE_EPOCH's day for reproducible output."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.isdigit():
        return datetime.fromtimestamp(int(epoch), tz=timezone.utc).date()
    return datetime.now(tz=timezone.utc).date()


def _plan(matrix: Path) -> Plan:
    from imagekit.matrix import load_plan

    plan = load_plan(matrix)
    for warning in plan.warnings:
        _err("warning", warning)
    return plan


@app.command()
@reports_errors
def plan(
    matrix: MatrixOption = Path("matrix.yaml"),
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: cells, refused.")] = False,
) -> None:
    """List the cells the matrix makes and the combinations it refuses, with reasons.

    Example: imagekit plan --matrix matrix.yaml --json | jq '.cells[].id'
    """
    from imagekit.render import Renderer, dockerfile_path, output_dir

    the_plan = _plan(matrix)
    renderer = Renderer(the_plan)
    rendered = renderer.render_all()
    out = output_dir(the_plan, None)
    day = today()
    cells = []
    for item in rendered:
        entry: dict[str, Any] = item.cell.summary()
        entry["tags"] = list(item.tags(the_plan.matrix, day))
        entry["input_digest"] = item.input_digest
        entry["dockerfile"] = str(dockerfile_path(out, item.cell))
        cells.append(entry)
    refused = [
        {"combination": dict(r.combination), "origin": r.origin, "reason": r.reason} for r in the_plan.refused
    ]
    if as_json:
        typer.echo(json.dumps({"cells": cells, "refused": refused}, indent=2, sort_keys=True))
        return
    columns = ("id", "torch", "cuda", "cudnn", "python", "flavour", "base_image")
    rows = [[str(c[k] if c[k] is not None else "-") for k in columns] for c in cells]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(columns)]
    typer.echo("  ".join(h.upper().ljust(w) for h, w in zip(columns, widths, strict=True)).rstrip())
    for row, cell in zip(rows, cells, strict=True):
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        typer.echo(f"    tags: {', '.join(cell['tags'])}")
    typer.echo(f"\n{len(cells)} cells, {len(refused)} refused")
    for refusal in the_plan.refused:
        typer.echo(f"  refused {refusal.describe()}")


@app.command()
@reports_errors
def render(
    matrix: MatrixOption = Path("matrix.yaml"),
    out: Annotated[
        Path | None,
        typer.Option(help="Directory for the Dockerfiles (default: the matrix's `output`).", file_okay=False),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 when a file differs (CI drift check).")
    ] = False,
    cst: Annotated[
        Path | None,
        typer.Option(
            "--cst", help="Also write a container-structure-test config per cell here.", file_okay=False
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print what was (or, with --check, would be) changed as JSON.")
    ] = False,
) -> None:
    """Render one Dockerfile per cell to OUT/<cell-id>/Dockerfile.

    Example: imagekit render --matrix matrix.yaml --check
    Example: imagekit render --matrix matrix.yaml --cst cst/   # then: container-structure-test test
    --image IMAGE --config cst/<cell-id>.yaml
    """
    from imagekit.render import (
        Renderer,
        check_drift,
        expected_files,
        output_dir,
        raise_on_drift,
        write_rendered,
    )

    if cst is not None and check:
        raise InputError("--cst writes files; run it without --check")
    the_plan = _plan(matrix)
    renderer = Renderer(the_plan)
    target = output_dir(the_plan, out)
    # Everything is rendered (and so validated) before the first file is touched.
    expected = expected_files(the_plan, renderer, target)
    drift = check_drift(expected, target) if check else write_rendered(expected, target)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "out": str(target),
                    "dockerfiles": len(expected),
                    "check": check,
                    "changed": [str(p) for p in drift.changed],
                    "missing": [str(p) for p in drift.missing],
                    "stale": [str(p) for p in drift.stale],
                },
                indent=2,
            )
        )
    if check:
        raise_on_drift(drift, matrix.name)
        if not as_json:
            typer.echo(f"{len(expected)} Dockerfiles in {target} are up to date")
        return
    if cst is not None:
        from imagekit.cst import write_cst

        written = write_cst(the_plan.cells, cst)
        if not as_json:
            typer.echo(f"{len(written)} container-structure-test configs in {cst}")
    if not as_json:
        typer.echo(
            f"{len(expected)} Dockerfiles in {target}: {len(drift.changed)} updated,"
            f" {len(drift.missing)} added, {len(drift.stale)} stale removed"
        )


@app.command()
def schema() -> None:
    """Print the matrix file's JSON Schema (for editors and validators)."""
    from imagekit.schema import json_schema

    typer.echo(json.dumps(json_schema(), indent=2, sort_keys=True))


# -- build and report (issue 3) ---------------------------------------------------------------------

GpusOption = Annotated[
    str,
    typer.Option(
        "--gpus", help="GPUs for the check containers, as docker takes it: all, none, 2, device=0,1."
    ),
]
VerifyTimeoutOption = Annotated[
    float,
    typer.Option("--verify-timeout", min=1, help="Seconds one check container may run before it is killed."),
]
StateDirOption = Annotated[
    Path,
    typer.Option("--state-dir", help="Where the report, logs and lock live.", file_okay=False),
]


@app.command()
@reports_errors
def build(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="Build only cells whose id matches this glob (repeatable)."),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, max=64, help="Builds running at once.")] = 1,
    force: Annotated[bool, typer.Option("--force", help="Rebuild cells whose image is up to date.")] = False,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=1, help="Seconds one image may take to build.")
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
        bool, typer.Option("--cache-from/--no-cache-from", help="Reuse the last published image's layers.")
    ] = True,
    network: Annotated[
        str | None, typer.Option("--network", help="Network mode of RUN steps (default: the engine's).")
    ] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", help="KEY=VALUE label added to every image (repeatable).")
    ] = None,
    state_dir: StateDirOption = Path(".imagekit"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")] = False,
    then_verify: Annotated[
        bool, typer.Option("--verify", help="Verify the built cells afterwards (see `imagekit verify`).")
    ] = False,
    gpus: GpusOption = "all",
    verify_timeout: VerifyTimeoutOption = 900.0,
) -> None:
    """Build every cell (local bases first) on the Docker engine at DOCKER_HOST and write a report.

    Example: imagekit build --matrix matrix.yaml --only '*cu121*' --jobs 2 --verify --gpus all
    """
    from imagekit.build import Builder, BuildOptions, parse_mapping
    from imagekit.engine import connect
    from imagekit.progress import make_progress
    from imagekit.report import state_lock, summary_line, write_report

    the_plan = _plan(matrix)
    cells = the_plan.select(only or [])
    if not cells:
        raise InputError(f"--only {' '.join(only or [])} matches no cell of {matrix}; see `imagekit plan`")
    options = BuildOptions(
        state_dir=state_dir,
        today=today(),
        jobs=jobs,
        force=force,
        timeout_s=timeout,
        fail_fast=fail_fast,
        pin_base_digests=pin_base_digests,
        mirrors=parse_mapping(mirror or [], "--mirror"),
        cache_from=cache_from,
        network_mode=network,
        extra_labels=parse_mapping(label or [], "--label"),
    )
    api = connect(pool_size=jobs + 8)
    with state_lock(state_dir):
        progress = make_progress(live=sys.stderr.isatty() and not as_json)
        try:
            outcome = Builder(api, the_plan, options, progress).run(cells)
        finally:
            progress.close()
        path = write_report(state_dir, outcome.report)
    if as_json:
        typer.echo(path.read_text(encoding="utf-8"), nl=False)
    typer.echo(f"imagekit: {summary_line(outcome.report)}; report: {path}", err=True)
    if outcome.interrupted:
        _err("error", "interrupted; finished images are kept, unfinished ones carry no tag")
        raise typer.Exit(130)
    if outcome.report.failed:
        for result in (*outcome.report.bases, *outcome.report.cells):
            if result.status in ("failed", "cancelled"):
                _err(result.status, f"{result.id}: {result.error} (log: {result.log})")
    verification_failed = False
    if then_verify:
        verified = [r.id for r in outcome.report.cells if r.status in ("built", "skipped")]
        results = _verify_cells(
            api, [c for c in cells if c.id in verified], state_dir, gpus, verify_timeout, None
        )
        verification_failed = any(r.verdict == "failed" for r in results)
    if outcome.report.failed or verification_failed:
        raise typer.Exit(int(ExitCode.CELL_FAILED))


@app.command()
@reports_errors
def report(
    state_dir: StateDirOption = Path(".imagekit"),
    markdown: Annotated[
        bool, typer.Option("--markdown", help="GitHub-flavoured Markdown (for $GITHUB_STEP_SUMMARY).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON.")] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html", help="Also write one self-contained HTML page of the report here.", dir_okay=False
        ),
    ] = None,
) -> None:
    """Print the last build's report as a table; exit 1 when a cell failed.

    Example: imagekit report --markdown >> "$GITHUB_STEP_SUMMARY"
    Example: imagekit report --html site/index.html
    """
    from rich.console import Console
    from rich.table import Table

    from imagekit import report as reports

    the_report = reports.read_report(state_dir)
    if html is not None:
        from imagekit.atomic import atomic_write
        from imagekit.html_report import render_html

        atomic_write(html, render_html(the_report))
        typer.echo(f"imagekit: HTML report: {html}", err=True)
    if as_json:
        typer.echo(json.dumps(the_report.as_json(), indent=2, sort_keys=True))
    elif markdown:
        typer.echo(reports.markdown(the_report), nl=False)
    else:
        table = Table(box=None, header_style="bold")
        for header in reports.ROW_HEADERS:
            table.add_column(header, overflow="fold")
        for row in reports.rows(the_report):
            table.add_row(*row)
        console = Console(width=None if sys.stdout.isatty() else 200)
        console.print(table)
        console.print(reports.summary_line(the_report))
    if the_report.failed:
        raise typer.Exit(int(ExitCode.CELL_FAILED))


# -- verify (issue 4) -------------------------------------------------------------------------------


def _echo_verification(result: Verification) -> None:
    line = f"{result.label:<20} {result.target}"
    if result.verdict == "failed":
        failed = result.failed_checks()
        reason = result.error or "; ".join(
            f"{c.name}: {c.cause or c.reason or 'failed'}" + (f" (fix: {c.fix})" if c.fix else "")
            for c in failed[:3]
        )
        line += f": {reason}"
    typer.echo(line)


def _verify_cells(
    api: Any,
    cells: Sequence[Cell],
    state_dir: Path,
    gpus: str,
    timeout: float,
    junit: Path | None,
    memory: str = "16g",
) -> list[Verification]:
    from imagekit.junit import write_junit
    from imagekit.verify import GpuRequest, Harness, Limits
    from imagekit.verify_matrix import verify_cells

    limits = Limits(timeout_s=timeout, memory=memory)
    harness = Harness(api, GpuRequest.parse(gpus), limits, logs_dir=state_dir / "logs")
    results = verify_cells(harness, cells, state_dir, on_result=_echo_verification)
    if junit is not None:
        write_junit(junit, results)
    return results


@app.command()
@reports_errors
def verify(
    images: Annotated[
        list[str] | None,
        typer.Argument(help="Images to verify instead of a matrix's cells.", show_default=False),
    ] = None,
    matrix: Annotated[
        Path | None, typer.Option("--matrix", "-m", help="Verify this matrix's built cells.", dir_okay=False)
    ] = None,
    only: Annotated[
        list[str] | None, typer.Option("--only", help="Only cells whose id matches this glob (repeatable).")
    ] = None,
    gpus: GpusOption = "all",
    timeout: VerifyTimeoutOption = 900.0,
    memory: Annotated[str, typer.Option("--memory", help="Memory limit of a check container.")] = "16g",
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Write JUnit XML here (one test case per check).")
    ] = None,
    state_dir: StateDirOption = Path(".imagekit"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdicts as JSON.")] = False,
) -> None:
    """Start each image with --gpus and run its in-image checks; validated needs a visible GPU.

    Example: imagekit verify --matrix matrix.yaml --gpus all --junit verify.xml
    Example: imagekit verify 2.1.2-cuda12.1-cudnn8-devel-ubuntu22.04 --gpus none
    """
    from imagekit.engine import connect
    from imagekit.junit import write_junit
    from imagekit.verify import GpuRequest, Harness, Limits, Target, verify_all

    request = GpuRequest.parse(gpus)
    if images and matrix is not None:
        raise InputError("give images or --matrix, not both")
    api = connect()
    if images:
        harness = Harness(api, request, Limits(timeout_s=timeout, memory=memory), logs_dir=None)
        results = verify_all(harness, [Target(i, i) for i in images], on_result=_echo_verification)
        if junit is not None:
            write_junit(junit, results)
    else:
        the_plan = _plan(matrix or Path("matrix.yaml"))
        cells = the_plan.select(only or [])
        if not cells:
            raise InputError(f"--only {' '.join(only or [])} matches no cell; see `imagekit plan`")
        results = _verify_cells(api, cells, state_dir, gpus, timeout, junit, memory)
    if as_json:
        typer.echo(json.dumps([r.as_json() for r in results], indent=2, sort_keys=True))
    counts = {
        label: sum(1 for r in results if r.label == label)
        for label in ("validated", "checked without GPU", "failed")
    }
    typer.echo("imagekit: " + ", ".join(f"{n} {label}" for label, n in counts.items() if n), err=True)
    if counts["failed"]:
        raise typer.Exit(int(ExitCode.CELL_FAILED))


# -- exports for other engines (issue 6) -------------------------------------------------------------


@app.command("matrix")
@reports_errors
def matrix_export(
    matrix: MatrixOption = Path("matrix.yaml"),
    output_format: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            "-f",
            help="github: one line for strategy.matrix; json: every cell in full; bake: a buildx bake file.",
        ),
    ] = ExportFormat.JSON,
    only: Annotated[
        list[str] | None, typer.Option("--only", help="Only cells whose id matches this glob (repeatable).")
    ] = None,
    context_dir: Annotated[
        Path,
        typer.Option(
            "--context-dir", help="bake: where each cell's build context is written.", file_okay=False
        ),
    ] = Path(".imagekit/bake"),
) -> None:
    """Export the cells for another engine: GitHub Actions, plain JSON or docker buildx bake.

    Example: echo "cells=$(imagekit matrix --matrix matrix.yaml --format github)" >> "$GITHUB_OUTPUT"
    Example: imagekit matrix --format bake --context-dir .imagekit/bake > bake.json
    && docker buildx bake -f bake.json --load --metadata-file bake-metadata.json
    && imagekit bake-import --metadata-file bake-metadata.json && imagekit verify && imagekit publish
    """
    from imagekit import export
    from imagekit.render import Renderer

    the_plan = _plan(matrix)
    cells = the_plan.select(only or [])
    if not cells:
        raise InputError(f"--only {' '.join(only or [])} matches no cell of {matrix}; see `imagekit plan`")
    if output_format is ExportFormat.GITHUB:
        typer.echo(json.dumps(export.github_matrix(cells), separators=(",", ":")))
        return
    rendered = Renderer(the_plan).render_all(cells)
    if output_format is ExportFormat.JSON:
        typer.echo(json.dumps(export.json_export(the_plan, rendered, today()), indent=2, sort_keys=True))
        return
    contexts = export.materialise_contexts(rendered, context_dir)
    typer.echo(json.dumps(export.bake_file(the_plan, rendered, context_dir), indent=2, sort_keys=True))
    typer.echo(f"imagekit: {len(contexts)} build contexts in {context_dir}", err=True)


@app.command("bake-import")
@reports_errors
def bake_import(
    metadata_file: Annotated[
        Path, typer.Option("--metadata-file", help="The file `docker buildx bake --metadata-file` wrote.")
    ],
    matrix: MatrixOption = Path("matrix.yaml"),
    state_dir: StateDirOption = Path(".imagekit"),
    as_json: Annotated[bool, typer.Option("--json", help="Print what was imported as JSON.")] = False,
) -> None:
    """Record the image digests a bake run produced in the report (status built), cell by cell.

    Example: imagekit bake-import --metadata-file bake-metadata.json && imagekit report
    """
    from imagekit import bake_import as importer
    from imagekit.build import image_repository
    from imagekit.render import Renderer
    from imagekit.report import state_lock, write_report

    the_plan = _plan(matrix)
    targets = importer.read_metadata(metadata_file)
    rendered = Renderer(the_plan).render_all()
    repository = image_repository(the_plan)
    tags = {
        item.cell.id: tuple(f"{repository}:{t}" for t in item.tags(the_plan.matrix, today()))
        for item in rendered
    }
    results, unknown = importer.results_from_bake(targets, rendered, tags)
    if not results:
        raise InputError(f"{metadata_file}: no target is a cell of {matrix}: {', '.join(unknown)}")
    with state_lock(state_dir):
        merged = importer.merge(importer.previous_report(state_dir), results, the_plan.source_name)
        path = write_report(state_dir, merged)
    for name in unknown:
        _err("warning", f"bake target {name} is no cell of {matrix}; not recorded")
    if as_json:
        typer.echo(json.dumps(importer.as_json(results, unknown), indent=2, sort_keys=True))
    else:
        for result in results:
            typer.echo(f"{result.id:<50} {result.image_digest}")
    typer.echo(f"imagekit: {len(results)} cells recorded as built in {path}", err=True)


# -- publish, images, k8s (issue 5) ------------------------------------------------------------------

LockOption = Annotated[
    Path,
    typer.Option("--lock", help="The lock file `publish` writes and `images`/`k8s` read.", dir_okay=False),
]


def _registry_host(value: str) -> str:
    from pydantic import TypeAdapter, ValidationError

    from imagekit.schema import Registry

    try:
        return str(TypeAdapter(Registry).validate_python(value))
    except ValidationError as exc:
        raise InputError(f"--registry {value!r}: {exc.errors()[0]['msg']}") from None


@app.command()
@reports_errors
def publish(
    matrix: MatrixOption = Path("matrix.yaml"),
    registry: Annotated[
        str | None, typer.Option("--registry", help="Registry host[:port]; overrides publish.registry.")
    ] = None,
    only: Annotated[
        list[str] | None, typer.Option("--only", help="Only cells whose id matches this glob (repeatable).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be pushed and tagged; touch nothing.")
    ] = False,
    retries: Annotated[
        int, typer.Option("--retries", min=1, max=20, help="Attempts per registry request or push.")
    ] = 5,
    state_dir: StateDirOption = Path(".imagekit"),
    lock: LockOption = Path("images.lock.json"),
    as_json: Annotated[
        bool, typer.Option("--json", help="Print what was published and refused as JSON.")
    ] = False,
) -> None:
    """Push the cells that pass the matrix's publish policy, then promote them by digest.

    Each image goes to a staging tag first; only when every push succeeded are the readable and
    immutable tags written, as the same manifest by digest. Exit 1 when a cell was refused.

    Example: imagekit publish --matrix matrix.yaml --registry ghcr.io --dry-run
    """
    from imagekit import publish as publishing
    from imagekit.engine import connect
    from imagekit.registry import Backoff
    from imagekit.report import read_report, state_lock

    the_plan = _plan(matrix)
    cells = the_plan.select(only or [])
    if not cells:
        raise InputError(f"--only {' '.join(only or [])} matches no cell of {matrix}; see `imagekit plan`")
    settings = the_plan.matrix.publish
    host = _registry_host(registry) if registry else settings.registry
    if not host:
        raise InputError(f"{matrix}: no registry; set publish.registry or pass --registry HOST[:PORT]")
    options = publishing.PublishOptions(
        registry=host, repository=settings.repository, lock_path=lock, backoff=Backoff(attempts=retries)
    )
    published: list[dict[str, Any]] = []
    with state_lock(state_dir):
        candidates, refused = publishing.select(the_plan, cells, read_report(state_dir))
        for refusal in refused:
            _err("refused", f"{refusal.cell}: {refusal.reason}")
        target = f"{host}/{settings.repository}"
        if dry_run:
            for candidate in candidates:
                published.append(
                    {"cell": candidate.cell, "level": candidate.level, "tags": list(candidate.tags)}
                )
                if not as_json:
                    typer.echo(f"would publish {candidate.cell} ({candidate.level}) as {target}:")
                    typer.echo(f"    {', '.join(candidate.tags)}")
        elif candidates:
            api = connect()
            client = publishing.connect_registry(host, options.backoff, lambda m: _err("retry", m))
            try:
                publisher = publishing.Publisher(
                    api, client, options, settings.policy,
                    say=lambda m: typer.echo(f"imagekit: {m}", err=True),
                )  # fmt: skip
                candidates, missing = publisher.present(candidates)
                for refusal in missing:
                    _err("refused", f"{refusal.cell}: {refusal.reason}")
                refused += missing
                for done in publisher.run(candidates):
                    entry = done.entry
                    published.append(entry.as_json())
                    if not as_json:
                        typer.echo(f"{entry.cell:<50} {entry.reference}")
                        typer.echo(
                            f"    {entry.level}; tags {', '.join(entry.tags)} ({done.duration_s:.1f}s)"
                        )
            finally:
                client.close()
    if as_json:
        refusals = [{"cell": r.cell, "reason": r.reason} for r in refused]
        document = {"dry_run": dry_run, "published": published, "refused": refusals}
        typer.echo(json.dumps(document, indent=2, sort_keys=True))
    verb = "would publish" if dry_run else "published"
    typer.echo(f"imagekit: {verb} {len(candidates)}, refused {len(refused)}; lock: {lock}", err=True)
    if refused:
        raise typer.Exit(int(ExitCode.CELL_FAILED))


@app.command()
@reports_errors
def images(
    output_format: Annotated[
        str,
        typer.Option("--format", "-f", help="json, yaml, or env (IMAGEKIT_IMAGE_<CELL>=repo@sha256:...)."),
    ] = "json",
    only: Annotated[
        list[str] | None, typer.Option("--only", help="Only cells whose id matches this glob (repeatable).")
    ] = None,
    lock: LockOption = Path("images.lock.json"),
) -> None:
    """Print the published images (images.lock.json) for other tools.

    Example: eval "$(imagekit images --format env)"; docker pull "$IMAGEKIT_IMAGE_..."
    """
    from fnmatch import fnmatchcase

    from imagekit.lockfile import read_lock, render_lock

    if not lock.is_file():
        raise InputError(f"no lock file at {lock}; run `imagekit publish` first")
    entries = read_lock(lock)
    if only:
        entries = {c: e for c, e in entries.items() if any(fnmatchcase(c, p) for p in only)}
    typer.echo(render_lock(entries, output_format), nl=False)


@app.command()
@reports_errors
def k8s(
    matrix: MatrixOption = Path("matrix.yaml"),
    only: Annotated[
        list[str] | None, typer.Option("--only", help="Only cells whose id matches this glob (repeatable).")
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", help="Directory for the Job manifests.", file_okay=False)
    ] = Path("k8s"),
    lock: LockOption = Path("images.lock.json"),
    gpus: Annotated[int, typer.Option("--gpus", min=0, max=64, help="nvidia.com/gpu per Job.")] = 1,
    node_selector: Annotated[
        list[str] | None, typer.Option("--node-selector", help="key=value (repeatable).")
    ] = None,
    toleration: Annotated[
        list[str] | None, typer.Option("--toleration", help="key=value:Effect or key:Effect (repeatable).")
    ] = None,
    runtime_class: Annotated[
        str | None, typer.Option("--runtime-class", help="RuntimeClass, e.g. nvidia.")
    ] = None,
    pvc: Annotated[
        list[str] | None,
        typer.Option("--pvc", help="NAME[:/mount]: a claim for data and checkpoints (default /data)."),
    ] = None,
    command: Annotated[
        str | None, typer.Option("--command", help="Run this (shell-split) instead of the check script.")
    ] = None,
    cpu: Annotated[str | None, typer.Option("--cpu", help="CPU request and limit (8, 500m).")] = None,
    memory: Annotated[str | None, typer.Option("--memory", help="Memory request and limit (64Gi).")] = None,
    backoff_limit: Annotated[int, typer.Option("--backoff-limit", min=0, help="Job retries.")] = 0,
    deadline: Annotated[
        int, typer.Option("--deadline", min=1, help="activeDeadlineSeconds of each Job.")
    ] = 3600,
    namespace: Annotated[str | None, typer.Option("--namespace", help="metadata.namespace.")] = None,
) -> None:
    """Write one Kubernetes Job per published cell, referencing the image by digest.

    By default each Job runs the image's own check script with the GPUs requested, so a cluster's
    GPU nodes are validated by the same checks as the build machine.

    Example: imagekit k8s --only '*cu121*' --gpus 8 --runtime-class nvidia --pvc ckpt:/checkpoints
    """
    import shlex

    from imagekit import k8s as kube
    from imagekit.lockfile import read_lock

    the_plan = _plan(matrix)
    cells = the_plan.select(only or [])
    if not cells:
        raise InputError(f"--only {' '.join(only or [])} matches no cell of {matrix}; see `imagekit plan`")
    entries = read_lock(lock)
    missing = [c.id for c in cells if c.id not in entries]
    if missing:
        raise InputError(
            f"{lock} has no digest for {', '.join(missing[:3])}"
            + (f" and {len(missing) - 3} more cells" if len(missing) > 3 else "")
            + "; run `imagekit publish` (or narrow --only)"
        )
    try:
        argv = tuple(shlex.split(command)) if command is not None else ()
    except ValueError as exc:
        raise InputError(f"--command: {exc}") from None
    if command is not None and not argv:
        raise InputError("--command is empty")
    options = kube.JobOptions(
        gpus=gpus,
        node_selector=kube.parse_node_selector(node_selector or []),
        tolerations=tuple(kube.Toleration.parse(t) for t in toleration or []),
        runtime_class=runtime_class,
        claims=tuple(kube.Claim.parse(p) for p in pvc or []),
        command=argv,
        cpu=kube.check_quantity("--cpu", cpu),
        memory=kube.check_quantity("--memory", memory),
        backoff_limit=backoff_limit,
        deadline_s=deadline,
        namespace=namespace,
    )
    files = kube.render_jobs({c.id: entries[c.id] for c in cells}, options)
    for path in kube.write_jobs(files, out):
        typer.echo(str(path))
    typer.echo(f"imagekit: {len(files)} Job manifests in {out}", err=True)


@app.command("merge-reports")
@reports_errors
def merge_reports(
    sources: Annotated[
        list[Path],
        typer.Argument(
            help="Directories holding a report.json (e.g. downloaded CI artifacts).", show_default=False
        ),
    ],
    state_dir: StateDirOption = Path(".imagekit"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the merged report as JSON.")] = False,
) -> None:
    """Merge the reports of per-cell CI jobs into STATE_DIR/report.json (for report and publish).

    Example: imagekit merge-reports --state-dir .imagekit cells/*
    """
    from imagekit.merge_reports import merge_reports as merge
    from imagekit.report import read_report, state_lock, summary_line, write_report

    merged = merge([read_report(source) for source in sources])
    with state_lock(state_dir):
        path = write_report(state_dir, merged)
    if as_json:
        typer.echo(json.dumps(merged.as_json(), indent=2, sort_keys=True))
    typer.echo(f"imagekit: merged {len(sources)} reports: {summary_line(merged)}; report: {path}", err=True)


def main() -> None:
    import signal
    import threading

    # SIGTERM (docker stop, a CI runner's cancel, systemd) takes Ctrl-C's path: Python's default
    # would end the process without running a `finally`, leaving check containers and half work.
    terminated = threading.Event()

    def on_sigterm(signum: int, frame: object) -> None:
        terminated.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        app()
    except KeyboardInterrupt:
        _err("error", "terminated" if terminated.is_set() else "interrupted")
        sys.exit(143 if terminated.is_set() else 130)
    except SystemExit as exc:
        if terminated.is_set() and exc.code == 130:  # a stage's own Ctrl-C exit
            sys.exit(143)
        raise


if __name__ == "__main__":
    main()

__all__ = ["ExitCode", "app", "main"]
