"""Signed Statements in the registry, beside the image they are about, and found again.

Each Statement goes in as a DSSE envelope, in two layouts that point at the same blob:

- an OCI 1.1 artifact: an image manifest with ``artifactType`` = the DSSE media type, the empty
  config, one layer (the envelope, annotated with its predicate type) and ``subject`` = the image
  manifest. A registry with the referrers API indexes it itself; on one without (Debian's
  docker-registry 2.8) the referrers tag ``sha256-<hex>`` lists it (``Registry.attach``);
- cosign's tag layout for key-based attestations, ``sha256-<hex>.att``: one manifest whose layers
  are the envelopes, each annotated ``predicateType``. That is what ``cosign verify-attestation
  --key`` and Kyverno's ``verifyImages`` attestations read.

Everything read back is bounded (``ENVELOPE_BYTES``, ``MAX_REFERRERS``) and each referrer that does
not prove what is asked is a ``Finding`` with a one-line reason, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from imagekit.attest.statements import (
    DSSE_MEDIA_TYPE,
    AttestationError,
    Finding,
    PublicKey,
    Requirement,
    SigningKey,
    judge,
    open_envelope,
    sign_statement,
)
from imagekit.core.errors import RegistryError
from imagekit.core.limits import ENVELOPE_BYTES, MAX_REFERRERS
from imagekit.core.naming import DIGEST
from imagekit.core.text import shown
from imagekit.registry.client import Registry
from imagekit.registry.manifest import EMPTY_BLOB, OCI_MANIFEST, Manifest, artifact_manifest, referrers_tag

PREDICATE_ANNOTATION = "in-toto.io/predicate-type"  # on the artifact and its layer
COSIGN_PREDICATE_ANNOTATION = "predicateType"  # on a layer of the .att manifest, as cosign writes it
COSIGN_SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
CREATED_ANNOTATION = "org.opencontainers.image.created"
COSIGN_CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"


def cosign_tag(digest: str) -> str:
    return referrers_tag(digest) + ".att"


@dataclass(frozen=True)
class Attached:
    """One Statement as it went into the registry: what an index attestation names it by."""

    predicate_type: str
    artifact: str  # the OCI 1.1 artifact manifest's digest (what the referrers list)
    envelope: str  # the DSSE envelope blob's digest (a layer of the cosign .att manifest too)

    def as_json(self) -> dict[str, str]:
        return {"predicateType": self.predicate_type, "artifact": self.artifact, "envelope": self.envelope}


def attach_envelopes(
    registry: Registry,
    repository: str,
    subject: Manifest,
    statements: Sequence[Mapping[str, Any]],
    key: SigningKey,
    created: str | None = None,
) -> tuple[Attached, ...]:
    """Sign each Statement and attach it to ``subject`` (an image or an image index) in
    ``repository``, in both layouts; what was attached, in order."""
    from imagekit.core.clock import timestamp

    when = created or timestamp()
    if not statements:
        return ()
    registry.put_blob(repository, EMPTY_BLOB)
    layers: list[dict[str, Any]] = []
    attached: list[Attached] = []
    for statement in statements:
        kind = str(statement["predicateType"])
        envelope = sign_statement(statement, key)
        digest = registry.put_blob(repository, envelope)
        artifact = artifact_manifest(
            DSSE_MEDIA_TYPE,
            (DSSE_MEDIA_TYPE, digest, len(envelope)),
            subject,
            {PREDICATE_ANNOTATION: kind, CREATED_ANNOTATION: when},
            {PREDICATE_ANNOTATION: kind},
        )
        registry.attach(repository, artifact, subject.digest)
        layers.append(
            {
                "mediaType": DSSE_MEDIA_TYPE,
                "digest": digest,
                "size": len(envelope),
                # cosign reads the signature from this annotation; a DSSE layer carries its own
                "annotations": {COSIGN_PREDICATE_ANNOTATION: kind, COSIGN_SIGNATURE_ANNOTATION: ""},
            }
        )
        attached.append(Attached(kind, artifact.digest, digest))
    _add_cosign_layers(registry, repository, subject.digest, layers)
    return tuple(attached)


def _add_cosign_layers(
    registry: Registry, repository: str, subject: str, layers: Sequence[Mapping[str, Any]]
) -> None:
    """The ``sha256-<hex>.att`` manifest with these envelopes added to the ones it had."""
    tag = cosign_tag(subject)
    existing: list[Any] = []
    if registry.head_manifest(repository, tag) is not None:
        found = registry.get_manifest(repository, tag)
        # read as every manifest is (imagekit.registry.manifest): its layers are carried into the
        # manifest written, so one of no digest or of an absurd size is refused, not copied
        where = f"registry {registry.host}: {repository}:{tag}"
        record = found.image(where, "no attestation attached", artifact=True)
        existing = list(record.document["layers"])
    have = {x["digest"] for x in existing}
    merged = [*existing, *(dict(x) for x in layers if x["digest"] not in have)]
    if len(merged) > MAX_REFERRERS:
        raise RegistryError(
            f"registry {registry.host}: {repository}:{tag} would hold {len(merged):,} attestations;"
            f" at most {MAX_REFERRERS:,} are kept"
        )
    config = {
        "architecture": "",
        "config": {},
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": [x.get("digest") for x in merged]},
    }
    raw_config = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_digest = registry.put_blob(repository, raw_config)
    body = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": COSIGN_CONFIG_TYPE, "digest": config_digest, "size": len(raw_config)},
        "layers": merged,
    }
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    registry.put_manifest(
        repository, tag, Manifest("sha256:" + hashlib.sha256(raw).hexdigest(), OCI_MANIFEST, raw)
    )


def _envelope_layer(artifact: Manifest, subject: str) -> tuple[str, int]:
    """The one DSSE layer of an artifact manifest about ``subject``: (digest, size). The manifest
    is read as every manifest is (``Manifest.image``, an artifact's: sha256 digests, sizes in
    bounds); RegistryError or AttestationError, one line, for one that is not."""
    data = artifact.image("its manifest", "its envelope is not read", artifact=True).document
    # A referrers list that names another image's artifact is a registry's (or a writer's) slip:
    # what is listed for this digest must say it is about this digest.
    about = data.get("subject")
    named = about.get("digest") if isinstance(about, dict) else None
    if named != subject:
        said = "no subject"
        if isinstance(named, str):
            said = named[:19] if DIGEST.fullmatch(named) else shown(named)
        raise AttestationError(f"its manifest is about {said}, not {subject[:19]}")
    layers = data["layers"]
    if len(layers) != 1:
        raise AttestationError("its manifest does not hold exactly one layer")
    layer = layers[0]
    if layer["mediaType"] != DSSE_MEDIA_TYPE:
        raise AttestationError("its layer is not a DSSE envelope")
    digest, size = layer["digest"], layer["size"]
    if not 1 <= size <= ENVELOPE_BYTES:
        raise AttestationError(f"its envelope's size is not a number from 1 to {ENVELOPE_BYTES:,} bytes")
    return digest, size


def find_attestations(
    registry: Registry,
    repository: str,
    digest: str,
    key: PublicKey,
    requirement: Requirement,
    now: datetime,
    index: bool = False,
) -> list[Finding]:
    """Every DSSE referrer of ``repository@digest``, each judged: its signature with ``key``, its
    Statement's subject (this digest) and predicate against ``requirement``. SBOMs are judged
    for their signature and subject only (``Finding.predicate_type`` tells them apart).
    ``index``: the digest is an image index, whose verification attestation lists its platforms
    (``imagekit.attest.index``); an image's never does."""
    findings: list[Finding] = []
    seen: set[str] = set()
    for referrer in registry.referrers(repository, digest):
        # A referrer listed twice (a registry's or a writer's slip) is one attestation: judged
        # once, so it neither counts twice nor repeats its line.
        if referrer.artifact_type != DSSE_MEDIA_TYPE or referrer.digest in seen:
            continue
        seen.add(referrer.digest)
        try:
            artifact = registry.get_manifest(repository, referrer.digest)
            blob, size = _envelope_layer(artifact, digest)
            raw = registry.get_blob(repository, blob, limit=size)
            statement = open_envelope(raw, key)
        except (AttestationError, RegistryError) as exc:
            findings.append(
                Finding(referrer.digest, referrer.annotations.get(PREDICATE_ANNOTATION), exc.message)
            )
            continue
        kind = statement.get("predicateType")
        kind = kind if isinstance(kind, str) else None
        if (
            kind is not None
            and kind not in requirement.predicate_types
            and kind.startswith("https://cyclonedx")
        ):
            problem = judge_subject(statement, digest)
        else:
            problem = judge(statement, digest, requirement, now) or _shape_problem(statement, index)
        findings.append(Finding(referrer.digest, kind, problem, statement))
    return findings


def _shape_problem(statement: Mapping[str, Any], index: bool) -> str | None:
    """An index's attestation accepted only for an index, an image's only for an image: a
    registry that answers an index's digest as no index must not get the index's proof taken
    without its platforms'."""
    predicate = statement.get("predicate")
    lists = isinstance(predicate, dict) and "platforms" in predicate
    if index and not lists:
        return "it attests a single image, not this index's platforms"
    if lists and not index:
        return "it attests an image index (it lists platforms); the registry did not serve this digest as one"
    return None


def judge_subject(statement: Mapping[str, Any], digest: str) -> str | None:
    subjects = statement.get("subject")
    for subject in subjects if isinstance(subjects, list) else []:
        found = subject.get("digest") if isinstance(subject, dict) else None
        if isinstance(found, dict) and found.get("sha256") == digest.removeprefix("sha256:"):
            return None
    return f"it is not about {digest[:19]}"
