"""Proof bound to a digest: in-toto Statements about a published image, signed in DSSE envelopes.

What is attested (the predicate types are imagekit's own, versioned, and documented in the README):

- ``VALIDATED_PREDICATE``: the image passed its checks *with a GPU visible* (the ``validated``
  verdict). Its predicate holds the verdict and what it rests on: each check's name and status,
  the GPU products, driver and CUDA driver version, the timed GEMM's figures, the probe's version,
  the cell, its input digest, the base image, when the verdict was reached and on which runner.
- ``CHECKED_PREDICATE``: the same predicate for an image checked *without* a GPU. A policy that
  asks for the first never accepts the second: the type itself says which it is.
- ``SBOM_PREDICATE``: a CycloneDX document (``imagekit.attest.sbom``) as the predicate, the way
  ``cosign attest --type cyclonedx`` writes it.

Signing is ECDSA P-256 over SHA-256 with the DSSE pre-authentication encoding, signatures in DER
(what cosign, Kyverno and securesystemslib verify with a public key). The key is the user's: a PEM
file (``--signing-key``) or the PEM itself in ``IMAGEKIT_SIGNING_KEY`` (a CI secret). It is input
like any other (a bounded read, one-line errors) and it is never repeated: no message, record or
repr holds any part of it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from imagekit import __version__
from imagekit.core.clock import future_problem, parse_time
from imagekit.core.errors import ImagekitError, InputError
from imagekit.core.limits import KEY_BYTES
from imagekit.core.naming import DIGEST
from imagekit.core.paths import read_regular_file
from imagekit.core.safetypes import parse_json
from imagekit.core.text import printable, shown
from imagekit.facts.advisories import AdvisoryFinding
from imagekit.probe import protocol
from imagekit.report.scans import ScanSummary
from imagekit.report.verification import Verification, json_or_text

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
PREDICATE_BASE = "https://github.com/imagekit/attestations"
VALIDATED_PREDICATE = f"{PREDICATE_BASE}/gpu-validated/v1"
CHECKED_PREDICATE = f"{PREDICATE_BASE}/checked-without-gpu/v1"
SBOM_PREDICATE = "https://cyclonedx.org/bom"
VERIFICATION_PREDICATES = {"validated": VALIDATED_PREDICATE, "checked": CHECKED_PREDICATE}
KEY_ENV = "IMAGEKIT_SIGNING_KEY"
# The runner's CI context worth naming in a predicate (no secret is among these).
CI_VARIABLES = (
    "GITHUB_SERVER_URL",
    "GITHUB_REPOSITORY",
    "GITHUB_RUN_ID",
    "GITHUB_WORKFLOW",
    "CI_PROJECT_PATH",
    "CI_PIPELINE_ID",
    "CI_JOB_URL",
)
Policy = Literal["validated", "checked"]


class AttestationError(ImagekitError):
    """An envelope or Statement that does not prove what is asked of it (exit 1, one line)."""


# -- keys ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SigningKey:
    """An ECDSA P-256 private key; its repr names the key id only."""

    key: Any = field(repr=False)  # cryptography's EllipticCurvePrivateKey
    keyid: str
    source: str  # the file or variable it came from, for messages

    def public_pem(self) -> str:
        from cryptography.hazmat.primitives import serialization

        public = self.key.public_key()
        pem: bytes = public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return pem.decode()


@dataclass(frozen=True)
class PublicKey:
    key: Any = field(repr=False)  # cryptography's EllipticCurvePublicKey
    keyid: str
    source: str

    def pem(self) -> str:
        from cryptography.hazmat.primitives import serialization

        text: bytes = self.key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return text.decode()


def key_id(public_key: Any) -> str:
    """The hex SHA-256 of the key's DER SubjectPublicKeyInfo: the envelope's ``keyid`` hint."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


_PEM_HINT = (
    "give an unencrypted ECDSA P-256 private key in PEM (`openssl ecparam -name prime256v1 -genkey"
    " -noout | openssl pkcs8 -topk8 -nocrypt -out imagekit.key`)"
)


_PUBLIC_HINT = (
    "give the ECDSA P-256 public key in PEM that belongs to the signing key"
    " (`openssl ec -in imagekit.key -pubout -out imagekit.pub`)"
)


def _check_curve(key: Any, source: str, kind: str) -> None:
    """Refuse a key that is not ECDSA P-256, saying what it is and what to give instead: a
    private key for signing, its public key for verifying."""
    from cryptography.hazmat.primitives.asymmetric import ec

    wanted = ec.EllipticCurvePrivateKey if kind == "private" else ec.EllipticCurvePublicKey
    if not isinstance(key, wanted) or not isinstance(key.curve, ec.SECP256R1):
        what = type(key).__name__.lstrip("_").replace("PrivateKey", "").replace("PublicKey", "")
        curve = getattr(getattr(key, "curve", None), "name", "")
        got = f"an {what or 'unknown'} {curve} {kind} key".replace("  ", " ")
        hint = _PEM_HINT if kind == "private" else _PUBLIC_HINT
        raise InputError(
            f"{source}: {got}; imagekit signs and verifies with ECDSA P-256 (prime256v1) keys only: {hint}"
        )


def _key_bytes(path: Path | None, environ: Mapping[str, str], what: str) -> tuple[bytes, str] | None:
    if path is not None:
        try:
            return read_regular_file(path, KEY_BYTES, what), str(path)
        except FileNotFoundError:
            raise InputError(f"{path}: no such file; pass {what}") from None
    text = environ.get(KEY_ENV)
    if not text:
        return None
    if len(text) > KEY_BYTES:
        raise InputError(f"{KEY_ENV}: longer than {KEY_BYTES:,} characters; it holds {what}")
    return text.encode("utf-8", errors="replace"), KEY_ENV


def load_signing_key(path: Path | None, environ: Mapping[str, str] | None = None) -> SigningKey | None:
    """The key from ``--signing-key PATH``, else from ``IMAGEKIT_SIGNING_KEY``; None with neither.

    Every problem is one InputError naming the file or the variable, never any of its content:
    cryptography's own messages are not repeated (they may quote what they could not parse)."""
    env = os.environ if environ is None else environ
    found = _key_bytes(path, env, "a PEM private key (ECDSA P-256)")
    if found is None:
        return None
    raw, source = found
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    if b"ENCRYPTED" in raw.split(b"\n", 1)[0]:
        raise InputError(f"{source}: an encrypted private key; {_PEM_HINT}")
    try:
        key = load_pem_private_key(raw, password=None)
    except TypeError:  # a password-protected PKCS#8 key
        raise InputError(f"{source}: an encrypted private key; {_PEM_HINT}") from None
    except (ValueError, UnsupportedAlgorithm):
        raise InputError(f"{source}: not a PEM private key imagekit can read; {_PEM_HINT}") from None
    finally:
        del raw
    _check_curve(key, source, "private")
    return SigningKey(key, key_id(key.public_key()), source)


def load_public_key(path: Path) -> PublicKey:
    """A PEM public key (``cosign.pub``, ``openssl ec -pubout``) from a file; one-line errors."""
    try:
        raw = read_regular_file(path, KEY_BYTES, "a PEM public key (ECDSA P-256)")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; pass a PEM public key (ECDSA P-256)") from None
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    if b"PRIVATE KEY" in raw:
        raise InputError(f"{path}: holds a private key; pass the public key (`openssl ec -pubout`)")
    try:
        key = load_pem_public_key(raw)
    except (ValueError, UnsupportedAlgorithm):
        raise InputError(f"{path}: not a PEM public key imagekit can read (ECDSA P-256)") from None
    _check_curve(key, str(path), "public")
    return PublicKey(key, key_id(key), str(path))


# -- DSSE --------------------------------------------------------------------------------------------------


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is signed, binding the payload to its type."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign_statement(statement: Mapping[str, Any], key: SigningKey) -> bytes:
    """The Statement as a DSSE envelope (JSON bytes), signed with ``key``."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    signature = key.key.sign(pae(PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256()))
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": key.keyid, "sig": base64.b64encode(signature).decode()}],
    }
    return json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode()


def _b64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise AttestationError(f"its {what} is not a string")
    try:  # DSSE allows the URL-safe alphabet as well as the standard one
        return base64.b64decode(value.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise AttestationError(f"its {what} is not base64") from None


def open_envelope(raw: bytes, key: PublicKey) -> dict[str, Any]:
    """The Statement inside a DSSE envelope whose signature ``key`` verifies; AttestationError
    (one line, naming what is wrong, never repeating the payload) otherwise."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        envelope: Any = parse_json(raw)
    except ValueError:
        raise AttestationError("the envelope is not JSON") from None
    if not isinstance(envelope, dict):
        raise AttestationError("the envelope is not a JSON object")
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise AttestationError(
            f"its payloadType is {shown(str(envelope.get('payloadType')))}, not {PAYLOAD_TYPE}"
        )
    payload = _b64(envelope.get("payload"), "payload")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise AttestationError("the envelope carries no signature")
    signed = pae(PAYLOAD_TYPE, payload)
    for entry in signatures[:16]:
        if not isinstance(entry, dict):
            continue
        try:
            key.key.verify(_b64(entry.get("sig"), "signature"), signed, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, AttestationError, ValueError):
            continue
        break
    else:
        raise AttestationError(f"no signature verifies with the key {key.source} (keyid {key.keyid[:16]})")
    try:
        statement: Any = parse_json(payload)
    except ValueError:
        raise AttestationError("its signed payload is not JSON") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise AttestationError(f"its signed payload is not an in-toto Statement ({STATEMENT_TYPE})")
    return statement


# -- Statements --------------------------------------------------------------------------------------------


def statement(
    repository: str, digest: str, predicate_type: str, predicate: Mapping[str, Any]
) -> dict[str, Any]:
    """An in-toto Statement v1 about the manifest ``repository@digest``."""
    if not DIGEST.fullmatch(digest):
        raise InputError(f"{shown(digest)} is not a sha256 manifest digest")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": repository, "digest": {"sha256": digest.removeprefix("sha256:")}}],
        "predicateType": predicate_type,
        "predicate": dict(predicate),
    }


def ci_context(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {name: printable(env[name])[:512] for name in CI_VARIABLES if env.get(name)}


@dataclass(frozen=True)
class Subject:
    """What a verification attestation is about, beside the verification itself."""

    repository: str  # registry/repository
    digest: str  # the promoted manifest digest
    cell: str
    input_digest: str
    image_id: str
    base_image: str | None = None
    base_digest: str | None = None
    gpus: tuple[str, ...] = ()  # the products nvidia-smi listed
    driver: str | None = None
    cuda_driver: str | None = None
    platform: str | None = None  # the cell's (linux/arm64): which entry of an index it is
    # the advisories that affect what it installs, each waived by the matrix (with the reason) or
    # below its threshold: a verifier's policy may refuse what the matrix accepted
    advisories: tuple[AdvisoryFinding, ...] = ()
    # what the scanners passed to publish found in the staged digest, counted per severity, and
    # the findings at or above the threshold that a waiver let through
    scans: tuple[ScanSummary, ...] = ()


def verification_predicate(
    subject: Subject, verification: Verification, environ: Mapping[str, str] | None = None
) -> tuple[str, dict[str, Any]] | None:
    """(predicate type, predicate) for a verification; None for one that failed (nothing to
    attest). A verification without a visible GPU gets ``CHECKED_PREDICATE``, never the other."""
    if verification.verdict not in VERIFICATION_PREDICATES:
        return None
    by_name = {c.name: c for c in verification.checks}

    def actual(name: str) -> Any:
        check = by_name.get(name)
        return json_or_text(check.actual) if check is not None and check.status == protocol.PASS else None

    inventory = verification.inventory
    predicate = {
        "verdict": verification.verdict,
        "gpu": {
            "requested": verification.gpus,
            "visible": verification.gpu_visible,
            "products": sorted(set(subject.gpus)),
            "driver": subject.driver,
            "cuda_driver": subject.cuda_driver,
        },
        "software": {
            "torch": actual(protocol.TORCH),
            "cuda": actual(protocol.TORCH_CUDA),
            "cudnn": actual(protocol.CUDNN),
            "libraries": dict(inventory.cuda_libraries) if inventory else {},
        },
        "checks": [{"name": c.name, "status": c.status, "required": c.required} for c in verification.checks],
        "figures": {
            "metrics": dict(verification.metrics),
            "gpus": [
                {"index": g.index, "device": g.device, "tflops": g.tflops, "floor_tflops": g.floor_tflops}
                for g in verification.gpu_figures
            ],
        },
        "probe": {
            "schema": inventory.probe_schema if inventory else None,
            "sha256": inventory.probe_sha256 if inventory else None,
        },
        "cell": {
            "id": subject.cell,
            "input_digest": subject.input_digest,
            "image_id": subject.image_id,
            "base_image": subject.base_image,
            "base_digest": subject.base_digest,
            "platform": subject.platform,
        },
        "advisories": [finding.as_json() for finding in subject.advisories],
        "scans": [scan.as_json() for scan in subject.scans],
        "run": {
            "verified_at": verification.finished_at,
            "verified_digest": verification.image_digest,
            "runner": verification.runner,
            "duration_s": verification.duration_s,
            # where the checks ran: the machine inside the container, and whether it was emulated
            "machine": verification.platform.machine if verification.platform else None,
            "emulated": verification.emulated,
            "ci": ci_context(environ),
        },
        "imagekit": {"version": __version__},
    }
    return VERIFICATION_PREDICATES[verification.verdict], predicate


# -- what a verifier asks ----------------------------------------------------------------------------------

_AGE = re.compile(r"([0-9]{1,6})([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``2w``: how old a verification may be."""
    match = _AGE.fullmatch(text.strip())
    if not match:
        raise InputError(f"--max-age {shown(text)}: use a number and a unit (s, m, h, d, w), like 30d")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


@dataclass(frozen=True)
class Requirement:
    """What ``attest verify`` (and ``images``/``k8s`` before they hand out a digest) demands."""

    policy: Policy = "validated"
    gpu: str | None = None  # a GPU product the verification must have run on (whole words, any case)
    max_age: timedelta | None = None

    @property
    def predicate_types(self) -> tuple[str, ...]:
        if self.policy == "checked":
            return (VALIDATED_PREDICATE, CHECKED_PREDICATE)
        return (VALIDATED_PREDICATE,)


def admitted_types(predicate_type: str) -> tuple[str, ...]:
    """The verification predicate types a policy asking for ``predicate_type`` admits, as
    ``Requirement`` has them: validated is stronger than checked, so asking for checked admits
    a gpu-validated attestation too; asking for validated admits nothing else."""
    if predicate_type not in VERIFICATION_PREDICATES.values():
        raise InputError(f"{shown(predicate_type)} is not a verification predicate type")
    return Requirement("checked" if predicate_type == CHECKED_PREDICATE else "validated").predicate_types


# What each verification predicate type's predicate must say to count (field path -> the values
# allowed), as ``_verdict_problem`` checks it: the admission policies (``imagekit.k8s``) write
# their conditions from this, in CUE and in CEL.
PREDICATE_CONDITIONS: Mapping[str, Mapping[str, tuple[object, ...]]] = {
    VALIDATED_PREDICATE: {"verdict": ("validated",), "gpu.visible": (True,)},
    CHECKED_PREDICATE: {"verdict": ("checked",)},
}


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def judge(found: Mapping[str, Any], digest: str, requirement: Requirement, now: datetime) -> str | None:
    """Why a verified Statement does not satisfy ``requirement`` for ``digest``; None when it does."""
    kind = found.get("predicateType")
    problem = _subject_problem(found.get("subject"), digest) or _type_problem(kind, requirement)
    if problem is not None:
        return problem
    predicate = found.get("predicate")
    if not isinstance(predicate, dict):
        return "its predicate is not an object"
    gpu = _object(predicate.get("gpu"))
    return (
        _verdict_problem(kind, predicate.get("verdict"), gpu)
        or _gpu_problem(gpu, requirement.gpu)
        or _age_problem(_object(predicate.get("run")), requirement.max_age, now)
    )


# What judge checks, in this order; each returns why the Statement does not count, or None.


def _subject_problem(subjects: object, digest: str) -> str | None:
    hexes = [
        s["digest"].get("sha256")
        for s in (subjects if isinstance(subjects, list) else [])
        if isinstance(s, dict) and isinstance(s.get("digest"), dict)
    ]
    if digest.removeprefix("sha256:") not in hexes:
        named = ", ".join(f"sha256:{h}"[:19] for h in hexes if isinstance(h, str)) or "nothing"
        return f"it is about {named}, not {digest[:19]}"
    return None


def _type_problem(kind: object, requirement: Requirement) -> str | None:
    if kind in requirement.predicate_types:
        return None
    if kind == CHECKED_PREDICATE:
        return "the image was only checked without a GPU (use --policy checked to accept that)"
    return f"its predicate type is {shown(str(kind))}, not {' or '.join(requirement.predicate_types)}"


def _verdict_problem(kind: object, verdict: object, gpu: Mapping[str, Any]) -> str | None:
    expected = "validated" if kind == VALIDATED_PREDICATE else "checked"
    if verdict != expected:
        return f"its verdict is {shown(str(verdict))}, not the {expected} its type says"
    if kind == VALIDATED_PREDICATE and gpu.get("visible") is not True:
        return "its predicate says no GPU was visible, yet claims validated"
    return None


def names_product(wanted: str, product: str) -> bool:
    """Whether ``wanted`` (``H100``, ``h100 80gb``) names ``product`` as nvidia-smi lists it
    (``NVIDIA H100 80GB HBM3``): its words, in any case, not a part of a word. A substring would
    let an H200 requirement pass on a GH200, another GPU in another machine."""
    pattern = rf"(?<![a-z0-9]){re.escape(wanted.strip().lower())}(?![a-z0-9])"
    return bool(wanted.strip()) and re.search(pattern, product.lower()) is not None


def _gpu_problem(gpu: Mapping[str, Any], wanted: str | None) -> str | None:
    if wanted is None:
        return None
    products = [p for p in gpu.get("products") or () if isinstance(p, str)]
    if not any(names_product(wanted, p) for p in products):
        return f"it ran on {', '.join(products) or 'no named GPU'}, not a {wanted}"
    return None


def _age_problem(run: Mapping[str, Any], max_age: timedelta | None, now: datetime) -> str | None:
    when = parse_time(run.get("verified_at"))
    # a time not yet come is refused with or without --max-age: it would pass any age for years
    future = future_problem(when, now) if when is not None else None
    if future is not None:
        return f"its verified_at {future}"
    if max_age is None:
        return None
    if when is None:
        return "it does not say when the verification ran"
    if now - when > max_age:
        return f"its verification ran at {when.isoformat()}, older than {max_age}"
    return None


@dataclass(frozen=True)
class Finding:
    """One referrer looked at: its manifest digest, and why it does not count (None: it does)."""

    manifest: str
    predicate_type: str | None
    problem: str | None
    # The Statement its signature verified (None when it did not): what an index's attestation
    # is checked against beyond ``judge`` (its platforms, the index's entries).
    statement: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)


def accepted(findings: Sequence[Finding], requirement: Requirement) -> bool:
    """Whether one verification attestation satisfies ``requirement`` (an SBOM never does)."""
    return any(f.problem is None and f.predicate_type in requirement.predicate_types for f in findings)


def short_type(predicate_type: str) -> str:
    """A predicate type as a line names it."""
    names = {
        VALIDATED_PREDICATE: "verification attestation (gpu-validated)",
        CHECKED_PREDICATE: "verification attestation (checked without GPU)",
        SBOM_PREDICATE: "SBOM (CycloneDX)",
    }
    return names.get(predicate_type, shown(predicate_type))
