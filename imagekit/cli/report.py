"""report: the last build's report as a table, Markdown, JSON or one HTML page, and what the lock
says was published."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from imagekit.cli.app import app, reports_errors
from imagekit.cli.flags import DEFAULT_LOCK, JsonOption, LockOption, StateDirOption, path_option
from imagekit.core.errors import ExitCode
from imagekit.report.state import DEFAULT_STATE_DIR


@app.command()
@reports_errors
def report(
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="GitHub-flavoured Markdown (for $GITHUB_STEP_SUMMARY).")
    ] = False,
    as_json: JsonOption = False,
    html: Annotated[
        Path | None,
        path_option(
            "--html",
            help="Also write one self-contained HTML page of the report here.",
        ),
    ] = None,
    lock: LockOption = DEFAULT_LOCK,
) -> None:
    """Print the last build's report as a table, and what the lock says was published (each
    image index's platforms and the ones it left out); exit 1 when a cell failed.

    Example: imagekit report --markdown >> "$GITHUB_STEP_SUMMARY"
    Example: imagekit report --html site/index.html
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from imagekit.report import text
    from imagekit.report.lockfile import read_lock
    from imagekit.report.store import check_output_path, read_report

    if html is not None:
        for kept in {DEFAULT_LOCK, lock}:  # the default lock, and the one --lock names
            check_output_path(html, state_dir, "--html", kept)
    the_report = read_report(state_dir)
    published = read_lock(lock)  # an absent lock: nothing published yet
    if html is not None:
        from imagekit.core.atomic import atomic_write
        from imagekit.report.html import render_html

        atomic_write(html, render_html(the_report, published))
        typer.echo(f"imagekit: HTML report: {html}", err=True)
    if as_json:
        typer.echo(json.dumps(the_report.as_json(), indent=2, sort_keys=True))
    elif markdown:
        typer.echo(text.markdown(the_report, published), nl=False)
    else:
        table = Table(box=None, header_style="bold")
        for header in text.ROW_HEADERS:
            table.add_column(header, overflow="fold")
        for row in text.rows(the_report):
            # Text, not a string: a value like "[red]" or "[/]" is shown as written, never as markup
            table.add_row(*(Text(value) for value in row))
        console = Console(width=None if sys.stdout.isatty() else 200)
        console.print(table)
        console.print(Text(text.summary_line(the_report)))
        pulled = text.pull_rows(the_report)
        for title, headers, rows in (
            ("vulnerability scans", text.SCAN_HEADERS, text.scan_rows(the_report)),
            (text.pull_line(the_report), text.PULL_HEADERS, pulled),
            ("published", text.PUBLISHED_HEADERS, text.published_rows(published)),
        ):
            if rows:
                listed = Table(box=None, header_style="bold", title=Text(title or ""), title_justify="left")
                for header in headers:
                    listed.add_column(header, overflow="fold")
                for row in rows:
                    listed.add_row(*(Text(value) for value in row))
                console.print(listed)
    if the_report.failed:
        raise typer.Exit(int(ExitCode.CELL_FAILED))
