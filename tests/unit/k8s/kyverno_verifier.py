"""Kyverno's verification of a key-signed cosign attestation, check by check as its source makes
it, run on what imagekit really attaches (the ``sha256-<hex>.att`` manifest and its DSSE layers,
read back from the OCI stub ``imagekit.attest.attach`` wrote them to).

This reproduces Kyverno's behaviour from its source; it does not run Kyverno. No Go toolchain is
here (Debian's golang-go is 1.19; Kyverno 1.19.0 builds with cosign v3.1.2, which needs Go 1.24+,
and the Go module proxy is not reachable from this machine). Each step names where it was read:

- kyverno/kyverno v1.19.0 (ee97ce09538b): ``pkg/image/verifiers/cpol/cosign/{cosign,verifier}.go``
  (ClusterPolicy), ``pkg/image/verifiers/ivpol/cosign/{opts,verifier}.go`` (ImageValidatingPolicy),
  ``pkg/engine/internal/{imageverifier,utils}.go``, ``pkg/engine/variables/operator/equal.go``,
  ``pkg/cel/libs/imageverify/impl.go``. The ImageValidatingPolicy's attestation check is the same in
  v1.17.0 to v1.18.2 (``verifier.go`` L132-141 there) and on main at 2026-08-21 (111e07bbecc6);
  the fix of kyverno/kyverno#17109 is PR #17217's commit d0662ffb6dbd, unmerged;
- sigstore/cosign v3.1.2 (Kyverno 1.19.0's go.mod): ``pkg/cosign/verify.go``, ``verifiers.go``;
- secure-systems-lab/go-securesystemslib v0.11.0 ``dsse/verify.go``, ``dsse/envelope.go``;
- sigstore/sigstore v1.10.8 ``pkg/signature/dsse/adapters.go``.

What no imagekit attestation carries is refused here rather than modelled (a Rekor bundle, a
certificate, a Sigstore bundle referrer): the model says so instead of guessing.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2

from tests.unit.oci_stub import OciStub, digest_of

INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"  # cosign's types.IntotoPayloadType
BUNDLE_ANNOTATION = "dev.sigstore.cosign/bundle"  # a Rekor bundle, as cosign's static layer reads it
CERT_ANNOTATION = "dev.sigstore.cosign/certificate"
SIGSTORE_BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle"  # a cosign v3 bundle referrer, any version


class Refused(Exception):
    """Kyverno's verifier returned an error: the image is not admitted (the message is Kyverno's)."""


@dataclass(frozen=True)
class Layer:
    """One layer of a ``.att`` manifest: cosign's ``oci.Signature`` (payload = the blob)."""

    blob: bytes
    annotations: Mapping[str, str]


@dataclass
class StubRegistry:
    """The registry Kyverno reads, the OCI stub standing in for the image's host: ``ghcr.io/acme/x``
    is ``acme/x`` in the stub."""

    stub: OciStub

    @staticmethod
    def where(image: str) -> tuple[str, str]:
        name, digest = image.rsplit("@", 1)
        return name.split("/", 1)[1], digest

    def att_layers(self, image: str) -> list[Layer]:
        """cosign's ``ociremote.AttestationTag`` + ``Signatures`` (verify.go L1092-1103): the
        ``sha256-<hex>.att`` manifest's layers, each blob fetched by its digest (a blob that does
        not hash to it is a registry error); no such tag is no attestation (cosign's empty list)."""
        repository, digest = self.where(image)
        found = self.stub.manifests.get((repository, digest.replace(":", "-") + ".att"))
        if found is None:
            return []
        layers = []
        for descriptor in json.loads(found[1])["layers"]:
            blob = self.stub.blobs[(repository, descriptor["digest"])]
            if digest_of(blob) != descriptor["digest"]:
                raise Refused(f"layer {descriptor['digest']}: the registry answered other bytes")
            layers.append(Layer(blob, descriptor.get("annotations", {})))
        return layers

    def referrer_types(self, image: str) -> list[str]:
        """The artifact types the referrers tag lists for the digest (cosign's ``GetBundles`` looks
        there for Sigstore bundles on a registry without the referrers API)."""
        repository, digest = self.where(image)
        found = self.stub.manifests.get((repository, digest.replace(":", "-")))
        if found is None:
            return []
        return [str(m.get("artifactType", "")) for m in json.loads(found[1]).get("manifests", [])]


# -- cosign v3.1.2 -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckOpts:
    """The fields of cosign's ``CheckOpts`` a key-signed attestation's verification reads."""

    key: ec.EllipticCurvePublicKey | None  # SigVerifier
    ignore_tlog: bool
    rekor_client: bool  # RekorClient set: an online lookup in Rekor is possible
    offline: bool = False


def _pae(payload_type: str, body: bytes) -> bytes:
    """DSSE's pre-authentication encoding (go-securesystemslib dsse/sign.go ``PAE``)."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def _b64(text: object, url_too: bool) -> bytes:
    """Go's base64.StdEncoding (strict padding), then URLEncoding where the caller falls back to
    it (go-securesystemslib dsse/envelope.go ``b64Decode`` L74-84)."""
    if not isinstance(text, str):
        raise Refused("not a base64 string")
    alphabets = (None, b"-_") if url_too else (None,)
    for altchars in alphabets:
        try:
            return base64.b64decode(text, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            continue
    raise Refused("unable to base64 decode payload (is payload in the right format?)")


def verify_oci_attestation(key: ec.EllipticCurvePublicKey, layer: Layer) -> None:
    """cosign verify.go ``verifyOCIAttestation`` L292-314: the layer is a DSSE envelope of the
    in-toto payload type, verified by go-securesystemslib's ``EnvelopeVerifier`` (dsse/verify.go
    ``VerifyAndDecode``, threshold 1) over sigstore's ``VerifierAdapter``. The adapter cosign builds
    has no ``PubKeyID`` and no ``Pub`` (adapters.go L70-77), so its key id is "" and
    ``SHA256KeyID(nil)`` fails: an envelope's ``keyid`` never excludes a signature (verify.go
    L66-72). The key verifies ECDSA over SHA-256 of the PAE, the signature ASN.1 DER."""
    try:
        envelope = json.loads(layer.blob)
    except ValueError as exc:
        raise Refused(f"json: {exc}") from None
    if envelope.get("payloadType") != INTOTO_PAYLOAD_TYPE:
        raise Refused(f"invalid payloadType {envelope.get('payloadType')} on envelope")
    signatures = envelope.get("signatures") or []
    if not signatures:
        raise Refused("no signature found")
    encoded = _pae(INTOTO_PAYLOAD_TYPE, _b64(envelope.get("payload"), url_too=True))
    for signature in signatures:
        raw = _b64(signature.get("sig"), url_too=True)  # an undecodable one fails the envelope
        try:
            key.verify(raw, encoded, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            continue
        return
    raise Refused("accepted signatures do not match threshold, Found: 0, Expected 1")


def intoto_subject_claim(layer: Layer, digest: str) -> None:
    """cosign verifiers.go ``IntotoSubjectClaimVerifier`` L59-96: the Statement (payload decoded
    with StdEncoding only) parses as an in-toto v1 Statement, strictly (``attestation.Statement
    .UnmarshalJSON``, pkg/cosign/attestation/attestation.go L70-75: protojson, unknown fields
    refused; here in-toto-attestation's protobuf and json_format, the same schema) and names the
    image's digest among its subjects' sha256 digests."""
    envelope = json.loads(layer.blob)
    raw = _b64(envelope["payload"], url_too=False)
    try:
        json_format.Parse(raw, statement_pb2.Statement())
    except json_format.ParseError as exc:
        # L77-100 retry only a Statement whose predicate is a string, which imagekit never writes
        raise Refused(f"could not parse statement: {exc}") from None
    statement = json.loads(raw)
    for subject in statement.get("subject") or []:
        if subject is None:
            raise Refused("invalid in-toto statement: null subject entry")
        found = (subject.get("digest") or {}).get("sha256")
        if found is not None and "sha256:" + found == digest:
            return
    raise Refused("no matching subject digest found")


def verify_internal(layer: Layer, digest: str, co: CheckOpts) -> bool:
    """cosign verify.go ``verifyInternal`` L815-962 for a key: the log first, then the signature,
    then the claim. Returns ``bundleVerified``."""
    if not co.ignore_tlog:  # L831-869
        if BUNDLE_ANNOTATION in layer.annotations:
            raise NotImplementedError("a Rekor bundle: imagekit attaches none, not modelled")
        # VerifyBundle found no bundle (L1272-1278): false, no error; then
        if co.offline:
            raise Refused("offline verification failed")
        if not co.rekor_client:
            raise Refused("rekor client not provided for online verification")
        # tlogValidateEntry searches Rekor for this signature: imagekit writes no entry
        raise Refused("signature not found in transparency log")
    if co.key is None:
        raise NotImplementedError("certificate verification: imagekit signs with a key")
    if CERT_ANNOTATION in layer.annotations:
        raise NotImplementedError("a certificate on the layer: imagekit attaches none")
    verify_oci_attestation(co.key, layer)  # L897-899
    intoto_subject_claim(layer, digest)  # ClaimVerifier, L901-906
    return False  # no bundle was verified: bundleVerified stays false


def verify_image_attestations(
    layers: Sequence[Layer], digest: str, co: CheckOpts
) -> tuple[list[Layer], bool]:
    """cosign verify.go ``VerifyImageAttestations`` L1072-1105 and ``VerifyImageAttestation``
    L1160-1222: each layer verified on its own, one that fails is dropped; an error only when
    none is left. Returns (the verified layers, ``bundleVerified``: any layer's)."""
    if co.key is None:
        raise Refused("one of verifier, root certs, or TrustedMaterial is required")
    checked, errors, bundle_verified = [], [], False
    for layer in layers:
        try:
            bundle_verified = verify_internal(layer, digest, co) or bundle_verified
        except Refused as exc:
            errors.append(str(exc))
            continue
        checked.append(layer)
    if not checked:
        raise Refused("no matching attestations: " + "\n ".join(errors))
    return checked, bundle_verified


def statement_of(layer: Layer) -> dict[str, Any]:
    statement: dict[str, Any] = json.loads(_b64(json.loads(layer.blob)["payload"], url_too=False))
    return statement


def _public_key(pem: str) -> ec.EllipticCurvePublicKey:
    key = load_pem_public_key(pem.encode())
    assert isinstance(key, ec.EllipticCurvePublicKey)
    return key


# -- ClusterPolicy (kyverno.io/v1 verifyImages) ------------------------------------------------------------


def _condition_key(template: str, predicate: Mapping[str, Any]) -> Any:
    """A condition's key ``{{ a.b }}``: the whole key one variable, so its JSON value, type kept
    (variables.SubstituteAllInConditions); the predicate is the context (utils.go
    ``EvaluateConditions`` L37-54, ``AddJSONObject(predicate)``). A path that is not there fails
    the substitution, and so the check."""
    path = template.removeprefix("{{").removesuffix("}}").strip()
    assert template.startswith("{{") and template.endswith("}}") and path.replace(".", "").isidentifier()
    value: Any = predicate
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise Refused(f"failed to substitute variables in attestation conditions: {path}")
        value = value[part]
    return value


def equals(key: Any, value: Any) -> bool:
    """operator/equal.go ``EqualHandler.Evaluate`` L30-163 for the keys a Statement holds: a bool
    key equals only a bool (L129-136); a string only a string, the value a wildcard pattern
    (L69-96; a quantity or a duration compared as such, which no value imagekit writes is); a
    number (JSON's are float64 in Go) a number or a string that parses as one (L98-127)."""
    if isinstance(key, bool):
        return isinstance(value, bool) and key == value
    if isinstance(key, str):
        return isinstance(value, str) and fnmatch.fnmatchcase(key, value)
    if isinstance(key, int | float):
        if isinstance(value, str):
            try:
                return float(value) == key
            except ValueError:
                return False
        return isinstance(value, int | float) and not isinstance(value, bool) and key == value
    return False


def _conditions_hold(blocks: Sequence[Mapping[str, Any]], predicate: Mapping[str, Any]) -> bool:
    """Each block's ``all`` every condition, ``any`` one of them (EvaluateAnyAllConditions)."""
    for block in blocks:
        for mode, conditions in block.items():
            assert all(c["operator"] == "Equals" for c in conditions), "only Equals is modelled"
            results = [equals(_condition_key(c["key"], predicate), c["value"]) for c in conditions]
            if not (all(results) if mode == "all" else any(results)):
                return False
    return True


def cluster_policy_verify(entry: Mapping[str, Any], registry: StubRegistry, image: str) -> None:
    """One ``verifyImages`` entry on one image (imageverifier.go ``verifyImage`` L152-195 and
    ``verifyAttestations`` L232-338), or Refused."""
    for attestation in entry["attestations"]:
        for attestor_set in attestation["attestors"]:
            required, verified, errors = attestor_set.get("count", len(attestor_set["entries"])), 0, []
            for attestor in attestor_set["entries"]:
                keys = attestor["keys"]
                # buildCosignVerifier L405-525 with buildCosignOptions (cosign.go L148-167): no
                # rekor block means the public Rekor, and a client for it
                ignore_tlog = bool((keys.get("rekor") or {}).get("ignoreTlog", False))
                assert keys.get("signatureAlgorithm", "sha256") == "sha256"
                co = CheckOpts(_public_key(keys["publicKeys"]), ignore_tlog, rekor_client=not ignore_tlog)
                try:
                    # FetchAttestations (cpol/cosign/verifier.go L94-172): bundleVerified is only
                    # logged (L165), never checked
                    layers, _bundle_verified = verify_image_attestations(
                        registry.att_layers(image), image.rsplit("@", 1)[1], co
                    )
                    statements = [statement_of(layer) for layer in layers]  # decodeStatements L255-309
                    # verifyAttestation L560-583: the statements of the type, each passing
                    of_type = [s for s in statements if s.get("predicateType") == attestation["type"]]
                    if not of_type:
                        raise Refused(f"attestions not found for predicate type {attestation['type']}")
                    for statement in of_type:
                        predicate = statement.get("predicate")
                        if not isinstance(predicate, Mapping):
                            raise Refused("failed to extract predicate from statement")
                        if not _conditions_hold(attestation.get("conditions", []), predicate):
                            raise Refused(f"attestation checks failed for {image}")
                except Refused as exc:
                    errors.append(str(exc))
                    continue
                verified += 1
                if verified >= required:
                    break
            if verified < required:
                raise Refused(f"image attestations verification failed, verifiedCount: {verified}: {errors}")


def kyverno_image_name(image: str, mutation: bool = True) -> str:
    """A pod's image as the ClusterPolicy sees it (pkg/utils/image/infos.go ``GetImageInfo``
    L48-100, ``String`` L34-46, ``addDefaultRegistry`` L102-109): ``docker.io/`` put before a first
    component that is no host (no ``.`` or ``:``, not ``localhost``, lower case), no ``library/``
    added; ``:latest`` for a name with neither tag nor digest; the registry dropped again when the
    default-registry mutation is off (Kyverno's ``enableDefaultRegistryMutation``)."""
    first, slash, _ = image.partition("/")
    added = not slash or (
        not any(c in first for c in ".:") and first != "localhost" and first.lower() == first
    )
    full = f"docker.io/{image}" if added else image
    name, at, digest = full.partition("@")
    registry, _, path = name.partition("/")
    tag = ""
    if ":" in path.rsplit("/", 1)[-1]:
        path, _, tag = path.rpartition(":")
    if not at and not tag:
        tag = "latest"
    if added and not mutation:
        registry = ""
    base = f"{registry}/{path}" if registry else path
    return f"{base}@{digest}" if at else f"{base}:{tag}"


def cluster_policy_admits(
    policy: Mapping[str, Any], registry: StubRegistry, images: Sequence[str], mutation: bool = True
) -> bool:
    """Whether Kyverno admits a pod of ``images`` (every container kind's, pinned by digest as
    ``mutateDigest`` leaves them) under the ClusterPolicy: every image an entry's
    ``imageReferences`` match, as Kyverno names it (``kyverno_image_name``; a wildcard match,
    imageverifier.go L172), passes that entry."""
    for rule in policy["spec"]["rules"]:
        for entry in rule["verifyImages"]:
            for spelled in images:
                image = kyverno_image_name(spelled, mutation)
                if not any(fnmatch.fnmatchcase(image, ref) for ref in entry["imageReferences"]):
                    continue
                try:
                    cluster_policy_verify(entry, registry, image)
                except Refused:
                    return False
    return True


# -- ImageValidatingPolicy (policies.kyverno.io/v1) --------------------------------------------------------


def ivpol_verify_attestation_signature(
    attestor: Mapping[str, Any], kind: str, registry: StubRegistry, image: str, with_17217: bool = False
) -> list[dict[str, Any]]:
    """ivpol/cosign/verifier.go ``VerifyAttestationSignature`` L135-204 with ``checkOptions``
    (opts.go L82-150): the Statements of ``kind`` the attestor verifies, or Refused.
    ``with_17217`` applies the unmerged fix (d0662ffb6dbd): ``!verified`` refused only when the
    attestor does not ignore the log."""
    cosign = attestor["cosign"]
    ctlog = cosign.get("ctlog") or {}
    ignore_tlog = bool(ctlog.get("insecureIgnoreTlog", False))
    # opts.go L85-87: a key with the log ignored skips Sigstore's infrastructure (no Rekor client);
    # otherwise getRekor makes one (L127-133)
    co = CheckOpts(_public_key(cosign["key"]["data"]), ignore_tlog, rekor_client=not ignore_tlog)
    # buildCheckOptsWithBundleDetection L32-47: a Sigstore bundle referrer switches to cosign's
    # bundle path; imagekit attaches DSSE referrers, so the .att layout is read
    if any(t.startswith(SIGSTORE_BUNDLE_TYPE) for t in registry.referrer_types(image)):
        raise NotImplementedError("a Sigstore bundle referrer: imagekit attaches none")
    layers, verified = verify_image_attestations(registry.att_layers(image), image.rsplit("@", 1)[1], co)
    if not verified:  # L161-165
        skips = ignore_tlog or bool(ctlog.get("insecureIgnoreSCT", False))
        if not (with_17217 and skips):
            raise Refused("cosign bundle verification failed")
    # L167-201: policy.AttestationToPayloadJSON keeps the Statements of the attestation's type
    payloads = [s for s in map(statement_of, layers) if s.get("predicateType") == kind]
    if not payloads:
        raise Refused(f"required predicate type {kind} not found")
    return payloads
