"""Merge the reports of jobs that each built part of a matrix (one CI job per cell) into one.

A cell or base that appears in several reports keeps its last record, in the order given; the
run's start is the earliest start and its duration the longest job's.
"""

from __future__ import annotations

from collections.abc import Sequence

from imagekit.errors import InputError
from imagekit.store import BuildReport, CellResult


def _last_wins(groups: Sequence[Sequence[CellResult]]) -> tuple[CellResult, ...]:
    merged: dict[str, CellResult] = {}
    for group in groups:
        for result in group:
            merged.pop(result.id, None)  # a later record moves to the end
            merged[result.id] = result
    return tuple(merged.values())


def merge_reports(reports: Sequence[BuildReport]) -> BuildReport:
    if not reports:
        raise InputError("no report to merge")
    matrices = sorted({r.matrix for r in reports})
    if len(matrices) > 1:
        raise InputError(f"the reports come from different matrices: {', '.join(matrices)}")
    return BuildReport(
        matrix=matrices[0],
        started=min(r.started for r in reports),
        duration_s=max(r.duration_s for r in reports),
        engine=", ".join(sorted({r.engine for r in reports})),
        cells=_last_wins([r.cells for r in reports]),
        bases=_last_wins([r.bases for r in reports]),
    )
