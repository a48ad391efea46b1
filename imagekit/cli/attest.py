"""Commands that check the proof attached to a published digest: attest verify."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from imagekit.cli.app import OneLineUsageErrors, app, path_option, reports_errors, say
from imagekit.core.errors import ExitCode, InputError

if TYPE_CHECKING:
    from imagekit.report.lockfile import Lock as LockLike

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


def given(flag: str, value: str | None, fix: str) -> str | None:
    """``value`` stripped; None when the flag was left out. An empty value is refused, never read
    as no requirement: ``--gpu "$GPU"`` with GPU unset must not pass every GPU."""
    if value is None:
        return None
    if not value.strip():
        raise InputError(f"{flag} {value!r}: an empty value requires nothing; {fix}, or leave {flag} out")
    return value.strip()


def requirement(policy: str, gpu: str | None, max_age: str | None) -> object:
    from imagekit.attest.statements import Requirement, parse_age

    if policy not in ("validated", "checked"):
        raise InputError(f"--policy {policy!r}: use validated or checked")
    wanted = given("--gpu", gpu, "name a GPU product (H100, GH200)")
    age = given("--max-age", max_age, "give a number and a unit (30d, 12h)")
    return Requirement(
        "validated" if policy == "validated" else "checked",
        wanted,
        parse_age(age) if age is not None else None,
    )


def split_digest_reference(ref: str) -> tuple[str, str, str]:
    """``registry/repository@sha256:...`` -> (registry, repository path, digest); exit 2 else."""
    from imagekit.core import naming
    from imagekit.core.text import shown

    name, digest = naming.split_reference(ref)
    if (
        "@" not in ref
        or digest is None
        or not naming.DIGEST.fullmatch(digest)
        or not naming.is_reference(ref)
    ):
        raise InputError(f"{shown(ref)}: name the image by digest, REGISTRY/REPOSITORY@sha256:<64 hex>")
    named = naming.registry_and_path(name)
    if named is None:
        raise InputError(f"{shown(ref)}: name the registry (REGISTRY/REPOSITORY@sha256:...)")
    return *named, digest


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
    from datetime import datetime, timezone

    from imagekit.attest.attach import find_attestations
    from imagekit.attest.index import verify_index
    from imagekit.attest.statements import Requirement, accepted, load_public_key, short_type
    from imagekit.registry.client import Backoff, open_registry
    from imagekit.registry.manifest import INDEX_TYPES

    host, path, digest = split_digest_reference(reference)
    need = requirement(policy, gpu, max_age)
    assert isinstance(need, Requirement)
    public = load_public_key(key)
    now = datetime.now(tz=timezone.utc)
    client = open_registry(host, Backoff(attempts=retries), lambda m: say("retry", m))
    try:
        # An index is checked as one (its platforms too); a digest the registry does not hold is
        # looked up as an image, as before (its referrers then say there is nothing).
        manifest = client.get_manifest(path, digest) if client.head_manifest(path, digest) else None
        if manifest is not None and manifest.media_type in INDEX_TYPES:
            checked = verify_index(client, path, manifest, public, need, now)
            for line in checked.ok:
                typer.echo(line)
            for line in checked.refused:
                say("refused", line)
            if checked.refused:
                raise typer.Exit(int(ExitCode.CELL_FAILED))
            return
        findings = find_attestations(client, path, digest, public, need, now)
    finally:
        client.close()
    if accepted(findings, need):
        for finding in findings:
            if finding.problem is None:
                typer.echo(f"ok: {short_type(finding.predicate_type or '?')} {finding.manifest[:19]}")
        return
    reasons = [f for f in findings if f.problem is not None]
    if not reasons:
        say("refused", f"{reference}: no signed verification attestation is attached")
    for finding in reasons:
        what = short_type(finding.predicate_type) if finding.predicate_type else "attestation"
        say("refused", f"{finding.manifest[:19]} ({what}): {finding.problem}")
    raise typer.Exit(int(ExitCode.CELL_FAILED))


def require_attested(lock: LockLike, key: Path, policy: str, retries: int = 5) -> None:
    """Refuse (exit 1, one line per cell or index) to hand out a digest that carries no
    attestation satisfying ``policy`` signed with ``key``: what `images` and `k8s` check first.
    Each index the cells are platforms of is checked whole (``attest_index.verify_index``: a Job
    pulls the index digest), which checks its platforms' digests too; a cell published alone is
    checked by its own digest."""
    from datetime import datetime, timezone

    from imagekit.attest.attach import find_attestations
    from imagekit.attest.index import verify_index
    from imagekit.attest.statements import Requirement, accepted, load_public_key
    from imagekit.core.errors import ImagekitError
    from imagekit.core.text import counted
    from imagekit.registry.client import Backoff, open_registry

    need = requirement(policy, None, None)
    assert isinstance(need, Requirement)
    public = load_public_key(key)
    now = datetime.now(tz=timezone.utc)
    refused: list[str] = []
    in_index = {p.cell for i in lock.indexes.values() for p in i.platforms.values()}
    for group in sorted(lock.indexes):
        index = lock.indexes[group]
        client = open_registry(index.registry, Backoff(attempts=retries), lambda m: say("retry", m))
        try:
            path = index.repository.split("/", 1)[1]
            checked = verify_index(client, path, client.get_manifest(path, index.digest), public, need, now)
        finally:
            client.close()
        refused += [f"{group}: {index.reference}: {line}" for line in checked.refused[:1]]
    for cell in sorted(set(lock.images) - in_index):
        entry = lock.images[cell]
        path = entry.repository.split("/", 1)[1]
        client = open_registry(entry.registry, Backoff(attempts=retries), lambda m: say("retry", m))
        try:
            findings = find_attestations(client, path, entry.digest, public, need, now)
        finally:
            client.close()
        if not accepted(findings, need):
            why = next((f.problem for f in findings if f.problem), "no signed verification attestation")
            refused.append(f"{cell}: {entry.reference}: {why}")
    for line in refused:
        say("refused", line)
    if refused:
        total = len(lock.indexes) + len(set(lock.images) - in_index)
        raise ImagekitError(
            f"{len(refused)} of {counted(total, 'digest')} without a valid attestation; none handed out"
        )
