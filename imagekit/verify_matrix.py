"""Verify a matrix's built cells and record each verdict in the build report.

The images come from the last build report (the image id each cell was built or skipped as), so
what is verified is exactly what the build produced. The report is rewritten after every cell:
an interrupted run leaves a whole report that says which cells were verified.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from imagekit.matrix import Cell
from imagekit.report import BuildReport, read_report, state_lock, write_report
from imagekit.verify import Harness, Target, Verification, verify_all


def targets_for(cells: Sequence[Cell], report: BuildReport) -> tuple[list[Target], list[tuple[str, str]]]:
    """(images to verify, [(cell id, why it cannot be verified)])."""
    by_id = {result.id: result for result in report.cells}
    targets: list[Target] = []
    missing: list[tuple[str, str]] = []
    for cell in cells:
        result = by_id.get(cell.id)
        if result is None:
            missing.append((cell.id, "not in the build report; run `imagekit build` first"))
        elif result.status not in ("built", "skipped") or not result.image_id:
            missing.append((cell.id, f"its build {result.status}; nothing to verify"))
        else:
            targets.append(Target(cell.id, result.image_id))
    return targets, missing


def verify_cells(
    harness: Harness,
    cells: Sequence[Cell],
    state_dir: Path,
    on_result: Callable[[Verification], None] = lambda _: None,
) -> list[Verification]:
    """Verify ``cells`` one after another, writing each verdict into ``state_dir``'s report."""
    with state_lock(state_dir):
        report = read_report(state_dir)
        targets, missing = targets_for(cells, report)
        results = [
            Verification(
                cell_id, "-", harness.gpus.text, "failed", harness.gpus.requested, False, (), 0.0, why
            )
            for cell_id, why in missing
        ]
        for result in results:
            report = report.with_verification(result.target, result)
            on_result(result)
        write_report(state_dir, report)

        def record(result: Verification) -> None:
            nonlocal report
            report = report.with_verification(result.target, result)
            write_report(state_dir, report)
            on_result(result)

        results += verify_all(harness, targets, on_result=record)
    return results
