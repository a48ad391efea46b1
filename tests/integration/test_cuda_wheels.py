"""The CUDA-wheel example for real: PyPI's torch 2.1.2 (the CUDA 12.1 build) and the nvidia-*-cu12
wheels it pulls, installed from a wheelhouse into the plain Debian base, built and checked here.

No GPU on this machine, but the CUDA userspace is real: the checks that need no GPU read torch's
CUDA, the cuDNN and the libcudart it loads from the wheels, compile on the CPU and train a step.
Through the test engine with a fake NVIDIA hook, `--gpus all` fails with the honest diagnosis.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.conftest import imagekit
from tests.integration.conftest import REPO_ROOT, RUN_ID, TEST_LABEL
from tests.integration.fake_gpu_engine import fake_gpu_engine

EXAMPLE = REPO_ROOT / "examples" / "cuda-wheels"


def checks_of(done: subprocess.CompletedProcess[str]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    (result,) = json.loads(done.stdout[done.stdout.index("[\n") :])  # after the verdict line
    return result, {c["name"]: c for c in result["checks"]}


@pytest.fixture(scope="module")
def cuda_wheels(api: docker.APIClient, debian_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example's matrix, built under the test's own image name (a user's image keeps its tags)."""
    setup = subprocess.run(
        [str(EXAMPLE / "setup.sh")], capture_output=True, text=True, timeout=1800, check=False
    )
    assert setup.returncode == 0, f"examples/cuda-wheels/setup.sh failed:\n{setup.stderr[-3000:]}"
    root = tmp_path_factory.mktemp("cuda-wheels")
    (root / "wheelhouse").mkdir()
    for wheel in (EXAMPLE / "wheelhouse").iterdir():
        try:
            os.link(wheel, root / "wheelhouse" / wheel.name)
        except OSError:
            shutil.copy(wheel, root / "wheelhouse" / wheel.name)
    text = (EXAMPLE / "matrix.yaml").read_text()
    name = "imagekit-examples/pytorch-cuda-wheels"
    assert name in text
    (root / "matrix.yaml").write_text(text.replace(name, f"imagekit-test/cuda-wheels-{RUN_ID}"))
    done = imagekit(
        "build", "--matrix", "matrix.yaml", "--label", f"{TEST_LABEL}={RUN_ID}", cwd=root, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return root


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


def test_a_gpu_asked_for_through_the_nvidia_hook_fails_honestly(
    cuda_wheels: Path, api: docker.APIClient
) -> None:
    report = json.loads((cuda_wheels / ".imagekit" / "report.json").read_text())
    (cell,) = report["cells"]
    root = Path(tempfile.mkdtemp(prefix="ikcw-", dir="/tmp"))
    root.rmdir()
    with fake_gpu_engine(root, (cell["image_id"],)) as engine:
        env = {"DOCKER_HOST": engine.host}
        done = imagekit("verify", cell["image_id"], "--gpus", "all", "--json", cwd=root.parent, env=env)
        hook_calls = engine.hook_calls()  # the engine's files go with it
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert hook_calls == ["prestart"], "the engine must call the NVIDIA hook as a prestart hook"
    result, checks = checks_of(done)
    assert result["verdict"] == "failed" and result["gpu_requested"] and not result["gpu_visible"]
    # asked for, not visible: the GPU checks fail (never skip, never pass) and say why
    for name in ("cuda_available", "gemm_gpu"):
        assert checks[name]["status"] == "fail", checks[name]
        assert "--gpus missing or no NVIDIA runtime" in (checks[name]["cause"] or "")
    # what needs no GPU still passes on that engine: the failure is the missing driver, not the image
    assert checks["torch_cuda"]["status"] == "pass" and checks["cudnn"]["status"] == "pass"
