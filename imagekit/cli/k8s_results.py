"""k8s-results: validate-on Jobs' outputs recorded in the report, and the Jobs that did not report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from imagekit.cli.app import app, reports_errors, say
from imagekit.cli.flags import JsonOption, StateDirOption, path_argument, path_option
from imagekit.core.errors import ExitCode
from imagekit.core.text import counted
from imagekit.report.state import DEFAULT_STATE_DIR


@app.command("k8s-results")
@reports_errors
def k8s_results(
    cluster: Annotated[
        str, typer.Option("--cluster", help="The cluster the Jobs ran in, as the report should name it.")
    ],
    outputs: Annotated[
        list[Path] | None,
        path_argument(help="Each validate-on Job's output: `kubectl logs -l job=NAME --tail=-1 > NAME.log`."),
    ] = None,
    plan: Annotated[
        Path,
        path_option(
            "--plan", help="The validate-on.plan `imagekit k8s --validate-on` wrote beside the Jobs."
        ),
    ] = Path("k8s") / "validate-on.plan",
    status: Annotated[
        Path | None,
        path_option(
            "--status",
            help="`kubectl get jobs,pods -l app.kubernetes.io/component=validate-on -o json`: says why"
            " each Job that did not report did not (evicted, pending, deadline, failed).",
        ),
    ] = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    as_json: JsonOption = False,
) -> None:
    """Record validate-on Jobs' outputs in the report: per cell and digest, the GPU products of
    CLUSTER its probe validated (or failed) on.

    Every file is read and checked first; with any problem (one line each) nothing is recorded
    (exit 2). Each Job of the plan that left no probe document is named with why (with --status),
    and every Job that did report is recorded. Exit 1 when a recorded run failed, else 6 when
    some Jobs did not report, 3 when none did.

    Example: imagekit k8s-results --cluster prod-east --plan validate/validate-on.plan logs/*.log
    Example: imagekit k8s-results --cluster prod-east --status status.json logs/*.log
    """
    from imagekit.k8s import results
    from imagekit.k8s.job_status import missing_lines, read_status
    from imagekit.report.store import open_store

    name = results.cluster_name(cluster)
    jobs = results.read_plan(plan)
    found = results.read_outputs(jobs, outputs or [], name)
    states = read_status(status) if status is not None else None
    missing = results.unreported(jobs, found, states, str(status))
    recorded, problems = found.recorded, found.problems
    with open_store(state_dir) as store:
        report, refused = results.into_report(store.require(), recorded, store.path)
        for problem in [*problems, *refused]:
            say("error", problem)
        if problems or refused:
            say("error", f"{counted(len(problems) + len(refused), 'problem')}; nothing recorded")
            raise typer.Exit(int(ExitCode.INVALID_INPUT))
        for line in missing_lines(missing):
            say("not reported", line)
        if not recorded:
            say("error", f"none of the {counted(len(jobs), 'Job')} of {plan} reported; nothing recorded")
            raise typer.Exit(int(ExitCode.ENVIRONMENT))
        path = store.save(report)
    if as_json:
        typer.echo(json.dumps([{"cell": i.job.cell, **i.record.as_json()} for i in recorded], indent=2))
    else:
        for line in results.lines(recorded):
            typer.echo(line)
    failed = sum(1 for i in recorded if i.record.verification.verdict != "validated")
    typer.echo(
        f"imagekit: recorded {counted(len(recorded), 'run')} on {name}, {failed} failed,"
        f" {len(missing)} not reported; report: {path}",
        err=True,
    )
    if failed:
        raise typer.Exit(int(ExitCode.CELL_FAILED))
    if missing:
        raise typer.Exit(int(ExitCode.INCOMPLETE))
