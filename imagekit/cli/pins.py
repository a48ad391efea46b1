"""pin-bases: the lock of base digests beside the matrix (``imagekit.plan.pins``), from the registries."""

from __future__ import annotations

from typing import Annotated

import typer

from imagekit.cli.app import DEFAULT_MATRIX, MatrixOption, app, reports_errors, say
from imagekit.core.errors import InputError


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
    from imagekit.build.bases import apply_mirrors
    from imagekit.core.atomic import atomic_write
    from imagekit.core.errors import DriftError
    from imagekit.plan.matrix import load_plan
    from imagekit.plan.pin_file import pins_path
    from imagekit.plan.pins import pins_document, pulled_bases, read_pins
    from imagekit.registry.lookup import manifest_digest

    plan = load_plan(matrix, pinned=False)  # the lock may be missing, stale or what is replaced
    wanted = pulled_bases(plan.cells)
    path = pins_path(plan.root / matrix.name)
    if not wanted:
        raise InputError(f"{matrix}: no cell pulls a base from a registry (local bases only); nothing to pin")
    try:
        before = read_pins(path, matrix) if path.exists() else {}
    except InputError:
        before = {}  # an unreadable lock is what this command replaces
    mirrors = tuple(plan.matrix.mirrors.items())
    pins: dict[str, str] = {}
    for reference in wanted:
        # Through the matrix's mirror, where the build pulls: a digest names the same bytes there.
        pins[reference] = manifest_digest(apply_mirrors(reference, mirrors))
        old = before.get(reference)
        state = "unchanged" if old == pins[reference] else "new" if old is None else f"moved from {old}"
        typer.echo(f"{reference} {pins[reference]} ({state})")
    if check:
        if pins != before:
            raise DriftError(f"{path.name} differs from what the registries name now; run without --check")
        return
    atomic_write(path, pins_document(pins))  # one file, whole or not at all
    say("pinned", f"{len(pins)} base(s) in {path}")
