"""Matrix `advisories:` waivers for test and benchmark cells: they build stand-ins or a test
template, and load no checkpoint, so imagekit's critical advisories (imagekit/data/advisories.yaml),
which refuse those cells unwaived, are about something else."""

from __future__ import annotations

from collections.abc import Sequence

from imagekit.facts.advisories import load_advisories
from imagekit.facts.compat import load_compat


def waive(*ids: str) -> str:
    """A matrix's `advisories:` block waiving each of ``ids`` for every cell it affects: for test
    matrices of torch 2.1-2.5 about something else (imagekit/data/advisories.yaml's critical
    advisories refuse those cells unwaived)."""
    reason = "a test of another feature; it loads no checkpoint"
    entries = "".join(f"    - {{id: {i}, reason: {reason}}}\n" for i in ids)
    return f"advisories:\n  waive:\n{entries}"


# torch < 2.6.0: torch.load(weights_only=True) runs code (CVE-2025-32434, critical); torch < 2.5.0
# also CVE-2024-48063 (critical). A waiver that selects no cell is only a warning.
WAIVE_TORCH_2_5 = waive("CVE-2025-32434")
WAIVE_OLD_TORCH = waive("CVE-2025-32434", "CVE-2024-48063")


def critical_waivers(torch: Sequence[str]) -> dict[str, object]:
    """A matrix's `advisories` waiving the critical advisories of ``torch`` (imagekit/data/advisories.yaml):
    the test cells build stand-ins or a test template, and load no checkpoint."""
    compat, advisories = load_compat(), load_advisories()
    found = {
        a.id
        for version in torch
        for a, _ in advisories.affecting({"torch": compat.resolve_torch(version)})
        if a.severity == "critical"
    }
    return {"waive": [{"id": i, "reason": "an integration test's stand-in cell"} for i in sorted(found)]}
