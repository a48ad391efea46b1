"""`imagekit report --html`: one self-contained page, a grid per base, every value escaped."""

from __future__ import annotations

import json
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

from imagekit.report.html import render_html
from imagekit.report.store import write_report
from tests.conftest import run_cli
from tests.unit.report_samples import HOSTILE, archs_report, build_report, sample_report


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> Collect:
    parser = Collect()
    parser.feed(page)
    return parser


def test_every_value_is_escaped_and_nothing_is_fetched() -> None:
    page = render_html(sample_report())
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    parsed = parse(page)
    names = [t for t, _ in parsed.tags]
    assert "script" not in names and "img" not in names and "link" not in names
    assert not any(k in ("src", "href") for _, attrs in parsed.tags for k in attrs)
    assert HOSTILE in "".join(parsed.text)  # shown as text, where a reader sees it


def test_a_grid_per_base_torch_down_cuda_across() -> None:
    parsed = parse(render_html(sample_report()))
    bases = [a["data-base"] for t, a in parsed.tags if t == "section"]
    assert bases == ["cuda-ubuntu22.04", "deb", "ngc-23.10"]
    page = render_html(sample_report())
    grid = page.split('data-base="cuda-ubuntu22.04"')[1].split("</section>")[0]
    assert grid.index("<th>cuda11.8</th>") < grid.index("<th>cuda12.1</th>")
    assert grid.index("<th>2.1.2</th>") < grid.index("<th>2.5.1</th>")
    statuses = {a["data-cell"]: a["data-status"] for t, a in parsed.tags if t == "details"}
    assert statuses == {
        "cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-devel": "validated",
        "cuda-ubuntu22.04-torch2.1.2-cuda11.8-py3.10-devel": "failed",
        "cuda-ubuntu22.04-torch2.5.1-cuda11.8-py3.10-runtime": "failed",
        "ngc-23.10-torch2.1.0a0-32f93b1-cuda12.2-py3.10-devel": "skipped",
        "deb-torch2.5.1-cpu-py3.11-runtime": "cancelled",
    }
    text = "".join(parsed.text)
    assert "612.3 TFLOP/s on NVIDIA H200" in text
    assert "8.12 GB" in text and "321.5s" in text and "42.0s" in text


def test_report_html_option_writes_the_page(tmp_path: Path) -> None:
    write_report(tmp_path, sample_report())
    out = tmp_path / "site" / "index.html"
    result = run_cli("report", "--state-dir", str(tmp_path), "--html", str(out), "--json")
    assert result.exit_code == 1  # cells failed: the report says so
    assert json.loads(result.stdout)["matrix"] == "matrix.yaml"
    assert out.read_text() == render_html(sample_report())


def test_a_grace_cell_and_a_front_end_find_their_grid_slot() -> None:
    from imagekit.report.html import OTHER, place
    from imagekit.report.store import CellResult

    arm = place(
        CellResult(
            id="deb-torch2.10.0-cpu-py3.11-runtime-jupyter-arm64", kind="cell", status="built", base_image="b"
        )
    )
    assert (arm.base, arm.torch, arm.accel, arm.variant) == (
        "deb",
        "2.10.0",
        "cpu",
        "py3.11 runtime-jupyter arm64",
    )
    amd = place(
        CellResult(id="cuda-torch2.1.2-cuda12.1-py3.10-devel", kind="cell", status="built", base_image="b")
    )
    assert (amd.base, amd.variant) == ("cuda", "py3.10 devel")
    assert place(CellResult(id="base-deb-arm64", kind="base", status="built", base_image="b")).base == OTHER


def test_the_page_lists_each_cells_advisories_with_the_waivers_reason() -> None:
    report = build_report()
    page = render_html(report)
    assert '<section id="advisories"><h2>Advisories</h2>' in page
    assert (
        "<td>cuda-built</td><td>CVE-2025-32434</td><td>critical</td><td>torch 2.1.2</td><td>2.6.0</td>"
        "<td>seed row: loads only trusted checkpoints</td>" in page
    )
    none = replace(report, cells=tuple(replace(c, advisories=()) for c in report.cells))
    assert 'id="advisories"' not in render_html(none)


def test_a_row_of_the_html_cell_shows_the_cuda_archs_it_serves() -> None:
    page = render_html(archs_report())
    assert "<th>CUDA archs</th><td>sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 (label: " in page
