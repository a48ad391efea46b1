"""A matrix's advisory policy, applied to each cell it makes: refusals with reasons, and waivers.

What a cell installs (its torch; the pip and setuptools every venv holds once the render has
upgraded them, ``imagekit/data/advisories.yaml``'s ``venv_tools``; a fixed stack's own pip is not
known and not held against anything) is looked up in imagekit's advisories and the matrix's own
(``advisories.file``). An advisory at or above ``advisories.threshold`` refuses the cell, naming
the advisory, the package, the version and the fix, unless an ``advisories.waive`` entry selects
the cell; the cell then carries the finding with the waiver's reason, into the plan, the report,
the lock and the signed statement. Milder findings are carried, never refused.

A waiver must be meant: for an advisory imagekit knows and for torch versions that advisory
affects (each problem one InputError line); one that waives nothing once the matrix is planned
(its cells gone or fixed) is a warning.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from imagekit.core.errors import InputError
from imagekit.core.paths import inside
from imagekit.core.versions import minor_of
from imagekit.core.yamlsource import SourceDocument
from imagekit.facts.advisories import (
    Advisories,
    Advisory,
    AdvisoryFinding,
    Severity,
    load_advisories,
    read_advisory_file,
)
from imagekit.facts.compat import Compat
from imagekit.plan.rules import Request
from imagekit.plan.schema import AdvisorySettings, Waiver

IDS_SHOWN = 12  # advisory IDs an unknown-ID error lists (imagekit's own file has about a dozen)


class Selectable(Protocol):
    """What a waiver's keys select on: a combination's request, or a planned cell."""

    @property
    def base(self) -> str: ...
    @property
    def torch(self) -> str: ...
    @property
    def cuda(self) -> str: ...
    @property
    def flavour(self) -> str: ...
    @property
    def platform(self) -> str: ...


@dataclass(frozen=True)
class _Selected:
    """A waiver with its advisory and its keys resolved as the cells' are (torch "2.5" -> 2.5.1)."""

    index: int
    waiver: Waiver
    advisory: Advisory
    torch: frozenset[str] | None
    cuda: frozenset[str] | None

    def selects(self, request: Selectable) -> bool:
        waiver = self.waiver
        return (
            (self.torch is None or request.torch in self.torch)
            and (self.cuda is None or request.cuda in self.cuda)
            and (waiver.base is None or request.base in waiver.base)
            and (waiver.flavour is None or request.flavour in waiver.flavour)
            and (waiver.platform is None or request.platform in waiver.platform)
        )


class AdvisoryPolicy:
    """One matrix's advisories, threshold and waivers; ``findings`` per cell, ``unused`` once every
    cell is planned."""

    def __init__(
        self,
        settings: AdvisorySettings,
        root: Path,
        doc: SourceDocument,
        compat: Compat,
        known: Advisories | None = None,
    ) -> None:
        self.doc = doc
        self.threshold = settings.threshold
        # The publish gate's threshold for a scanner's findings, resolved here once: its own, or
        # the advisories' (``imagekit.publish.scan_gate``; --scan-threshold overrides it there).
        self.scan_threshold: Severity = settings.scan.threshold or settings.threshold
        self.scan_required = settings.scan.required
        data = known or load_advisories()
        self.sources = "imagekit/data/advisories.yaml"
        if settings.file is not None:
            where = f"{doc.where(('advisories', 'file'))}: advisories.file"
            path = inside(root / settings.file, root, where)
            data = data.extended(read_advisory_file(path, where, data))
            self.sources += f" and {settings.file}"
        self.data = data
        self.waivers = tuple(self._selected(i, w, compat) for i, w in enumerate(settings.waive))
        self._used: set[int] = set()

    def _where(self, index: int, key: str) -> str:
        path = ("advisories", "waive", index, key)
        return f"{self.doc.where(path)}: advisories.waive[{index}].{key}"

    def _selected(self, index: int, waiver: Waiver, compat: Compat) -> _Selected:
        advisory = self.data.get(waiver.id)
        if advisory is None:
            alias = self.data.by_alias(waiver.id)
            if alias is not None:
                hint = f"it is an alias of {alias.id}: write that"
            else:
                ids = [a.id for a in self.data.entries]
                more = f" and {len(ids) - IDS_SHOWN} more" if len(ids) > IDS_SHOWN else ""
                hint = f"they are {', '.join(ids[:IDS_SHOWN])}{more}"
            raise InputError(
                f"{self._where(index, 'id')}: {waiver.id} is not an advisory in {self.sources}; {hint}"
            )
        torch = frozenset(compat.resolve_torch(t) for t in waiver.torch) if waiver.torch else None
        if advisory.package == "torch":
            for version in sorted(torch or ()):
                if not advisory.affects(version):
                    raise InputError(
                        f"{self._where(index, 'torch')}: torch {version} is not affected by {advisory.id}"
                        f" (affected: {advisory.affected.text}), so there is nothing to waive; remove it"
                    )
        else:
            held = self.data.venv_tools.get(advisory.package)
            if held is None or not advisory.affects(held):
                raise InputError(
                    f"{self._where(index, 'id')}: {advisory.id} affects {advisory.package}"
                    f" {advisory.affected.text}, and every venv holds {advisory.package} {held}: it affects"
                    " no cell; remove the waiver"
                )
        cuda = frozenset(c if c == "cpu" else minor_of(c) for c in waiver.cuda) if waiver.cuda else None
        return _Selected(index, waiver, advisory, torch, cuda)

    def installed(self, torch: str, venv: bool) -> dict[str, str]:
        """What a cell installs that advisories name: its torch, and its venv's tools if it has one."""
        return {"torch": torch, **(dict(self.data.venv_tools) if venv else {})}

    def findings(
        self, request: Request, installed: Mapping[str, str]
    ) -> tuple[tuple[AdvisoryFinding, ...], str | None]:
        """The cell's findings (each with its waiver's reason, if one selects it), and why the cell
        is refused (None: it is not)."""
        found: list[AdvisoryFinding] = []
        refusing: list[AdvisoryFinding] = []
        for advisory, version in self.data.affecting(installed):
            waiver = next((w for w in self.waivers if w.advisory is advisory and w.selects(request)), None)
            if waiver is not None:
                self._used.add(waiver.index)
            finding = AdvisoryFinding(
                advisory.id,
                advisory.package,
                version,
                advisory.fixed,
                advisory.severity,
                advisory.summary,
                waiver.waiver.reason if waiver else None,
            )
            found.append(finding)
            if waiver is None and advisory.at_least(self.threshold):
                refusing.append(finding)
        return tuple(found), (self._refusal(refusing) if refusing else None)

    def _refusal(self, refusing: Sequence[AdvisoryFinding]) -> str:
        first = refusing[0]
        also = "".join(f"; also {f.id} ({f.severity}), fixed in {f.fixed}" for f in refusing[1:])
        return (
            f"{first.package} {first.version} is affected by {first.id} ({first.severity}), fixed in"
            f" {first.fixed}: {first.summary}{also}; install a fixed version, or waive it for this cell"
            " in advisories.waive with a reason"
        )

    def waiver_of(self, ids: Collection[str], cell: Selectable) -> tuple[str, str] | None:
        """(advisory ID, reason) of the first waiver that selects ``cell`` for an advisory named
        by one of ``ids`` (a scanner's finding: its own ID and those it lists as related), by the
        advisory's ID or one of its aliases; None when no waiver covers it. A scanner's finding is
        waived by the same entries as the plan's, never by a second list."""
        for selected in self.waivers:
            advisory = selected.advisory
            if (advisory.id in ids or any(a in ids for a in advisory.aliases)) and selected.selects(cell):
                return advisory.id, selected.waiver.reason
        return None

    def unused(self) -> list[str]:
        """A warning per waiver that waived no finding of any planned cell: stale (its cells are
        gone, or now fixed) or mistyped keys. A warning, not an error: a waiver that provably waives
        nothing (an unknown ID, a torch the advisory does not affect) is refused as it is read."""
        return [
            f"{self._where(selected.index, 'id')}: the waiver of {selected.advisory.id} selects no cell it"
            f" affects ({selected.advisory.package} {selected.advisory.affected.text}); fix its keys, or"
            " remove it"
            for selected in self.waivers
            if selected.index not in self._used
        ]
