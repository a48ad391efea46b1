"""attest: the group of commands that check the proof attached to a published digest (attest verify)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from imagekit.cli.app import OneLineUsageErrors, app, reports_errors, say
from imagekit.cli.flags import path_option
from imagekit.core.errors import ExitCode

attest_app = typer.Typer(
    name="attest",
    help="Check the signed attestations attached to a published image (no Docker engine needed).",
    no_args_is_help=True,
    cls=OneLineUsageErrors,
)
app.add_typer(attest_app, name="attest")

KeyOption = Annotated[
    Path,
    path_option("--key", help="The PEM public key (ECDSA P-256) the attestations must be signed with."),
]
AttestPolicyOption = Annotated[
    str,
    typer.Option(
        "--policy",
        help="validated: a GPU verification (default); checked: also a check without GPU.",
    ),
]
GpuProductOption = Annotated[
    str | None,
    typer.Option(
        "--gpu", help="Require a verification on this GPU product (e.g. H100, GH200: whole words, any case)."
    ),
]
MaxAgeOption = Annotated[
    str | None,
    typer.Option("--max-age", help="Require a verification at most this old (30d, 12h, 2w)."),
]


@attest_app.command("verify")
@reports_errors
def verify_attestation(
    reference: Annotated[str, typer.Argument(help="REGISTRY/REPOSITORY@sha256:... (by digest).")],
    key: KeyOption,
    policy: AttestPolicyOption = "validated",
    gpu: GpuProductOption = None,
    max_age: MaxAgeOption = None,
    retries: Annotated[
        int, typer.Option("--retries", min=1, max=20, help="Attempts per registry request.")
    ] = 5,
) -> None:
    """Check that a digest carries a verification attestation signed with KEY that satisfies the
    policy: signature, subject (this digest), predicate type and verdict, GPU and age.

    An image index (the platforms of one group, the digest a Kubernetes Job pulls) is checked
    whole: its own attestation, which must list exactly its platforms, and each platform's
    manifest digest, each held to the same policy.

    Exit 0 when one does; exit 1 with one line per attestation that does not (and why).

    Example: imagekit attest verify ghcr.io/acme/pytorch@sha256:... --key imagekit.pub --gpu H100
    """
    from imagekit.attest.required import check_reference

    checked = check_reference(reference, key, policy, gpu, max_age, lambda m: say("retry", m), retries)
    for line in checked.ok:
        typer.echo(line)
    for line in checked.refused:
        say("refused", line)
    if checked.refused:
        raise typer.Exit(int(ExitCode.CELL_FAILED))
