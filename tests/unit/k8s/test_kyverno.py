"""The Kyverno policies `imagekit k8s --policy kyverno|kyverno-ivpol` writes. The
ImageValidatingPolicy's CEL is evaluated by cel-python (``kyverno_cel``) against the attestations
imagekit's own attest code signs and attaches (to an OCI stub): Statements of a GPU runner's and of
a CPU runner's verification, an index's, and edited, misdirected or foreign-signed ones, each
attestation verified as Kyverno's verifier does (``kyverno_verifier``). What it admits with
kyverno/kyverno#17217 applied is held to what `imagekit attest verify` accepts (``attest.judge``)
for the same Statement and policy; as Kyverno 1.17.0 to 1.19.0 verify, it admits none."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from imagekit.attest import statements as attest
from imagekit.attest.attach import attach_envelopes
from imagekit.attest.index import PlatformProof, index_predicate
from imagekit.core.errors import InputError
from imagekit.k8s.kyverno import (
    admission_expression,
    cluster_policy,
    image_globs,
    image_validating_policy,
)
from imagekit.registry.manifest import OCI_INDEX, OCI_MANIFEST, Manifest
from tests.unit.attest_samples import (
    DIGEST,
    SUBJECT,
    gpu_verification,
    private_pem,
    public_pem_of,
    signing_key,
)
from tests.unit.k8s.kyverno_cel import admitted, compile_validations, glob_matches
from tests.unit.k8s.kyverno_verifier import StubRegistry
from tests.unit.oci_stub import OciStub, oci_stub

REPOSITORY = "ghcr.io/acme/pytorch"
INDEX_DIGEST = "sha256:" + "9" * 64
KEY_PEM = private_pem()
PUB = public_pem_of(KEY_PEM).decode()
NOW = datetime(2026, 12, 2, tzinfo=UTC)


SIGNER = signing_key(KEY_PEM)
STRANGER = signing_key(private_pem())


def image_statement(verdict: str) -> dict[str, Any]:
    """A verification's Statement about DIGEST; "failed" is a checked one whose verdict says so
    (imagekit attests no failed verification: only a forged or edited Statement says it)."""
    made = attest.verification_predicate(
        SUBJECT, gpu_verification("checked" if verdict == "failed" else verdict)
    )
    assert made is not None
    statement = attest.statement(REPOSITORY, DIGEST, *made)
    statement["predicate"]["verdict"] = verdict
    return statement


def index_statement(*verdicts: str) -> dict[str, Any]:
    proofs = [
        PlatformProof(
            f"linux/{arch}", f"c{i}", "sha256:" + str(i) * 64, gpu_verification(v), ("NVIDIA H200",)
        )
        for i, (arch, v) in enumerate(zip(("amd64", "arm64"), verdicts, strict=False))
    ]
    made = index_predicate("g", "0" * 64, proofs, environ={})
    assert made is not None
    return attest.statement(REPOSITORY, INDEX_DIGEST, *made)


def _invisible(statement: dict[str, Any]) -> None:
    statement["predicate"]["gpu"]["visible"] = False


def _string_true(statement: dict[str, Any]) -> None:
    statement["predicate"]["gpu"]["visible"] = "true"


def _other_digest(statement: dict[str, Any]) -> None:
    statement["subject"][0]["digest"]["sha256"] = "cd" * 32


# name -> (the Statement, how it is edited before signing, its signer, admitted by: validated, checked)
CASES: dict[
    str, tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None] | None, str, bool, bool]
] = {
    "gpu-validated image": (lambda: image_statement("validated"), None, "key", True, True),
    "checked-only image": (lambda: image_statement("checked"), None, "key", False, True),
    "failed image": (lambda: image_statement("failed"), None, "key", False, False),
    "validated index": (lambda: index_statement("validated", "validated"), None, "key", True, True),
    "index with a checked platform": (
        lambda: index_statement("validated", "checked"),
        None,
        "key",
        False,
        True,
    ),
    "validated type, no GPU visible": (lambda: image_statement("validated"), _invisible, "key", False, False),
    "visible as a string": (lambda: image_statement("validated"), _string_true, "key", False, False),
    "about another digest": (lambda: image_statement("validated"), _other_digest, "key", False, False),
    "signed by another key": (lambda: image_statement("validated"), None, "stranger", False, False),
}


@pytest.fixture
def stub() -> Iterator[OciStub]:
    with oci_stub() as made:
        yield made


def _attached(stub: OciStub, name: str) -> tuple[str, StubRegistry, dict[str, Any]]:
    """The case's Statement signed and attached by imagekit (``attach_envelopes``) to its digest in
    the stub, which stands in for ghcr.io: the image reference, the registry Kyverno reads, the
    Statement."""
    make, edit, signer, _, _ = CASES[name]
    statement = make()
    if edit is not None:
        edit(statement)
    index = bool(statement["predicate"].get("index"))
    digest = INDEX_DIGEST if index else DIGEST
    subject = Manifest(digest, OCI_INDEX if index else OCI_MANIFEST, b"{}")
    client = stub.client()
    attach_envelopes(
        client, REPOSITORY.split("/", 1)[1], subject, [statement], SIGNER if signer == "key" else STRANGER
    )
    client.close()
    return f"{REPOSITORY}@{digest}", StubRegistry(stub), statement


@pytest.mark.parametrize("name", list(CASES))
def test_what_each_policy_admits_evaluated_in_cel(stub: OciStub, name: str) -> None:
    image, registry, statement = _attached(stub, name)
    *_, by_validated, by_checked = CASES[name]
    pod = {"containers": [image], "initContainers": [], "ephemeralContainers": []}
    for predicate_type, expected in (
        (attest.VALIDATED_PREDICATE, by_validated),
        (attest.CHECKED_PREDICATE, by_checked),
    ):
        policy = image_validating_policy([REPOSITORY], PUB, predicate_type)
        assert admitted(policy, registry, pod, with_17217=True) is expected, (name, predicate_type)
        # Kyverno 1.17.0-1.19.0: the attestation verifies without a log bundle, and is refused
        assert not admitted(policy, registry, pod), (name, predicate_type)
        # `imagekit attest verify` with the same policy reaches the same verdict on the same Statement
        checked = predicate_type == attest.CHECKED_PREDICATE
        requirement = attest.Requirement("checked") if checked else attest.Requirement("validated")
        digest = image.rsplit("@", 1)[1]
        signed_by_key = CASES[name][2] == "key"
        judged = signed_by_key and attest.judge(statement, digest, requirement, NOW) is None
        assert judged is expected, (name, predicate_type)


def test_a_pod_is_admitted_only_when_every_matched_image_is(stub: OciStub) -> None:
    image, registry, _ = _attached(stub, "gpu-validated image")
    unattested = f"{REPOSITORY}@sha256:{'e' * 64}"
    policy = image_validating_policy([REPOSITORY], PUB, attest.CHECKED_PREDICATE)

    def admits(pod: dict[str, list[str]]) -> bool:
        return admitted(policy, registry, pod, with_17217=True)

    assert admits({"containers": [image], "initContainers": [image]})
    assert not admits({"containers": [image], "initContainers": [unattested]})
    assert not admits({"containers": [image], "ephemeralContainers": [unattested]})
    assert not admits({"containers": [unattested]})
    # an image of another repository is not this policy's to judge
    assert admits({"containers": [image, "docker.io/library/busybox:1.37"]})
    assert admits({"containers": [f"{REPOSITORY}-staging@{DIGEST}"]})


def test_the_expressions_parse_and_read_the_conditions_of_each_type() -> None:
    validated = image_validating_policy([REPOSITORY], PUB, attest.VALIDATED_PREDICATE)
    checked = image_validating_policy([REPOSITORY], PUB, attest.CHECKED_PREDICATE)
    assert len(compile_validations(validated)) == len(compile_validations(checked)) == 1
    assert [a["intoto"]["type"] for a in validated["spec"]["attestations"]] == [attest.VALIDATED_PREDICATE]
    assert [a["intoto"]["type"] for a in checked["spec"]["attestations"]] == [
        attest.VALIDATED_PREDICATE,
        attest.CHECKED_PREDICATE,
    ]
    expression = admission_expression(attest.VALIDATED_PREDICATE)
    for path, (value,) in attest.PREDICATE_CONDITIONS[attest.VALIDATED_PREDICATE].items():
        assert f".predicate.{path} == {json.dumps(value)}" in expression
    assert checked["spec"]["validations"][0]["expression"].count("||") == 1


def test_the_policy_document() -> None:
    policy = image_validating_policy([REPOSITORY], PUB, attest.VALIDATED_PREDICATE)
    assert (policy["apiVersion"], policy["kind"]) == ("policies.kyverno.io/v1", "ImageValidatingPolicy")
    spec = policy["spec"]
    assert spec["validationActions"] == ["Deny"] and spec["failurePolicy"] == "Fail"
    assert "validationFailureAction" not in spec
    assert spec["validationConfigurations"] == {"required": True, "verifyDigest": True, "mutateDigest": True}
    (attestor,) = spec["attestors"]
    assert attestor["cosign"]["key"] == {"data": PUB, "hashAlgorithm": "sha256"}
    assert attestor["cosign"]["ctlog"] == {"insecureIgnoreTlog": True, "insecureIgnoreSCT": True}
    assert [m["glob"] for m in spec["matchImageReferences"]] == [
        REPOSITORY,
        f"{REPOSITORY}:*",
        f"{REPOSITORY}@*",
    ]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods"] and rule["operations"] == ["CREATE", "UPDATE"]


@pytest.mark.parametrize(
    ("repository", "spellings"),
    [
        (
            "docker.io/acme/pytorch",
            ["acme/pytorch", "docker.io/acme/pytorch", "index.docker.io/acme/pytorch"],
        ),
        (
            "docker.io/library/pytorch",
            [
                "docker.io/library/pytorch",
                "docker.io/pytorch",
                "index.docker.io/library/pytorch",
                "index.docker.io/pytorch",
                "library/pytorch",
                "pytorch",
            ],
        ),
        ("127.0.0.1:5000/acme/pytorch", ["127.0.0.1:5000/acme/pytorch"]),
    ],
)
def test_the_globs_match_every_spelling_of_the_repository_and_nothing_else(
    repository: str, spellings: list[str]
) -> None:
    globs = image_globs([repository])
    assert globs == [f"{s}{suffix}" for s in sorted(spellings) for suffix in (":*", "@*")]
    for name in spellings:
        assert any(glob_matches(g, f"{name}:2.11.0-cuda13.0") for g in globs)
        assert any(glob_matches(g, f"{name}@{DIGEST}") for g in globs)
        assert not any(
            glob_matches(g, f"{name}-staging:x") or glob_matches(g, f"{name}/other:x") for g in globs
        )
    # the ImageValidatingPolicy sees the name as spelled: without a tag too
    policy = image_validating_policy([repository], PUB, attest.VALIDATED_PREDICATE)
    ivpol_globs = [m["glob"] for m in policy["spec"]["matchImageReferences"]]
    assert ivpol_globs == image_globs([repository], bare=True)
    for name in spellings:
        assert any(glob_matches(g, name) for g in ivpol_globs)
        assert not any(glob_matches(g, f"{name}-staging") for g in ivpol_globs)


def test_the_cluster_policy_enforces_per_rule_with_the_same_conditions() -> None:
    policy = cluster_policy([REPOSITORY], PUB, attest.VALIDATED_PREDICATE)
    assert (policy["apiVersion"], policy["kind"]) == ("kyverno.io/v1", "ClusterPolicy")
    assert "validationFailureAction" not in policy["spec"]
    (rule,) = policy["spec"]["rules"]
    (verify,) = rule["verifyImages"]
    assert verify["failureAction"] == "Enforce"
    assert verify["imageReferences"] == [f"{REPOSITORY}:*", f"{REPOSITORY}@*"]
    (attestation,) = verify["attestations"]
    assert attestation["type"] == attest.VALIDATED_PREDICATE
    assert attestation["attestors"][0]["entries"][0]["keys"]["publicKeys"] == PUB.strip()
    conditions = {c["key"].strip("{} "): c["value"] for c in attestation["conditions"][0]["all"]}
    assert conditions == {p: v for p, (v,) in attest.PREDICATE_CONDITIONS[attest.VALIDATED_PREDICATE].items()}
    # the index's Statement carries the same fields at the same places
    predicate = index_statement("validated", "validated")["predicate"]
    assert (predicate["verdict"], predicate["gpu"]["visible"]) == ("validated", True)


def test_the_cluster_policy_is_not_written_for_checked_images() -> None:
    with pytest.raises(InputError, match="--policy kyverno cannot admit checked images") as refused:
        cluster_policy([REPOSITORY], PUB, attest.CHECKED_PREDICATE)
    assert "--policy sigstore" in str(refused.value) and "kyverno/kyverno#17109" in str(refused.value)
