"""merge-reports: the reports of per-cell CI jobs merged into one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from imagekit.cli.app import app, reports_errors
from imagekit.cli.flags import JsonOption, StateDirOption, path_argument
from imagekit.core.text import counted
from imagekit.report.state import DEFAULT_STATE_DIR


@app.command("merge-reports")
@reports_errors
def merge_reports(
    sources: Annotated[
        list[Path],
        path_argument(
            help="Directories holding a report.json (e.g. downloaded CI artifacts).", show_default=False
        ),
    ],
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    as_json: JsonOption = False,
) -> None:
    """Merge the reports of per-cell CI jobs into STATE_DIR/report.json (for report and publish).

    Reports that disagree about a cell's staged or verified digest are refused (exit 2).

    Example: imagekit merge-reports --state-dir .imagekit cells/*
    """
    from imagekit.report.merge import merge_reports as merge
    from imagekit.report.store import open_store, read_report
    from imagekit.report.text import summary_line

    merged = merge([read_report(source) for source in sources], [str(source) for source in sources])
    with open_store(state_dir) as store:
        path = store.save(merged)
    if as_json:
        typer.echo(json.dumps(merged.as_json(), indent=2, sort_keys=True))
    typer.echo(
        f"imagekit: merged {counted(len(sources), 'report')}: {summary_line(merged)}; report: {path}",
        err=True,
    )
