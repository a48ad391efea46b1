"""`imagekit k8s --gpu-request dra`: the claim templates are valid Kubernetes 1.34-1.37 objects, and
their CEL, evaluated with cel-python (Kubernetes' semver through tests/unit/k8s/cel_semver.py)
against a cluster as NVIDIA's DRA driver publishes it (tests/fixtures/dra/cluster.yaml), selects
for every shipped cell exactly the GPUs it serves."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from imagekit.core.errors import InputError
from imagekit.core.versions import version_key
from imagekit.k8s import dra
from imagekit.k8s.dra import GpuClaim, gpu_claim, mig_profile
from imagekit.k8s.manifests import render_jobs
from imagekit.k8s.options import JobOptions, Toleration
from imagekit.k8s.placement import entry_fit
from imagekit.k8s.validate_on import PLAN_NAME, parse_plan, parse_products, render_validation
from imagekit.plan.cells import frontend_of
from imagekit.plan.gpu_fit import GpuFit
from imagekit.plan.matrix import load_plan
from imagekit.report.lockfile import Lock, LockEntry, merge_lock
from tests.conftest import REPO, run_cli
from tests.unit.k8s.cel_semver import device_activation, evaluate
from tests.unit.report_samples import lock_entry

KUBERNETES = ("1.34.0", "1.35.0", "1.36.0", "1.37.0")
MATRICES = (
    "matrix.yaml",
    *sorted(p.relative_to(REPO).as_posix() for p in REPO.glob("examples/*/matrix.yaml")),
)
CLUSTER = REPO / "tests" / "fixtures" / "dra" / "cluster.yaml"
DRA = JobOptions(gpu_request="dra")


# -- the cluster and what a claim gets from it -----------------------------------------------------


@dataclass(frozen=True)
class Device:
    node: str
    arch: str  # the node's kubernetes.io/arch
    name: str
    attributes: dict[str, Any]  # as the ResourceSlice has them
    activation: dict[str, Any]  # as a selector sees them

    def attribute(self, name: str) -> str:
        ((_, value),) = self.attributes[name].items()
        return str(value)


@functools.cache
def cluster() -> tuple[dict[str, list[str]], tuple[Device, ...]]:
    """The DeviceClasses' selectors by class, and every device with its node's architecture."""
    documents = list(yaml.safe_load_all(CLUSTER.read_text(encoding="utf-8")))
    classes = {
        d["metadata"]["name"]: [s["cel"]["expression"] for s in d["spec"]["selectors"]]
        for d in documents
        if d["kind"] == "DeviceClass"
    }
    arch = {
        d["metadata"]["name"]: d["metadata"]["labels"]["kubernetes.io/arch"]
        for d in documents
        if d["kind"] == "Node"
    }
    devices = tuple(
        Device(s["spec"]["nodeName"], arch[s["spec"]["nodeName"]], d["name"], d["attributes"],
               device_activation(s["spec"]["driver"], d))
        for s in documents if s["kind"] == "ResourceSlice" for d in s["spec"]["devices"]
    )  # fmt: skip
    return classes, devices


def allocatable(text: str) -> set[tuple[str, str]]:
    """(node, device) a file's workload can be given: the pod's nodeSelector holds for the node,
    the device is of the request's class, and every selector accepts it."""
    documents = list(yaml.safe_load_all(text))
    (template,) = [d for d in documents if d["kind"] == "ResourceClaimTemplate"]
    workload = next(d for d in documents if d["kind"] in ("Job", "Deployment"))
    pod = workload["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    assert pod["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
    assert "affinity" not in pod and "nvidia.com" not in str(pod["containers"][0]["resources"])
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    exactly = request["exactly"]
    classes, devices = cluster()
    expressions = classes[exactly["deviceClassName"]] + [
        s["cel"]["expression"] for s in exactly.get("selectors", [])
    ]
    arch = pod.get("nodeSelector", {}).get("kubernetes.io/arch")
    return {
        (d.node, d.name)
        for d in devices
        if arch in (None, d.arch) and all(evaluate(e, d.activation) for e in expressions)
    }


def entries_of(matrix: str) -> dict[str, LockEntry]:
    """The matrix's cells as published: each with its platform, CUDA and torch (what its fit reads)."""
    plan = load_plan(REPO / matrix)
    repository = f"{plan.matrix.publish.registry}/{plan.matrix.publish.repository}"
    out = {}
    for c in plan.cells:
        sample = lock_entry(c.id, frontend=frontend_of(c))
        expect = {**sample.expect, "cuda": c.cuda, "torch": c.torch}
        out[c.id] = replace(sample, repository=repository, platform=c.platform, expect=expect)
    return out


def rendered(matrix: str, options: JobOptions) -> dict[str, str]:
    """Cell -> its file, for the matrix's cells."""
    entries = entries_of(matrix)
    files = render_jobs(Lock(entries), options, {cell: e.frontend for cell, e in entries.items()})
    by_cell = {}
    for text in files.values():
        first = next(d for d in yaml.safe_load_all(text) if d["kind"] in ("Job", "Deployment"))
        by_cell[first["metadata"]["annotations"]["imagekit/cell"]] = text
    assert len(by_cell) == len(entries)
    return by_cell


def serves(fit: GpuFit, device: Device) -> bool:
    """The oracle: the fit's three facts, read off the ResourceSlice without CEL."""
    capability = version_key(device.attribute("cudaComputeCapability"))[:2]
    driver = version_key(device.attribute("driverVersion"))
    return (
        device.arch == fit.platform.arch
        and (fit.kernels is None or fit.kernels.serve((capability[0], capability[1])))
        and (fit.driver_floor is None or driver >= version_key(fit.driver_floor))
    )


def whole_gpus(selected: set[tuple[str, str]]) -> set[str]:
    return {node for node, device in selected if device == "gpu-0"}


# -- valid objects ---------------------------------------------------------------------------------

OPTIONS = {
    "defaults": DRA,
    "a node pool": JobOptions(
        gpus=8,
        gpu_request="dra",
        namespace="ml",
        runtime_class="nvidia",
        tolerations=(Toleration.parse("gpu"),),
        cpu="32",
        memory="512Gi",
    ),
    "a MIG slice": JobOptions(gpu_request="dra", gpu_resource="nvidia.com/mig-1g.10gb"),
    "no cell placement": JobOptions(gpu_request="dra", gpu_affinity=False),
}


def strictly_valid(options: JobOptions, versions: tuple[str, ...]) -> None:
    """Every document of every shipped matrix against each release's strict schema."""
    kinds = set()
    for matrix in MATRICES:
        for text in rendered(matrix, options).values():
            documents = list(yaml.safe_load_all(text))
            assert documents[0]["kind"] == "ResourceClaimTemplate"  # created before the pod naming it
            for document in documents:
                kinds.add(document["kind"])
                for version in versions:
                    kubernetes_validate.validate(document, version, strict=True)
    assert {"ResourceClaimTemplate", "Job", "Deployment", "Service", "PersistentVolumeClaim"} <= kinds


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_every_manifest_is_strictly_valid_for_kubernetes_1_34_and_1_37(options: JobOptions) -> None:
    """The first and the last release (some 15 ms a document and release: the fast tier's time);
    past the defaults the last only. tests/slow/k8s/test_dra.py checks 1.34 to 1.37 for each."""
    strictly_valid(options, (KUBERNETES[0], KUBERNETES[-1]) if options == DRA else (KUBERNETES[-1],))


def test_the_cluster_fixture_is_valid_kubernetes() -> None:
    for document in yaml.safe_load_all(CLUSTER.read_text(encoding="utf-8")):
        kubernetes_validate.validate(document, KUBERNETES[0], strict=True)


# -- the selectors against the cluster -------------------------------------------------------------


@pytest.mark.parametrize("matrix", MATRICES)
def test_each_shipped_cell_selects_the_gpus_it_serves_and_refuses_the_others(matrix: str) -> None:
    _, devices = cluster()
    gpus = [d for d in devices if d.attribute("type") == "gpu"]
    entries = entries_of(matrix)
    for cell, text in rendered(matrix, DRA).items():
        fit = entry_fit(entries[cell])
        selected = allocatable(text)
        assert whole_gpus(selected) == {d.node for d in gpus if serves(fit, d)}, cell
        assert all(device == "gpu-0" for _, device in selected), cell  # never a MIG slice
        assert selected, f"{cell}: no GPU of the cluster selected"
        if fit.kernels is not None or fit.driver_floor is not None:
            refused = {d.node for d in gpus if d.arch == fit.platform.arch} - whole_gpus(selected)
            assert refused, f"{cell}: no GPU of its architecture refused"


X86 = {"node-v100", "node-t4", "node-a100", "node-a100-r470", "node-a100-r525-early", "node-l40s"}
X86 |= {"node-h100", "node-h100-r575", "node-b200", "node-rtx-pro"}


@pytest.mark.parametrize(
    ("cell", "selected"),
    [
        # sm_37..sm_90 cubins, any driver of 11.x's floor 450.80.02: no Blackwell, R470 is enough
        ("cuda-ubuntu22.04-torch2.5.1-cuda11.8-py3.10-runtime", X86 - {"node-b200", "node-rtx-pro"}),
        # CUDA 12: driver >= 525.60.13, the full version: the early R525 (525.60.11) is refused
        (
            "cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-runtime",
            X86 - {"node-b200", "node-rtx-pro", "node-a100-r470", "node-a100-r525-early"},
        ),
        # CUDA 13.2: sm_75 to sm_120, no PTX; driver >= 580.65.06: no V100, no R575 and older
        ("cuda-ubuntu24.04-torch2.15.0-cuda13.2-py3.12-runtime", {"node-h100", "node-b200", "node-rtx-pro"}),
        # aarch64 cu126: sm_80 and sm_90 only: GH200 (with R570 too), not GB200 nor Thor
        ("cuda-ubuntu22.04-torch2.14.1-cuda12.6-py3.10-runtime-arm64", {"node-gh200", "node-gh200-r570"}),
        # aarch64 cu132: sm_80 to sm_120 (Thor's sm_110 included), driver >= 580.65.06
        (
            "cuda-ubuntu24.04-torch2.15.0-cuda13.2-py3.12-runtime-arm64",
            {"node-gh200", "node-gb200", "node-thor"},
        ),
    ],
)
def test_hand_checked_cells(cell: str, selected: set[str]) -> None:
    assert whole_gpus(allocatable(rendered("matrix.yaml", DRA)[cell])) == selected


def test_a_mig_slice_is_claimed_from_the_mig_class_by_its_profile() -> None:
    options = JobOptions(gpu_request="dra", gpu_resource="nvidia.com/mig-1g.10gb")
    text = rendered("matrix.yaml", options)["cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-runtime"]
    template = next(yaml.safe_load_all(text))
    assert (
        template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "mig.nvidia.com"
    )
    assert allocatable(text) == {("node-a100", "gpu-0-mig-1g.10gb-0")}
    assert mig_profile("nvidia.com/mig-1g.10gb.me") == "1g.10gb+me"  # NVML's spelling of media extensions
    assert mig_profile("nvidia.com/gpu") is None


def test_no_cell_placement_selects_every_gpu_of_the_cells_architecture() -> None:
    options = JobOptions(gpu_request="dra", gpu_affinity=False)
    text = rendered("matrix.yaml", options)["cuda-ubuntu24.04-torch2.15.0-cuda13.2-py3.12-runtime-arm64"]
    assert whole_gpus(allocatable(text)) == {"node-gh200", "node-gh200-r570", "node-gb200", "node-thor"}
    assert "selectors" not in text


def test_without_gpus_no_claim_is_written() -> None:
    for text in rendered("matrix.yaml", JobOptions(gpu_request="dra", gpus=0)).values():
        assert "ResourceClaimTemplate" not in text and "resourceClaims" not in text


def test_a_front_end_claims_its_gpus_in_the_server_not_in_its_init_container() -> None:
    texts = rendered("examples/offline/matrix.yaml", DRA)
    text = texts["debian-local-torch2.13.0-cpu-py3.11-runtime-jupyter"]
    kinds = [d["kind"] for d in yaml.safe_load_all(text)]
    assert kinds == ["ResourceClaimTemplate", "Deployment", "Service", "PersistentVolumeClaim"]
    pod = next(d for d in yaml.safe_load_all(text) if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert "claims" not in pod["initContainers"][0]["resources"]
    assert whole_gpus(allocatable(text)) == {
        d.node for d in cluster()[1] if d.arch == "amd64" and d.name == "gpu-0"
    }  # a CPU build asks nothing of the GPU but its architecture


def test_the_claim_builder_is_reusable() -> None:
    entry = entries_of("matrix.yaml")["cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-runtime"]
    claim = gpu_claim(
        "worker", entry, JobOptions(gpus=4, gpu_request="dra"), {"namespace": "ml", "labels": {"a": "b"}}
    )
    assert isinstance(claim, GpuClaim)
    assert claim.template["metadata"] == {
        "name": "worker-gpu",
        "labels": {"a": "b"},
        "annotations": {},
        "namespace": "ml",
    }
    assert claim.template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 4
    assert claim.pod_claims == ({"name": "gpu", "resourceClaimTemplateName": "worker-gpu"},)
    assert claim.container_claims == ({"name": "gpu"},)


# -- validate-on: the product by its productName ---------------------------------------------------


def test_validate_on_with_dra_selects_the_product_name_exactly() -> None:
    entries = {
        c: e for c, e in entries_of("matrix.yaml").items() if "torch2.15.0-cuda13.2-py3.12-runtime" in c
    }
    products = parse_products(["NVIDIA H100 80GB HBM3", "NVIDIA GH200 480GB"], dra=True)
    assert [(p.label, p.machine) for p in products] == [
        ("NVIDIA-H100-80GB-HBM3", "x86_64"),
        ("NVIDIA-GH200-480GB", "aarch64"),  # gpus.yaml places it, by its label form
    ]
    files = render_validation(Lock(entries), DRA, products).files
    plan = parse_plan(files.pop(PLAN_NAME).encode(), "plan")
    assert {j.product for j in plan.jobs} == {"NVIDIA-H100-80GB-HBM3", "NVIDIA-GH200-480GB"}
    selected = {}
    for text in files.values():
        job = next(d for d in yaml.safe_load_all(text) if d["kind"] == "Job")
        assert "nvidia.com/gpu.product" not in job["spec"]["template"]["spec"]["nodeSelector"]
        for document in yaml.safe_load_all(text):
            for version in KUBERNETES:
                kubernetes_validate.validate(document, version, strict=True)
        selected[job["metadata"]["annotations"]["imagekit/gpu-product"]] = whole_gpus(allocatable(text))
    # the product only, also where the cell could not pass (no affinity from the cell: the probe says why)
    assert selected == {
        "NVIDIA-H100-80GB-HBM3": {"node-h100", "node-h100-r575"},
        "NVIDIA-GH200-480GB": {"node-gh200", "node-gh200-r570"},
    }


def _lock_for_the_cli(tmp_path: Path) -> Path:
    entries = {
        c: e for c, e in entries_of("matrix.yaml").items() if "torch2.15.0-cuda13.2-py3.12-runtime" in c
    }
    lock = tmp_path / "images.lock.json"
    merge_lock(lock, entries)
    return lock


def _cli(tmp_path: Path, *extra: str) -> tuple[int, str, Path]:
    out = tmp_path / "out"
    done = run_cli(
        "k8s", "-m", str(REPO / "matrix.yaml"), "--only", "*torch2.15.0*runtime*",
        "--lock", str(_lock_for_the_cli(tmp_path)), "--out", str(out), *extra,
    )  # fmt: skip
    return done.exit_code, done.stderr, out


def test_the_command_writes_claims_and_validate_on_jobs(tmp_path: Path) -> None:
    code, stderr, out = _cli(tmp_path, "--gpu-request", "dra")
    assert code == 0, stderr
    assert all("kind: ResourceClaimTemplate" in p.read_text() for p in out.iterdir())
    code, stderr, out = _cli(tmp_path / "v", "--gpu-request", "dra", "--validate-on", "NVIDIA H100 80GB HBM3")
    assert code == 0, stderr
    assert PLAN_NAME in {p.name for p in out.iterdir()}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--gpu-request", "dra", "--validate-on", "NVIDIA H100' || true || '"), "no quote or backslash"),
        (("--gpu-request", "claims"), "--gpu-request 'claims': use device-plugin or dra"),
        (("--gpu-request", "dra", "--gpu-resource", "nvidia.com/gpu.shared"), "time-sliced"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, extra: tuple[str, ...], message: str
) -> None:
    code, stderr, out = _cli(tmp_path, *extra)
    assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not out.exists()


def test_a_selector_that_cannot_be_expressed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unexpressible(entry: LockEntry) -> GpuFit:
        return replace(entry_fit(entry), driver_floor="525.60.13a")  # no semver CEL could compare

    monkeypatch.setattr(dra, "entry_fit", unexpressible)
    code, stderr, out = _cli(tmp_path, "--gpu-request", "dra")
    assert code == 2 and "driver floor '525.60.13a': not a version a CEL semver selector" in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1 and not out.exists()


# go-nvlib's profile strings (pkg/nvlib/device/mig_profile.go, MigProfileInfo.String) beside the
# device plugin's resource for each ('+' as '.', NVIDIA/k8s-device-plugin internal/rm/rm.go).
GO_NVLIB_PROFILES = {
    "nvidia.com/mig-1g.10gb": "1g.10gb",
    "nvidia.com/mig-1g.10gb.me": "1g.10gb+me",
    "nvidia.com/mig-1g.23gb.me.all": "1g.23gb+me.all",
    "nvidia.com/mig-1g.23gb-me": "1g.23gb-me",
    "nvidia.com/mig-1g.23gb.gfx": "1g.23gb+gfx",
    "nvidia.com/mig-1c.2g.20gb": "1c.2g.20gb",
}


@pytest.mark.parametrize(("resource", "profile"), GO_NVLIB_PROFILES.items())
def test_every_mig_profile_go_nvlib_writes_is_claimed_by_the_drivers_spelling(
    resource: str, profile: str
) -> None:
    assert mig_profile(resource) == profile
    options = JobOptions(gpu_request="dra", gpu_resource=resource)
    text = rendered("matrix.yaml", options)["cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-runtime"]
    template = next(yaml.safe_load_all(text))
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    expressions = [s["cel"]["expression"] for s in request["exactly"]["selectors"]]
    # the selector accepts the device the driver publishes with that profile, and no other
    device = {"attributes": {"type": {"string": "mig"}, "profile": {"string": profile}}}
    other = {"attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.10gb+me.al"}}}
    (selector,) = [e for e in expressions if ".profile" in e]
    assert evaluate(selector, device_activation("gpu.nvidia.com", device))
    assert not evaluate(selector, device_activation("gpu.nvidia.com", other))
    for version in (KUBERNETES[0], KUBERNETES[-1]):
        for document in yaml.safe_load_all(text):
            kubernetes_validate.validate(document, version, strict=True)


@pytest.mark.parametrize(
    "resource", ["nvidia.com/mig-1g.10gb+me", "nvidia.com/mig-1g.10gb.mee", "nvidia.com/mig-1g.10gb-gfx"]
)
def test_a_mig_profile_go_nvlib_does_not_write_is_refused(resource: str) -> None:
    with pytest.raises(InputError, match=r"^--gpu-resource .*: use nvidia.com/gpu"):
        rendered("matrix.yaml", JobOptions(gpu_request="dra", gpu_resource=resource))
