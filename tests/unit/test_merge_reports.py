"""`imagekit merge-reports`: per-cell CI jobs' reports become one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from imagekit.store import read_report, write_report
from tests.conftest import run_cli
from tests.unit.report_samples import sample_report


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
