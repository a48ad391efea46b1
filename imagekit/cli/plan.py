"""Commands that read the matrix and write no image: plan, render, schema, matrix (exports)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from imagekit.cli.app import (
    DEFAULT_MATRIX,
    JsonOption,
    MatrixOption,
    OnlyOption,
    app,
    load_plan,
    path_option,
    reports_errors,
    select_cells,
)
from imagekit.core import platforms
from imagekit.core.clock import today
from imagekit.core.errors import InputError
from imagekit.core.text import counted
from imagekit.export.formats import ExportFormat


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


class BuilderChoice(str, Enum):
    """`--builder`: the builder the Dockerfiles are rendered for (the matrix's build.builder)."""

    CLASSIC = "classic"
    BUILDKIT = "buildkit"


@app.command()
@reports_errors
def render(
    matrix: MatrixOption = DEFAULT_MATRIX,
    out: Annotated[
        Path | None,
        path_option(
            help="Directory for the Dockerfiles (default: the matrix's `output`).",
        ),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 when a file differs (CI drift check).")
    ] = False,
    cst: Annotated[
        Path | None,
        path_option(
            "--cst",
            help="Also write a container-structure-test config per cell here.",
        ),
    ] = None,
    as_json: JsonOption = False,
    builder: Annotated[
        BuilderChoice | None,
        typer.Option(
            "--builder",
            help="Render for this builder instead of the matrix's build.builder (buildkit: every RUN"
            " with its --network= and cache mounts).",
        ),
    ] = None,
) -> None:
    """Render one Dockerfile per cell to OUT/<cell-id>/Dockerfile.

    Example: imagekit render --matrix matrix.yaml --check
    Example: imagekit render --matrix matrix.yaml --cst cst/   # then: container-structure-test test
    --image IMAGE --config cst/<cell-id>.yaml
    """
    from imagekit.render.dockerfile import Renderer
    from imagekit.render.drift import check_drift, expected_files, output_dir, raise_on_drift, write_rendered

    if cst is not None and check:
        raise InputError("--cst writes files; run it without --check")
    the_plan = load_plan(matrix)
    build = the_plan.matrix.build
    if builder is not None:
        build = build.model_copy(update={"builder": builder.value})
    target = output_dir(the_plan, out)
    # Everything is rendered (and so validated) before the first file is touched.
    renderer = Renderer(the_plan, build=build)
    expected = expected_files(the_plan, renderer, target)
    unlayered = renderer.unlayered_cuda_builds()
    if unlayered and not as_json:
        typer.echo(
            f"imagekit: {len(unlayered)} torch builds install CUDA's wheels with torch, in one step:"
            f" imagekit/data/cuda_wheels.yaml lacks their pins ({'; '.join(unlayered)});"
            " scripts/refresh-cuda-wheels.py reads them from the index",
            err=True,
        )
    bundled = renderer.bundled_cuda_builds()
    if bundled and not as_json:
        typer.echo(
            f"imagekit: {len(bundled)} torch builds install in one step with nothing to split:"
            f" PyTorch's index's wheel brings CUDA's libraries inside torch ({'; '.join(bundled)};"
            " imagekit/data/cuda_wheels.yaml, bundled)",
            err=True,
        )
    drift = check_drift(expected, target) if check else write_rendered(expected, target)
    if as_json:
        document = {
            "out": str(target),
            "dockerfiles": len(expected),
            "check": check,
            "changed": [str(p) for p in drift.changed],
            "missing": [str(p) for p in drift.missing],
            "stale": [str(p) for p in drift.stale],
        }
        typer.echo(json.dumps(document, indent=2))
    if check:
        raise_on_drift(drift, matrix.name)
        if not as_json:
            typer.echo(f"{len(expected)} Dockerfiles in {target} are up to date")
        return
    if cst is not None:
        from imagekit.export.cst import write_cst

        written = write_cst(the_plan.cells, cst)
        if not as_json:
            typer.echo(f"{len(written)} container-structure-test configs in {cst}")
    if not as_json:
        typer.echo(
            f"{len(expected)} Dockerfiles in {target}: {len(drift.changed)} updated,"
            f" {len(drift.missing)} added, {len(drift.stale)} stale removed"
        )


@app.command()
def schema() -> None:
    """Print the matrix file's JSON Schema (for editors and validators)."""
    from imagekit.plan.schema import json_schema

    typer.echo(json.dumps(json_schema(), indent=2, sort_keys=True))


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
    from imagekit.export import targets as export
    from imagekit.render.dockerfile import Renderer

    the_plan, cells = select_cells(matrix, only)
    if output_format is ExportFormat.GITHUB:
        typer.echo(json.dumps(export.github_matrix(cells), separators=(",", ":")))
        return
    if output_format is ExportFormat.BAKE:
        cells = the_plan.with_parents(cells)  # bake builds a front end's cell as its own target
    rendered = Renderer(the_plan).render_all(cells)
    if output_format is ExportFormat.JSON:
        typer.echo(json.dumps(export.json_export(the_plan, rendered, today()), indent=2, sort_keys=True))
        return
    bake = export.bake_file(the_plan, rendered, context_dir)  # refuses before any context is written
    contexts = export.materialise_contexts(rendered, context_dir)
    typer.echo(json.dumps(bake, indent=2, sort_keys=True))
    typer.echo(f"imagekit: {len(contexts)} build contexts in {context_dir}", err=True)
    hint = export.bake_netrc_hint(the_plan)
    if hint is not None:
        typer.echo(f"imagekit: {hint}", err=True)


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
