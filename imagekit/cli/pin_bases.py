"""pin-bases: the lock of base digests beside the matrix (``imagekit.plan.pins``), from the registries."""

from __future__ import annotations

from typing import Annotated

import typer

from imagekit.builds.command_line import DEFAULT_MATRIX
from imagekit.cli.app import app, reports_errors, say
from imagekit.cli.flags import MatrixOption


@app.command("pin-bases")
@reports_errors
def pin_bases(
    matrix: MatrixOption = DEFAULT_MATRIX,
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; exit 1 when a tag names another digest than its pin."),
    ] = False,
) -> None:
    """Pin every base the matrix pulls to the digest its tag names now: ask each registry (HEAD of
    the manifest or index, with the logins `imagekit` uses), then write <matrix>.bases.lock.json
    beside the matrix, all at once. Commit it: every later plan builds FROM name:tag@sha256:...

    Example: imagekit pin-bases --matrix matrix.yaml && git add matrix.bases.lock.json
    """
    from imagekit.builds.bases import current_pins
    from imagekit.core.atomic import atomic_write
    from imagekit.core.errors import DriftError
    from imagekit.plan.matrix import load_plan
    from imagekit.plan.pins import pins_document

    plan = load_plan(matrix, pinned=False)  # the lock may be missing, stale or what is replaced
    pinned = current_pins(plan, matrix, typer.echo)
    if check:
        if pinned.pins != pinned.before:
            lock = pinned.path.name
            raise DriftError(f"{lock} differs from what the registries name now; run without --check")
        return
    atomic_write(pinned.path, pins_document(pinned.pins))  # one file, whole or not at all
    say("pinned", f"{len(pinned.pins)} base(s) in {pinned.path}")
