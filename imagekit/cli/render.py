"""render: one Dockerfile per cell (and a container-structure-test config), or --check for drift."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from imagekit.builds.command_line import DEFAULT_MATRIX
from imagekit.cli.app import app, load_plan, reports_errors
from imagekit.cli.flags import JsonOption, MatrixOption, path_option
from imagekit.core.build_kinds import BuilderKind
from imagekit.core.errors import InputError


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
        BuilderKind | None,
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
        build = build.model_copy(update={"builder": builder})
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
