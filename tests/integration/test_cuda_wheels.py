"""The CUDA-wheel example for real: PyPI's torch 2.1.2 (the CUDA 12.1 build) and the nvidia-*-cu12
wheels it pulls, installed from a wheelhouse into the plain Debian base, built and checked here.

No GPU on this machine, but the CUDA userspace is real: the checks that need no GPU read torch's
CUDA, the cuDNN and the libcudart it loads from the wheels, compile on the CPU and train a step.

Built with the BuildKit builder: on the containerd image store the classic builder commits each
multi-GB step as a gzip-compressed blob and a snapshot of its own (about 17 minutes here; with the
modules before it, it filled a CI machine's disk); BuildKit compresses only the finished image's
layers, once (about 7.5 minutes). `--gpus all` through a fake NVIDIA hook is test_verify's:
copying this 5.4 GB image into a private engine for it cost 4 more minutes and 8 GB.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from testbed.imagekit_process import imagekit
from testbed.matrix_projects import RUN_ID, TEST_LABEL
from tests.integration.conftest import REPO_ROOT, example_project, remove_built

EXAMPLE = REPO_ROOT / "examples" / "cuda-wheels"


def checks_of(done: subprocess.CompletedProcess[str]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    (result,) = json.loads(done.stdout[done.stdout.index("[\n") :])  # after the verdict line
    return result, {c["name"]: c for c in result["checks"]}


@pytest.fixture(scope="module")
def cuda_wheels(
    api: docker.APIClient, debian_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The example's matrix, built under the test's own image name (a user's image keeps its tags)."""
    root = example_project(
        EXAMPLE,
        tmp_path_factory.mktemp("cuda-wheels"),
        "imagekit-examples/pytorch-cuda-wheels",
        f"imagekit-test/cuda-wheels-{RUN_ID}",
    )
    done = imagekit(
        "build", "--matrix", "matrix.yaml", "--builder", "buildkit", "--compression", "zstd",
        "--label", f"{TEST_LABEL}={RUN_ID}", cwd=root, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    yield root
    remove_built(api, root)


def test_the_cuda_userspace_from_the_wheels_is_checked_for_real(cuda_wheels: Path) -> None:
    done = imagekit("verify", "--matrix", "matrix.yaml", "--gpus", "none", "--json", cwd=cuda_wheels)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result, checks = checks_of(done)
    assert result["verdict"] == "checked" and not result["gpu_visible"]
    # read from the image, not from a label: torch's CUDA, the cuDNN it loads, libcudart's version
    assert (checks["torch"]["status"], checks["torch"]["actual"]) == ("pass", "2.1.2+cu121")
    assert (checks["torch_cuda"]["status"], checks["torch_cuda"]["actual"]) == ("pass", "12.1")
    assert (checks["cudnn"]["status"], checks["cudnn"]["actual"]) == ("pass", "8.9.2")
    assert (checks["libcudart"]["status"], checks["libcudart"]["actual"]) == ("pass", "12.1")
    # the plain base asks for the GPU itself: capabilities with compute
    assert checks["environment"]["status"] == "pass"
    assert "compute,utility" in (checks["environment"]["detail"] or "")
    # the CPU paths run for real: inductor's C++ on the CPU, a bf16 training step
    assert checks["compile"]["status"] == "pass", checks["compile"]
    assert checks["train_step"]["status"] == "pass", checks["train_step"]
    assert checks["gemm_cpu"]["status"] == "pass"
    for name in ("cuda_available", "gemm_gpu", "nvidia_smi"):
        assert checks[name]["status"] == "skip" and checks[name]["reason"] == "no GPU requested"
