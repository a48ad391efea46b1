"""tests/unit/k8s/test_validate_on.py's slow tests: kubernetes-validate's strict schemas on the Jobs of every
cell and GPU product of the shipped lock file."""

from __future__ import annotations

import kubernetes_validate

from imagekit.k8s.options import JobOptions
from imagekit.k8s.validate_on import (
    parse_products,
    render_validation,
)
from tests.unit.k8s.test_validate_on import GH200, H100, L40S, jobs, shipped_lock


def test_one_job_per_cell_and_product_its_platform_runs_on() -> None:
    published = shipped_lock()
    rendered = render_validation(published, JobOptions(namespace="ml"), parse_products([H100, L40S, GH200]))
    manifests = jobs(rendered.files)
    plan = rendered.plan
    amd64 = [c for c, e in published.images.items() if e.platform == "linux/amd64"]
    arm64 = [c for c, e in published.images.items() if e.platform == "linux/arm64"]
    assert amd64 and arm64
    # GH200 hosts are Grace (aarch64): arm64 cells there, amd64 ones on the x86 products
    assert len(manifests) == len(plan.jobs) == 2 * len(amd64) + len(arm64)
    assert {(j.cell, j.product) for j in plan.jobs} == {
        *((c, p) for c in amd64 for p in (H100, L40S)),
        *((c, GH200) for c in arm64),
    }
    assert len(rendered.left_out) == len(amd64) + 2 * len(arm64)
    assert f"{arm64[0]} (linux/arm64) on {H100}: its hosts are x86_64" in rendered.left_out
    for manifest, job in zip(manifests, sorted(plan.jobs, key=lambda j: j.job), strict=True):
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)
        entry = published.images[job.cell]
        pod = manifest["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert manifest["metadata"]["name"] == job.job and len(job.job) <= 63
        assert manifest["metadata"]["labels"]["app.kubernetes.io/component"] == "validate-on"
        assert manifest["metadata"]["annotations"]["imagekit/gpu-product"] == job.product
        arch = "arm64" if entry.platform == "linux/arm64" else "amd64"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": job.product, "kubernetes.io/arch": arch}
        # pinned to one product: no affinity from the cell (the probe says why a GPU is not served)
        assert "affinity" not in pod
        # the cell's own manifest, by digest: the record names what ran
        assert container["image"] == entry.reference == job.image and job.digest == entry.digest
        assert "command" not in container  # behind the image's entrypoint, as verification ran it
        machine = "aarch64" if arch == "arm64" else "x86_64"
        assert container["args"][:2] == ["python3", "/opt/imagekit/check.py"]
        assert (
            container["args"][-3:]
            == ["--require-gpu", "--host-machine", machine]
            == [
                "--require-gpu",
                "--host-machine",
                job.host_machine,
            ]
        )
        assert container["resources"]["limits"] == {"memory": "14Gi", "nvidia.com/gpu": 1}  # + /dev/shm
        security = container["securityContext"]
        assert (
            security["runAsNonRoot"] and security["runAsUser"] == 10001 and security["readOnlyRootFilesystem"]
        )
        assert {"name": "HOME", "value": "/tmp"} in container["env"]
        assert manifest["metadata"]["namespace"] == "ml" == job.namespace
