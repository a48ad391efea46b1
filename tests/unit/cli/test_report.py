"""report: where --html may write, and every view on a terminal that shows only ASCII."""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from imagekit.report.store import write_report
from testbed.imagekit_process import imagekit
from tests.conftest import run_cli
from tests.unit.cli.samples import (
    CUDA_BASE,
    GOOD_AXES,
    V1_STATE,
    LinkCase,
    assert_no_read_or_write_outside,
    link,
)

LINK_CASES: dict[str, LinkCase] = {
    "the HTML page linked outside": (
        GOOD_AXES + CUDA_BASE,
        link("page.html", "secret/Dockerfile"),
        lambda project: ["report", "--state-dir", V1_STATE, "--html", str(project / "page.html")],
        "page.html is a symbolic link",
    ),
}


@pytest.mark.parametrize("case", sorted(LINK_CASES))
def test_links_never_lead_a_read_or_a_write_outside(case: str, tmp_path: Path) -> None:
    assert_no_read_or_write_outside(LINK_CASES[case], tmp_path)


@pytest.mark.parametrize(
    "kind", ["a FIFO", "a device", "a directory", "the state's report", "the state's lock"]
)
def test_an_output_flag_never_replaces_what_is_not_a_file_of_its_own(kind: str, tmp_path: Path) -> None:
    # renaming a page over /dev/null (as root) or over the report being rendered destroys them
    state = tmp_path / "state"
    shutil.copytree(V1_STATE, state)
    target = {
        "a FIFO": tmp_path / "fifo",
        "a device": tmp_path / "null",
        "a directory": tmp_path / "dir",
        "the state's report": state / "report.json",
        "the state's lock": state / "lock",
    }[kind]
    if kind == "a FIFO":
        os.mkfifo(target)
    elif kind == "a device":
        os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    elif kind == "a directory":
        target.mkdir()
    before = {p: os.lstat(p).st_mode for p in (*tmp_path.iterdir(), *state.iterdir())}
    report = (state / "report.json").read_bytes()
    result = run_cli("report", "--state-dir", str(state), "--html", str(target))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("imagekit: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert str(target) in result.stderr
    assert {p: os.lstat(p).st_mode for p in (*tmp_path.iterdir(), *state.iterdir())} == before
    assert (state / "report.json").read_bytes() == report


@pytest.mark.parametrize("view", [[], ["--markdown"], ["--json"]])
def test_every_report_view_prints_on_an_ascii_only_terminal(tmp_path: Path, view: list[str]) -> None:
    """LANG=C or PYTHONIOENCODING=ascii: a value the terminal cannot show (an edited report's
    right-to-left override, shown as U+FFFD) is escaped, never a UnicodeEncodeError traceback."""
    from tests.unit.report_samples import build_report

    report = build_report()
    failed = replace(report.cells[2], error="bad \u202e value \u00e9")
    write_report(tmp_path, replace(report, cells=(*report.cells[:2], failed, *report.cells[3:])))
    done = imagekit("report", "--state-dir", str(tmp_path), *view, env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 1, done.stderr  # the sample holds a failed build
    assert "Traceback" not in done.stderr and "cuda-failed" in done.stdout
