"""bake-import: the image digests a `docker buildx bake` run produced, recorded in the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from imagekit.builds.command_line import DEFAULT_MATRIX
from imagekit.cli.app import app, load_plan, reports_errors, say
from imagekit.cli.flags import JsonOption, MatrixOption, StateDirOption, path_option
from imagekit.core.clock import today
from imagekit.core.errors import InputError
from imagekit.core.text import counted
from imagekit.report.state import DEFAULT_STATE_DIR


@app.command("bake-import")
@reports_errors
def bake_import(
    metadata_file: Annotated[
        Path,
        path_option(
            "--metadata-file",
            help="The file `docker buildx bake --metadata-file` wrote.",
        ),
    ],
    matrix: MatrixOption = DEFAULT_MATRIX,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    as_json: JsonOption = False,
) -> None:
    """Record the image digests a bake run produced in the report (status built), cell by cell.

    Example: imagekit bake-import --metadata-file bake-metadata.json && imagekit report
    """
    from imagekit.export import bake_import as importer
    from imagekit.render.dockerfile import Renderer
    from imagekit.report.store import open_store

    the_plan = load_plan(matrix)
    targets = importer.read_metadata(metadata_file)
    rendered = Renderer(the_plan).render_all()
    publish = the_plan.matrix.publish
    with importer.lookups(publish.registry, lambda line: say("warning", line)) as (holds, staged_digest):
        results, unknown = importer.results_from_bake(
            targets, rendered, publish, today(), holds, staged_digest
        )
    if not results:
        raise InputError(f"{metadata_file}: no target is a cell of {matrix}: {', '.join(unknown)}")
    with open_store(state_dir) as store:
        path = store.save(importer.merge(store.previous, results, the_plan.source_name))
    for name in unknown:
        say("warning", f"bake target {name} is no cell of {matrix}; not recorded")
    if as_json:
        typer.echo(json.dumps(importer.as_json(results, unknown), indent=2, sort_keys=True))
    else:
        for result in results:
            typer.echo(f"{result.id:<50} {result.image_digest}")
    typer.echo(f"imagekit: {counted(len(results), 'cell')} recorded as built in {path}", err=True)
