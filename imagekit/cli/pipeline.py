"""Stages run together: build, then verify what was built or found unchanged, in one report.

Above both stages (the builder knows nothing of verification, the harness nothing of builds);
`imagekit build --verify` is its one caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from imagekit.build.builder import Builder, BuildOutcome
from imagekit.plan.cells import Cell
from imagekit.report.store import ReportStore
from imagekit.report.verification import Verification
from imagekit.verify.harness import Harness
from imagekit.verify.schedule import verify_cells


def build_and_verify(
    builder: Builder,
    cells: Sequence[Cell],
    store: ReportStore,
    harness: Harness | None = None,
    on_verified: Callable[[Verification], None] = lambda _: None,
) -> BuildOutcome:
    """Build ``cells`` and record the report; with a harness, then verify what was built or found
    unchanged, each verdict landing in the same report as it comes."""
    outcome = builder.run(tuple(cells))
    store.save(outcome.report)
    if harness is None or outcome.interrupted:
        return outcome
    ready = {r.id for r in outcome.report.cells if r.status in ("built", "skipped")}
    verifications = verify_cells(harness, [c for c in cells if c.id in ready], store, on_verified)
    return dataclasses.replace(outcome, verifications=tuple(verifications))
