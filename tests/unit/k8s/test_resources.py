"""Every imagekit pod asks for CPU and memory by default, sized for the probe and its GPUs, with a
memory limit that covers /dev/shm (imagekit.k8s.resources); each size is a flag, checked strictly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from imagekit.core.errors import InputError
from imagekit.k8s.compute_domain import ComputeDomainOptions, render_domains
from imagekit.k8s.options import JobOptions
from imagekit.k8s.resources import memory_bytes, quantity, sizes
from imagekit.k8s.validate_on import PLAN_NAME, parse_products, render_validation
from imagekit.report.lockfile import Lock
from tests.conftest import REPO, run_cli
from tests.unit.k8s.test_compute_domain import shipped_lock
from tests.unit.k8s.test_manifests import _pod_of, render
from tests.unit.report_samples import lock_entry as entry

KUBERNETES = ("1.34.0", "1.35.0", "1.36.0", "1.37.0")


def _sized(pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The workload container's requests and limits, and its /dev/shm's size in bytes."""
    container = pod["containers"][0]
    (shm,) = (v["emptyDir"] for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["medium"] == "Memory"
    return (
        container["resources"]["requests"],
        container["resources"]["limits"],
        memory_bytes("", shm["sizeLimit"]),
    )


@pytest.mark.parametrize(
    ("gpus", "cpu", "memory", "limit", "shm"),
    [
        (0, "1", "4Gi", "6Gi", "2Gi"),  # no GPU: the probe alone, the 2Gi /dev/shm NCCL's floor
        (1, "2", "6Gi", "14Gi", "8Gi"),
        (8, "9", "20Gi", "84Gi", "64Gi"),  # a whole node: 8Gi of /dev/shm per GPU counted in the limit
    ],
)
def test_a_job_is_never_best_effort_and_its_limit_covers_dev_shm(
    gpus: int, cpu: str, memory: str, limit: str, shm: str
) -> None:
    (text,) = render({"c": entry("c")}, JobOptions(gpus=gpus)).values()
    requests, limits, shm_bytes = _sized(_pod_of(text))
    assert (requests["cpu"], requests["memory"], limits["memory"]) == (cpu, memory, limit)
    assert "cpu" not in limits  # no CFS quota on NCCL's threads unless --cpu-limit
    assert shm_bytes == memory_bytes("", shm)
    # every byte /dev/shm may hold fits under the limit beside what the request sized the probe for
    assert memory_bytes("", limits["memory"]) == memory_bytes("", requests["memory"]) + shm_bytes


def test_every_job_kind_is_sized_for_the_gpus_its_pod_holds(tmp_path: Path) -> None:
    """validate-on Jobs and compute-domain pods too; a domain's pod is sized for its --gpus even
    though its GPUs are attached apart from the container (a limit for 0 GPUs would OOM-kill it
    once NCCL filled the 32Gi /dev/shm it was given)."""
    options = JobOptions(gpus=4, namespace="ml")
    products = parse_products(["NVIDIA-H100-80GB-HBM3"])
    validation = render_validation(Lock({"c": entry("c")}), options, products).files
    domains = render_domains(shipped_lock(), options, ComputeDomainOptions(2)).files
    texts = [t for n, t in validation.items() if n != PLAN_NAME] + list(domains.values())
    for text in texts:
        (job,) = (d for d in yaml.safe_load_all(text) if d["kind"] == "Job")
        requests, limits, shm_bytes = _sized(job["spec"]["template"]["spec"])
        assert (requests["cpu"], requests["memory"], limits["memory"]) == ("5", "12Gi", "44Gi")
        assert shm_bytes == 32 * 2**30


def test_each_size_is_its_flag_and_valid_for_every_kubernetes_release() -> None:
    options = JobOptions(gpus=2, cpu="12", cpu_limit="16", memory="48Gi", memory_limit="96Gi", shm="24Gi")
    (text,) = render({"c": entry("c")}, options).values()
    requests, limits, shm_bytes = _sized(_pod_of(text))
    assert requests == {"cpu": "12", "memory": "48Gi", "nvidia.com/gpu": 2}
    assert limits == {"cpu": "16", "memory": "96Gi", "nvidia.com/gpu": 2}
    assert shm_bytes == 24 * 2**30
    for version in KUBERNETES:
        kubernetes_validate.validate(yaml.safe_load(text), version, strict=True)
    # --memory alone: the limit is that request and /dev/shm
    assert sizes(JobOptions(gpus=1, memory="1536Mi")).memory_limit == "9728Mi"
    # --memory-limit smaller than the default /dev/shm: /dev/shm shrinks to it
    assert sizes(JobOptions(gpus=8, memory="8Gi", memory_limit="32Gi")).shm == "32Gi"


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--cpu", "lots", "--cpu 'lots': not a Kubernetes quantity (like 8, 500m, 16Gi)"),
        ("--cpu", "-2", "--cpu '-2': not a Kubernetes quantity"),
        ("--cpu", "1e3", "--cpu '1e3': not a Kubernetes quantity"),
        ("--cpu", "0", "--cpu '0': give CPUs from 1m to 4096 in whole millicores"),
        ("--cpu", "100u", "--cpu '100u': not a Kubernetes quantity"),
        ("--cpu", "0.0005", "--cpu '0.0005': give CPUs from 1m to 4096 in whole millicores"),
        ("--cpu", "5000", "--cpu '5000': give CPUs from 1m to 4096"),
        ("--cpu-limit", "1", "--cpu-limit '1': below the CPU request 2; raise it or lower --cpu"),
        ("--memory", "500m", "--memory '500m': not a whole number of bytes"),
        ("--memory", "16GiB", "--memory '16GiB': not a Kubernetes quantity"),
        ("--memory", "1k", "--memory '1k': give a size from 1Mi to 64Ti"),
        ("--memory", "100Ti", "--memory '100Ti': give a size from 1Mi to 64Ti"),
        ("--memory", "9" * 40, f"--memory '{'9' * 40}': not a Kubernetes quantity"),
        ("--memory-limit", "4Gi", "--memory-limit '4Gi': below the memory request 6Gi"),
        ("--shm", "2.5", "--shm '2.5': not a whole number of bytes"),
    ],
)
def test_a_bad_size_is_one_line_and_exit_2(flag: str, value: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        sizes(JobOptions(**{flag.removeprefix("--").replace("-", "_"): value}))
    lock = tmp_path / "images.lock.json"
    lock.write_text("{}")  # never read: the sizes are checked first
    done = run_cli("k8s", "-m", str(REPO / "matrix.yaml"), "--lock", str(lock), flag, value)
    assert done.exit_code == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"imagekit: error: {message}"), line


def test_quantities_are_read_as_kubernetes_reads_them() -> None:
    assert quantity("--x", "500m") * 2 == 1
    assert quantity("--x", "1.5Gi") == 1536 * 2**20
    assert quantity("--x", "2k") == 2000 and quantity("--x", "2Ki") == 2048
    assert quantity("--x", "1E") == 10**18 and memory_bytes("--x", "64Ti") == 2**46
