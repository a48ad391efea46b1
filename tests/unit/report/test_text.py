"""The report as text: table rows, the summary line, Markdown for CI job summaries."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from imagekit.core.text import printable
from imagekit.report.lockfile import (
    LeftOut,
    Lock,
    merge_lock,
)
from imagekit.report.store import BuildReport, write_report
from imagekit.report.text import ROW_HEADERS, cuda_archs, markdown, rows, summary_line
from imagekit.report.verification import Verification
from tests.conftest import run_cli
from tests.unit.report.test_lockfile import GROUP, INDEX_DIGEST, index_lock
from tests.unit.report_samples import (
    ARCHS_CELL,
    ARCHS_LABEL,
    archs_checked,
    archs_record,
    archs_report,
    build_report,
    lock_entry,
)

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


# -- the CUDA archs a cell serves: the arch list the probe read in the image (the cuda_archs check), else
# the image's cuda-archs label it was given (tests/unit/report/test_html.py, test_junit.py: the same
# column in the other views)


@pytest.mark.parametrize(
    ("found", "shown"),
    [
        (
            archs_checked(archs_record("pass", "7.5;8.0;8.6;9.0;10.0;12.0")),
            "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120",
        ),
        # the wheel lacks the PTX the label promises: what the image holds, and the label beside it
        (
            archs_checked(archs_record("fail")),
            f"sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 (label: {ARCHS_LABEL})",
        ),
        (
            archs_checked(archs_record("skip", actual=None)),
            f"{ARCHS_LABEL} (label)",
        ),  # an old torch: the label only
        (archs_checked(archs_record("skip", expected=None, actual=None)), ""),  # a CPU build
        (archs_checked(), ""),  # a probe of an earlier release: no such check
        (None, ""),  # not verified
    ],
)
def test_the_probes_list_else_the_label(found: Verification | None, shown: str) -> None:
    assert cuda_archs(found) == shown


def test_a_column_in_the_table_and_the_job_summary() -> None:
    table = {row[0]: dict(zip(ROW_HEADERS, row, strict=True)) for row in rows(archs_report())}
    assert (
        table[ARCHS_CELL]["cuda archs"].startswith("sm_75 sm_80")
        and ARCHS_LABEL in table[ARCHS_CELL]["cuda archs"]
    )
    assert table["cuda-unverified"]["cuda archs"] == "-"
    assert "sm\\_75 sm\\_80" in markdown(archs_report())  # Markdown-escaped like every value


# -- the report: what was published, each index's platforms and the ones left out -----------------


def test_the_report_shows_each_index_its_platforms_and_the_ones_left_out(tmp_path: Path) -> None:
    from imagekit.report.html import render_html
    from imagekit.report.store import write_report
    from imagekit.report.text import markdown, published_rows
    from tests.conftest import run_cli
    from tests.unit.report_samples import build_report

    lock = index_lock(missing=True)
    index = lock.indexes[GROUP]
    hostile = replace(index, missing={"linux/arm64": LeftOut("c-arm64", "<b>failed</b> | `x`")})
    lock = Lock(lock.images, {GROUP: hostile})
    assert published_rows(lock) == [
        (
            f"{GROUP} (index)",
            INDEX_DIGEST[:19],
            "linux/amd64: c (validated)",
            "linux/arm64: c-arm64 (<b>failed</b> | `x`)",
        )
    ]
    text = markdown(build_report(), lock)
    assert "| published as | digest | platforms | left out |" in text
    assert "linux/arm64: c-arm64 (&lt;b&gt;failed&lt;/b&gt; \\| \\`x\\`)" in text  # text, never markup
    page = render_html(build_report(), lock)
    assert "<td>linux/arm64: c-arm64 (&lt;b&gt;failed&lt;/b&gt; | `x`)</td>" in page
    alone = Lock({"c-arm64": replace(lock_entry("c-arm64"), platform="linux/arm64")})
    assert published_rows(alone)[0][2] == "linux/arm64: c-arm64 (validated)"
    # `imagekit report` reads the lock next to it (or --lock): the table gains what was published
    write_report(tmp_path / "state", build_report())
    merge_lock(tmp_path / "lock.json", lock.images, lock.indexes)
    shown = run_cli("report", "--state-dir", str(tmp_path / "state"), "--lock", str(tmp_path / "lock.json"))
    assert "published as" in shown.stdout and "linux/amd64: c (validated)" in shown.stdout
