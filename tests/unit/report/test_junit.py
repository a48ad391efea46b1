"""Verification results as JUnit XML, read back by a JUnit reader (junitparser): the counts, a failed
verdict with no failing check, characters XML forbids, and the properties of each image."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import junitparser

from imagekit.report.junit import junit_xml, write_junit
from imagekit.report.verification import CheckRecord, Verification
from tests.unit.report_samples import ARCHS_LABEL, archs_checked, archs_record


def test_junit_reads_back_with_the_right_counts(tmp_path: Path) -> None:
    checks = (
        CheckRecord("torch", "pass", True, duration_s=0.5),
        CheckRecord("gemm-gpu", "skip", True, reason="no GPU requested"),
        CheckRecord("nvcc", "fail", True, cause="nvcc missing", fix="use a devel base", expected="12.1"),
    )
    results = [
        Verification("cell-a", "img:a", "none", "failed", False, False, checks, 1.5),
        Verification(
            "cell-b", "img:b", "all", "failed", True, False, (), 900.0, error="timed out after 900s"
        ),
    ]
    path = tmp_path / "junit.xml"
    write_junit(path, results)
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml)
    assert [s.name for s in suites] == ["cell-a", "cell-b"]
    assert (suites[0].tests, suites[0].failures, suites[0].skipped) == (3, 1, 1)
    assert (suites[1].tests, suites[1].failures) == (1, 1)
    cases = {case.name: case for case in suites[0]}
    assert cases["nvcc"].result[0].message == "nvcc missing"
    assert isinstance(cases["gemm-gpu"].result[0], junitparser.Skipped)
    assert cases["torch"].is_passed


def test_junit_fails_a_failed_verdict_without_a_failing_check(tmp_path: Path) -> None:
    checks = (CheckRecord("torch", "pass", True), CheckRecord("gemm_gpu", "skip", True, reason="no torch"))
    results = [Verification("cell-a", "img:a", "all", "failed", True, True, checks, 1.0)]
    path = tmp_path / "junit.xml"
    write_junit(path, results)
    (suite,) = list(junitparser.JUnitXml.fromfile(str(path)))
    assert (suite.tests, suite.failures) == (3, 1)
    cases = {case.name: case for case in suite}
    assert "gemm_gpu" in cases["verdict"].result[0].message


def test_junit_drops_characters_xml_forbids(tmp_path: Path) -> None:
    checks = (
        CheckRecord(
            "nvcc\x07",
            "fail",
            True,
            cause="\x1b[31mred\x1b[0m cause\x00",
            detail="a\x1bb\x0cc\x7f",
            fix="ok\ttab",
        ),
    )
    results = [
        Verification("cell\x01", "img\x1b[1m", "none", "failed", False, False, checks, 1.0, error="e\x02")
    ]
    path = tmp_path / "junit.xml"
    write_junit(path, results)
    text = path.read_text(encoding="utf-8")
    assert not any(ord(c) < 0x20 and c not in "\t\n\r" for c in text)
    (suite,) = list(junitparser.JUnitXml.fromfile(str(path)))
    (case,) = list(suite)
    assert suite.name == "cell" and case.name == "nvcc"
    assert case.result[0].message == "red cause"


def test_a_junit_property_names_the_cuda_archs_the_image_serves() -> None:
    root = ET.fromstring(junit_xml([archs_checked(archs_record("pass", ARCHS_LABEL, '["sm_80", "sm_90"]'))]))
    properties = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert properties["cuda-archs"] == "sm_80 sm_90"
