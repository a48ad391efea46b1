"""The report as text: table rows, the summary line, Markdown for CI job summaries."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from imagekit.core.text import printable
from imagekit.report.store import BuildReport, write_report
from imagekit.report.text import ROW_HEADERS, markdown, rows, summary_line
from tests.conftest import run_cli
from tests.unit.report_samples import build_report

# -- presentation -----------------------------------------------------------------------------------------


def by_column(report: BuildReport) -> dict[str, dict[str, str]]:
    """rows() as {cell: {header: value}}, so the checks do not hang on the column order."""
    out = {}
    for row in rows(report):
        assert len(row) == len(ROW_HEADERS)
        values = dict(zip(ROW_HEADERS, row, strict=True))
        out[values["cell"]] = values
    return out


def test_rows() -> None:
    table = by_column(build_report())
    assert list(table) == [
        "base-inner (base)",
        "cuda-built",
        "cuda-skipped",
        "cuda-failed",
        "cuda-cancelled",
    ]
    columns = ("status", "image", "size", "time", "base digest", "detail")

    def pick(name: str) -> tuple[str, ...]:
        return tuple(table[name][c] for c in columns)

    assert pick("base-inner (base)") == ("built", "fedcba987654", "5.0 MB", "1.3s", "-", "example/inner:dev")
    assert pick("cuda-built") == (
        "built",
        "0123456789ab",
        "1.50 GB",
        "83.4s",
        "@sha256:999999999999",
        "reg/it:cuda-2.1",  # the first (readable) tag
    )
    assert pick("cuda-skipped") == (
        "skipped",
        "0123456789ab",
        "123.5 MB",
        "0.0s",
        "sha256:fedcba987654",
        "reg/it:cuda-2.2",
    )
    assert pick("cuda-failed") == (
        "failed",
        "-",
        "-",
        "4.0s",
        "-",
        "The command '/bin/sh -c exit 3' returned a non-zero code: 3 | see log",
    )
    assert table["cuda-cancelled"]["status"] == "cancelled"
    assert table["cuda-cancelled"]["detail"] == "cancelled by --fail-fast after cuda-failed failed"


def test_summary_line() -> None:
    report = build_report()
    assert summary_line(report) == "4 cells: 1 built, 1 skipped, 1 failed, 1 cancelled in 92.3s"
    two = replace(report, cells=report.cells[:1] * 2, duration_s=3.0)
    assert summary_line(two) == "2 cells: 2 built in 3.0s"  # bases are not counted
    assert summary_line(replace(report, cells=(), bases=())) == "0 cells: none in 92.3s"


def test_markdown() -> None:
    text = markdown(build_report())
    lines = text.splitlines()
    assert text.endswith("\n")
    assert lines[:4] == [
        "### imagekit build: matrix.yaml",
        "",
        "4 cells: 1 built, 1 skipped, 1 failed, 1 cancelled in 92.3s",
        "",
    ]
    assert lines[4] == "| " + " | ".join(ROW_HEADERS) + " |"
    assert lines[4].startswith("| cell | status | ")
    assert lines[5] == "|" + "---|" * len(ROW_HEADERS)
    # One table line per row, bases first, each value escaped.
    expected = ["| " + " | ".join(v.replace("|", "\\|") for v in row) + " |" for row in rows(build_report())]
    assert lines[6:11] == expected
    assert lines[11] == ""
    assert lines[6].startswith("| base-inner (base) | built | ")
    assert lines[7].startswith("| cuda-built | built | ")
    assert lines[7].endswith(" | 83.4s | @sha256:999999999999 | reg/it:cuda-2.1 |")
    # A '|' inside a value is escaped so it cannot split the table's cells.
    failed_row = next(line for line in lines if line.startswith("| cuda-failed |"))
    assert failed_row.endswith("returned a non-zero code: 3 \\| see log |")
    # The failure's tail follows the table in a details block; the cancelled cell has none.
    details = lines.index(
        "<details><summary>cuda-failed: The command '/bin/sh -c exit 3'"
        " returned a non-zero code: 3 \\| see log</summary>"
    )
    assert lines[details + 1 : details + 7] == [
        "",
        "```",
        "Step 3/4 : RUN exit 3",
        "boom: this step fails on purpose",
        "```",
        "",
    ]
    assert lines[details + 7] == "</details>"
    assert text.count("<details>") == 1


def test_markdown_lists_each_cells_advisories_with_the_waivers_reason() -> None:
    report = build_report()
    text = markdown(report)
    assert "#### advisories" in text
    assert (
        "| cuda-built | CVE-2025-32434 | critical | torch 2.1.2 | 2.6.0 |"
        " seed row: loads only trusted checkpoints |" in text
    )
    listed = replace(report.cells[0].advisories[0], waived=None)  # below the threshold: listed only
    only_listed = replace(report, cells=(replace(report.cells[0], advisories=(listed,)),))
    assert "| torch 2.1.2 | 2.6.0 | no (below the threshold) |" in markdown(only_listed)
    none = replace(report, cells=tuple(replace(c, advisories=()) for c in report.cells))
    assert "#### advisories" not in markdown(none)


def test_markdown_without_failures_has_no_details() -> None:
    report = build_report()
    text = markdown(replace(report, cells=report.cells[:2]))
    assert "<details>" not in text
    assert "2 cells: 1 built, 1 skipped in 92.3s" in text


# -- values from the report are text wherever they are shown ----------------------------------------------

MARKUP = (
    "<img src=x onerror=alert(1)> [click](javascript:alert(1)) ![i](http://evil.example/x.png) *b* `c` | d"
)


def hostile_report() -> BuildReport:
    report = build_report()
    failed = replace(
        report.cells[2],
        id="<img src=x onerror=alert(1)>",
        error=MARKUP + "\x1b[31m red \u202e reversed \nimagekit: error: forged",
        error_tail=("```", "</details><script>alert(1)</script>", "\x1b]8;;http://evil\x07link"),
    )
    return replace(report, matrix="m.yaml <b>x</b> [x](y)", cells=(*report.cells[:2], failed))


def test_markdown_escapes_every_value() -> None:
    text = markdown(hostile_report())
    table = text[: text.index("<details>")]
    assert "<img" not in text and "<b>" not in text and "<script>" not in table
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "\\[click\\](javascript:alert(1))" in text and "!\\[i\\](http://evil.example/x.png)" in text
    assert "\\*b\\*" in text and "\\`c\\`" in text and "\\| d" in text
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert "### imagekit build: m.yaml &lt;b&gt;x&lt;/b&gt; \\[x\\](y)" in text
    # every table row is one line with the table's number of cells
    rows_ = [line for line in table.splitlines() if line.startswith("| ")]
    assert all(len(re.split(r"(?<!\\)\|", line)) == len(ROW_HEADERS) + 2 for line in rows_)
    # the log stays inside its fence: a fence longer than any backtick run in it
    details = text[text.index("<details>") :]
    assert details.count("````") == 2 and "</details><script>" in details  # inside the code block


def test_rows_hold_no_control_or_invisible_character() -> None:
    for row in rows(hostile_report()):
        for value in row:
            assert printable(value) == value and "\n" not in value


def test_report_prints_markup_and_escapes_as_text(tmp_path: Path) -> None:
    report = build_report()
    failed = replace(report.cells[2], error="[/] [bold red]not bold[/] \x1b[2J cleared? \u202e")
    write_report(tmp_path, replace(report, cells=(*report.cells[:2], failed)))
    result = run_cli("report", "--state-dir", str(tmp_path))
    assert result.exit_code == 1, result.stderr  # a failed cell; not a rich MarkupError
    assert "[/] [bold red]not bold[/]" in result.stdout
    assert "\x1b[2J" not in result.stdout and "\u202e" not in result.stdout
    markdown_out = run_cli("report", "--state-dir", str(tmp_path), "--markdown")
    assert markdown_out.exit_code == 1 and "\\[/\\] \\[bold red\\]" in markdown_out.stdout
