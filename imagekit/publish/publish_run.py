"""One ``imagekit publish`` run: the cells the report admits decided first (``imagekit.publish.policy``),
then, unless dry, a registry session and, only where some image was not staged by ``build --push``,
the Docker engine, handed to the publisher (``imagekit.publish.promote``); what it did, for the
command to print and the report to keep.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from imagekit.engine.client import connect
from imagekit.plan.cells import Cell, Plan
from imagekit.publish.policy import Candidate, Group, Refusal, select
from imagekit.publish.promote import Published, PublishedIndex, Publisher, PublishOptions, registry_side
from imagekit.registry.client import Backoff, Registry, open_registry
from imagekit.report.pullcost import PullCost
from imagekit.report.scans import ScanSummary
from imagekit.report.store import BuildReport


def connect_registry(host: str, backoff: Backoff, say: Callable[[str], None]) -> Registry:
    return open_registry(host, backoff, say)


@dataclass(frozen=True)
class PublishRun:
    """What one ``imagekit publish`` did (or, dry, would do)."""

    singles: tuple[Candidate, ...]  # published (or, dry, to publish) as an image alone
    groups: tuple[Group, ...]  # published (or, dry, to publish) as an image index
    published: tuple[Published, ...]
    indexes: tuple[PublishedIndex, ...]
    refused: tuple[Refusal, ...]
    costs: Mapping[str, PullCost] = field(default_factory=dict)  # each prepared cell's pull cost
    scans: Mapping[str, tuple[ScanSummary, ...]] = field(default_factory=dict)  # each published cell's


def publish_cells(
    plan: Plan,
    cells: Sequence[Cell],
    report: BuildReport,
    options: PublishOptions,
    say: Callable[[str], None],
    on_retry: Callable[[str], None],
    on_refused: Callable[[Refusal], None],
    on_published: Callable[[Published | PublishedIndex], None],
) -> PublishRun:
    """Decide from the report, then (unless dry) push, stage and promote what was admitted.

    ``say`` hears progress, ``on_retry`` each retried registry request, ``on_refused`` and
    ``on_published`` each cell's (or group's) outcome as it is known.
    """
    selection = select(plan, cells, report)
    for refusal in selection.refused:
        on_refused(refusal)
    if options.dry_run or not selection.candidates:
        return PublishRun(selection.singles, selection.groups, (), (), selection.refused)
    client = connect_registry(options.registry, options.backoff, on_retry)
    try:
        # The engine only when some image was not staged by `build --push`: with every cell
        # staged, publishing runs where there is no Docker at all.
        engine_needed = not all(registry_side(c, options.registry) for c in selection.candidates)
        publisher = Publisher(
            connect() if engine_needed else None, client, options, plan.matrix.publish.policy, say
        )
        done, unready = publisher.run(selection.singles, on_published, on_refused, selection.groups)
    finally:
        client.close()
    published = tuple(d for d in done if isinstance(d, Published))
    indexes = tuple(d for d in done if isinstance(d, PublishedIndex))
    cells_done = {p.entry.cell for p in published}
    groups_done = {i.index.group for i in indexes}
    # Scans are judged while cells are prepared; a cell refused after that was never published.
    scanned = {*cells_done, *(e.cell for i in indexes for e in i.entries)}
    return PublishRun(
        tuple(c for c in selection.singles if c.cell in cells_done),
        tuple(g for g in selection.groups if g.tag in groups_done),
        published,
        indexes,
        (*selection.refused, *unready),
        publisher.costs,
        {cell: found for cell, found in publisher.scans.items() if cell in scanned},
    )
