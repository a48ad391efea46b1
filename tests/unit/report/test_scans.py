"""A scanner's findings as the report keeps them: severities ranked mildest first with "unknown"
below every threshold, the counts and the summary described in one line, and a summary's JSON what
the record reads back."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from imagekit.report.scans import SCAN_SEVERITIES, ScanSummary, SeverityCounts, WaivedFinding, at_least

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("severity", "threshold", "held"),
    [
        ("critical", "critical", True),
        ("critical", "low", True),
        ("high", "critical", False),
        ("medium", "medium", True),
        ("low", "medium", False),
        ("negligible", "low", False),
        ("unknown", "low", False),  # no score yet says nothing of how severe it is
    ],
)
def test_a_severity_is_at_least_a_threshold_only_when_as_bad_or_worse(
    severity: str, threshold: str, held: bool
) -> None:
    assert at_least(severity, threshold) is held  # type: ignore[arg-type]


def test_severities_rank_mildest_first() -> None:
    assert SCAN_SEVERITIES == ("unknown", "negligible", "low", "medium", "high", "critical")


def test_counts_name_the_four_levels_always_and_the_others_where_there_are_any() -> None:
    assert SeverityCounts(critical=2, high=1, low=4).describe() == "2 critical, 1 high, 0 medium, 4 low"
    assert SeverityCounts(unknown=3).describe() == "0 critical, 0 high, 0 medium, 0 low, 3 unknown"
    assert SeverityCounts(negligible=1, unknown=2).describe().endswith("0 low, 1 negligible, 2 unknown")


def summary(*waived: WaivedFinding) -> ScanSummary:
    return ScanSummary("trivy", "0.76.0", DIGEST, "high", SeverityCounts(critical=1, high=2, low=2), waived)


def test_a_summary_says_its_scanner_counts_and_waivers_and_round_trips_through_json() -> None:
    waiver = WaivedFinding(
        "CVE-2025-1", "torch", "2.1.2", "critical", "CVE-2025-1", "trusted checkpoints only"
    )
    assert summary().describe() == "trivy 0.76.0: 1 critical, 2 high, 0 medium, 2 low"
    assert summary(waiver).describe() == "trivy 0.76.0: 1 critical, 2 high, 0 medium, 2 low (1 waived)"
    document = summary(waiver).as_json()
    assert document["waived"] == [
        {
            "id": "CVE-2025-1",
            "package": "torch",
            "version": "2.1.2",
            "severity": "critical",
            "advisory": "CVE-2025-1",
            "reason": "trusted checkpoints only",
        }
    ]
    assert TypeAdapter(ScanSummary).validate_python(document) == summary(waiver)


@pytest.mark.parametrize(
    ("field", "value"),
    [("scanner", "clair"), ("digest", "sha256:short"), ("threshold", "unknown"), ("counts", {"high": -1})],
)
def test_a_summary_a_record_could_not_hold_is_refused(field: str, value: object) -> None:
    document = summary().as_json() | {field: value}
    with pytest.raises(ValidationError):
        TypeAdapter(ScanSummary).validate_python(document)
