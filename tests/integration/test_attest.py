"""Signed attestations and SBOMs on the real registry (Debian's docker-registry 2.8, no referrers
API): `build --push`, `verify --pull`, a recorded GPU verification, `publish --signing-key`; then
an independent verifier (securesystemslib's DSSE, in-toto-attestation's Statement model, plain
HTTP reads of the registry) checks what was attached, and `attest verify` accepts the promoted
digest and refuses each tampered case in one line."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from testbed.matrix_projects import NO_RUN_TEMPLATE, Project, write_cells
from testbed.registry_server import LocalRegistry
from testbed.waivers import critical_waivers

VALIDATED = "https://github.com/imagekit/attestations/gpu-validated/v1"
CHECKED = "https://github.com/imagekit/attestations/checked-without-gpu/v1"
SBOM = "https://cyclonedx.org/bom"
DSSE = "application/vnd.dsse.envelope.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"

# The stand-in check prints a passing document with an inventory, as the probe does in a real image.
DOCUMENT = {
    "gpu_visible": False,
    "checks": [{"name": "stand-in", "status": "pass", "required": True}],
    "inventory": {
        "python": "3.11.2",
        "os_release": {"ID": "debian", "VERSION_ID": "12", "VERSION_CODENAME": "bookworm"},
        "packages": [
            {"name": "torch", "version": "2.5.1+cu124"},
            {"name": "nvidia-cudnn-cu12", "version": "9.1.0.70"},
            {"name": "nvidia-nccl-cu12", "version": "2.21.5"},
        ],
        "os_packages": [{"name": "libc6", "version": "2.36-9", "arch": "amd64"}],
        "cuda_libraries": {"cudnn": "9.1.0", "nccl": "2.21.5"},
        "loaded_libraries": ["/venv/lib/nvidia/cudnn/lib/libcudnn.so.9"],
        "probe": {"schema": 1, "sha256": None},
    },
}
TEMPLATE = """\
FROM {{ cell.base_image }}
{% for name, value in cell.env %}
ENV {{ name }}={{ value }}
{% endfor %}
RUN echo '__DOCUMENT__' > /check.json \\
 && { echo '#!/bin/sh'; echo 'cat /check.json'; } > /bin/python3 && chmod 755 /bin/python3
LABEL {% for name, value in recipe.labels %}{{ name }}="{{ value }}"{{ " " if not loop.last }}{% endfor %}

""".replace("__DOCUMENT__", json.dumps(DOCUMENT))

# What a GPU runner's verification adds (the probe's H200 figures, recorded).
GPU_CHECKS = [
    {
        "name": "nvidia_smi",
        "status": "pass",
        "required": True,
        "actual": json.dumps({"driver": "560.35.03", "gpus": [{"name": "NVIDIA H200"}]}),
        "detail": json.dumps({"header": {"cuda": "12.6"}}),
    },
    {"name": "cuda_available", "status": "pass", "required": True},
    {"name": "gemm_gpu", "status": "pass", "required": True},
    {"name": "gemm_perf", "status": "pass", "required": False, "actual": "790.1"},
]


@pytest.fixture(scope="module")
def registry() -> Iterator[LocalRegistry]:
    server = LocalRegistry().start()
    yield server
    server.remove()


def keypair(root: Path, name: str) -> tuple[Path, Path, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (root / f"{name}.pem").write_bytes(pem)
    (root / f"{name}.pub").write_bytes(public)
    return root / f"{name}.pem", root / f"{name}.pub", pem


def record_gpu_verification(project: Project, cell: str) -> None:
    """Turn the cell's real (no-GPU) verification into the record a GPU runner writes."""
    path = project.root / ".imagekit" / "report.json"
    report = json.loads(path.read_text())
    for entry in report["cells"]:
        if entry["id"] == cell:
            verification = entry["verification"]
            verification.update(
                gpus="all",
                gpu_requested=True,
                gpu_visible=True,
                verdict="validated",
                checks=[*verification["checks"], *GPU_CHECKS],
                metrics={"gemm_perf.tflops": 790.1, "gemm_perf.device": "NVIDIA H200"},
                runner="gpu-runner-h200",
            )
    path.write_text(json.dumps(report))


def get(registry: str, path: str, accept: str = MANIFEST) -> requests.Response:
    response = requests.get(f"http://{registry}/v2/{path}", headers={"Accept": accept}, timeout=10)
    response.raise_for_status()
    return response


def independent_check(registry: str, repository: str, digest: str, public_pem: bytes) -> dict[str, dict]:
    """Predicate type -> Statement, for every referrer the referrers tag lists, each envelope's
    signature verified by securesystemslib and its Statement parsed by in-toto-attestation."""
    public = serialization.load_pem_public_key(public_pem)
    keyid = hashlib.sha256(
        public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    ).hexdigest()
    key = SSlibKey.from_crypto(public, keyid=keyid, scheme="ecdsa-sha2-nistp256")
    index = get(registry, f"{repository}/manifests/{digest.replace(':', '-')}", INDEX).json()
    found: dict[str, dict] = {}
    for descriptor in index["manifests"]:
        assert descriptor["artifactType"] == DSSE
        artifact = get(registry, f"{repository}/manifests/{descriptor['digest']}").json()
        assert artifact["subject"]["digest"] == digest
        assert artifact["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
        blob = get(registry, f"{repository}/blobs/{artifact['layers'][0]['digest']}").content
        envelope = Envelope.from_dict(json.loads(blob))
        assert keyid in envelope.verify([key], 1)
        parsed = Statement.copy_from_pb(json_format.Parse(envelope.payload, statement_pb2.Statement()))
        parsed.validate()
        statement = json.loads(envelope.payload)
        assert statement["subject"][0]["digest"]["sha256"] == digest.removeprefix("sha256:")
        found[statement["predicateType"]] = statement
    return found


def test_published_digests_carry_signed_attestations_and_sboms(
    project: Project, registry: LocalRegistry, tmp_path: Path
) -> None:
    (project.root / "templates" / "Dockerfile.j2").write_text(TEMPLATE)
    write_cells(project, ("2.1", "2.2"), publish={"policy": "checked", "signing": "required"})
    built = project.build("--push", "--registry", registry.host)
    assert built.returncode == 0, built.stderr
    verified = project.run("verify", "--matrix", "matrix.yaml", "--pull", "--gpus", "none")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    cells = sorted(project.report())
    gpu_cell, cpu_cell = cells  # torch 2.1 and 2.2
    record_gpu_verification(project, gpu_cell)
    keys = tmp_path / "keys"  # beside the project (tmp_path), not among the files imagekit wrote
    keys.mkdir()
    _, public, pem = keypair(keys, "signer")
    _, wrong_public, _ = keypair(keys, "other")

    # A matrix that requires signing refuses to publish without a key, before anything moves.
    unsigned = project.run("publish", "--matrix", "matrix.yaml", "--registry", registry.host)
    assert unsigned.returncode == 2 and "publish.signing is required" in unsigned.stderr
    assert [t for t in registry.tags(project.repository) if not t.startswith("staging-")] == []

    done = project.run(
        "publish", "--matrix", "matrix.yaml", "--registry", registry.host,
        env={"IMAGEKIT_SIGNING_KEY": pem.decode()},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("signed and attached") == 2, done.stderr
    lock = json.loads((project.root / "images.lock.json").read_text())["images"]

    # No private key material in any output or any file imagekit wrote.
    secret = b"".join(pem.splitlines()[1:-1])
    for text in (done.stdout, done.stderr, verified.stdout, verified.stderr):
        assert secret.decode()[:40] not in text.replace("\n", "")
    for path in project.root.rglob("*"):
        if path.is_file() and keys not in path.parents:
            assert secret[:40] not in path.read_bytes().replace(b"\n", b""), path

    for cell, predicate in ((gpu_cell, VALIDATED), (cpu_cell, CHECKED)):
        entry = lock[cell]
        repository = str(entry["repository"]).split("/", 1)[1]
        digest = str(entry["digest"])
        # The referrers tag lists them (the registry has no referrers API)
        tags = registry.tags(repository)
        assert digest.replace(":", "-") in tags and digest.replace(":", "-") + ".att" in tags
        found = independent_check(registry.host, repository, digest, public.read_bytes())
        assert set(found) == {predicate, SBOM}
        attestation = found[predicate]["predicate"]
        assert attestation["cell"]["input_digest"] == entry["input_digest"]
        bom = found[SBOM]["predicate"]
        assert bom["bomFormat"] == "CycloneDX"
        names = {c["name"] for c in bom["components"]}
        assert {"torch", "nvidia-cudnn-cu12", "libc6", "cudnn", "nccl"} <= names
        assert bom["metadata"]["component"]["version"] == digest
        # cosign's layout: the .att manifest's layers are the same envelopes
        att = get(registry.host, f"{repository}/manifests/{digest.replace(':', '-')}.att").json()
        assert {layer["annotations"]["predicateType"] for layer in att["layers"]} == {predicate, SBOM}

    gpu = lock[gpu_cell]
    validated = found_attestation = independent_check(
        registry.host, str(gpu["repository"]).split("/", 1)[1], str(gpu["digest"]), public.read_bytes()
    )[VALIDATED]["predicate"]
    assert found_attestation["gpu"]["products"] == ["NVIDIA H200"] and validated["verdict"] == "validated"
    assert validated["run"]["runner"] == "gpu-runner-h200"

    gpu_ref = f"{gpu['repository']}@{gpu['digest']}"
    cpu_ref = f"{lock[cpu_cell]['repository']}@{lock[cpu_cell]['digest']}"
    ok = project.run("attest", "verify", gpu_ref, "--key", str(public), "--gpu", "H200", "--max-age", "1d")
    assert ok.returncode == 0, ok.stderr
    assert "ok: verification attestation (gpu-validated)" in ok.stdout

    def refused(*args: str) -> str:
        result = project.run("attest", "verify", *args)
        assert result.returncode == 1, result.stdout + result.stderr
        lines = [line for line in result.stderr.splitlines() if line.startswith("imagekit: refused")]
        assert lines and len(lines) == len(result.stderr.strip().splitlines()), result.stderr
        return result.stderr

    assert "no signature verifies" in refused(gpu_ref, "--key", str(wrong_public))
    assert "only checked without a GPU" in refused(cpu_ref, "--key", str(public))
    checked_ok = project.run("attest", "verify", cpu_ref, "--key", str(public), "--policy", "checked")
    assert checked_ok.returncode == 0, checked_ok.stderr
    assert "not a B200" in refused(gpu_ref, "--key", str(public), "--gpu", "B200")

    # `images` and `k8s` hand out a digest only with a valid attestation.
    gpu_only = ("--only", gpu_cell, "--require-attestation", str(public))
    listed = project.run("images", "--format", "env", *gpu_only)
    assert listed.returncode == 0 and str(gpu["digest"]) in listed.stdout, listed.stderr
    cpu_listed = project.run("images", "--only", cpu_cell, "--require-attestation", str(public))
    assert cpu_listed.returncode == 1 and cpu_listed.stdout == ""
    assert f"imagekit: refused: {cpu_cell}:" in cpu_listed.stderr
    out = tmp_path / "k8s"
    kube = project.run(
        "k8s", "--matrix", "matrix.yaml", *gpu_only, "--out", str(out), "--policy", "kyverno",
        "--key", str(public),
    )  # fmt: skip
    assert kube.returncode == 0, kube.stderr
    policy = yaml.safe_load((out / "imagekit-attestation-policy.kyverno.yaml").read_text())
    assert policy["kind"] == "ClusterPolicy" and policy["apiVersion"] == "kyverno.io/v1"
    (verify,) = policy["spec"]["rules"][0]["verifyImages"]
    assert verify["imageReferences"] == [f"{gpu['repository']}{s}" for s in (":*", "@*")]
    (attestation,) = verify["attestations"]
    assert attestation["type"] == VALIDATED
    keys = attestation["attestors"][0]["entries"][0]["keys"]
    assert keys["publicKeys"].strip() == public.read_text().strip() and keys["rekor"] == {"ignoreTlog": True}
    no_cpu = project.run(
        "k8s", "--matrix", "matrix.yaml", "--only", cpu_cell, "--require-attestation", str(public),
        "--out", str(tmp_path / "k8s-cpu"),
    )  # fmt: skip
    assert no_cpu.returncode == 1 and not (tmp_path / "k8s-cpu").exists()


def test_tampered_and_misdirected_attestations_are_refused(
    project: Project, registry: LocalRegistry, tmp_path: Path
) -> None:
    """A digest whose only attestations are a tampered one and one about another digest."""
    from imagekit.attest import statements as attest
    from imagekit.attest.attach import attach_envelopes
    from imagekit.registry.client import Registry

    private, public, _ = keypair(tmp_path, "signer")
    key = attest.load_signing_key(private, {})
    assert key is not None
    client = Registry(registry.host)
    repository = f"{project.repository}-tamper"
    config = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
    config_digest = client.put_blob(repository, config)
    from imagekit.registry.manifest import OCI_MANIFEST, Manifest

    body = json.dumps(
        {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": [],
         "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                    "size": len(config)}}
    ).encode()  # fmt: skip
    image = Manifest("sha256:" + hashlib.sha256(body).hexdigest(), OCI_MANIFEST, body)
    client.put_manifest(repository, "v1", image)
    other = "sha256:" + "ee" * 32
    predicate = {"verdict": "validated", "gpu": {"visible": True, "products": ["NVIDIA H200"]}}
    # One attestation about another digest, attached to this one.
    attach_envelopes(
        client, repository, image, [attest.statement(repository, other, VALIDATED, predicate)], key
    )
    # One tampered after signing: the signed payload said checked, the attached one says validated.
    honest = attest.sign_statement(
        attest.statement(repository, image.digest, CHECKED, {**predicate, "verdict": "checked"}), key
    )
    envelope = json.loads(honest)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicateType"] = VALIDATED
    statement["predicate"]["verdict"] = "validated"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    tampered = json.dumps(envelope).encode()
    from imagekit.registry.manifest import EMPTY_BLOB, artifact_manifest

    client.put_blob(repository, EMPTY_BLOB)
    blob = client.put_blob(repository, tampered)
    client.attach(repository, artifact_manifest(DSSE, (DSSE, blob, len(tampered)), image, {}), image.digest)
    client.close()

    result = project.run(
        "attest", "verify", f"{registry.host}/{repository}@{image.digest}", "--key", str(public)
    )
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, lines
    assert any("no signature verifies" in line for line in lines)
    assert any(re.search(r"it is about sha256:eeee\S*, not sha256:", line) for line in lines)


# -- a group of platforms: one index, its own attestation and each platform's -----------------------------

MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}
PRODUCTS = {"amd64": "NVIDIA H200", "arm64": "NVIDIA GH200 480GB"}


def record_platform_verifications(project: Project) -> dict[str, str]:
    """Each cell's verification as a GPU runner of its own platform writes it (an x86 H200 node, a
    Grace GH200 node: native, never emulated), on the digest `build --push` staged; cell -> arch."""
    from datetime import datetime, timezone

    path = project.root / ".imagekit" / "report.json"
    report = json.loads(path.read_text())
    arches: dict[str, str] = {}
    for entry in report["cells"]:
        arch = "arm64" if entry["id"].endswith("-arm64") else "amd64"
        arches[entry["id"]] = arch
        smi = {
            **GPU_CHECKS[0],
            "actual": json.dumps({"driver": "570.86", "gpus": [{"name": PRODUCTS[arch]}]}),
        }
        entry["verification"] = {
            "target": entry["id"],
            "image": entry["image_id"],
            "gpus": "all",
            "verdict": "validated",
            "gpu_requested": True,
            "gpu_visible": True,
            "checks": [{"name": "stand-in", "status": "pass", "required": True}, smi, *GPU_CHECKS[1:]],
            "duration_s": 40.0,
            "metrics": {"gemm_perf.tflops": 790.1},
            "finished_at": datetime.now(tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "image_digest": entry["staged"]["digest"],
            "input_digest": entry["input_digest"],  # a verification is bound to the cell's inputs
            "runner": f"gpu-runner-{arch}",
            "platform": {"machine": MACHINES[arch], "host_machine": MACHINES[arch], "emulated": False},
        }
    path.write_text(json.dumps(report))
    return arches


def test_an_index_carries_its_own_attestation_and_each_platforms(
    project: Project,
    registry: LocalRegistry,
    tiny_bases: str,
    tmp_path: Path,
) -> None:
    (project.root / "templates" / "Dockerfile.j2").write_text(NO_RUN_TEMPLATE)
    document = {
        "version": 1,
        "templates": "templates",
        "publish": {
            "registry": registry.host,
            "repository": project.repository,
            "signing": "required",
            "tags": {"readable": "{base}-{torch}", "immutable": ["{readable}-{digest}"]},
        },
        "axes": {"torch": ["2.1"], "platform": ["linux/amd64", "linux/arm64"]},
        "advisories": critical_waivers(["2.1"]),
        "bases": {"tiny": {"image": tiny_bases, "os": "debian12", "python": "3.11", "cuda": False}},
    }
    (project.root / "matrix.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    built = project.build("--push")
    assert built.returncode == 0, built.stderr
    arches = record_platform_verifications(project)
    keys = tmp_path / "keys"
    keys.mkdir()
    _, public, pem = keypair(keys, "signer")
    _, wrong_public, _ = keypair(keys, "other")

    done = project.run("publish", "--matrix", "matrix.yaml", env={"IMAGEKIT_SIGNING_KEY": pem.decode()})
    assert done.returncode == 0, done.stderr
    assert "the index of 2 platforms: verification attestation (gpu-validated)" in done.stderr, done.stderr
    secret = b"".join(pem.splitlines()[1:-1])
    assert secret.decode()[:40] not in (done.stdout + done.stderr).replace("\n", "")
    for path in project.root.rglob("*"):
        if path.is_file() and keys not in path.parents:
            assert secret[:40] not in path.read_bytes().replace(b"\n", b""), path
    lock = json.loads((project.root / "images.lock.json").read_text())
    (index,) = lock["indexes"].values()
    repository = project.repository

    # The index digest's referrers tag lists its signed attestation (the independent verifier),
    # whose platforms are the index's, each with the attestations of its own digest.
    found = independent_check(registry.host, repository, index["digest"], public.read_bytes())
    predicate = found[VALIDATED]["predicate"]
    assert predicate["verdict"] == "validated" and predicate["gpu"]["visible"] is True
    listed = {p["platform"]: p for p in predicate["platforms"]}
    assert {name: p["digest"] for name, p in listed.items()} == {
        name: p["digest"] for name, p in index["platforms"].items()
    }
    for name, platform in index["platforms"].items():
        own = independent_check(registry.host, repository, platform["digest"], public.read_bytes())
        assert own[VALIDATED]["predicate"]["gpu"]["products"] == [PRODUCTS[arches[platform["cell"]]]]
        named = {a["artifact"] for a in listed[name]["attestations"] if a["predicateType"] == VALIDATED}
        artifacts = get(
            registry.host, f"{repository}/manifests/{platform['digest'].replace(':', '-')}", INDEX
        )
        assert named <= {d["digest"] for d in artifacts.json()["manifests"]}
    att = get(registry.host, f"{repository}/manifests/{index['digest'].replace(':', '-')}.att").json()
    assert [layer["annotations"]["predicateType"] for layer in att["layers"]] == [VALIDATED]

    reference = f"{registry.host}/{repository}@{index['digest']}"
    ok = project.run("attest", "verify", reference, "--key", str(public), "--max-age", "1d")
    assert ok.returncode == 0, ok.stderr
    assert [line.split()[1] for line in ok.stdout.splitlines()] == ["index", "linux/amd64", "linux/arm64"]
    wrong = project.run("attest", "verify", reference, "--key", str(wrong_public))
    assert wrong.returncode == 1
    refused = wrong.stderr.strip().splitlines()
    assert len(refused) == 3 and all(line.startswith("imagekit: refused: ") for line in refused), refused
    assert all("no signature verifies" in line for line in refused)
    # policy per platform: the index's GPUs include a GH200, the x86 image's do not
    on_gh200 = project.run("attest", "verify", reference, "--key", str(public), "--gpu", "GH200")
    (line,) = on_gh200.stderr.strip().splitlines()
    assert on_gh200.returncode == 1 and "linux/amd64" in line and "not a GH200" in line, line

    # k8s: the Jobs pull the index digest, which carries the proof Kyverno and policy-controller ask for
    out = tmp_path / "k8s"
    kube = project.run(
        "k8s", "--matrix", "matrix.yaml", "--out", str(out), "--gpus", "0", "--require-attestation",
        str(public), "--policy", "kyverno", "--policy", "sigstore", "--key", str(public),
    )  # fmt: skip
    assert kube.returncode == 0, kube.stderr
    jobs = [m for m in (yaml.safe_load(p.read_text()) for p in out.glob("*.yaml")) if m["kind"] == "Job"]
    assert len(jobs) == 2
    assert {j["spec"]["template"]["spec"]["containers"][0]["image"] for j in jobs} == {reference}
    sigstore = yaml.safe_load((out / "imagekit-attestation-policy.sigstore.yaml").read_text())
    (authority,) = sigstore["spec"]["authorities"]
    assert authority["attestations"][0]["predicateType"] == VALIDATED == found[VALIDATED]["predicateType"]
    assert authority["key"]["data"].strip() == public.read_text().strip()
    refused_k8s = project.run(
        "k8s", "--matrix", "matrix.yaml", "--out", str(tmp_path / "k8s-wrong"), "--gpus", "0",
        "--require-attestation", str(wrong_public),
    )  # fmt: skip
    assert refused_k8s.returncode == 1 and not (tmp_path / "k8s-wrong").exists()
    assert f"imagekit: refused: {index['group']}: {reference}: index " in refused_k8s.stderr
