"""Which GPUs a cell serves, in every view of the report: the arch list the probe read in the image
(the cuda_archs check), else the image's cuda-archs label it was given."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from imagekit.probe import protocol
from imagekit.report.html import render_html
from imagekit.report.junit import junit_xml
from imagekit.report.store import BuildReport
from imagekit.report.text import ROW_HEADERS, cuda_archs, markdown, rows
from imagekit.report.verification import CheckRecord, Verification
from tests.unit.report_samples import result, verification

READ = '["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]'  # the record holds JSON text
LABEL = "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
CELL = "cuda-ubuntu24.04-torch2.11.0-cuda13.0-py3.12-runtime"


def checked(*records: CheckRecord) -> Verification:
    return verification(CELL, "checked", (CheckRecord("torch", "pass", True), *records))


def archs(status: str, expected: str | None = LABEL, actual: str | None = READ) -> CheckRecord:
    return CheckRecord(protocol.CUDA_ARCHS, status, False, expected=expected, actual=actual)


@pytest.mark.parametrize(
    ("found", "shown"),
    [
        (checked(archs("pass", "7.5;8.0;8.6;9.0;10.0;12.0")), "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"),
        # the wheel lacks the PTX the label promises: what the image holds, and the label beside it
        (checked(archs("fail")), f"sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 (label: {LABEL})"),
        (checked(archs("skip", actual=None)), f"{LABEL} (label)"),  # an old torch: the label only
        (checked(archs("skip", expected=None, actual=None)), ""),  # a CPU build
        (checked(), ""),  # a probe of an earlier release: no such check
        (None, ""),  # not verified
    ],
)
def test_the_probes_list_else_the_label(found: Verification | None, shown: str) -> None:
    assert cuda_archs(found) == shown


def report() -> BuildReport:
    cells = (result(CELL, verification=checked(archs("fail"))), result("cuda-unverified"))
    started = "2026-12-01T00:00:00Z"
    return BuildReport(
        matrix="matrix.yaml", started=started, duration_s=1.0, engine="docker", cells=cells, bases=()
    )


def test_a_column_in_the_table_and_the_job_summary() -> None:
    table = {row[0]: dict(zip(ROW_HEADERS, row, strict=True)) for row in rows(report())}
    assert table[CELL]["cuda archs"].startswith("sm_75 sm_80") and LABEL in table[CELL]["cuda archs"]
    assert table["cuda-unverified"]["cuda archs"] == "-"
    assert "sm\\_75 sm\\_80" in markdown(report())  # Markdown-escaped like every value


def test_a_row_of_the_html_cell() -> None:
    page = render_html(report())
    assert "<th>CUDA archs</th><td>sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 (label: " in page


def test_a_junit_property() -> None:
    root = ET.fromstring(junit_xml([checked(archs("pass", LABEL, '["sm_80", "sm_90"]'))]))
    properties = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert properties["cuda-archs"] == "sm_80 sm_90"
