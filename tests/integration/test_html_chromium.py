"""The HTML report as a browser shows it: Debian's headless Chromium, its DOM and a screenshot."""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from imagekit.report.html import COLOURS, render_html
from tests.unit.report_samples import HOSTILE, sample_report

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
)  # fmt: skip


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        reason = "no chromium on PATH (apt-get install chromium; scripts/test.sh does)"
        if os.environ.get("IMAGEKIT_REQUIRE_DOCKER") == "1":
            pytest.fail(f"IMAGEKIT_REQUIRE_DOCKER=1 but {reason}")
        pytest.skip(reason)
    return found


class Details(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[str, str] = {}
        self.styles: dict[str, str] = {}
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "details":
            self.cells[values["data-cell"] or ""] = values["data-status"] or ""
            self.styles[values["data-cell"] or ""] = values.get("style") or ""
        self.scripts += tag == "script"


def run_chromium(binary: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_chromium_shows_every_cell_with_its_status(tmp_path: Path) -> None:
    binary = chromium()
    page = tmp_path / "report.html"
    page.write_text(render_html(sample_report()))
    dumped = run_chromium(binary, tmp_path, "--dump-dom", page.as_uri())
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = Details()
    dom.feed(dumped.stdout)
    assert dom.scripts == 0  # the hostile text stayed text
    assert dom.cells["cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-devel"] == "validated"
    assert dom.cells["cuda-ubuntu22.04-torch2.1.2-cuda11.8-py3.10-devel"] == "failed"
    assert len(dom.cells) == len(sample_report().cells)
    assert COLOURS["failed"] in dom.styles["cuda-ubuntu22.04-torch2.1.2-cuda11.8-py3.10-devel"]
    assert "612.3 TFLOP/s" in dumped.stdout
    assert "&lt;script&gt;" in dumped.stdout and HOSTILE not in dumped.stdout

    shot = tmp_path / "shot.png"
    taken = run_chromium(binary, tmp_path, f"--screenshot={shot}", "--window-size=1200,900", page.as_uri())
    assert taken.returncode == 0, taken.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
