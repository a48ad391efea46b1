"""Kubernetes Jobs from the lock file: options checked, every manifest valid."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from imagekit.errors import InputError
from imagekit.k8s import Claim, JobOptions, Toleration, job_name, parse_node_selector, render_jobs
from tests.unit.report_samples import LOCK_DIGEST as DIGEST
from tests.unit.report_samples import lock_entry as entry


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
    files = render_jobs({"a": entry("a"), "b": entry("b" * 70)}, options)
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
        if not options.command:
            assert container["command"][:2] == ["python3", "/opt/imagekit/check.py"]
            assert ("--require-gpu" in container["command"]) == (options.gpus > 0)
            assert container["command"][container["command"].index("--expect-torch") + 1] == "2.1.2"
        claims = [
            v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
        ]
        assert claims == [c.name for c in options.claims]
