"""verify: start each image (a matrix's built cells, or images named) and run its in-image checks.

``build --verify`` verifies with the same harness and prints each verdict the same way
(``imagekit.cli.build``'s ``_harness`` and ``_echo_verification``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from imagekit.builds.command_line import DEFAULT_MATRIX
from imagekit.cli.app import app, gpu_request, reports_errors, select_cells
from imagekit.cli.build import _echo_verification, _harness
from imagekit.cli.flags import (
    DEFAULT_LOCK,
    GpusOption,
    JsonOption,
    OnlyOption,
    StateDirOption,
    VerifyTimeoutOption,
    path_option,
)
from imagekit.core.errors import ExitCode, InputError
from imagekit.report.state import DEFAULT_STATE_DIR


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
    from imagekit.verify.harness import Target
    from imagekit.verify.schedule import schedule, verify_all, verify_cells

    requested = gpu_request(gpus)  # a bad --gpus is bad input (exit 2), whether an engine answers or not
    if junit is not None:  # refused now, not after an hour of checks
        check_output_path(junit, state_dir, "--junit", DEFAULT_LOCK)
    if images and matrix is not None:
        raise InputError("give images or --matrix, not both")
    started, clock = timestamp(), time.monotonic()
    if images:
        harness = _harness(connect(jobs + 2), requested, timeout, memory, None, pull)
        plan = schedule(harness, jobs)
        _echo_note(plan.note)
        targets = [Target(i, i) for i in images]
        results = verify_all(harness, targets, on_result=_echo_verification, plan=plan)
    else:
        _, cells = select_cells(matrix or DEFAULT_MATRIX, only)
        api = connect(jobs + 2)  # a connection per running check, and one to spare
        with open_store(state_dir) as store:
            harness = _harness(api, requested, timeout, memory, store.logs, pull)
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


def _echo_note(note: str | None) -> None:
    if note:
        typer.echo(f"imagekit: {note}", err=True)
