"""Commands that join imagekit to other CI engines: bake-import, merge-reports."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from imagekit.cli.app import (
    DEFAULT_MATRIX,
    JsonOption,
    MatrixOption,
    StateDirOption,
    app,
    load_plan,
    path_argument,
    path_option,
    reports_errors,
    say,
)
from imagekit.core.clock import today
from imagekit.core.errors import EnvironmentProblem, InputError, RegistryError, one_line
from imagekit.core.text import counted
from imagekit.report.state import DEFAULT_STATE_DIR

if TYPE_CHECKING:
    from docker import APIClient


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
    with _lookups(publish.registry) as (holds, staged_digest):
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


@contextlib.contextmanager
def _lookups(
    registry: str | None,
) -> Iterator[tuple[Callable[[str], bool], Callable[[str, str], str | None]]]:
    """What bake-import asks the engine (which image ids it holds) and the registry (what a
    staging tag names). Either one out of reach is a warning: the import goes on without it."""
    import requests
    from docker.errors import DockerException

    from imagekit.engine.client import connect, inspect_image
    from imagekit.registry.client import open_registry

    problems: list[str] = []

    def noted(what: str, exc: Exception) -> None:
        if not problems:
            say("warning", f"bake-import: {what} ({one_line(exc)}); recorded from the metadata file alone")
        problems.append(what)

    # The engine is reached on the first question, not before: a metadata file that names no cell
    # (or is refused) asks it nothing and warns of nothing.
    engines: list[APIClient | None] = []

    def engine() -> APIClient | None:
        if not engines:
            try:
                engines.append(connect(pool_size=2))
            except EnvironmentProblem as exc:
                noted("no engine to ask which image id it shows", exc)
                engines.append(None)
        return engines[0]

    client = open_registry(registry) if registry is not None else None

    def holds(digest: str) -> bool:
        try:
            api = engine()
            return api is not None and inspect_image(api, digest) is not None
        except (DockerException, requests.RequestException, OSError) as exc:
            noted("the engine did not answer", exc)
            return False

    def staged_digest(repository: str, tag: str) -> str | None:
        try:
            return client.head_manifest(repository, tag) if client is not None else None
        except (EnvironmentProblem, RegistryError) as exc:
            noted(f"registry {registry} did not say what it staged", exc)
            return None

    try:
        yield holds, staged_digest
    finally:
        if client is not None:
            client.close()
        for api in engines:
            if api is not None:
                api.close()


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
