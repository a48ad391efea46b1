"""plan: the cells the matrix makes, the combinations it refuses, and (--coverage) the GPUs each serves."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from imagekit.builds.command_line import DEFAULT_MATRIX
from imagekit.cli.app import app, load_plan, reports_errors
from imagekit.cli.flags import JsonOption, MatrixOption
from imagekit.core import platforms
from imagekit.core.clock import today
from imagekit.core.text import counted


@app.command()
@reports_errors
def plan(
    matrix: MatrixOption = DEFAULT_MATRIX,
    as_json: JsonOption = False,
    coverage: Annotated[
        bool,
        typer.Option(
            "--coverage",
            help="Also show, for each GPU generation (V100 to GB300), which cells run on it and from"
            " which driver.",
        ),
    ] = False,
) -> None:
    """List the cells the matrix makes and the combinations it refuses, with reasons.

    Example: imagekit plan --matrix matrix.yaml --json | jq '.cells[].id'
    Example: imagekit plan --matrix matrix.yaml --coverage
    """
    from imagekit.render.dockerfile import Renderer
    from imagekit.render.drift import dockerfile_path, output_dir

    the_plan = load_plan(matrix)
    out = output_dir(the_plan, None)
    day = today()
    cells = []
    for item in Renderer(the_plan).render_all():
        entry: dict[str, Any] = item.cell.summary()
        entry["tags"] = list(item.names(the_plan.matrix.publish, day).tags)
        entry["input_digest"] = item.input_digest
        entry["dockerfile"] = str(dockerfile_path(out, item.cell))
        cells.append(entry)
    refused = [
        {"combination": dict(r.combination), "origin": r.origin, "reason": r.reason} for r in the_plan.refused
    ]
    compat = the_plan.compat
    table = {"checked_on": compat.checked_on, "newest_torch": compat.newest_patch()}
    fleet = _fleet(the_plan) if coverage else None
    if as_json:
        document: dict[str, Any] = {"cells": cells, "refused": refused, "table": table}
        if fleet is not None:
            document["coverage"] = fleet
        typer.echo(json.dumps(document, indent=2, sort_keys=True))
        return
    _echo_table(cells)
    from imagekit.plan.rules import REFRESH_COMMAND  # rules (and the compat table's types) load on use

    typer.echo(
        f"\n{counted(len(cells), 'cell')}, {len(refused)} refused; compatibility table of {compat.checked_on}"
        f" (torch up to {compat.newest_patch()}; {REFRESH_COMMAND} refreshes it)"
    )
    for refusal in the_plan.refused:
        typer.echo(f"  refused {refusal.describe()}")
    if fleet is not None:
        typer.echo(
            "\nfleet coverage (a cell runs on a GPU when its torch has a kernel for it; the driver is"
            " what the image needs, the GPU may need a newer one):"
        )
        for family in fleet:
            served = ", ".join(
                f"{c['cell']} (driver >= {c['driver']})" if c["driver"] else c["cell"]
                for c in family["cells"]
            )
            where = "" if family["machines"] == ["x86_64"] else f", {'/'.join(family['machines'])} hosts"
            typer.echo(f"  {family['family']} ({family['capability']}{where}): {served or 'NO CELL'}")


def _echo_table(cells: list[dict[str, Any]]) -> None:
    """One row per cell, then its tags; a platform column only where a cell is not linux/amd64."""
    columns: tuple[str, ...] = ("id", "torch", "cuda", "cudnn", "python", "flavour", "base_image")
    if any(c["platform"] != platforms.DEFAULT for c in cells):
        columns = (*columns[:-1], "platform", columns[-1])
    rows = [[str(c[k] if c[k] is not None else "-") for k in columns] for c in cells]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(columns)]
    typer.echo("  ".join(h.upper().ljust(w) for h, w in zip(columns, widths, strict=True)).rstrip())
    for row, cell in zip(rows, cells, strict=True):
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        typer.echo(f"    tags: {', '.join(cell['tags'])}")
        for finding in cell["advisories"]:  # each waived (with its reason) or below the threshold
            waived = f"; waived: {finding['waived']}" if finding["waived"] is not None else ""
            typer.echo(
                f"    advisory {finding['id']} ({finding['severity']}): {finding['package']}"
                f" {finding['version']}, fixed in {finding['fixed']}{waived}"
            )


def _fleet(the_plan: Any) -> list[dict[str, Any]]:
    from imagekit.plan.coverage import fleet_coverage

    return [
        {
            "family": f.family,
            "capability": f.capability,
            "machines": list(f.machines),
            "cells": [{"cell": c.cell, "driver": c.driver} for c in f.cells],
        }
        for f in fleet_coverage(the_plan)
    ]
