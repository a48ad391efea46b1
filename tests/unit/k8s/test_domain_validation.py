"""`imagekit k8s --validate-on PRODUCT --compute-domain N`: the probe on N nodes of a product, its nccl
check across all of them; the plan names each Job with its node count and reads back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from imagekit.core import naming
from imagekit.core.errors import InputError
from imagekit.k8s.compute_domain import NAME_CHARS, ComputeDomainOptions
from imagekit.k8s.domain_validation import render_domain_validation
from imagekit.k8s.options import JobOptions
from imagekit.k8s.validate_on import COMPONENT, PLAN_NAME, PRODUCT_LABEL, parse_plan, parse_products
from imagekit.probe import protocol
from tests.conftest import REPO, run_cli
from tests.unit.k8s.test_compute_domain import FIT, KUBERNETES, OLD_ARM, _lock_file, shipped_lock

GB200 = "NVIDIA-GB200"
H100 = "NVIDIA-H100-80GB-HBM3"


def rendered_jobs(nodes: int = 4) -> tuple[dict[str, str], tuple[str, ...]]:
    options = JobOptions(gpus=4, namespace="ml")
    done = render_domain_validation(
        shipped_lock(), options, parse_products([GB200, H100]), ComputeDomainOptions(nodes)
    )
    return done.files, done.left_out


def test_each_rack_cell_gets_a_domain_job_on_the_product_running_the_probe() -> None:
    files, left_out = rendered_jobs()
    plan = parse_plan(files[PLAN_NAME].encode(), "plan")
    assert {j.cell for j in plan.jobs} >= {FIT} and OLD_ARM not in {j.cell for j in plan.jobs}
    assert {(j.product, j.nodes, j.gpus, j.host_machine) for j in plan.jobs} == {(GB200, 4, 4, "aarch64")}
    assert any(line.startswith(f"{OLD_ARM}: its torch has no kernels") for line in left_out)
    for job in plan.jobs:
        assert len(job.job) <= NAME_CHARS
        domain, service, manifest = yaml.safe_load_all(files[f"{job.job}.yaml"])
        assert domain["kind"] == "ComputeDomain" and domain["spec"]["numNodes"] == 4
        assert service["spec"]["clusterIP"] == "None"
        assert manifest["metadata"]["labels"]["app.kubernetes.io/component"] == COMPONENT
        assert manifest["metadata"]["annotations"][naming.annotation("gpu-product")] == GB200
        pod = manifest["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {PRODUCT_LABEL: GB200, "kubernetes.io/arch": "arm64"}
        (container,) = pod["containers"]
        assert container["image"] == job.image and "--require-gpu" in container["args"]
        assert "--host-machine" in container["args"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert (env[protocol.NNODES], env[protocol.NPROC_PER_NODE]) == ("4", "4")


@pytest.mark.parametrize("version", KUBERNETES)
def test_the_jobs_and_services_are_strictly_valid(version: str) -> None:
    files, _ = rendered_jobs()
    for name, text in files.items():
        if name == PLAN_NAME:
            continue
        for manifest in yaml.safe_load_all(text):
            if manifest["kind"] in ("Job", "Service"):
                kubernetes_validate.validate(manifest, version, strict=True)


def test_a_plan_entry_whose_node_count_was_edited_away_is_refused() -> None:
    files, _ = rendered_jobs()
    data = json.loads(files[PLAN_NAME])
    long = [n for n, j in enumerate(data["jobs"]) if len(j["job"]) == NAME_CHARS]
    assert long  # the shipped cells' names are cut to leave room for the pods' index
    data["jobs"][long[0]]["nodes"] = None
    with pytest.raises(InputError, match="the Job's name carries another digest, cell or product"):
        parse_plan(json.dumps(data).encode(), "plan")
    data["jobs"][long[0]]["nodes"] = 19
    with pytest.raises(InputError, match=r"nodes"):
        parse_plan(json.dumps(data).encode(), "plan")


def test_no_rack_cell_for_the_products_is_one_line() -> None:
    options = JobOptions(gpus=4)
    with pytest.raises(InputError, match=re.escape(f"hosts of {H100} (x86_64)")):
        render_domain_validation(shipped_lock(), options, parse_products([H100]), ComputeDomainOptions(2))
    with pytest.raises(InputError, match="leave --command out"):
        render_domain_validation(
            shipped_lock(), JobOptions(command=("true",)), parse_products([GB200]), ComputeDomainOptions(2)
        )


def test_the_command_writes_the_jobs_and_the_plan(tmp_path: Path) -> None:
    out = tmp_path / "validate"
    flags = ["--only", "*-arm64", "--compute-domain", "2", "--gpus", "4", "--validate-on", GB200]
    done = run_cli(
        "k8s",
        "--matrix",
        str(REPO / "matrix.yaml"),
        "--lock",
        str(_lock_file(tmp_path)),
        "--out",
        str(out),
        *flags,
    )
    assert done.exit_code == 0, done.stderr
    plan = parse_plan((out / PLAN_NAME).read_bytes(), "plan")
    assert {j.nodes for j in plan.jobs} == {2}
    assert sorted(p.name for p in out.iterdir()) == sorted([PLAN_NAME, *(f"{j.job}.yaml" for j in plan.jobs)])
    assert f"imagekit: note: no compute-domain Job for {OLD_ARM}" in done.stderr


def test_with_dra_the_claim_selects_the_product_and_no_label_pins_it() -> None:
    """--gpu-request dra: the pods' GPU claim selects the productName as NVML spells it; feature
    discovery's product label is not asked for (a DRA cluster need not run feature discovery)."""
    options = JobOptions(gpus=4, namespace="ml", gpu_request="dra")
    done = render_domain_validation(
        shipped_lock(), options, parse_products(["NVIDIA GB200"], dra=True), ComputeDomainOptions(2)
    )
    plan = parse_plan(done.files[PLAN_NAME].encode(), "plan")
    assert plan.jobs and {j.product for j in plan.jobs} == {GB200}
    for job in plan.jobs:
        kinds = [d["kind"] for d in yaml.safe_load_all(done.files[f"{job.job}.yaml"])]
        assert kinds == ["ComputeDomain", "ResourceClaimTemplate", "Service", "Job"]
        _, template, _, manifest = yaml.safe_load_all(done.files[f"{job.job}.yaml"])
        (request,) = template["spec"]["spec"]["devices"]["requests"]
        expressions = [s["cel"]["expression"] for s in request["exactly"]["selectors"]]
        assert expressions == ["device.attributes['gpu.nvidia.com'].productName == 'NVIDIA GB200'"]
        pod = manifest["spec"]["template"]["spec"]
        assert PRODUCT_LABEL not in pod.get("nodeSelector", {})
        assert pod["nodeSelector"]["kubernetes.io/arch"] == "arm64"
