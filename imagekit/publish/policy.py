"""What may be published, decided from the build report alone before anything moves.

Per cell: the policy (how far its image was verified), freshness (its verification ran on the
built image, the verified digest is the staged one) and its final tags. Per group (the cells that
share one readable tag, ``Plan.groups``, one per platform): a group of one is published as its
cell's image alone, exactly as before platforms existed; a group of two or more is published as
one OCI image index, by default only when every platform passes the policy, with
``publish.partial_index`` from the platforms that do (the others are listed as missing).

A group's immutable ``{digest}`` is the sha256 of its sorted ``"<platform> <input digest>"``
lines: it changes when any platform's inputs change, or when the set of platforms does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from typing import Any, Literal

from imagekit.core import naming, platforms
from imagekit.core.errors import RegistryError
from imagekit.core.platforms import Platform, PlatformName
from imagekit.core.text import shown
from imagekit.facts.advisories import AdvisoryFinding
from imagekit.plan.cells import Cell, Plan
from imagekit.plan.schema import Publish
from imagekit.report.lockfile import LockEntry
from imagekit.report.pullcost import ImageReader, PullCost, gib, measure
from imagekit.report.store import BuildReport, CellResult, Staged
from imagekit.report.verification import Verification

Level = Literal["validated", "checked", "built"]
# What a policy admits, by what the image actually passed.
ADMITS: Mapping[str, frozenset[str]] = {
    "gpu-validated": frozenset({"validated"}),
    "checked": frozenset({"validated", "checked"}),
    "built": frozenset({"validated", "checked", "built"}),
}
_WEAKEST_FIRST: tuple[Level, ...] = ("built", "checked", "validated")


@dataclass(frozen=True)
class Candidate:
    """A cell admitted for publishing, with its final tags (none for a platform of an index:
    the tags name the index)."""

    cell: str
    image_id: str
    input_digest: str
    level: Level
    tags: tuple[str, ...]
    verification: Verification | None
    staged: Staged | None = None  # where `build --push` staged it: promoted with no engine
    base_image: str | None = None  # what the build's FROM named, and the digest it resolved to
    base_digest: str | None = None
    platform: PlatformName = platforms.DEFAULT
    built_on: date | None = None  # the day the build dated its tags (a group's {date})
    # what the plan found against its installs (each waived, or below the threshold): the lock and
    # the signed statement carry it
    advisories: tuple[AdvisoryFinding, ...] = ()


@dataclass(frozen=True)
class Refusal:
    cell: str
    reason: str


@dataclass(frozen=True)
class Missing:
    """A platform of a group left out of its index (publish.partial_index), and why."""

    platform: PlatformName
    cell: str
    reason: str


@dataclass(frozen=True)
class Group:
    """The platforms of one readable tag published as one image index."""

    tag: str  # the readable tag the group's cells share (Plan.groups' key)
    members: tuple[Candidate, ...]  # the platforms in the index, in plan order
    missing: tuple[Missing, ...]  # the platforms left out (publish.partial_index)
    tagging: naming.Tagging  # the matrix's
    partial: bool  # publish.partial_index: a platform that fails in the registry is left out too

    @property
    def level(self) -> Level:
        """How far the index was verified: as far as its least verified platform."""
        return min((m.level for m in self.members), key=_WEAKEST_FIRST.index)

    @property
    def input_digest(self) -> str:
        return group_digest({m.platform: m.input_digest for m in self.members})

    @property
    def tags(self) -> tuple[str, ...]:
        """Readable first, then the immutable ones, suffixed by the index's level."""
        days = [m.built_on for m in self.members if m.built_on is not None]
        day = self.tagging.tag_day(max(days, default=None))  # the day its last platform was built
        assert day is not None  # a member is built on a day (``_candidate``)
        tags = self.tagging.tags(self.tag, day, self.input_digest)
        return naming.published_tags(tags, self.level, self.tag)

    def without(self, cell: str, reason: str) -> Group:
        """The group with ``cell``'s platform moved to the missing ones (it failed after the
        decision, in the registry)."""
        member = next(m for m in self.members if m.cell == cell)
        return replace(
            self,
            members=tuple(m for m in self.members if m.cell != cell),
            missing=(*self.missing, Missing(member.platform, cell, reason)),
        )


@dataclass(frozen=True)
class Selection:
    """The decision: images published alone, indexes, and every refusal with its reason."""

    singles: tuple[Candidate, ...]
    groups: tuple[Group, ...]
    refused: tuple[Refusal, ...]

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        """Every image that is pushed and promoted: the singles and each group's platforms."""
        return (*self.singles, *(m for g in self.groups for m in g.members))


def group_digest(inputs: Mapping[str, str]) -> str:
    """The input digest of a group: sha256 of its sorted ``"<platform> <input digest>"`` lines."""
    lines = sorted(f"{platform} {digest}\n" for platform, digest in inputs.items())
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def level_of(result: CellResult) -> Level | None:
    """How far this image was verified; None when it must never be published."""
    if result.status not in ("built", "skipped") or not result.image_id:
        return None
    verification = result.verification
    if verification is None:
        return "built"
    if verification.verdict == "failed":
        return None
    return verification.verdict


def unbound_verification(verification: Verification, input_digest: str) -> str | None:
    """Why ``verification`` is no verification of a cell built from ``input_digest``, or None.

    A verification names the inputs of the image it ran on (its input-digest label). One that
    names none (a record of an earlier release, or an image without the label) or other inputs
    cannot be bound to the cell's record, whose input digest may have been replaced: it is no
    verification, whatever its verdict, and the cell is refused until it is verified again (not
    published as never verified: its record would still show another image's checks)."""
    made_for = verification.input_digest
    if made_for is None:
        return (
            f"its verification names no input digest (a record of an earlier release, or an image"
            f" without the {naming.INPUT_DIGEST_LABEL} label): it cannot be bound to the cell's"
            " inputs; re-run `imagekit verify` on the cell"
        )
    if made_for != input_digest:
        return (
            f"its verification was made for inputs {made_for}, not the cell's {input_digest};"
            " re-run `imagekit verify` on the cell's own image"
        )
    return None


def refusal_reason(result: CellResult | None, policy: str) -> str | None:
    if result is None:
        return "not in the build report; run `imagekit build` first"
    if result.status not in ("built", "skipped") or not result.image_id or not result.input_digest:
        return f"its build {result.status}"
    verification = result.verification
    staged = result.staged
    ran_on = (result.image_id, *result.tags, *((staged.reference,) if staged else ()))
    if verification is not None and verification.image not in ran_on:
        return f"its verification ran on {verification.image}, not the built {result.image_id}; verify again"
    level = level_of(result)
    if level is None:
        assert verification is not None
        return f"it failed verification ({verification.error or _failed_names(verification)})"
    unbound = unbound_verification(verification, result.input_digest) if verification is not None else None
    if unbound is not None:
        return unbound
    if staged is not None and verification is not None and verification.image_digest != staged.digest:
        return (
            f"its verified digest ({verification.image_digest or 'unknown'}) is not its staged digest"
            f" ({staged.digest}); run `imagekit verify --pull` on the staged image"
        )
    if level not in ADMITS[policy]:
        what = "never verified" if level == "built" else "checked without a GPU"
        return (
            f"publish policy {policy} needs {' or '.join(sorted(ADMITS[policy]))}; it was {what}"
            " (run `imagekit verify --gpus all`, or set publish.policy explicitly)"
        )
    return None


def layer_over_cap(cost: PullCost, cap: int) -> str | None:
    """Why a cell may not be published for its largest layer (publish.max_layer_size: a node or a
    service that refuses such a layer, SageMaker's 10 GiB), naming the step that made it; the
    refusal's line names the cell."""
    largest = cost.largest
    if largest is None or largest.size <= cap:
        return None
    return (
        f"its layer {largest.digest[:19]} is {gib(largest.size)}, over"
        f" publish.max_layer_size {gib(cap)}; made by: {cost.largest_step}"
    )


def counted_cost(reader: ImageReader, source: str, digest: str, candidate: Candidate, cap: int) -> PullCost:
    """The staged image's pull cost, read from the registry before anything of it moves; a
    RegistryError (one line) when a layer is over ``cap`` or the registry's word is absurd."""
    where = f"{source}@{digest[:19]}"
    cost = measure(reader, source, digest, platforms.get(candidate.platform), where)
    over = layer_over_cap(cost, cap)
    if over is not None:
        raise RegistryError(over)
    return cost


def _failed_names(verification: Verification) -> str:
    return ", ".join(c.name for c in verification.failed_checks()[:4]) or "no checks ran"


_NO_DAY = (
    "the build report does not say which day the build dated its tags (a report of an earlier"
    " release); run `imagekit build` again, which re-tags it without rebuilding"
)


def final_tags(cell: Cell, publish: Publish, result: CellResult, level: Level) -> tuple[str, ...] | None:
    """The matrix's tags for the cell (readable first), suffixed by level, dated as the build was.

    Derived from the matrix and the identity the build decided (input digest, build day, both
    typed fields of the report), never copied from the report's tags and never rendered again.
    None when a pattern needs the build day and the report (of an earlier release) has none.
    """
    tagging = publish.tagging
    day = tagging.tag_day(result.built_on)
    if day is None or result.input_digest is None:
        return None
    tags = tagging.tags(cell.readable_tag, day, result.input_digest)
    return naming.published_tags(tags, level, cell.id)


def _candidate(cell: Cell, result: CellResult | None, publish: Publish, alone: bool) -> Candidate | Refusal:
    """One cell's decision; ``alone``: its group is itself, so the candidate carries final tags."""
    reason = refusal_reason(result, publish.policy)
    if reason is not None:
        return Refusal(cell.id, reason)
    assert result is not None and result.image_id and result.input_digest
    level = level_of(result)
    assert level is not None
    tags = final_tags(cell, publish, result, level)
    if tags is None:
        return Refusal(cell.id, _NO_DAY)
    return Candidate(
        cell.id,
        result.image_id,
        result.input_digest,
        level,
        tags if alone else (),
        result.verification,
        result.staged,
        result.base_image,
        result.base_digest,
        cell.platform,
        result.built_on,
        cell.advisories,
    )


def _group(
    tag: str, cells: Sequence[Cell], decided: Sequence[Candidate | Refusal], publish: Publish
) -> tuple[Group | None, list[Refusal]]:
    """A group of platforms: its index, or why none is published (naming group and platform)."""
    members = tuple(d for d in decided if isinstance(d, Candidate))
    turned = [(cell, d) for cell, d in zip(cells, decided, strict=True) if isinstance(d, Refusal)]
    refused = [
        Refusal(cell.id, f"group {tag}, {cell.platform}: {refusal.reason}") for cell, refusal in turned
    ]
    if turned and (not publish.partial_index or not members):
        names = ", ".join(cell.platform for cell, _ in turned)
        why = (
            f"group {tag} is published only when every platform passes publish policy"
            f" {publish.policy}, and {names} did not (publish.partial_index: true publishes the others)"
        )
        refused = [replace(r, reason=f"{r.reason}; no index published") for r in refused]
        refused += [Refusal(m.cell, f"group {tag}, {m.platform}: not published: {why}") for m in members]
        return None, refused
    missing = tuple(Missing(cell.platform, cell.id, refusal.reason) for cell, refusal in turned)
    refused = [replace(r, reason=f"{r.reason}; left out of the group's index") for r in refused]
    return Group(tag, members, missing, publish.tagging, publish.partial_index), refused


def settle(group: Group, failed: Mapping[str, str]) -> tuple[Group | None, list[Refusal]]:
    """The group once its platforms' images were checked in the registry: ``failed`` (cell ->
    why) may leave platforms out (partial) or refuse the whole group (each platform told why)."""
    broken = [m for m in group.members if m.cell in failed]
    if not broken:
        return group, []
    rest = [m for m in group.members if m.cell not in failed]
    refused = [Refusal(m.cell, f"group {group.tag}, {m.platform}: {failed[m.cell]}") for m in broken]
    if group.partial and rest:
        for member in broken:
            group = group.without(member.cell, failed[member.cell])
        return group, [replace(r, reason=f"{r.reason}; left out of the group's index") for r in refused]
    names = ", ".join(m.platform for m in broken)
    refused += [
        Refusal(
            m.cell, f"group {group.tag}, {m.platform}: not published: {names} is not ready in the registry"
        )
        for m in rest
    ]
    return None, refused


def select(plan: Plan, cells: Sequence[Cell], report: BuildReport) -> Selection:
    """Decide per group, from the report alone, before anything is pushed.

    A group is published whole: naming one platform's cell (``--only``) decides its whole group,
    since the readable tag names the one image (or index) the group publishes. Nothing is
    rendered: the report's input digest is what the build decided, and ``prepare`` checks it
    against the label of the image the registry holds before any tag moves.
    """
    by_id = {r.id: r for r in report.cells}
    publish = plan.matrix.publish
    chosen = {c.id for c in cells}
    singles: list[Candidate] = []
    groups: list[Group] = []
    refused: list[Refusal] = []
    for tag, members in plan.groups().items():
        if not chosen.intersection(m.id for m in members):
            continue
        alone = len(members) == 1
        decided = [_candidate(m, by_id.get(m.id), publish, alone) for m in members]
        if alone:
            (decision,) = decided
            if isinstance(decision, Candidate):
                singles.append(decision)
            else:
                refused.append(decision)
            continue
        group, turned = _group(tag, members, decided, publish)
        refused += turned
        if group is not None:
            groups.append(group)
    return Selection(tuple(singles), tuple(groups), tuple(refused))


def gpus_of(entry: LockEntry) -> tuple[str, ...]:
    """The GPU products a published image's verification saw (its provenance's word)."""
    return entry.provenance.gpus if entry.provenance is not None else ()


def check_platform(where: str, config: Mapping[str, Any], platform: Platform) -> None:
    """The image config's platform (required by the OCI image spec) must be the cell's: an index
    entry, a Kubernetes node selector and the lock say so on its word."""
    found = (config.get("os"), config.get("architecture"))
    if found != (platform.os, platform.arch):
        said = "/".join(str(x) for x in found) if all(isinstance(x, str) for x in found) else "no platform"
        raise RegistryError(f"{where} is an image for {shown(said)}, not the cell's {platform.name}")
