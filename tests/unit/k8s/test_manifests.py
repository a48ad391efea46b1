"""Kubernetes from the lock file: Jobs, and front ends as Deployments; every manifest valid."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from imagekit.core.errors import InputError
from imagekit.k8s.manifests import job_name, parse_command, render_jobs, write_jobs
from imagekit.k8s.options import Claim, JobOptions, Toleration, parse_node_selector
from imagekit.plan.matrix import load_plan
from imagekit.report.lockfile import (
    Lock,
    LockEntry,
    merge_lock,
)
from tests.conftest import REPO, run_cli
from tests.unit.report.test_lockfile import INDEX_DIGEST, index_lock
from tests.unit.report_samples import LOCK_DIGEST as DIGEST
from tests.unit.report_samples import lock_entry
from tests.unit.report_samples import lock_entry as entry


def render(entries: dict[str, LockEntry], options: JobOptions) -> dict[str, str]:
    """render_jobs with each cell's front end as the matrix gives it (here: as the lock says)."""
    return render_jobs(Lock(entries), options, {cell: e.frontend for cell, e in entries.items()})


def test_k8s_options_are_checked() -> None:
    assert Toleration.parse("nvidia.com/gpu:NoSchedule").as_json()["operator"] == "Exists"
    assert Toleration.parse("dedicated=gpu:NoExecute").as_json()["value"] == "gpu"
    assert Claim.parse("ckpt") == Claim("ckpt", "/data")
    assert parse_node_selector(["nvidia.com/gpu.present=true"]) == (("nvidia.com/gpu.present", "true"),)
    for bad in (
        lambda: Toleration.parse("key=v:Sometimes"),
        lambda: Claim.parse("Bad_Name"),
        lambda: Claim.parse("ok:relative"),
        lambda: parse_node_selector(["novalue"]),
    ):
        with pytest.raises(InputError):
            bad()
    long = job_name("x" * 80)
    assert len(long) <= 63 and long != job_name("x" * 81)


@pytest.mark.parametrize(
    "options",
    [
        JobOptions(),
        JobOptions(gpus=0),
        JobOptions(
            gpus=8,
            node_selector=(("nvidia.com/gpu.product", "NVIDIA-H200"),),
            tolerations=(Toleration.parse("nvidia.com/gpu:NoSchedule"), Toleration.parse("a=b:NoExecute")),
            runtime_class="nvidia",
            claims=(Claim.parse("data"), Claim.parse("ckpt:/checkpoints")),
            command=("torchrun", "--nproc-per-node=8", "train.py"),
            cpu="32",
            memory="256Gi",
            namespace="ml",
            ttl_s=None,
        ),
    ],
)
def test_every_job_manifest_is_valid_kubernetes(options: JobOptions) -> None:
    files = render({"a": entry("a"), "b": entry("b" * 70)}, options)
    assert len(files) == 2
    for text in files.values():
        manifest: dict[str, Any] = yaml.safe_load(text)
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
        pod = manifest["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert container["image"] == f"ghcr.io/acme/pytorch@{DIGEST}"  # by digest, never a tag
        assert pod["restartPolicy"] == "Never"
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        limits = container["resources"]["limits"]
        assert limits.get("nvidia.com/gpu", 0) == options.gpus
        # args, never command: the image's ENTRYPOINT runs, as it did when the image was verified
        assert "command" not in container
        if not options.command:
            assert container["args"][:2] == ["python3", "/opt/imagekit/check.py"]
            assert ("--require-gpu" in container["args"]) == (options.gpus > 0)
            assert container["args"][container["args"].index("--expect-torch") + 1] == "2.1.2"
        else:
            assert container["args"] == list(options.command)
        claims = [
            v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
        ]
        assert claims == [c.name for c in options.claims]


@pytest.mark.parametrize("frontend", ["jupyter", "ssh"])
def test_a_front_end_is_a_deployment_with_its_service_and_workspace(frontend: str) -> None:
    cell = f"cuda-torch2.5.1-cuda12.1-py3.10-runtime-{frontend}"
    files = render({cell: entry(cell, frontend=frontend)}, JobOptions(gpus=1, runtime_class="nvidia"))
    ((name, text),) = files.items()
    manifests = list(yaml.safe_load_all(text))
    for manifest in manifests:
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
    deployment, service, claim = manifests
    assert [m["kind"] for m in manifests] == ["Deployment", "Service", "PersistentVolumeClaim"]
    assert name == f"{deployment['metadata']['name']}.yaml"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == f"ghcr.io/acme/pytorch@{DIGEST}"  # by digest, never a tag
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1 and pod["runtimeClassName"] == "nvidia"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    # the secret comes from a Secret reference, never inline
    secret_volume = next(v for v in pod["volumes"] if v["name"] == "secret")
    assert secret_volume["secret"]["secretName"].endswith("-secret")
    variable = "JUPYTER_TOKEN_FILE" if frontend == "jupyter" else "SSH_AUTHORIZED_KEYS_FILE"
    # only a path and a switch in the environment: the token or keys are read from the mounted Secret
    assert {e["name"] for e in container["env"]} == {
        "PYTHONDONTWRITEBYTECODE",
        variable,
        "IMAGEKIT_STATE_DIR",
    }
    assert {
        "name": variable,
        "value": f"/run/secrets/imagekit/{'token' if frontend == 'jupyter' else 'authorized_keys'}",
    } in container["env"]
    # the claim is the whole workspace (home, Jupyter's root): everything a user makes outlives the pod
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/workspace"] == {"name": "workspace", "mountPath": "/workspace"}
    (init,) = pod["initContainers"]
    assert init["image"] == container["image"] and "command" not in init
    assert "mkdir -p code data checkpoints" in init["args"][-1]
    assert init["volumeMounts"] == [mounts["/workspace"]] and "nvidia.com/gpu" not in str(init["resources"])
    state = next(e["value"] for e in container["env"] if e["name"] == "IMAGEKIT_STATE_DIR")
    # sshd's host keys live in the state directory: on the claim, so a restart keeps them;
    # Jupyter's runtime files (they hold its token) stay off it
    assert state == ("/tmp/imagekit-frontend" if frontend == "jupyter" else "/workspace/.imagekit-frontend")
    assert (
        claim["metadata"]["name"]
        == next(v for v in pod["volumes"] if v["name"] == "workspace")["persistentVolumeClaim"]["claimName"]
    )
    port = 8888 if frontend == "jupyter" else 22
    assert service["spec"]["type"] == "ClusterIP" and service["spec"]["ports"][0]["port"] == port
    assert container["readinessProbe"]["exec"]["command"][-1] == "/opt/imagekit/frontend/healthcheck.py"


def test_a_named_claim_and_secret_are_referenced_not_written() -> None:
    cell = "c-jupyter"
    options = JobOptions(secret="team-token", workspace_claim="team-ws")
    (text,) = render({cell: entry(cell, frontend="jupyter")}, options).values()
    kinds = [m["kind"] for m in yaml.safe_load_all(text)]
    assert kinds == ["Deployment", "Service"] and "team-token" in text and "team-ws" in text
    with pytest.raises(InputError, match="--secret"):
        render({cell: entry(cell, frontend="jupyter")}, JobOptions(secret="Bad_Name"))


def test_jobs_pull_only_from_the_matrixs_repository(tmp_path: Path) -> None:
    """The Job's image is re-derived: a lock entry naming another repository is refused."""
    cell = load_plan(REPO / "matrix.yaml").cells[0].id
    lock = tmp_path / "images.lock.json"
    out = tmp_path / "k8s"
    merge_lock(lock, {cell: replace(entry(cell), repository="ghcr.io/imagekit/pytorch")})
    args = ("k8s", "-m", str(REPO / "matrix.yaml"), "--only", cell, "--lock", str(lock), "--out", str(out))
    done = run_cli(*args)
    assert done.exit_code == 0, done.stderr
    (manifest,) = (yaml.safe_load(p.read_text()) for p in out.iterdir())
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"ghcr.io/imagekit/pytorch@{DIGEST}"
    assert container["args"][:2] == ["python3", "/opt/imagekit/check.py"] and "command" not in container
    merge_lock(lock, {cell: replace(entry(cell), repository="ghcr.io/evil/pytorch")})
    refused = run_cli(*args[:-2], "--out", str(tmp_path / "k8s-2"))
    assert refused.exit_code == 2 and not (tmp_path / "k8s-2").exists()
    expected = "ghcr.io/evil/pytorch is not the matrix's repository (ghcr.io/imagekit/pytorch)"
    assert f"images.{cell}.repository: {expected}" in refused.stderr


@pytest.mark.parametrize("namespace", ["$(id)", "Team", "a" * 64, "gpu\u202e"])
def test_a_namespace_is_a_dns_label(namespace: str) -> None:
    with pytest.raises(InputError, match=r"--namespace .*: not a DNS label"):
        render({"c": entry("c")}, JobOptions(namespace=namespace))


def test_manifests_are_written_all_or_none(tmp_path: Path) -> None:
    """A directory where the last manifest goes stops the run before the first is written."""
    files = render({"a": entry("a"), "b": entry("b")}, JobOptions())
    out = tmp_path / "k8s"
    *first, last = sorted(files)
    (out / last).mkdir(parents=True)
    with pytest.raises(InputError, match=rf"{last}: is a directory; imagekit writes only regular files"):
        write_jobs(files, out)
    assert [p.name for p in out.iterdir()] == [last]
    assert first and write_jobs({name: files[name] for name in first}, out) == [out / n for n in first]


@pytest.mark.parametrize(
    "flag",
    [
        ("--pvc", "u:s3cret@h"),
        ("--pvc", "BAD:u:s3cret@h"),
        ("--toleration", "k=u:s3cret@h:NoSchedule"),
        ("--node-selector", "u:s3cret@h"),
        ("--cpu", "u:s3cret@h"),
        ("--memory", "https://u:s3cret@h"),
        ("--workspace-size", "u:s3cret@h"),
        ("--shm", "u:s3cret@h"),
        ("--cpu-limit", "u:s3cret@h"),
        ("--memory-limit", "https://u:s3cret@h"),
        ("--uid-mode", "u:s3cret@h"),
        ("--gpu-resource", "u:s3cret@h"),
    ],
    ids=lambda flag: flag[0],
)
def test_a_bad_k8s_flag_never_repeats_a_login(flag: tuple[str, str], tmp_path: Path) -> None:
    # the value is shown once, masked; never a part of it that no longer looks like a login
    cell = load_plan(REPO / "matrix.yaml").cells[0].id
    lock = tmp_path / "images.lock.json"
    merge_lock(lock, {cell: replace(entry(cell), repository="ghcr.io/imagekit/pytorch")})
    args = ("k8s", "-m", str(REPO / "matrix.yaml"), "--only", cell, "--lock", str(lock))
    result = run_cli(*args, "--out", str(tmp_path / "o"), *flag)
    assert result.exit_code == 2, result.stderr
    assert "s3cret" not in result.stderr + result.stdout and "***@h" in result.stderr


MOUNTS = {
    "/dev/shm": "the shared-memory volume",
    "/dev": "the shared-memory volume",
    "/": "the shared-memory volume",
    "/run/secrets": "the front end's Secret",
    "/workspace/code": "the workspace claim",
    "/workspace/data/raw": "the workspace claim",
    "/workspace": "the workspace claim",
    "/tmp/x": "the pod's /tmp",
    "/ckpt/../dev/shm/x": "the shared-memory volume",
}


@pytest.mark.parametrize(("mount", "what"), MOUNTS.items())
def test_a_claim_mounted_over_another_mount_is_refused(mount: str, what: str) -> None:
    cell = "c-jupyter"
    options = JobOptions(claims=(Claim("ckpt", mount),))
    with pytest.raises(InputError, match=f"--pvc ckpt:{mount}: collides with {what}"):
        render({cell: entry(cell, frontend="jupyter")}, options)


def test_two_claims_on_one_path_are_refused_and_disjoint_ones_pass() -> None:
    clash = JobOptions(claims=(Claim("a", "/data"), Claim("b", "/data/b")))
    with pytest.raises(InputError, match="collides with the claim a at /data"):
        render({"c": entry("c")}, clash)
    assert render({"c": entry("c")}, JobOptions(claims=(Claim("a", "/data"), Claim("b", "/datasets"))))


def test_what_a_cell_is_comes_from_the_matrix_not_the_lock() -> None:
    edited = {"c-ssh": entry("c-ssh", frontend=None)}  # an ssh cell the lock calls a plain image
    with pytest.raises(InputError, match="the lock file says front end none, the matrix ssh"):
        render_jobs(Lock(edited), JobOptions(), {"c-ssh": "ssh"})


def test_two_cells_that_would_be_one_kubernetes_object_are_refused() -> None:
    entries = {"a.b": entry("a.b"), "a-b": entry("a-b")}
    both = re.escape("a-b and a.b would both be the Kubernetes object imagekit-check-a-b")
    with pytest.raises(InputError, match=both):
        render(entries, JobOptions())


def _pod_of(text: str) -> dict[str, Any]:
    manifest: dict[str, Any] = next(iter(yaml.safe_load_all(text)))
    pod: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return pod


def _shm(options: JobOptions) -> str:
    (text,) = render({"c": entry("c")}, options).values()
    (volume,) = (v for v in _pod_of(text)["volumes"] if v["name"] == "dshm")
    assert volume["emptyDir"]["medium"] == "Memory"
    size: str = volume["emptyDir"]["sizeLimit"]
    return size


@pytest.mark.parametrize(
    ("options", "size"),
    [
        (JobOptions(gpus=0), "2Gi"),
        (JobOptions(gpus=1), "8Gi"),
        (JobOptions(gpus=8), "64Gi"),  # DataLoader workers of 8 ranks: far beyond a fixed 2Gi
        (JobOptions(gpus=8, memory_limit="32Gi"), "32Gi"),  # never above the memory it counts against
        (JobOptions(gpus=8, shm="100Gi"), "100Gi"),
        (JobOptions(gpus=1, shm="512Mi", memory="1Gi"), "512Mi"),
    ],
)
def test_shared_memory_scales_with_the_gpus_or_is_the_flag(options: JobOptions, size: str) -> None:
    assert _shm(options) == size


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (JobOptions(shm="lots"), "--shm 'lots': not a Kubernetes quantity"),
        (JobOptions(shm="100"), "--shm '100': give a size from 1Mi to 64Ti"),
        (JobOptions(shm="64Gi", memory_limit="32Gi"), "--shm '64Gi': larger than --memory-limit 32Gi"),
    ],
)
def test_a_bad_shm_is_one_line_naming_the_flag(options: JobOptions, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        render({"c": entry("c")}, options)


@pytest.mark.parametrize(
    "resource",
    # the device plugin's name for each of go-nvlib's profile spellings ('+' as '.'): imagekit.k8s.mig
    [
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-1g.10gb.me",
        "nvidia.com/mig-1g.23gb.me.all",
        "nvidia.com/mig-1g.23gb-me",
        "nvidia.com/mig-1g.23gb.gfx",
        "nvidia.com/mig-1c.2g.20gb",
    ],
)
def test_a_mig_slice_is_requested_by_its_resource_name(resource: str) -> None:
    options = JobOptions(gpu_resource=resource)
    (text,) = render({"c": entry("c")}, options).values()
    kubernetes_validate.validate(yaml.safe_load(text), kubernetes_validate.latest_version(), strict=True)
    (container,) = _pod_of(text)["containers"]
    resources = container["resources"]
    assert resources["limits"][resource] == resources["requests"][resource] == 1
    assert "nvidia.com/gpu" not in resources["limits"]
    assert "--require-gpu" in container["args"]  # a slice is a GPU the checks must see


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (JobOptions(gpu_resource="amd.com/gpu"), "--gpu-resource 'amd.com/gpu': use nvidia.com/gpu"),
        (JobOptions(gpu_resource="nvidia.com/mig-1g"), "--gpu-resource 'nvidia.com/mig-1g': use"),
        (JobOptions(gpus=2, gpu_resource="nvidia.com/mig-3g.40gb"), "a MIG slice takes --gpus 1"),
        (JobOptions(gpus=0, gpu_resource="nvidia.com/mig-3g.40gb"), "not 0"),
    ],
)
def test_a_bad_gpu_resource_is_refused(options: JobOptions, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        render({"c": entry("c")}, options)


def test_the_gpu_toleration_shorthand() -> None:
    assert Toleration.parse("gpu").as_json() == {
        "key": "nvidia.com/gpu",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    (text,) = render({"c": entry("c")}, JobOptions(tolerations=(Toleration.parse("gpu"),))).values()
    assert _pod_of(text)["tolerations"] == [Toleration.parse("gpu").as_json()]
    with pytest.raises(InputError, match="--toleration 'gpus': use gpu, key=value:Effect"):
        Toleration.parse("gpus")


RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.mark.parametrize("frontend", [None, "jupyter", "ssh"])
def test_every_pod_meets_pod_security_restricted(frontend: str | None) -> None:
    """Pod Security 'restricted': non-root by number, RuntimeDefault seccomp, no escalation, no
    capability; a read-only root with the places that are written on emptyDirs or the claim."""
    cell = f"c-{frontend}" if frontend else "c"
    (text,) = render({cell: entry(cell, frontend=frontend)}, JobOptions(gpus=8)).values()
    pod = _pod_of(text)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    assert pod["automountServiceAccountToken"] is False
    assert "hostNetwork" not in pod and "hostIPC" not in pod and "hostPID" not in pod
    for container in (*pod["containers"], *pod.get("initContainers", ())):
        assert container["securityContext"] == RESTRICTED_CONTAINER
        assert (
            "/tmp" in {m["mountPath"] for m in container["volumeMounts"]} or container["name"] == "workspace"
        )
    allowed = {"emptyDir", "persistentVolumeClaim", "secret", "configMap", "projected", "downwardAPI"}
    for volume in pod["volumes"]:
        assert set(volume) - {"name"} <= allowed
    tmp = next(v for v in pod["volumes"] if v["name"] == "tmp")
    assert "sizeLimit" in tmp["emptyDir"]


def _schedulable(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a node with ``labels`` satisfies the pod's required node affinity (the scheduler's
    rule: any term, every expression of it; Gt/Lt compare integers)."""
    affinity = pod.get("affinity")
    if affinity is None:
        return True
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]

    def holds(expr: dict[str, Any]) -> bool:
        value = labels.get(expr["key"])
        if value is None:
            return False
        if expr["operator"] == "In":
            return value in expr["values"]
        (bound,) = expr["values"]
        return int(value) > int(bound) if expr["operator"] == "Gt" else int(value) < int(bound)

    return any(all(holds(e) for e in term["matchExpressions"]) for term in terms)


def node(capability: str, driver: int, arch: str = "amd64") -> dict[str, str]:
    major, minor = capability.split(".")
    return {
        "kubernetes.io/arch": arch,
        "nvidia.com/gpu.compute.major": major,
        "nvidia.com/gpu.compute.minor": minor,
        "nvidia.com/cuda.driver.major": str(driver),
    }


NODES = {  # FACTS.md's capabilities; drivers as such nodes run them
    "V100": node("7.0", 550),
    "T4": node("7.5", 535),
    "A100": node("8.0", 535),
    "L40S": node("8.9", 550),
    "H100": node("9.0", 560),
    "B200": node("10.0", 580),
    "B300": node("10.3", 590),
    "RTX PRO 6000": node("12.0", 580),
    "GH200 (arm64)": node("9.0", 560, arch="arm64"),
    "H100 on R470": node("9.0", 470),
}


@pytest.mark.parametrize(
    ("cuda", "runs_on"),
    [
        # cu118: kernels up to sm_90, no Blackwell; any 11.x runs on driver >= 450
        ("11.8", {"V100", "T4", "A100", "L40S", "H100", "H100 on R470"}),
        ("12.1", {"V100", "T4", "A100", "L40S", "H100"}),  # CUDA 12 needs driver >= 525
        # CUDA 13: no Volta, Blackwell and later through PTX, driver >= 580 (never an R550 node)
        ("13.2", {"B200", "B300", "RTX PRO 6000"}),
        # NGC's own build: no arch list in the table, so the platform and the driver floor only
        ("12.2", {"V100", "T4", "A100", "L40S", "H100", "B200", "B300", "RTX PRO 6000"}),
    ],
)
def test_node_affinity_keeps_an_image_off_gpus_it_cannot_serve(cuda: str, runs_on: set[str]) -> None:
    cell = entry("c")
    cell = replace(cell, expect={**cell.expect, "cuda": cuda})
    (text,) = render({"c": cell}, JobOptions()).values()
    kubernetes_validate.validate(yaml.safe_load(text), kubernetes_validate.latest_version(), strict=True)
    pod = _pod_of(text)
    assert {name for name, labels in NODES.items() if _schedulable(pod, labels)} == runs_on
    assert "&id" not in text and "*id" not in text  # shared terms written out, not as YAML aliases


OLD_DRIVER_LABEL = "nvidia.com/cuda.driver.major"  # feature discovery before v0.15.0; deprecated since
NEW_DRIVER_LABEL = "nvidia.com/cuda.driver-version.major"  # its replacement (k8s-device-plugin v0.15.0)


def _driver_labels(labels: dict[str, str], names: tuple[str, ...]) -> dict[str, str]:
    driver = labels[OLD_DRIVER_LABEL]
    return {**{k: v for k, v in labels.items() if k != OLD_DRIVER_LABEL}, **dict.fromkeys(names, driver)}


@pytest.mark.parametrize(
    "names",
    [(OLD_DRIVER_LABEL,), (NEW_DRIVER_LABEL,), (OLD_DRIVER_LABEL, NEW_DRIVER_LABEL)],
    ids=["old-feature-discovery", "a-release-without-the-deprecated-label", "both"],
)
def test_node_affinity_takes_the_driver_major_under_either_label(names: tuple[str, ...]) -> None:
    """Feature discovery writes the driver's major as cuda.driver.major (deprecated) and as
    cuda.driver-version.major: a node with either, or both, is placed alike."""
    cell = entry("c")
    cell = replace(cell, expect={**cell.expect, "cuda": "12.1"})
    (text,) = render({"c": cell}, JobOptions()).values()
    for version in ("1.34.0", "1.35.0", "1.36.0", "1.37.0"):
        kubernetes_validate.validate(yaml.safe_load(text), version, strict=True)
    pod = _pod_of(text)
    nodes = {name: _driver_labels(labels, names) for name, labels in NODES.items()}
    assert {name for name, labels in nodes.items() if _schedulable(pod, labels)} == {
        "V100",
        "T4",
        "A100",
        "L40S",
        "H100",
    }
    assert "&id" not in text and "*id" not in text


def test_node_affinity_without_gpus_or_feature_discovery() -> None:
    (text,) = render({"c": entry("c")}, JobOptions(gpus=0)).values()
    terms = _pod_of(text)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {"nodeSelectorTerms": [{"matchExpressions": [_req("kubernetes.io/arch", "In", "amd64")]}]}
    (text,) = render({"c": entry("c")}, JobOptions(gpu_affinity=False)).values()
    assert "affinity" not in _pod_of(text)
    # a front end carries the same affinity as a Job of its cell
    (text,) = render({"c-ssh": entry("c-ssh", frontend="ssh")}, JobOptions()).values()
    assert _schedulable(_pod_of(text), NODES["H100"]) and not _schedulable(_pod_of(text), NODES["B200"])


def _req(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def test_command_is_shell_split_and_refused_empty_or_unbalanced() -> None:
    assert parse_command(None) == ()
    assert parse_command("python -c 'import torch; print(1)'") == ("python", "-c", "import torch; print(1)")
    with pytest.raises(InputError, match=r"^--command is empty$"):
        parse_command("  ")
    with pytest.raises(InputError, match=r"^--command: No closing quotation$"):
        parse_command("echo 'x")


# -- Kubernetes: the index digest, and the architecture where one platform is served --------------


def _pods(lock: Lock, options: JobOptions) -> dict[str, dict[str, Any]]:
    files = render_jobs(lock, options, dict.fromkeys(lock.images))
    pods = {}
    for name, text in files.items():
        manifest = yaml.safe_load(text)
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
        pods[name] = manifest["spec"]["template"]["spec"]
    return pods


def test_k8s_pulls_the_index_and_pins_the_architecture_of_one_platform() -> None:
    both = _pods(index_lock(), JobOptions(node_selector=(("pool", "gpu"),)))
    for pod in both.values():  # the index serves both: the node's architecture picks the entry
        assert pod["containers"][0]["image"] == f"ghcr.io/acme/pytorch@{INDEX_DIGEST}"
        assert pod["nodeSelector"] == {"pool": "gpu"}
    arch_of = {
        n: p["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        for n, p in both.items()
    }
    terms = {n: t["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] for n, t in arch_of.items()}
    assert terms == {"imagekit-check-c.yaml": ["amd64"], "imagekit-check-c-arm64.yaml": ["arm64"]}
    # an index left with one platform, and an image alone, are held to that architecture
    (pod,) = _pods(index_lock(missing=True), JobOptions(gpu_affinity=False)).values()
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    alone = Lock({"c-arm64": replace(lock_entry("c-arm64"), platform="linux/arm64")})
    (pod,) = _pods(alone, JobOptions(node_selector=(("pool", "gpu"),))).values()
    assert pod["nodeSelector"] == {"pool": "gpu", "kubernetes.io/arch": "arm64"}
    assert pod["containers"][0]["image"] == alone.images["c-arm64"].reference
    with pytest.raises(InputError, match="c-arm64's image serves linux/arm64 only"):
        _pods(alone, JobOptions(node_selector=(("kubernetes.io/arch", "amd64"),)))
