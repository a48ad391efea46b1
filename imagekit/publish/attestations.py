"""What a promoted digest carries besides its tags: the referrers of its staged digest, carried
along when promotion moves it into another repository, and, signed with ``--signing-key``, its
verification attestation and SBOM; a group's image index carries its own attestation
(``imagekit.attest.index``), attached once each platform's is. Without a key nothing is signed,
and publish says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from imagekit.attest import statements
from imagekit.attest.attach import Attached, attach_envelopes
from imagekit.attest.index import LeftOutPlatform, PlatformProof, index_predicate
from imagekit.attest.sbom import build_sbom
from imagekit.attest.statements import SBOM_PREDICATE, SigningKey
from imagekit.core import naming
from imagekit.core.limits import TEXT_CHARS
from imagekit.core.text import counted
from imagekit.publish.policy import Candidate, Group, gpus_of
from imagekit.registry.client import Registry
from imagekit.registry.manifest import Manifest
from imagekit.report.lockfile import LockEntry
from imagekit.report.scans import ScanSummary
from imagekit.report.verification import clipped


@dataclass(frozen=True)
class Proofs:
    """Where a run's promoted digests get what they carry: the registry, the target repository
    (``repository`` without the registry, ``target`` with it), the signing key (None: nothing is
    signed) and where progress is said."""

    registry: Registry
    registry_host: str
    repository: str
    target: str
    key: SigningKey | None
    say: Callable[[str], None]

    def carry_referrers(self, source: str, manifest: Manifest) -> int:
        """Promotion by digest into another repository takes the staged digest's referrers along
        (attestations attached where it was staged): each artifact manifest, its blobs mounted
        across, and the target's referrers tag. Returns how many were carried."""
        target = self.repository
        digest = manifest.digest
        if source == target:
            return 0
        found = self.registry.referrers(source, digest)
        for referrer in found:
            artifact = self.registry.get_manifest(source, referrer.digest)
            # an artifact's blobs may be of any media type; digests and sizes are checked alike
            about = naming.by_digest(naming.repository(self.registry_host, source), referrer.digest)
            record = artifact.image(about, "no referrer carried", artifact=True)
            for blob in record.blobs.values():
                self.registry.mount_blob(target, blob.digest, source, size=blob.size)
            self.registry.attach(target, artifact, digest)
        if found:
            self.say(f"carried {len(found)} referrer(s) of {digest[:19]} from {source} to {target}")
        return len(found)

    def attach(
        self, candidate: Candidate, manifest: Manifest, entry: LockEntry, scans: tuple[ScanSummary, ...]
    ) -> tuple[Attached, ...]:
        """Sign and attach the verification attestation and the SBOM of the promoted digest;
        what was attached (nothing without a signing key)."""
        key = self.key
        if key is None:
            return ()
        verification = candidate.verification
        made, provenance = None, entry.provenance
        if verification is not None:
            subject = statements.Subject(
                entry.repository,
                entry.digest,
                entry.cell,
                entry.input_digest,
                entry.image_id,
                candidate.base_image,
                candidate.base_digest,
                provenance.gpus if provenance else (),
                provenance.driver if provenance else None,
                provenance.cuda_driver if provenance else None,
                entry.platform,
                entry.advisories,
                scans,
            )
            made = statements.verification_predicate(subject, verification)
        signed: list[dict[str, Any]] = []
        if made is not None:
            signed.append(statements.statement(entry.repository, entry.digest, *made))
        inventory = verification.inventory if verification is not None else None
        if inventory is not None:
            bom = build_sbom(
                entry.repository,
                entry.digest,
                inventory,
                candidate.base_image,
                candidate.base_digest,
                entry.cell,
            )
            signed.append(statements.statement(entry.repository, entry.digest, SBOM_PREDICATE, bom))
        attached = attach_envelopes(self.registry, self.repository, manifest, signed, key)
        missing = []
        if made is None:
            missing.append("no verification attestation (never verified)")
        if inventory is None:
            missing.append("no SBOM (its verification has no inventory: verify it again)")
        kinds = ", ".join(statements.short_type(a.predicate_type) for a in attached) or "nothing"
        self.say(
            f"signed and attached to {entry.reference}: {kinds}"
            + (f"; {'; '.join(missing)}" if missing else "")
            + f" (key {key.keyid[:16]})"
        )
        return attached

    def attach_index(
        self,
        group: Group,
        index: Manifest,
        entries: Sequence[LockEntry],
        attached: Sequence[tuple[Attached, ...]],
    ) -> None:
        """Sign and attach the index's own verification attestation (``imagekit.attest.index``),
        once each platform's is attached: the digest a pod pulls carries the proof too."""
        key = self.key
        if key is None:
            return
        proofs = [
            PlatformProof(e.platform, e.cell, e.digest, m.verification, gpus_of(e), tuple(a))
            for m, e, a in zip(group.members, entries, attached, strict=True)
        ]
        missing = [LeftOutPlatform(x.platform, x.cell, clipped(x.reason, TEXT_CHARS)) for x in group.missing]
        made = index_predicate(group.tag, group.input_digest, proofs, missing)
        reference = naming.by_digest(self.target, index.digest)
        if made is None:
            self.say(f"no index attestation for {reference}: a platform was never verified")
            return
        signed = statements.statement(self.target, index.digest, *made)
        done = attach_envelopes(self.registry, self.repository, index, [signed], key)
        kinds = ", ".join(statements.short_type(a.predicate_type) for a in done)
        what = f"the index of {counted(len(proofs), 'platform')}"
        self.say(f"signed and attached to {reference}, {what}: {kinds} (key {key.keyid[:16]})")
