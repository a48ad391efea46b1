"""`imagekit merge-reports`: per-cell CI jobs' reports become one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from imagekit.report.store import read_report, write_report
from imagekit.report.verification import CheckRecord
from tests.conftest import run_cli
from tests.unit.report_samples import sample_report, verification


def test_merge_takes_every_cell_once_and_the_newest_record(tmp_path: Path) -> None:
    full = sample_report()
    one = replace(full, cells=full.cells[:2], started="2026-11-29T02:20:00+00:00", duration_s=10.0)
    newer = replace(full.cells[1], status="skipped")
    two = replace(full, cells=(newer, *full.cells[2:]), duration_s=99.0)
    write_report(tmp_path / "a", one)
    write_report(tmp_path / "b", two)
    result = run_cli(
        "merge-reports",
        "--state-dir",
        str(tmp_path / "out"),
        str(tmp_path / "a"),
        str(tmp_path / "b"),
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    merged = read_report(tmp_path / "out")
    assert sorted(r.id for r in merged.cells) == sorted(r.id for r in full.cells)
    assert {r.id: r for r in merged.cells}[newer.id].status == "skipped"
    assert merged.started == full.started and merged.duration_s == 99.0
    assert json.loads(result.stdout)["counts"]["skipped"] == 2


def test_reports_of_different_matrices_are_refused(tmp_path: Path) -> None:
    write_report(tmp_path / "a", sample_report())
    write_report(tmp_path / "b", replace(sample_report(), matrix="other.yaml"))
    result = run_cli(
        "merge-reports", "--state-dir", str(tmp_path / "out"), str(tmp_path / "a"), str(tmp_path / "b")
    )
    assert result.exit_code == 2
    assert "different matrices" in result.stderr
    assert not (tmp_path / "out" / "report.json").exists()


def test_reports_that_disagree_about_a_digest_are_refused_naming_both(tmp_path: Path) -> None:
    from imagekit.report.store import Staged
    from tests.unit.report_samples import build_report

    report = build_report()
    cell = report.cells[0]
    assert cell.staged is not None
    verified = replace(
        cell, verification=verification(cell.id, "checked", (CheckRecord("torch", "pass", True),))
    )
    verified = replace(
        verified,
        verification=replace(verified.verification, image_digest=cell.staged.digest),  # type: ignore[type-var]
    )
    write_report(tmp_path / "a", replace(report, cells=(cell,)))
    write_report(tmp_path / "b", replace(report, cells=(verified,)))
    agree = run_cli(
        "merge-reports", "--state-dir", str(tmp_path / "ok"), str(tmp_path / "a"), str(tmp_path / "b")
    )
    assert agree.exit_code == 0, agree.stderr
    assert read_report(tmp_path / "ok").cells[0] == verified

    other = Staged(cell.staged.registry, cell.staged.repository, cell.staged.tag, "sha256:" + "6" * 64)
    write_report(tmp_path / "c", replace(report, cells=(replace(cell, staged=other),)))
    result = run_cli(
        "merge-reports", "--state-dir", str(tmp_path / "out"), str(tmp_path / "a"), str(tmp_path / "c")
    )
    assert result.exit_code == 2
    assert (
        f"{tmp_path / 'a'} and {tmp_path / 'c'} disagree about the staged digest of {cell.id}"
        in result.stderr
    )
    assert not (tmp_path / "out" / "report.json").exists()

    wrong = replace(verified, verification=replace(verified.verification, image_digest=other.digest))  # type: ignore[type-var]
    write_report(tmp_path / "d", replace(report, cells=(wrong,)))
    result = run_cli(
        "merge-reports", "--state-dir", str(tmp_path / "out"), str(tmp_path / "b"), str(tmp_path / "d")
    )
    assert result.exit_code == 2 and "disagree about the verified digest" in result.stderr


def test_a_staged_digest_and_another_reports_verification_of_another_image_are_refused(
    tmp_path: Path,
) -> None:
    """The build job's report stages one digest; the verify job's report (no staging record of
    its own) verified another image: refused in either order, naming both reports, nothing
    written. The same digest on both sides merges."""
    from tests.unit.report_samples import build_report

    report = build_report()
    cell = report.cells[0]
    assert cell.staged is not None
    checked = verification(cell.id, "checked", (CheckRecord("torch", "pass", True),))
    other = replace(cell, staged=None, verification=replace(checked, image_digest="sha256:" + "6" * 64))
    write_report(tmp_path / "built", replace(report, cells=(cell,)))
    write_report(tmp_path / "verified", replace(report, cells=(other,)))
    for first, second in (("built", "verified"), ("verified", "built")):
        out = tmp_path / f"out-{first}"
        result = run_cli(
            "merge-reports", "--state-dir", str(out), str(tmp_path / first), str(tmp_path / second)
        )
        assert result.exit_code == 2, result.stderr
        assert f"{tmp_path / first} and {tmp_path / second} disagree about {cell.id}" in result.stderr
        assert cell.staged.digest in result.stderr and "sha256:" + "6" * 64 in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert not (out / "report.json").exists()
    same = replace(other, verification=replace(checked, image_digest=cell.staged.digest))
    write_report(tmp_path / "same", replace(report, cells=(same,)))
    ok = run_cli(
        "merge-reports", "--state-dir", str(tmp_path / "ok"), str(tmp_path / "built"), str(tmp_path / "same")
    )
    assert ok.exit_code == 0, ok.stderr
