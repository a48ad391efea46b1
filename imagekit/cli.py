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
from imagekit.matrix import Plan, load_plan
from imagekit.render import (
    Renderer,
    dockerfile_path,
    expected_files,
    output_dir,
    raise_on_drift,
    write_rendered,
)
from imagekit.schema import json_schema

if TYPE_CHECKING:
    from imagekit.matrix import Cell
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
) -> None:
    """Render one Dockerfile per cell to OUT/<cell-id>/Dockerfile.

    Example: imagekit render --matrix matrix.yaml --check
    """
    the_plan = _plan(matrix)
    renderer = Renderer(the_plan)
    target = output_dir(the_plan, out)
    # Everything is rendered (and so validated) before the first file is touched.
    expected = expected_files(the_plan, renderer, target)
    if check:
        from imagekit.render import check_drift

        raise_on_drift(check_drift(expected, target), matrix.name)
        typer.echo(f"{len(expected)} Dockerfiles in {target} are up to date")
        return
    drift = write_rendered(expected, target)
    typer.echo(
        f"{len(expected)} Dockerfiles in {target}: {len(drift.changed)} updated,"
        f" {len(drift.missing)} added, {len(drift.stale)} stale removed"
    )


@app.command()
def schema() -> None:
    """Print the matrix file's JSON Schema (for editors and validators)."""
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
    if then_verify:
        verified = [r.id for r in outcome.report.cells if r.status in ("built", "skipped")]
        _verify_cells(api, [c for c in cells if c.id in verified], state_dir, gpus, verify_timeout, None)
    if outcome.report.failed:
        raise typer.Exit(int(ExitCode.CELL_FAILED))


@app.command()
@reports_errors
def report(
    state_dir: StateDirOption = Path(".imagekit"),
    markdown: Annotated[
        bool, typer.Option("--markdown", help="GitHub-flavoured Markdown (for $GITHUB_STEP_SUMMARY).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON.")] = False,
) -> None:
    """Print the last build's report as a table; exit 1 when a cell failed.

    Example: imagekit report --markdown >> "$GITHUB_STEP_SUMMARY"
    """
    from rich.console import Console
    from rich.table import Table

    from imagekit import report as reports

    the_report = reports.read_report(state_dir)
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
    api: Any, cells: Sequence[Cell], state_dir: Path, gpus: str, timeout: float, junit: Path | None
) -> list[Verification]:
    from imagekit.junit import write_junit
    from imagekit.verify import GpuRequest, Harness, Limits
    from imagekit.verify_matrix import verify_cells

    harness = Harness(api, GpuRequest.parse(gpus), Limits(timeout_s=timeout), logs_dir=state_dir / "logs")
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
        results = _verify_cells(api, cells, state_dir, gpus, timeout, junit)
    if as_json:
        typer.echo(json.dumps([r.as_json() for r in results], indent=2, sort_keys=True))
    counts = {
        label: sum(1 for r in results if r.label == label)
        for label in ("validated", "checked without GPU", "failed")
    }
    typer.echo("imagekit: " + ", ".join(f"{n} {label}" for label, n in counts.items() if n), err=True)
    if counts["failed"]:
        raise typer.Exit(int(ExitCode.CELL_FAILED))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        _err("error", "interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()

__all__ = ["ExitCode", "app", "main"]
