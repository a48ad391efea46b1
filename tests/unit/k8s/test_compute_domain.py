"""`imagekit k8s --compute-domain N`: a ComputeDomain, an Indexed Job of N pods claiming its channel,
and a headless Service, for the shipped matrix's cells that run on GB200/GB300 racks.

The ComputeDomain is checked with check-jsonschema against the CRD schemas NVIDIA's DRA driver
publishes (tests/fixtures/crds/dra-driver-nvidia-gpu/NOTES.md says where from), closed as
`kubectl apply`'s strict field validation closes them; the Job and the Service with
kubernetes-validate's strict schemas of Kubernetes 1.34 to 1.37."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from imagekit.core import naming
from imagekit.core.errors import InputError
from imagekit.core.limits import MAX_COMPUTE_DOMAIN_NODES
from imagekit.k8s.compute_domain import (
    CHANNEL_CLAIM,
    CLIQUE_LABEL,
    INDEX_FIELD,
    ComputeDomainOptions,
    job_name,
    rack_families,
    render_domains,
)
from imagekit.k8s.options import JobOptions
from imagekit.plan.matrix import load_plan
from imagekit.report.lockfile import Lock, LockEntry, merge_lock
from tests.conftest import REPO, run_cli
from tests.unit.report_samples import lock_entry

CRDS = sorted((REPO / "tests/fixtures/crds/dra-driver-nvidia-gpu").glob("computedomains-*.yaml"))
KUBERNETES = ("1.34.0", "1.35.0", "1.36.0", "1.37.0")
FIT = "cuda-ubuntu24.04-torch2.15.0-cuda13.2-py3.12-devel-arm64"  # cu132 aarch64: sm_100
OLD_ARM = "cuda-ubuntu22.04-torch2.14.1-cuda12.6-py3.10-devel-arm64"  # cu126 aarch64: sm_80/sm_90


def shipped_lock() -> Lock:
    """A lock entry for every cell of the shipped matrix, with its own platform and versions."""
    plan = load_plan(REPO / "matrix.yaml")
    repository = f"{plan.matrix.publish.registry}/{plan.matrix.publish.repository}"
    entries: dict[str, LockEntry] = {}
    for n, c in enumerate(plan.cells, start=1):
        entry = lock_entry(c.id, digest=f"sha256:{n:064x}")
        expect = {**entry.expect, "torch": c.torch, "cuda": c.cuda}
        entries[c.id] = replace(entry, repository=repository, platform=c.platform, expect=expect)
    return Lock(entries)


def documents(files: dict[str, str]) -> list[dict[str, Any]]:
    return [d for _, text in sorted(files.items()) for d in yaml.safe_load_all(text)]


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every object that lists its properties closed to others: the API server's
    strict field validation (kubectl's default) refuses an unknown field a plain schema would pass."""
    out = dict(schema)
    if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["properties"] = {k: closed(v) for k, v in out["properties"].items()}
        out.setdefault("additionalProperties", False)
    if "items" in out:
        out["items"] = closed(out["items"])
    return out


def check_jsonschema(crd: Path, documents: list[dict[str, Any]], tmp_path: Path) -> tuple[int, str]:
    """check-jsonschema's exit status and output for ``documents`` (files doc0.json, ...)."""
    (version,) = yaml.safe_load(crd.read_text())["spec"]["versions"]
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(closed(version["schema"]["openAPIV3Schema"])))
    instances = [tmp_path / f"doc{n}.json" for n in range(len(documents))]
    for path, document in zip(instances, documents, strict=True):
        path.write_text(json.dumps(document))
    done = subprocess.run(  # a fixed argument list
        [sys.executable, "-m", "check_jsonschema", "--schemafile", str(schema), *map(str, instances)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_only_grace_blackwell_cells_get_a_domain_the_rest_are_said() -> None:
    lock = shipped_lock()
    rendered = render_domains(lock, JobOptions(gpus=4), ComputeDomainOptions(4))
    made = {
        d["metadata"]["annotations"][naming.annotation("cell")]
        for d in documents(rendered.files)
        if d["kind"] == "Job"
    }
    assert FIT in made and OLD_ARM not in made
    assert made == {c for c, e in lock.images.items() if rack_families(e)}
    assert all(lock.images[c].platform == "linux/arm64" for c in made)
    assert len(made) + len(rendered.left_out) == len(lock.images)
    said = "\n".join(rendered.left_out)
    assert f"{OLD_ARM}: its torch has no kernels for the racks' GPUs (GB200 10.0, GB300 10.3)" in said
    assert "its image is linux/amd64, the racks' Grace hosts are aarch64" in said


def test_the_domain_job_and_service_fit_together() -> None:
    lock = shipped_lock().only([FIT])
    (text,) = render_domains(lock, JobOptions(gpus=4, namespace="ml"), ComputeDomainOptions(4)).files.values()
    domain, service, job = yaml.safe_load_all(text)
    name = job_name(FIT)
    assert [domain["kind"], service["kind"], job["kind"]] == ["ComputeDomain", "Service", "Job"]
    assert domain["metadata"]["name"] == service["metadata"]["name"] == job["metadata"]["name"] == name
    assert domain["spec"] == {
        "numNodes": 4,
        "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}},
    }
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    pod = spec["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": CHANNEL_CLAIM, "resourceClaimTemplateName": f"{name}-channel"}]
    (container,) = pod["containers"]
    assert container["resources"]["claims"] == [{"name": CHANNEL_CLAIM}]
    resources = container["resources"]
    assert (
        resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == 4
    )  # as single-node Jobs
    # sized for the 4 GPUs the pod holds (not 0: the GPUs are attached apart from the container)
    assert resources["requests"] == {"cpu": "5", "memory": "12Gi", "nvidia.com/gpu": 4}
    assert resources["limits"]["memory"] == "44Gi"  # 12Gi and the 32Gi of /dev/shm it counts
    assert container["image"] == lock.images[FIT].reference  # by digest
    # the pods' names: <job>-<index>.<subdomain>, the Service selecting exactly them
    assert pod["subdomain"] == name and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["MASTER_ADDR"] == f"{name}-0.{name}" and env["MASTER_PORT"] == "29500"
    assert (env["NNODES"], env["NPROC_PER_NODE"]) == ("4", "4")
    assert env["NODE_RANK"] == {"fieldRef": {"fieldPath": INDEX_FIELD}}
    # a process a GPU: its launcher gives each its RANK and WORLD_SIZE, the pod neither
    assert "WORLD_SIZE" not in env and "RANK" not in env
    # Grace hosts in one NVLink clique, one pod a node, GPUs the wheel has kernels for
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms and all({"key": CLIQUE_LABEL, "operator": "Exists"} in t["matchExpressions"] for t in terms)
    assert any(e["key"] == "nvidia.com/gpu.compute.major" for t in terms for e in t["matchExpressions"])
    (together,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (apart,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert together["topologyKey"] == CLIQUE_LABEL and apart["topologyKey"] == "kubernetes.io/hostname"
    assert together["labelSelector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()


def test_a_long_cell_leaves_room_for_the_pod_index_in_the_hostname() -> None:
    names = {job_name("x" * 80), job_name("x" * 81)}
    assert len(names) == 2
    assert all(len(f"{n}-{MAX_COMPUTE_DOMAIN_NODES - 1}") <= 63 for n in names)


def test_a_dra_request_claims_the_gpus_beside_the_channel() -> None:
    """With --gpu-request dra each pod claims its GPUs from a template written beside the Job (the
    cell's selectors in it) instead of the device plugin's limit and feature discovery's affinity."""
    lock = shipped_lock().only([FIT])
    options = JobOptions(gpus=4, gpu_request="dra")
    (text,) = render_domains(lock, options, ComputeDomainOptions(2)).files.values()
    documents = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in documents] == ["ComputeDomain", "ResourceClaimTemplate", "Service", "Job"]
    template, job = documents[1], documents[-1]
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com" and request["exactly"]["count"] == 4
    assert request["exactly"]["selectors"]  # the cell's compute capability and driver floor
    pod = job["spec"]["template"]["spec"]
    claims = [c["name"] for c in pod["resourceClaims"]]
    assert claims[0] == CHANNEL_CLAIM and len(claims) == 2
    assert pod["resourceClaims"][1]["resourceClaimTemplateName"] == template["metadata"]["name"]
    container = pod["containers"][0]
    assert container["resources"]["claims"] == [{"name": c} for c in claims]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term == {"matchExpressions": [{"key": CLIQUE_LABEL, "operator": "Exists"}]}
    # the device plugin's Job, for contrast: a limit, and feature discovery's terms
    (plain,) = render_domains(lock, JobOptions(gpus=4), ComputeDomainOptions(2)).files.values()
    pod = list(yaml.safe_load_all(plain))[-1]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert (
        len(
            pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ][0]["matchExpressions"]
        )
        > 1
    )


@pytest.mark.parametrize("crd", CRDS, ids=[p.stem for p in CRDS])
def test_the_compute_domain_is_valid_for_the_drivers_crd(crd: Path, tmp_path: Path) -> None:
    assert len(CRDS) == 2
    rendered = render_domains(shipped_lock(), JobOptions(gpus=4, namespace="ml"), ComputeDomainOptions(18))
    domains = [d for d in documents(rendered.files) if d["kind"] == "ComputeDomain"]
    assert domains
    status, output = check_jsonschema(crd, domains, tmp_path)
    assert status == 0, output
    # the check can fail: a field the CRD lacks, a value it refuses
    typo = {**domains[0], "spec": {**domains[0]["spec"], "numnodes": 4}}
    mode = {
        **domains[0],
        "spec": {
            **domains[0]["spec"],
            "channel": {**domains[0]["spec"]["channel"], "allocationMode": "Some"},
        },
    }
    status, output = check_jsonschema(crd, [typo, mode], tmp_path)
    assert status == 1 and "doc0.json" in output and "doc1.json" in output, output


@pytest.mark.parametrize("version", KUBERNETES)
def test_the_job_and_service_are_strictly_valid(version: str) -> None:
    options = JobOptions(gpus=4, namespace="ml", cpu="16", memory="256Gi")
    rendered = render_domains(shipped_lock(), options, ComputeDomainOptions(4))
    checked = 0
    for document in documents(rendered.files):
        if document["kind"] in ("Job", "Service"):
            kubernetes_validate.validate(document, version, strict=True)
            checked += 1
    assert checked == 2 * len(rendered.files)


@pytest.mark.parametrize(
    ("options", "nodes", "message"),
    [
        (JobOptions(), 0, f"--compute-domain 0: give 1 to {MAX_COMPUTE_DOMAIN_NODES} nodes"),
        (
            JobOptions(),
            MAX_COMPUTE_DOMAIN_NODES + 1,
            f"--compute-domain 19: give 1 to {MAX_COMPUTE_DOMAIN_NODES}",
        ),
        (JobOptions(gpus=0), 2, "give --gpus 1 or more"),
        (JobOptions(gpu_resource="nvidia.com/mig-1g.10gb"), 2, "leave --gpu-resource out"),
    ],
)
def test_bad_options_are_refused(options: JobOptions, nodes: int, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        render_domains(shipped_lock(), options, ComputeDomainOptions(nodes))


def test_a_cell_that_cannot_run_on_a_rack_alone_is_refused_with_its_reason() -> None:
    with pytest.raises(InputError, match=re.escape(f"--compute-domain: {OLD_ARM}: its torch has no kernels")):
        render_domains(shipped_lock().only([OLD_ARM]), JobOptions(), ComputeDomainOptions(2))
    amd64 = [c for c, e in shipped_lock().images.items() if e.platform == "linux/amd64"]
    with pytest.raises(InputError, match=f"none of the {len(amd64)} selected cells runs on GB200/GB300"):
        render_domains(shipped_lock().only(amd64), JobOptions(), ComputeDomainOptions(2))


def _lock_file(tmp_path: Path) -> Path:
    lock = tmp_path / "images.lock.json"
    merge_lock(lock, shipped_lock().images)
    return lock


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--only", FIT, "--compute-domain", "0"], "--compute-domain 0: give 1 to 18 nodes"),
        (["--only", FIT, "--compute-domain", "19"], "--compute-domain 19: give 1 to 18 nodes"),
        (
            ["--only", OLD_ARM, "--compute-domain", "2"],
            f"--compute-domain: {OLD_ARM}: its torch has no kernels",
        ),
        (
            ["--only", "*-arm64", "--compute-domain", "2", "--validate-on", "NVIDIA-H100-80GB-HBM3"],
            "no selected cell runs on GB200/GB300 racks with hosts of NVIDIA-H100-80GB-HBM3 (x86_64)",
        ),
    ],
)
def test_the_command_refuses_bad_input_in_one_line_writing_nothing(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    out = tmp_path / "k8s"
    lock = _lock_file(tmp_path)
    result = run_cli(
        "k8s", "--matrix", str(REPO / "matrix.yaml"), "--lock", str(lock), "--out", str(out), *flags
    )
    assert result.exit_code == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert message in line
    assert not out.exists()


def test_the_command_writes_the_domain_files_and_notes_the_cells_left_out(tmp_path: Path) -> None:
    out = tmp_path / "k8s"
    lock = _lock_file(tmp_path)
    flags = ["--only", "*-arm64", "--compute-domain", "2", "--gpus", "4", "--namespace", "ml"]
    result = run_cli(
        "k8s", "--matrix", str(REPO / "matrix.yaml"), "--lock", str(lock), "--out", str(out), *flags
    )
    assert result.exit_code == 0, result.stderr
    written = sorted(p.name for p in out.iterdir())
    assert f"{job_name(FIT)}.yaml" in written and f"{job_name(OLD_ARM)}.yaml" not in written
    assert f"imagekit: note: no compute-domain Job for {OLD_ARM}" in result.stderr


# What torchrun reads (torch/distributed/run.py's options, through argparse_util.py's ``env``
# action: PET_<DEST>), and what torch.distributed's env:// reads (MASTER_ADDR, MASTER_PORT,
# WORLD_SIZE, RANK).
TORCHRUN = ("PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "PET_MASTER_PORT")


def _env_of(gpus: int, nodes: int = 4) -> dict[str, Any]:
    lock = shipped_lock().only([FIT])
    (text,) = render_domains(lock, JobOptions(gpus=gpus), ComputeDomainOptions(nodes)).files.values()
    job = list(yaml.safe_load_all(text))[-1]
    for version in ("1.34.0", "1.35.0", "1.36.0", "1.37.0"):
        kubernetes_validate.validate(job, version, strict=True)
    assert "&id" not in text and "*id" not in text
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("gpus", [1, 4])
def test_a_bare_torchrun_reads_the_rendezvous_from_the_pods_env(gpus: int) -> None:
    """`--command torchrun train.py` needs no flags: torchrun takes each from PET_<OPTION>."""
    env = _env_of(gpus)
    name = job_name(FIT)
    assert {k: env[k] for k in TORCHRUN} == {
        "PET_NNODES": "4",
        "PET_NODE_RANK": {"fieldRef": {"fieldPath": INDEX_FIELD}},
        "PET_NPROC_PER_NODE": str(gpus),
        "PET_MASTER_ADDR": f"{name}-0.{name}",
        "PET_MASTER_PORT": "29500",
    }


def test_a_pod_of_one_process_is_given_its_world_size_and_rank_together() -> None:
    """With one GPU a pod is one env:// process: WORLD_SIZE counts the pods and RANK is the pod's;
    never one without the other."""
    env = _env_of(1, nodes=3)
    assert env["WORLD_SIZE"] == "3" and env["RANK"] == {"fieldRef": {"fieldPath": INDEX_FIELD}}
    many = _env_of(4, nodes=3)
    assert ("WORLD_SIZE" in many) == ("RANK" in many)
