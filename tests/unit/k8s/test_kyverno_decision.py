"""What Kyverno decides on the policies `imagekit k8s --policy kyverno|kyverno-ivpol` writes, for
attestations imagekit really signs and attaches (``attach_envelopes`` into an OCI stub standing in
for ghcr.io): each attestation verified as Kyverno's verifiers do, per their source
(``kyverno_verifier``, which cites the lines), not only the documents' shape.

- ``--policy kyverno`` (the ClusterPolicy): a gpu-validated digest is admitted; a checked-only,
  unattested, unsigned, foreign-signed, misdirected or other-type one is refused.
- The ImageValidatingPolicy (``kyverno-ivpol``, ``kyverno``'s document before) as Kyverno 1.17.0
  to 1.19.0 verify: every imagekit digest refused, the gpu-validated one too (kyverno/kyverno#17109),
  which is why ``kyverno`` is no longer it; with #17217 applied it admits what the ClusterPolicy does.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
import yaml

from imagekit.attest import statements as attest
from imagekit.attest.attach import attach_envelopes, cosign_tag
from imagekit.k8s.admission import policy_files
from imagekit.k8s.kyverno import KYVERNO_IVPOL_POLICY_FILE, KYVERNO_POLICY_FILE, cluster_policy
from imagekit.registry.manifest import OCI_MANIFEST, Manifest
from tests.unit.attest_samples import (
    DIGEST,
    SUBJECT,
    gpu_verification,
    private_pem,
    public_pem_of,
    signing_key,
)
from tests.unit.k8s import kyverno_cel
from tests.unit.k8s.kyverno_verifier import (
    Refused,
    StubRegistry,
    cluster_policy_admits,
    cluster_policy_verify,
    ivpol_verify_attestation_signature,
    kyverno_image_name,
)
from tests.unit.oci_stub import OciStub, digest_of, oci_stub

REPOSITORY = "ghcr.io/acme/pytorch"
PATH = REPOSITORY.split("/", 1)[1]  # the repository in the stub
IMAGE = f"{REPOSITORY}@{DIGEST}"
KEY_PEM = private_pem()
PUB = public_pem_of(KEY_PEM).decode()


SIGNER = signing_key(KEY_PEM)
STRANGER = signing_key(private_pem())


def verification(verdict: str, edit: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """imagekit's verification Statement about DIGEST (a GPU runner's for validated, a CPU
    runner's for checked), edited after it is made and before it is signed."""
    made = attest.verification_predicate(SUBJECT, gpu_verification(verdict))
    assert made is not None
    statement = attest.statement(REPOSITORY, DIGEST, *made)
    if edit is not None:
        edit(statement)
    return statement


def sbom() -> dict[str, Any]:
    return attest.statement(REPOSITORY, DIGEST, attest.SBOM_PREDICATE, {"bomFormat": "CycloneDX"})


def _verdict(value: str) -> Callable[[dict[str, Any]], None]:
    def edit(statement: dict[str, Any]) -> None:
        statement["predicate"]["verdict"] = value

    return edit


def _gpu_visible(value: object) -> Callable[[dict[str, Any]], None]:
    def edit(statement: dict[str, Any]) -> None:
        statement["predicate"]["gpu"]["visible"] = value

    return edit


def _no_gpu_block(statement: dict[str, Any]) -> None:
    del statement["predicate"]["gpu"]


def _unknown_field(statement: dict[str, Any]) -> None:
    statement["verdict"] = "validated"  # beside the predicate: not a field of an in-toto Statement


def _about(digest: str) -> Callable[[dict[str, Any]], None]:
    def edit(statement: dict[str, Any]) -> None:
        statement["subject"][0]["digest"]["sha256"] = digest.removeprefix("sha256:")

    return edit


@pytest.fixture
def stub() -> Iterator[OciStub]:
    with oci_stub() as made:
        yield made


def attach(stub: OciStub, *signed: tuple[dict[str, Any], attest.SigningKey]) -> StubRegistry:
    """Each Statement signed by its key and attached to DIGEST by imagekit, as `attest` does."""
    client = stub.client()
    for statement, key in signed:
        attach_envelopes(client, PATH, Manifest(DIGEST, OCI_MANIFEST, b"{}"), [statement], key)
    client.close()
    return StubRegistry(stub)


def strip_signatures(stub: OciStub) -> None:
    """The .att manifest's envelopes, rewritten with no signature (each layer's blob and digest)."""
    tag = cosign_tag(DIGEST)
    media_type, body = stub.manifests[(PATH, tag)]
    manifest = json.loads(body)
    for layer in manifest["layers"]:
        envelope = json.loads(stub.blobs[(PATH, layer["digest"])])
        envelope["signatures"] = []
        blob = json.dumps(envelope).encode()
        stub.blobs[(PATH, digest_of(blob))] = blob
        layer.update(digest=digest_of(blob), size=len(blob))
    stub.replace_manifest(PATH, tag, manifest, media_type)


def written(policy: str, predicate_type: str = attest.VALIDATED_PREDICATE) -> dict[str, Any]:
    """The document `imagekit k8s --policy POLICY` writes, read back from its YAML."""
    files = policy_files([policy], [REPOSITORY], PUB, predicate_type)
    (text,) = files.values()
    document: dict[str, Any] = yaml.safe_load(text)
    return document


def kyverno_admits(
    document: Mapping[str, Any], registry: StubRegistry, images: Sequence[str], with_17217: bool = False
) -> bool:
    """Kyverno's decision on a pod of ``images`` under ``document``, by the verifier of its kind."""
    if document["kind"] == "ClusterPolicy":
        return cluster_policy_admits(document, registry, images)
    assert document["kind"] == "ImageValidatingPolicy"
    pod = {"containers": list(images), "initContainers": [], "ephemeralContainers": []}
    return kyverno_cel.admitted(document, registry, pod, with_17217=with_17217)


# name -> the Statements attached (each with its signer); what `--policy kyverno` decides
CASES: dict[str, tuple[Callable[[], list[tuple[dict[str, Any], attest.SigningKey]]], bool]] = {
    "gpu-validated": (lambda: [(verification("validated"), SIGNER)], True),
    "gpu-validated beside a foreign-signed checked one": (
        lambda: [(verification("validated"), SIGNER), (verification("checked"), STRANGER)],
        True,
    ),
    "checked without a GPU": (lambda: [(verification("checked"), SIGNER)], False),
    "validated type, verdict failed": (
        lambda: [(verification("validated", _verdict("failed")), SIGNER)],
        False,
    ),
    "validated type, no GPU visible": (
        lambda: [(verification("validated", _gpu_visible(False)), SIGNER)],
        False,
    ),
    "visible as a string": (lambda: [(verification("validated", _gpu_visible("true")), SIGNER)], False),
    "no gpu block": (lambda: [(verification("validated", _no_gpu_block), SIGNER)], False),
    "a second validated-type one that failed": (
        lambda: [
            (verification("validated"), SIGNER),
            (verification("validated", _verdict("failed")), SIGNER),
        ],
        False,
    ),
    "wrong key": (lambda: [(verification("validated"), STRANGER)], False),
    "about another digest": (
        lambda: [(verification("validated", _about("sha256:" + "cd" * 32)), SIGNER)],
        False,
    ),
    "an SBOM only (another predicate type)": (lambda: [(sbom(), SIGNER)], False),
    "a Statement in-toto cannot parse": (
        lambda: [(verification("validated", _unknown_field), SIGNER)],
        False,
    ),
    "nothing attached": (lambda: [], False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_cluster_policy_kyverno_writes_admits_gpu_validated_digests_only(
    stub: OciStub, name: str
) -> None:
    make, expected = CASES[name]
    registry = attach(stub, *make())
    document = written("kyverno")
    assert document["kind"] == "ClusterPolicy"
    assert kyverno_admits(document, registry, [IMAGE]) is expected, name
    # the former name writes the same document
    assert written("kyverno-legacy") == document


@pytest.mark.parametrize("name", list(CASES))
def test_the_image_validating_policy_refuses_every_digest_on_kyverno_1_19(stub: OciStub, name: str) -> None:
    """The v1 verifier needs a log bundle imagekit never writes: even the gpu-validated digest is
    refused, whatever ``insecureIgnoreTlog`` says. With #17217 it decides as the ClusterPolicy."""
    make, expected = CASES[name]
    registry = attach(stub, *make())
    document = written("kyverno-ivpol")
    assert document["kind"] == "ImageValidatingPolicy"
    assert document["spec"]["attestors"][0]["cosign"]["ctlog"]["insecureIgnoreTlog"] is True
    assert kyverno_admits(document, registry, [IMAGE]) is False, name
    assert kyverno_admits(document, registry, [IMAGE], with_17217=True) is expected, name


def test_why_the_image_validating_policy_refuses(stub: OciStub) -> None:
    """The signature verifies and the claim holds; the refusal is cosign's bundleVerified=false."""
    registry = attach(stub, (verification("validated"), SIGNER))
    (attestor,) = written("kyverno-ivpol")["spec"]["attestors"]
    with pytest.raises(Refused, match=r"^cosign bundle verification failed$"):
        ivpol_verify_attestation_signature(attestor, attest.VALIDATED_PREDICATE, registry, IMAGE)
    (statement,) = ivpol_verify_attestation_signature(
        attestor, attest.VALIDATED_PREDICATE, registry, IMAGE, with_17217=True
    )
    assert statement["predicate"]["verdict"] == "validated"


def test_the_cluster_policy_admits_only_because_it_ignores_the_log(stub: OciStub) -> None:
    """Without ``rekor.ignoreTlog`` cosign looks the signature up in Rekor, where imagekit wrote
    nothing: the flag imagekit writes is what admits, and it admits nothing unverified."""
    registry = attach(stub, (verification("validated"), SIGNER))
    document = written("kyverno")
    (entry,) = document["spec"]["rules"][0]["verifyImages"]
    keys = entry["attestations"][0]["attestors"][0]["entries"][0]["keys"]
    assert keys["rekor"] == {"ignoreTlog": True}
    cluster_policy_verify(entry, registry, IMAGE)
    del keys["rekor"]
    with pytest.raises(Refused, match="signature not found in transparency log"):
        cluster_policy_verify(entry, registry, IMAGE)


def test_stripped_signatures_are_refused_by_both(stub: OciStub) -> None:
    registry = attach(stub, (verification("validated"), SIGNER))
    strip_signatures(stub)
    with pytest.raises(Refused, match="no signature found"):
        cluster_policy_verify(written("kyverno")["spec"]["rules"][0]["verifyImages"][0], registry, IMAGE)
    assert not kyverno_admits(written("kyverno-ivpol"), registry, [IMAGE], with_17217=True)


def test_a_pod_is_admitted_only_when_every_matched_image_is(stub: OciStub) -> None:
    registry = attach(stub, (verification("validated"), SIGNER))
    document = written("kyverno")
    unattested = f"{REPOSITORY}@sha256:{'e' * 64}"
    assert kyverno_admits(document, registry, [IMAGE, IMAGE])
    assert not kyverno_admits(document, registry, [IMAGE, unattested])
    # an image of another repository is not this policy's to judge
    assert kyverno_admits(document, registry, [IMAGE, "docker.io/library/busybox@sha256:" + "b" * 64])
    assert kyverno_admits(document, registry, [f"{REPOSITORY}-staging@{DIGEST}"])


def test_kyverno_is_the_cluster_policy_and_kyverno_ivpol_the_image_validating_policy() -> None:
    files = policy_files(
        ["kyverno", "kyverno-legacy", "kyverno-ivpol"], [REPOSITORY], PUB, attest.VALIDATED_PREDICATE
    )
    assert sorted(files) == sorted([KYVERNO_POLICY_FILE, KYVERNO_IVPOL_POLICY_FILE])
    assert yaml.safe_load(files[KYVERNO_POLICY_FILE])["kind"] == "ClusterPolicy"
    assert yaml.safe_load(files[KYVERNO_IVPOL_POLICY_FILE])["kind"] == "ImageValidatingPolicy"


SPELLINGS = {
    "docker.io/acme/pytorch": ["acme/pytorch", "docker.io/acme/pytorch", "index.docker.io/acme/pytorch"],
    "docker.io/library/pytorch": [
        "pytorch",
        "library/pytorch",
        "docker.io/pytorch",
        "docker.io/library/pytorch",
        "index.docker.io/pytorch",
        "index.docker.io/library/pytorch",
    ],
    "ghcr.io/acme/pytorch": ["ghcr.io/acme/pytorch"],
}


@pytest.mark.parametrize("repository", list(SPELLINGS))
@pytest.mark.parametrize("mutation", [True, False])
def test_the_cluster_policy_judges_every_spelling_as_kyverno_names_it(
    repository: str, mutation: bool
) -> None:
    """A pod reaching the repository by any spelling, tagged, untagged or by digest, is one the
    ClusterPolicy's ``imageReferences`` match as Kyverno renders the name; another repository is not."""
    references = cluster_policy([repository], PUB, attest.VALIDATED_PREDICATE)["spec"]["rules"][0][
        "verifyImages"
    ][0]["imageReferences"]

    def judged(spelled: str) -> bool:
        return any(fnmatch.fnmatchcase(kyverno_image_name(spelled, mutation), r) for r in references)

    for name in SPELLINGS[repository]:
        assert all(judged(f"{name}{suffix}") for suffix in ("", ":2.11.0", f"@{DIGEST}")), name
        assert not judged(f"{name}-staging:2.11.0") and not judged(f"{name}/other@{DIGEST}"), name


def test_a_docker_hub_spelling_does_not_skip_the_check(stub: OciStub) -> None:
    """Spelled ``index.docker.io/acme/x``, an unattested digest of ``docker.io/acme/x`` is refused and
    a validated one admitted (a spelling the references missed would be admitted unchecked)."""
    registry = attach(stub, (verification("validated"), SIGNER))
    document = cluster_policy(["docker.io/acme/pytorch"], PUB, attest.VALIDATED_PREDICATE)
    for spelled in SPELLINGS["docker.io/acme/pytorch"]:
        assert kyverno_admits(document, registry, [f"{spelled}@{DIGEST}"]), spelled
        assert not kyverno_admits(document, registry, [f"{spelled}@sha256:{'e' * 64}"]), spelled
