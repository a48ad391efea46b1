"""What a vulnerability scanner found in a published image, as the report and the signed statement
keep it: the scanner, the digest it scanned, the threshold it was held to, the findings counted per
severity, and those at or above the threshold that a waiver let through (with its reason).

``imagekit.publish.scan_gate`` reads the scanners' JSON and makes these; the report
(``imagekit report`` and its JSON) and the verification statement of the published digest carry
them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal, get_args

from imagekit.core.limits import MAX_ITEMS
from imagekit.core.safetypes import RECORD_CONFIG, Count, ImageDigest, Items, ShortText
from imagekit.facts.advisories import Severity

Scanner = Literal["trivy", "grype"]
# The scanners' own severities, mildest first, in one spelling: Trivy's UNKNOWN, LOW, MEDIUM, HIGH
# and CRITICAL, Grype's Negligible besides them. "unknown" (no score yet) is counted apart: it
# ranks below every threshold, since it says nothing of how severe a finding is.
ScanSeverity = Literal["unknown", "negligible", "low", "medium", "high", "critical"]
SCAN_SEVERITIES: tuple[ScanSeverity, ...] = get_args(ScanSeverity)


def at_least(severity: ScanSeverity, threshold: Severity) -> bool:
    """Whether a scanner's ``severity`` is ``threshold`` (advisories' low..critical) or worse."""
    return SCAN_SEVERITIES.index(severity) >= SCAN_SEVERITIES.index(threshold)


@dataclass(frozen=True)
class SeverityCounts:
    """Findings per severity (each package and ID once)."""

    __pydantic_config__ = RECORD_CONFIG

    critical: Count = 0
    high: Count = 0
    medium: Count = 0
    low: Count = 0
    negligible: Count = 0
    unknown: Count = 0

    def describe(self) -> str:
        """``2 critical, 1 high, 0 medium, 4 low`` (negligible and unknown where there are any)."""
        shown = [f"{getattr(self, s)} {s}" for s in ("critical", "high", "medium", "low")]
        shown += [f"{getattr(self, s)} {s}" for s in ("negligible", "unknown") if getattr(self, s)]
        return ", ".join(shown)


@dataclass(frozen=True)
class WaivedFinding:
    """A finding at or above the threshold that the matrix waives for this cell (advisories.waive)."""

    __pydantic_config__ = RECORD_CONFIG

    id: ShortText  # as the scanner names it
    package: ShortText
    version: ShortText
    severity: ScanSeverity
    advisory: ShortText  # the waived advisory's ID (the scanner's, or one it names as related)
    reason: ShortText


@dataclass(frozen=True)
class ScanSummary:
    """One scanner's findings for one staged digest, as held to the gate."""

    __pydantic_config__ = RECORD_CONFIG

    scanner: Scanner
    version: ShortText  # the scanner's own version ("unknown" where its JSON does not say)
    digest: ImageDigest  # the staged manifest digest the findings are for
    threshold: Severity
    counts: SeverityCounts
    waived: Annotated[tuple[WaivedFinding, ...], Items(MAX_ITEMS)] = ()

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["waived"] = [asdict(w) for w in self.waived]
        return data

    def describe(self) -> str:
        """``trivy 0.76.0: 1 critical, 2 high, 0 medium, 2 low (1 waived)``."""
        waived = f" ({len(self.waived)} waived)" if self.waived else ""
        return f"{self.scanner} {self.version}: {self.counts.describe()}{waived}"
