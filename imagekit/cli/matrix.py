"""matrix: the cells exported for another engine (GitHub Actions, plain JSON, docker buildx bake)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from imagekit.builds.command_line import DEFAULT_MATRIX
from imagekit.cli.app import app, reports_errors, select_cells
from imagekit.cli.flags import MatrixOption, OnlyOption, path_option
from imagekit.core.clock import today
from imagekit.export.formats import ExportFormat


@app.command("matrix")
@reports_errors
def matrix_export(
    matrix: MatrixOption = DEFAULT_MATRIX,
    output_format: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            "-f",
            help="github: one line for strategy.matrix; json: every cell in full; bake: a buildx bake file.",
        ),
    ] = ExportFormat.JSON,
    only: OnlyOption = None,
    context_dir: Annotated[
        Path,
        path_option(
            "--context-dir",
            help="bake: where each cell's build context is written.",
        ),
    ] = Path(".imagekit/bake"),
) -> None:
    """Export the cells for another engine: GitHub Actions, plain JSON or docker buildx bake.

    Example: echo "cells=$(imagekit matrix --matrix matrix.yaml --format github)" >> "$GITHUB_OUTPUT"
    Example: imagekit matrix --format bake --context-dir .imagekit/bake > bake.json
    && docker buildx bake -f bake.json --load --metadata-file bake-metadata.json
    && imagekit bake-import --metadata-file bake-metadata.json && imagekit verify && imagekit publish
    """
    from imagekit.export import targets
    from imagekit.render.dockerfile import Renderer

    the_plan, cells = select_cells(matrix, only)
    if output_format is ExportFormat.GITHUB:
        typer.echo(json.dumps(targets.github_matrix(cells), separators=(",", ":")))
        return
    if output_format is ExportFormat.BAKE:
        cells = the_plan.with_parents(cells)  # bake builds a front end's cell as its own target
    rendered = Renderer(the_plan).render_all(cells)
    if output_format is ExportFormat.JSON:
        typer.echo(json.dumps(targets.json_export(the_plan, rendered, today()), indent=2, sort_keys=True))
        return
    bake = targets.bake_file(the_plan, rendered, context_dir)  # refuses before any context is written
    contexts = targets.materialise_contexts(rendered, context_dir)
    typer.echo(json.dumps(bake, indent=2, sort_keys=True))
    typer.echo(f"imagekit: {len(contexts)} build contexts in {context_dir}", err=True)
    hint = targets.bake_netrc_hint(the_plan)
    if hint is not None:
        typer.echo(f"imagekit: {hint}", err=True)
