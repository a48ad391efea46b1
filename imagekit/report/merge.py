"""Merge the reports of jobs that each built part of a matrix (one CI job per cell) into one.

A cell or base that appears in several reports keeps its last record, in the order given; the
run's start is the earliest start and its duration the longest job's; every job's verify runs are
kept. Two reports that disagree about one cell's staged or verified manifest digest are refused,
and so is one report's staged digest beside another's verification of another image: publishing
from either would promote an image the other job never built or checked.
"""

from __future__ import annotations

from collections.abc import Sequence

from imagekit.core.errors import InputError
from imagekit.report.store import MAX_VERIFY_RUNS, BuildReport, CellResult


def _last_wins(groups: Sequence[Sequence[CellResult]]) -> tuple[CellResult, ...]:
    merged: dict[str, CellResult] = {}
    for group in groups:
        for result in group:
            merged.pop(result.id, None)  # a later record moves to the end
            merged[result.id] = result
    return tuple(merged.values())


def _digests(result: CellResult) -> dict[str, str]:
    found: dict[str, str] = {}
    if result.staged is not None:
        found["staged"] = result.staged.digest
    if result.verification is not None and result.verification.image_digest:
        found["verified"] = result.verification.image_digest
    return found


def check_digests(reports: Sequence[BuildReport], names: Sequence[str]) -> None:
    """Refuse two reports that name different staged or verified digests for one cell."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}  # (cell, kind) -> (digest, report name)
    for report, name in zip(reports, names, strict=True):
        for result in report.cells:
            for kind, digest in _digests(result).items():
                first = seen.setdefault((result.id, kind), (digest, name))
                if first[0] != digest:
                    raise InputError(
                        f"{first[1]} and {name} disagree about the {kind} digest of {result.id}"
                        f" ({first[0]} vs {digest}); merge reports of one run only"
                    )
                # One report's staged image and another's verified one must be the same image.
                other = "verified" if kind == "staged" else "staged"
                found = seen.get((result.id, other))
                if found is not None and found[1] != name and found[0] != digest:
                    raise InputError(
                        f"{found[1]} and {name} disagree about {result.id}: the {other} digest"
                        f" {found[0]} vs the {kind} digest {digest}; merge reports of one run only"
                    )


def merge_reports(reports: Sequence[BuildReport], names: Sequence[str] | None = None) -> BuildReport:
    if not reports:
        raise InputError("no report to merge")
    check_digests(reports, names if names is not None else [f"report {i + 1}" for i in range(len(reports))])
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
        # every job's verify runs (each its own runner's GPU time), oldest first
        verify_runs=tuple(sorted((v for r in reports for v in r.verify_runs), key=lambda v: v.started))[
            -MAX_VERIFY_RUNS:
        ],
    )
