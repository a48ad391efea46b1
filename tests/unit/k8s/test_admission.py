"""The admission policies `imagekit k8s --policy` writes: here the Sigstore policy-controller
ClusterImagePolicy and the CLI (the Kyverno ones: test_kyverno.py, their CRD schemas:
test_kyverno_crd_schemas.py). The tests are structural (the YAML parses, it names the key and the predicate
type, its image patterns match the published repository only), and the CUE policy-controller
evaluates is held, line by line, to real Statements: an image's and an index's verification
attestation pass it, a checked or an edited one does not."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.attest import statements as attest
from imagekit.attest.index import PlatformProof, index_predicate
from imagekit.k8s.admission import SIGSTORE_POLICY_FILE, cue_policy, render_policy, sigstore_policy
from imagekit.k8s.kyverno import KYVERNO_IVPOL_POLICY_FILE, KYVERNO_POLICY_FILE
from imagekit.plan.matrix import load_plan
from imagekit.report.lockfile import merge_lock
from tests.conftest import REPO, run_cli
from tests.unit.attest_samples import SUBJECT, gpu_verification, private_pem, public_pem_of
from tests.unit.report_samples import lock_entry

PEM = public_pem_of(private_pem()).decode()
REPOSITORY = "ghcr.io/acme/pytorch"


def cue_holds(cue: str, statement: dict[str, Any]) -> bool:
    """Whether ``statement`` unifies with a CUE policy of the shape ``cue_policy`` writes
    (``predicateType: "..."`` and ``predicate: { a: b: v1 | v2 ... }``), read from its text: a
    stand-in for CUE itself (not installed here) over exactly the constructs imagekit writes."""
    lines = cue.strip().splitlines()
    kind = re.fullmatch(r'predicateType: (".*")', lines[0])
    assert kind and lines[1] == "predicate: {" and lines[-1] == "}", cue
    if statement.get("predicateType") != json.loads(kind.group(1)):
        return False
    for line in lines[2:-1]:
        *path, values = line.strip().split(": ")
        allowed = [json.loads(v) for v in values.split(" | ")]
        found: Any = statement.get("predicate")
        for part in path:
            found = found.get(part) if isinstance(found, dict) else None
        if not any(found == v and type(found) is type(v) for v in allowed):
            return False
    return True


def image_statement(verdict: str = "validated") -> dict[str, Any]:
    made = attest.verification_predicate(SUBJECT, gpu_verification(verdict))
    assert made is not None
    return attest.statement(REPOSITORY, SUBJECT.digest, *made)


def index_statement(*verdicts: str) -> dict[str, Any]:
    proofs = [
        PlatformProof(
            f"linux/{arch}", f"c{i}", "sha256:" + str(i) * 64, gpu_verification(v), ("NVIDIA H200",)
        )
        for i, (arch, v) in enumerate(zip(("amd64", "arm64"), verdicts, strict=False))
    ]
    made = index_predicate("g", "0" * 64, proofs, environ={})
    assert made is not None
    return attest.statement(REPOSITORY, "sha256:" + "9" * 64, *made)


def admitted(policy: dict[str, Any], statement: dict[str, Any]) -> bool:
    """policy-controller's decision for an image whose one attestation is ``statement`` (signed
    by the key): some authority's every attestation has a Statement of its type passing its CUE."""
    return any(
        all(
            statement["predicateType"] == a["predicateType"] and cue_holds(a["policy"]["data"], statement)
            for a in authority["attestations"]
        )
        for authority in policy["spec"]["authorities"]
    )


def test_the_sigstore_policy_names_the_key_and_the_predicate_type() -> None:
    text = render_policy(sigstore_policy([REPOSITORY], PEM, attest.VALIDATED_PREDICATE))
    policy = yaml.safe_load(text)
    assert policy["apiVersion"] == "policy.sigstore.dev/v1beta1" and policy["kind"] == "ClusterImagePolicy"
    assert policy["spec"]["mode"] == "enforce"
    assert policy["spec"]["images"] == [{"glob": f"{REPOSITORY}:*"}, {"glob": f"{REPOSITORY}@*"}]
    (authority,) = policy["spec"]["authorities"]
    assert authority["key"] == {"data": PEM, "hashAlgorithm": "sha256"}
    assert "ctlog" not in authority  # key-signed, no transparency log entry to look for
    (attestation,) = authority["attestations"]
    assert attestation["predicateType"] == attest.VALIDATED_PREDICATE
    assert attestation["policy"]["type"] == "cue"
    assert attestation["policy"]["data"] == cue_policy(attest.VALIDATED_PREDICATE)
    # the PEM and the CUE are literal blocks, as typed
    assert "data: |\n" in text and "-----BEGIN PUBLIC KEY-----\n" in text


def test_the_cue_admits_image_and_index_attestations_that_are_validated_and_nothing_else() -> None:
    policy = sigstore_policy([REPOSITORY], PEM, attest.VALIDATED_PREDICATE)
    assert admitted(policy, image_statement())
    assert admitted(policy, index_statement("validated", "validated"))
    assert not admitted(policy, image_statement("checked"))
    assert not admitted(policy, index_statement("validated", "checked"))
    edited = image_statement()
    edited["predicate"]["gpu"]["visible"] = "true"  # a string is not the boolean
    assert not admitted(policy, edited)
    other_type = {**image_statement(), "predicateType": "https://example.com/gpu-validated/v1"}
    assert not admitted(policy, other_type)


def test_a_checked_policy_admits_checked_and_validated_digests() -> None:
    policy = sigstore_policy([REPOSITORY], PEM, attest.CHECKED_PREDICATE)
    kinds = [a["attestations"][0]["predicateType"] for a in policy["spec"]["authorities"]]
    assert kinds == [attest.VALIDATED_PREDICATE, attest.CHECKED_PREDICATE]
    for statement in (image_statement(), image_statement("checked"), index_statement("validated", "checked")):
        assert admitted(policy, statement), statement["predicateType"]
    failed = image_statement("checked")
    failed["predicate"]["verdict"] = "failed"
    assert not admitted(policy, failed)


@pytest.mark.parametrize(
    ("repository", "globs"),
    [
        ("127.0.0.1:5000/acme/pytorch", ["127.0.0.1:5000/acme/pytorch:*", "127.0.0.1:5000/acme/pytorch@*"]),
        ("docker.io/acme/pytorch", ["index.docker.io/acme/pytorch:*", "index.docker.io/acme/pytorch@*"]),
    ],
)
def test_the_globs_match_the_repository_by_its_resolved_name(repository: str, globs: list[str]) -> None:
    policy = sigstore_policy([repository], PEM, attest.VALIDATED_PREDICATE)
    assert [g["glob"] for g in policy["spec"]["images"]] == globs
    # policy-controller's glob: `*` is any run of characters but `/`, and the glob matches whole
    pattern = re.compile("|".join(re.escape(g).replace(r"\*", "[^/]*") for g in globs))
    name = globs[0].removesuffix(":*")
    assert pattern.fullmatch(f"{name}:2.11.0-cuda13.0") and pattern.fullmatch(f"{name}@sha256:{'a' * 64}")
    assert not pattern.fullmatch(f"{name}-staging:x") and not pattern.fullmatch(f"{name}/other:x")


def test_k8s_writes_every_policy_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    cell = load_plan(REPO / "matrix.yaml").cells[0].id
    lock = tmp_path / "images.lock.json"
    merge_lock(lock, {cell: replace(lock_entry(cell), repository="ghcr.io/imagekit/pytorch")})
    (tmp_path / "k.pub").write_text(PEM)
    base = ("k8s", "-m", str(REPO / "matrix.yaml"), "--only", cell, "--lock", str(lock))
    out = tmp_path / "k8s"
    key = ("--key", str(tmp_path / "k.pub"))
    policies = ("--policy", "kyverno", "--policy", "kyverno-ivpol", "--policy", "sigstore", *key)
    done = run_cli(*base, "--out", str(out), *policies)
    assert done.exit_code == 0, done.stderr
    sigstore = yaml.safe_load((out / SIGSTORE_POLICY_FILE).read_text())
    assert sigstore["spec"]["authorities"][0]["key"]["data"] == PEM
    assert sigstore["spec"]["images"][0]["glob"] == "ghcr.io/imagekit/pytorch:*"
    kyverno = yaml.safe_load((out / KYVERNO_POLICY_FILE).read_text())
    assert (kyverno["apiVersion"], kyverno["kind"]) == ("kyverno.io/v1", "ClusterPolicy")
    keys = kyverno["spec"]["rules"][0]["verifyImages"][0]["attestations"][0]["attestors"][0]["entries"][0][
        "keys"
    ]
    assert keys["publicKeys"] == PEM.strip()
    ivpol = yaml.safe_load((out / KYVERNO_IVPOL_POLICY_FILE).read_text())
    assert (ivpol["apiVersion"], ivpol["kind"]) == ("policies.kyverno.io/v1", "ImageValidatingPolicy")
    assert ivpol["spec"]["attestors"][0]["cosign"]["key"]["data"] == PEM
    only_new = run_cli(*base, "--out", str(tmp_path / "k8s-1"), "--policy", "kyverno-legacy", *key)
    assert only_new.exit_code == 0, only_new.stderr  # the former name: the same ClusterPolicy, one file
    assert [p.name for p in (tmp_path / "k8s-1").glob("imagekit-attestation-policy.*")] == [
        KYVERNO_POLICY_FILE
    ]
    unknown = run_cli(*base, "--out", str(tmp_path / "k8s-2"), "--policy", "gatekeeper", *key)
    assert unknown.exit_code == 2 and not (tmp_path / "k8s-2").exists()
    assert "--policy 'gatekeeper': use kyverno, kyverno-ivpol, kyverno-legacy or sigstore" in unknown.stderr
    keyless = run_cli(*base, "--out", str(tmp_path / "k8s-3"), "--policy", "sigstore")
    assert keyless.exit_code == 2 and "--policy sigstore needs --key PUB" in keyless.stderr


@pytest.mark.parametrize("name", ["kyverno", "kyverno-legacy"])
def test_the_kyverno_cluster_policy_is_refused_for_checked_images(tmp_path: Path, name: str) -> None:
    """A ClusterPolicy cannot admit either attestation type: one line, exit 2, nothing written."""
    cell = load_plan(REPO / "matrix.yaml").cells[0].id
    lock = tmp_path / "images.lock.json"
    merge_lock(lock, {cell: replace(lock_entry(cell), repository="ghcr.io/imagekit/pytorch")})
    (tmp_path / "k.pub").write_text(PEM)
    base = ("k8s", "-m", str(REPO / "matrix.yaml"), "--only", cell, "--lock", str(lock))
    out = tmp_path / "k8s"
    checked = ("--attestation-policy", "checked", "--key", str(tmp_path / "k.pub"))
    refused = run_cli(*base, "--out", str(out), "--policy", "sigstore", "--policy", name, *checked)
    assert refused.exit_code == 2 and not out.exists()
    (line,) = refused.stderr.strip().splitlines()
    assert f"--policy {name} cannot admit checked images" in line and "--policy sigstore" in line
    admitted = run_cli(
        *base, "--out", str(out), "--policy", "kyverno-ivpol", "--policy", "sigstore", *checked
    )
    assert admitted.exit_code == 0, admitted.stderr
    bad = run_cli(*base, "--out", str(tmp_path / "k8s-2"), "--policy", "kyverno", "--attestation-policy",
                  "gpu", "--key", str(tmp_path / "k.pub"))  # fmt: skip
    assert bad.exit_code == 2 and "--attestation-policy 'gpu': use validated or checked" in bad.stderr
    assert not (tmp_path / "k8s-2").exists()
