"""rebuild-check: rebuild a published image and say whether its digest matches, and where it parts."""

from __future__ import annotations

from typing import Annotated

import typer

from imagekit.builds.command_line import DEFAULT_MATRIX
from imagekit.cli.app import app, load_plan, reports_errors, say
from imagekit.cli.flags import JsonOption, MatrixOption
from imagekit.core.errors import ExitCode, InputError
from imagekit.core.text import shown


@app.command("rebuild-check")
@reports_errors
def rebuild_check(
    reference: Annotated[
        str, typer.Argument(help="The image by digest: REGISTRY/REPOSITORY@sha256:...", show_default=False)
    ],
    matrix: MatrixOption = DEFAULT_MATRIX,
    platform: Annotated[
        str | None,
        typer.Option("--platform", help="Which image of an index to rebuild (linux/amd64, linux/arm64)."),
    ] = None,
    anyway: Annotated[
        bool,
        typer.Option("--anyway", help="Rebuild even when the matrix renders other inputs than the image's."),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Rebuild a published or staged cell with BuildKit, without the cache, and say whether its
    digest matches; when not, the first layer that differs, its step and its first differing files.

    Nothing is loaded into the engine or pushed. Exit 0: matches; 4: differs; 5: the matrix renders
    other inputs than the image was built from (nothing built; --anyway builds all the same).

    Example: imagekit rebuild-check 127.0.0.1:5000/team/torch@sha256:... --matrix matrix.yaml
    """
    from imagekit.builds.rebuild_check import parse_target
    from imagekit.builds.rebuild_check import rebuild_check as check
    from imagekit.core.platforms import PLATFORMS
    from imagekit.engine.client import connect
    from imagekit.registry.client import open_registry

    target = parse_target(reference)
    if platform is not None and platform not in PLATFORMS:
        raise InputError(f"--platform {shown(platform)}: not one of {', '.join(sorted(PLATFORMS))}")
    the_plan = load_plan(matrix)
    outcome = check(
        connect(),
        the_plan,
        open_registry(target.host),
        target,
        platform,
        anyway,
        lambda line: say("rebuild", line),
    )
    if as_json:
        typer.echo(outcome.json_text())
    else:
        for line in outcome.lines():
            typer.echo(line)
    if outcome.difference is not None:
        raise typer.Exit(int(ExitCode.DIFFERS))
