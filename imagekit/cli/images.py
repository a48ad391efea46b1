"""images: the published images (the lock) printed for other tools, optionally only those attested."""

from __future__ import annotations

from typing import Annotated

import typer

from imagekit.cli.app import app, reports_errors, say
from imagekit.cli.flags import (
    DEFAULT_LOCK,
    AttestationPolicyOption,
    LockOption,
    OnlyOption,
    RequireAttestationOption,
)
from imagekit.core.errors import InputError


@app.command()
@reports_errors
def images(
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="json, yaml, or env (IMAGEKIT_IMAGE_<CELL>=repo@sha256:..., IMAGEKIT_INDEX_<TAG>=...).",
        ),
    ] = "json",
    only: OnlyOption = None,
    lock: LockOption = DEFAULT_LOCK,
    require_attestation: RequireAttestationOption = None,
    attestation_policy: AttestationPolicyOption = "validated",
) -> None:
    """Print the published images (images.lock.json) for other tools.

    Example: eval "$(imagekit images --format env)"; docker pull "$IMAGEKIT_IMAGE_..."
    """
    from imagekit.plan.cells import select_ids
    from imagekit.report.lockfile import read_lock, render_lock

    if not lock.exists():
        raise InputError(f"no lock file at {lock}; run `imagekit publish` first")
    published = read_lock(lock)
    chosen = published.only(select_ids(sorted(published.images), only or [], str(lock)))
    if require_attestation is not None:
        from imagekit.attest.required import require_attested

        require_attested(chosen, require_attestation, attestation_policy, say)
    typer.echo(render_lock(chosen, output_format), nl=False)
