"""The vulnerability gate of publish: Trivy's and Grype's JSON (tests/fixtures/scans: Trivy's a real
recording, Grype's from its documented model), hostile variants of them, and a publish that the
gate refuses moving nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagekit.core.errors import ExitCode, InputError
from imagekit.core.limits import MAX_SCAN_FINDINGS, SCAN_BYTES
from imagekit.plan.matrix import load_plan
from imagekit.publish.scan_gate import ScanFile, ScanGate, ScanRefused, gate_of, read_scan, threshold_flag
from imagekit.report.scans import ScanSummary, SeverityCounts
from testbed.waivers import WAIVE_TORCH_2_5
from tests.conftest import CUDA_BASE, REPO, run_cli
from tests.unit.publish.test_promote import IMAGE, STAGED_DIGEST, FakeRegistry, staged_result

SCANS = REPO / "tests" / "fixtures" / "scans"
TRIVY = SCANS / "trivy-debian-python.json"
GRYPE = SCANS / "grype-debian-python.json"
# The recorded image: its manifest digest (what was staged and scanned) and its config digest.
MANIFEST = "sha256:2ecfb06d6f3ce9d3b0fa73227a3c19f207be5e407c357a69dcb0406ccb7d57ec"
CONFIG = "sha256:916bae8ce0cb4c2caeebd36b302d051a50535a51ab5db27d791831e91b9fc74e"


def loaded(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text())
    assert isinstance(document, dict)
    return document


def written(tmp_path: Path, document: object, name: str = "scan.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def gate(*scans: ScanFile, threshold: str = "critical", required: bool = False) -> ScanGate:
    return ScanGate(scans, threshold, required, None, {})  # type: ignore[arg-type]


# -- the recorded outputs ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", [TRIVY, GRYPE], ids=["trivy", "grype"])
def test_a_scan_names_its_image_by_manifest_and_config_digest_and_lists_each_finding(path: Path) -> None:
    scan = read_scan(path)
    assert scan.digests == {MANIFEST, CONFIG}
    assert scan.version == ("0.76.0" if scan.scanner == "trivy" else "0.104.0")
    found = {(f.package, f.id, f.severity, f.fixed) for f in scan.findings}
    assert found == {
        ("libssl3", "CVE-2099-0001", "critical", "3.0.99-1~deb12u1"),
        ("openssl", "CVE-2099-0001", "critical", "3.0.99-1~deb12u1"),
        ("libexpat1", "CVE-2099-0002", "high", "2.5.99-1+deb12u1"),
        ("libexpat1-dev", "CVE-2099-0002", "high", "2.5.99-1+deb12u1"),
        ("zlib1g", "CVE-2099-0003", "low", ""),
        ("zlib1g-dev", "CVE-2099-0003", "low", ""),
    }


@pytest.mark.parametrize("path", [TRIVY, GRYPE], ids=["trivy", "grype"])
def test_a_critical_finding_refuses_the_cell_naming_package_id_and_fix_in_one_line(path: Path) -> None:
    with pytest.raises(ScanRefused) as refused:
        gate(read_scan(path)).judge("c", MANIFEST, ())
    line = refused.value.message
    assert "libssl3 3.0.20-1~deb12u2 has CVE-2099-0001 (critical), fixed in 3.0.99-1~deb12u1" in line
    assert "also openssl CVE-2099-0001" in line and "CVE-2099-0002" not in line  # high is below
    assert "\n" not in line and refused.value.exit_code == ExitCode.CELL_FAILED


def test_the_threshold_decides_what_refuses_and_the_counts_go_into_the_summary() -> None:
    scan = read_scan(TRIVY)
    with pytest.raises(ScanRefused, match="CVE-2099-0002"):
        gate(scan, threshold="high").judge("c", MANIFEST, ())
    clean = replace(scan, findings=tuple(f for f in scan.findings if f.severity != "critical"))
    (summary,) = gate(clean).judge("c", MANIFEST, ())
    assert summary == ScanSummary(
        "trivy", "0.76.0", MANIFEST, "critical", SeverityCounts(high=2, low=2), waived=()
    )
    assert summary.describe() == "trivy 0.76.0: 0 critical, 2 high, 0 medium, 2 low"


def test_a_scan_of_the_config_digest_is_the_staged_images_and_others_are_not_this_cells() -> None:
    scan = replace(read_scan(TRIVY), digests=frozenset({CONFIG}))
    with pytest.raises(ScanRefused):
        gate(scan).judge("c", "sha256:" + "7" * 64, (CONFIG,))
    assert gate(scan).judge("c", "sha256:" + "7" * 64, ("sha256:" + "8" * 64,)) == ()


def test_no_findings_for_the_staged_digest_refuse_where_the_matrix_requires_them() -> None:
    with pytest.raises(
        ScanRefused, match=r"no scanner findings for its staged digest sha256:7+ \(advisories"
    ):
        gate(required=True).judge("c", "sha256:" + "7" * 64, ())
    assert gate().judge("c", "sha256:" + "7" * 64, ()) == ()


def test_findings_for_another_image_than_any_cells_are_refused_before_anything_moves() -> None:
    scans = gate(read_scan(TRIVY))
    scans.check_known({"c": {MANIFEST}}, "the report")  # its own: fine
    with pytest.raises(InputError) as other:
        scans.check_known({"c": {STAGED_DIGEST, IMAGE}}, "the report")
    assert "is no cell's staged digest or image in the report" in other.value.message
    assert other.value.exit_code == ExitCode.INVALID_INPUT


# -- waivers: the matrix's own entries ---------------------------------------------------------------


def _torch_finding(document: dict[str, Any], vulnerability_id: str) -> dict[str, Any]:
    """The recorded scan with its OS findings replaced by one of torch 2.5.1 in a venv (Trivy's
    lang-pkgs result, as pkg/types/report.go names it)."""
    finding = {
        "VulnerabilityID": vulnerability_id,
        "PkgName": "torch",
        "InstalledVersion": "2.5.1+cu121",
        "FixedVersion": "2.6.0",
        "Severity": "CRITICAL",
    }
    target = {"Target": "Python", "Class": "lang-pkgs", "Type": "python-pkg", "Vulnerabilities": [finding]}
    return {**document, "Results": [target]}


@pytest.mark.parametrize("vulnerability_id", ["CVE-2025-32434", "GHSA-53q9-r3pm-6pq6"])
def test_the_matrixs_waiver_of_an_advisory_waives_the_scanners_finding_of_the_same_id(
    write_matrix: Callable[[str], Path], tmp_path: Path, vulnerability_id: str
) -> None:
    plan = load_plan(
        write_matrix('axes:\n  torch: ["2.5.1"]\n  cuda: ["12.1"]\n' + CUDA_BASE + WAIVE_TORCH_2_5)
    )
    cell = plan.cells[0]
    scan = read_scan(written(tmp_path, _torch_finding(loaded(TRIVY), vulnerability_id)))
    held = gate_of([scan], plan.advisory_policy, {cell.id: cell})
    assert held is not None and held.threshold == "critical"
    (summary,) = held.judge(cell.id, MANIFEST, ())
    (waived,) = summary.waived
    assert (waived.id, waived.advisory, waived.package) == (vulnerability_id, "CVE-2025-32434", "torch")
    assert waived.reason == "a test of another feature; it loads no checkpoint"
    assert summary.counts.critical == 1
    # the same finding in a cell no waiver selects is refused
    unwaived = gate_of([scan], plan.advisory_policy, {})
    assert unwaived is not None
    with pytest.raises(ScanRefused, match=r"torch 2\.5\.1\+cu121 has .* fixed in 2\.6\.0"):
        unwaived.judge(cell.id, MANIFEST, ())


def test_the_scan_threshold_is_the_matrixs_and_the_flag_overrides_it(
    write_matrix: Callable[[str], Path],
) -> None:
    plan = load_plan(
        write_matrix(
            'axes:\n  torch: ["2.6.0"]\n  cuda: ["12.6"]\n'
            + CUDA_BASE
            + "advisories:\n  threshold: critical\n  scan: {threshold: high, required: true}\n"
        )
    )
    policy = plan.advisory_policy
    assert policy is not None and (policy.scan_threshold, policy.scan_required) == ("high", True)
    held = gate_of([], policy, {})  # required: a gate even without a file
    assert held is not None and held.threshold == "high" and held.required
    flagged = gate_of([], policy, {}, threshold_flag("medium"))
    assert flagged is not None and flagged.threshold == "medium"
    with pytest.raises(InputError, match="--scan-threshold 'severe': use one of critical, high"):
        threshold_flag("severe")
    unset = load_plan(write_matrix('axes:\n  torch: ["2.6.0"]\n  cuda: ["12.6"]\n' + CUDA_BASE))
    assert gate_of([], unset.advisory_policy, {}) is None  # nothing to hold


# -- hostile files: one line each, exit 2 ----------------------------------------------------------------


def _trivy_with(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    document = loaded(TRIVY)
    change(document)
    return document


def _first_trivy(document: dict[str, Any]) -> dict[str, Any]:
    found = document["Results"][0]["Vulnerabilities"][0]
    assert isinstance(found, dict)
    return found


def _first_grype(document: dict[str, Any]) -> dict[str, Any]:
    found = document["matches"][0]["vulnerability"]
    assert isinstance(found, dict)
    return found


HOSTILE: dict[str, tuple[Callable[[], object], str]] = {
    "trivy: missing severity": (
        lambda: _trivy_with(lambda d: _first_trivy(d).pop("Severity")),
        "Results[0].Vulnerabilities[0].Severity: has no severity",
    ),
    "trivy: null severity": (
        lambda: _trivy_with(lambda d: _first_trivy(d).update(Severity=None)),
        "Vulnerabilities[0].Severity: has no severity",
    ),
    "trivy: unknown severity": (
        lambda: _trivy_with(lambda d: _first_trivy(d).update(Severity="SEVERE")),
        "severity 'SEVERE' is none that Trivy writes (UNKNOWN, LOW, MEDIUM, HIGH, CRITICAL)",
    ),
    "trivy: grype's spelling": (
        lambda: _trivy_with(lambda d: _first_trivy(d).update(Severity="Critical")),
        "severity 'Critical' is none that Trivy writes",
    ),
    "trivy: another schema": (lambda: _trivy_with(lambda d: d.update(SchemaVersion=1)), "SchemaVersion: 1;"),
    "trivy: a filesystem": (
        lambda: _trivy_with(lambda d: d.update(ArtifactType="filesystem")),
        "'filesystem' is no image",
    ),
    "trivy: no digest": (
        lambda: _trivy_with(lambda d: d.update(ArtifactName="debian-python:bookworm", Metadata={})),
        "'debian-python:bookworm' is named by no digest",
    ),
    # Trivy writes no Results where it found nothing: without an OS it read no package at all
    "trivy: no operating system": (
        lambda: _trivy_with(lambda d: (d["Metadata"].pop("OS"), d.update(Results=[]))),
        "Metadata.OS: Trivy found no operating system, so no package was scanned",
    ),
    "trivy: no id": (
        lambda: _trivy_with(lambda d: _first_trivy(d).update(VulnerabilityID=7)),
        "VulnerabilityID: expected text, not int",
    ),
    "trivy: results no list": (
        lambda: _trivy_with(lambda d: d.update(Results={})),
        "Results: expected a list",
    ),
    "grype: missing severity": (
        lambda: _grype_with(lambda d: _first_grype(d).pop("severity")),
        "matches[0].vulnerability.severity: has no severity",
    ),
    "grype: unknown severity": (
        lambda: _grype_with(lambda d: _first_grype(d).update(severity="CRITICAL")),
        "severity 'CRITICAL' is none that Grype writes (Unknown, Negligible, Low, Medium, High, Critical)",
    ),
    "grype: a directory": (
        lambda: _grype_with(lambda d: d.update(source={"type": "directory", "target": "/"})),
        "'directory' is no image",
    ),
    # read back as the report's records (at most 1,024 characters each): a longer one was written
    # into report.json, and every later command that read the report failed
    "trivy: a runaway version": (
        lambda: _trivy_with(lambda d: _first_trivy(d).update(InstalledVersion="9" * 2_000)),
        "is 2,000 characters long; at most 1,024",
    ),
    "grype: a runaway id": (
        lambda: _grype_with(lambda d: _first_grype(d).update(id="CVE-" + "1" * 2_000)),
        "is 2,004 characters long; at most 1,024",
    ),
    "neither": (lambda: {"vulnerabilities": []}, "neither Trivy's JSON"),
    "a list": (lambda: [], "(top level): expected an object, not list"),
    "deep nesting": (lambda: None, "not readable JSON"),
}


def _grype_with(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    document = loaded(GRYPE)
    change(document)
    return document


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_scan_is_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    make, expected = HOSTILE[case]
    path = tmp_path / "scan.json"
    if case == "deep nesting":
        path.write_text('{"SchemaVersion": 2, "Results": ' + "[" * 100_000 + "]" * 100_000 + "}")
    else:
        path.write_text(json.dumps(make()))
    with pytest.raises(InputError) as refused:
        read_scan(path)
    assert expected in refused.value.message and "\n" not in refused.value.message
    assert refused.value.message.startswith(str(path)) and refused.value.exit_code == ExitCode.INVALID_INPUT


def test_a_truncated_scan_is_refused_not_read_as_fewer_findings(tmp_path: Path) -> None:
    raw = TRIVY.read_bytes()
    for cut in (len(raw) // 2, len(raw) - 2):
        path = tmp_path / "cut.json"
        path.write_bytes(raw[:cut])
        with pytest.raises(InputError, match="not readable JSON"):
            read_scan(path)


def test_a_scan_past_the_size_bound_is_refused_by_its_size_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as file:
        file.truncate(SCAN_BYTES + 1)  # sparse: no byte is written, or read
    with pytest.raises(InputError, match=f"larger than {SCAN_BYTES} bytes"):
        read_scan(path)


@pytest.mark.parametrize("scanner", ["trivy", "grype"])
def test_a_million_findings_are_refused_before_one_is_looked_at(scanner: str, tmp_path: Path) -> None:
    count = 1_000_000
    assert count > MAX_SCAN_FINDINGS
    if scanner == "trivy":
        document = {**loaded(TRIVY), "Results": [{"Target": "t", "Vulnerabilities": [{}] * count}]}
    else:
        document = {**loaded(GRYPE), "matches": [{}] * count}
    with pytest.raises(InputError, match=f"{count} findings, more than the {MAX_SCAN_FINDINGS}"):
        read_scan(written(tmp_path, document))


def test_a_scan_that_is_no_regular_file_is_refused(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"is a FIFO|not a regular file"):
        read_scan(fifo)
    with pytest.raises(InputError, match="no such file"):
        read_scan(tmp_path / "absent.json")


# -- publish: the gate before any tag moves -------------------------------------------------------------


def _publisher(tmp_path: Path, scan: Path, required: bool = False) -> tuple[Any, FakeRegistry]:
    from imagekit.publish.promote import Publisher, PublishOptions

    registry = FakeRegistry()
    registry.manifest = replace(registry.manifest, digest=STAGED_DIGEST)
    held = gate_of([read_scan(scan)], None, {})
    assert held is not None
    held = replace_gate(held, required=required)
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging", scan_gate=held
    )
    return Publisher(None, registry, options, "checked", lambda _: None), registry  # type: ignore[arg-type]


def replace_gate(held: ScanGate, required: bool) -> ScanGate:
    return ScanGate(held.scans, held.threshold, required, held.policy, held.cells)


def _staged_scan(tmp_path: Path, severity: str) -> Path:
    """The recorded Trivy scan, of the staged digest the publish tests stage (STAGED_DIGEST)."""
    document = loaded(TRIVY)
    document["ArtifactName"] = f"reg:5000/acme/staging@{STAGED_DIGEST}"
    document["Metadata"].update(ImageID=IMAGE, RepoDigests=[document["ArtifactName"]])
    for result in document["Results"]:
        for finding in result["Vulnerabilities"]:
            if finding["Severity"] == "CRITICAL":
                finding["Severity"] = severity
    return written(tmp_path, document, f"trivy-{severity}.json")


def test_publish_refuses_a_cell_with_a_critical_finding_and_promotes_nothing(tmp_path: Path) -> None:
    from imagekit.publish.policy import Candidate

    verified = staged_result("checked")
    candidate = Candidate(
        "c", IMAGE, "f" * 64, "checked", ("t", "t-1"), verified.verification, verified.staged
    )
    publisher, registry = _publisher(tmp_path, _staged_scan(tmp_path, "CRITICAL"))
    published, refused = publisher.run([candidate])
    assert published == [] and [r.cell for r in refused] == ["c"]
    assert "libssl3 3.0.20-1~deb12u2 has CVE-2099-0001 (critical)" in refused[0].reason
    assert "nothing promoted for this cell" in refused[0].reason
    assert [c for c in registry.calls if c[0] in ("put_manifest", "mount_blob", "attach")] == []
    assert not (tmp_path / "lock.json").exists()


def test_publish_promotes_a_cell_whose_findings_are_below_the_threshold_with_their_counts(
    tmp_path: Path,
) -> None:
    from imagekit.publish.policy import Candidate

    verified = staged_result("checked")
    candidate = Candidate(
        "c", IMAGE, "f" * 64, "checked", ("t", "t-1"), verified.verification, verified.staged
    )
    publisher, _ = _publisher(tmp_path, _staged_scan(tmp_path, "MEDIUM"))
    published, refused = publisher.run([candidate])
    assert [p.entry.cell for p in published] == ["c"] and refused == []
    (summary,) = publisher.scans["c"]
    assert summary.digest == STAGED_DIGEST and summary.counts == SeverityCounts(high=2, medium=2, low=2)


def test_publish_cli_refuses_on_the_scan_and_writes_no_lock(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from imagekit.publish import publish_run as publishing
    from imagekit.publish.policy import Candidate, Selection
    from imagekit.report.store import BuildReport, read_report, write_report

    verified = replace(staged_result("checked"), id="c", image_id=IMAGE)
    write_report(tmp_path, BuildReport("m", "2026-12-01T00:00:00Z", 1.0, "e", (verified,), ()))
    candidate = Candidate(
        "c", IMAGE, "f" * 64, "checked", ("t", "t-1"), verified.verification, verified.staged
    )
    registry = FakeRegistry()
    registry.manifest = replace(registry.manifest, digest=STAGED_DIGEST)
    registry.close = lambda: None  # type: ignore[attr-defined]
    monkeypatch.setattr(publishing, "select", lambda *_: Selection((candidate,), (), ()))
    monkeypatch.setattr(publishing, "connect_registry", lambda *_: registry)
    lock = tmp_path / "lock.json"
    common = ("publish", "-m", str(REPO / "matrix.yaml"), "--registry", "reg:5000")
    places = ("--state-dir", str(tmp_path), "--lock", str(lock))
    critical = run_cli(*common, *places, "--scan", str(_staged_scan(tmp_path, "CRITICAL")))
    assert critical.exit_code == ExitCode.CELL_FAILED, critical.stderr
    assert (
        "refused" in critical.stderr
        and "CVE-2099-0001 (critical), fixed in 3.0.99-1~deb12u1" in critical.stderr
    )
    assert not [c for c in registry.calls if c[0] == "put_manifest"] and not lock.exists()
    # the recorded scan names another image than the report's: refused before the registry is asked
    registry.calls.clear()
    other = run_cli(*common, *places, "--scan", str(TRIVY))
    assert other.exit_code == ExitCode.INVALID_INPUT, other.stderr
    assert "is no cell's staged digest or image in" in other.stderr and registry.calls == []
    # a clean scan: promoted, its counts in the report
    clean = run_cli(*common, *places, "--scan", str(_staged_scan(tmp_path, "LOW")))
    assert clean.exit_code == 0 and lock.exists(), clean.stderr
    (summary,) = read_report(tmp_path).cells[0].scans
    assert summary.counts == SeverityCounts(high=2, low=4) and summary.threshold == "critical"
    report = run_cli("report", "--state-dir", str(tmp_path), "--lock", str(lock), "--json")
    assert json.loads(report.stdout)["cells"][0]["scans"][0]["counts"]["high"] == 2
    table = run_cli("report", "--state-dir", str(tmp_path), "--lock", str(lock), "--markdown")
    assert "#### vulnerability scans" in table.stdout and "| c | trivy 0.76.0 |" in table.stdout
    page = tmp_path / "page.html"
    run_cli("report", "--state-dir", str(tmp_path), "--lock", str(lock), "--html", str(page))
    assert "<h2>Vulnerability scans</h2>" in page.read_text() and "<td>trivy 0.76.0</td>" in page.read_text()
    # the staged cell's high findings at --scan-threshold high refuse it
    registry.calls.clear()
    lock.unlink()
    high = run_cli(*common, *places, "--scan", str(_staged_scan(tmp_path, "LOW")), "--scan-threshold", "high")
    assert "CVE-2099-0002 (high)" in high.stderr and not lock.exists()
