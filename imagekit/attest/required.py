"""What a published digest must carry: `imagekit attest verify`'s check of one digest
(``check_reference``), and the check `imagekit images` and `imagekit k8s` make with
--require-attestation before they hand a digest out (``require_attested``).

Every digest is checked in the registry (no Docker engine): a cell published alone by its own
digest, each image index whole (``imagekit.attest.index``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from imagekit.attest.attach import find_attestations
from imagekit.attest.index import IndexCheck, verify_index
from imagekit.attest.statements import Requirement, accepted, load_public_key, parse_age, short_type
from imagekit.core import naming
from imagekit.core.errors import ImagekitError, InputError
from imagekit.core.text import counted
from imagekit.registry.client import Backoff, open_registry
from imagekit.registry.manifest import INDEX_TYPES

if TYPE_CHECKING:
    from imagekit.report.lockfile import Lock


def given(flag: str, value: str | None, fix: str) -> str | None:
    """``value`` stripped; None when the flag was left out. An empty value is refused, never read
    as no requirement: ``--gpu "$GPU"`` with GPU unset must not pass every GPU."""
    if value is None:
        return None
    if not value.strip():
        raise InputError(f"{flag} {value!r}: an empty value requires nothing; {fix}, or leave {flag} out")
    return value.strip()


def requirement(policy: str, gpu: str | None, max_age: str | None) -> Requirement:
    """The flags of a requirement (--policy, --gpu, --max-age) as one; exit 2 when one is wrong."""
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
    return naming.pinned_reference(ref, "name the image by digest, REGISTRY/REPOSITORY@sha256:<64 hex>")


def check_reference(
    reference: str,
    key: Path,
    policy: str,
    gpu: str | None,
    max_age: str | None,
    on_retry: Callable[[str], None],
    retries: int = 5,
) -> IndexCheck:
    """`attest verify`: whether the digest ``reference`` names carries a verification attestation
    signed with ``key`` that satisfies the requirement (``requirement``): ``ok`` lines when it
    does, else one ``refused`` line per attestation that does not (and why). An image index is
    checked whole (``index.verify_index``)."""
    host, path, digest = split_digest_reference(reference)
    need = requirement(policy, gpu, max_age)
    public = load_public_key(key)
    now = datetime.now(tz=timezone.utc)
    client = open_registry(host, Backoff(attempts=retries), on_retry)
    try:
        # An index is checked as one (its platforms too); a digest the registry does not hold is
        # looked up as an image, as before (its referrers then say there is nothing).
        manifest = client.get_manifest(path, digest) if client.head_manifest(path, digest) else None
        if manifest is not None and manifest.media_type in INDEX_TYPES:
            return verify_index(client, path, manifest, public, need, now)
        findings = find_attestations(client, path, digest, public, need, now)
    finally:
        client.close()
    checked = IndexCheck()
    if accepted(findings, need):
        checked.ok = [
            f"ok: {short_type(finding.predicate_type or '?')} {finding.manifest[:19]}"
            for finding in findings
            if finding.problem is None
        ]
        return checked
    reasons = [f for f in findings if f.problem is not None]
    if not reasons:
        checked.refused.append(f"{reference}: no signed verification attestation is attached")
    for finding in reasons:
        what = short_type(finding.predicate_type) if finding.predicate_type else "attestation"
        checked.refused.append(f"{finding.manifest[:19]} ({what}): {finding.problem}")
    return checked


def require_attested(
    lock: Lock,
    key: Path,
    policy: str,
    say: Callable[[str, str], None],
    retries: int = 5,
) -> None:
    """Refuse (exit 1, one line per cell or index) to hand out a digest that carries no
    attestation satisfying ``policy`` signed with ``key``: what `images` and `k8s` check first.
    Each index the cells are platforms of is checked whole (``index.verify_index``: a Job
    pulls the index digest), which checks its platforms' digests too; a cell published alone is
    checked by its own digest. Each retry and each refusal is said as ``say(kind, line)``, kind
    ``retry`` or ``refused``."""
    need = requirement(policy, None, None)
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
