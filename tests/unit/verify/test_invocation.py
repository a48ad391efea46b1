"""How a probe is asked to check an image (its options and environment, from the image's labels) and
the verdict its document earns."""

from __future__ import annotations

from typing import Any

import pytest

from imagekit.verify.gpus import GpuRequest
from imagekit.verify.invocation import check_arguments, check_invocation, verdict_of


def test_check_arguments_come_from_labels() -> None:
    labels = {
        "imagekit.torch": "2.1.2",
        "imagekit.cuda": "12.1",
        "imagekit.cudnn": "8",
        "imagekit.python": "3.10",
        "imagekit.flavour": "devel",
    }
    assert check_arguments(labels, GpuRequest.parse("all")) == [
        "--expect-torch", "2.1.2", "--expect-cuda", "12.1", "--expect-cudnn", "8",
        "--expect-python", "3.10", "--flavour", "devel", "--require-gpu",
    ]  # fmt: skip
    assert "--require-gpu" not in check_arguments(labels, GpuRequest.parse("none"))


def test_verify_tells_a_probe_what_it_may_not_know_in_its_environment() -> None:
    """An image published by an earlier release runs its own probe, whose parser exits 2 on an
    option it does not know (--expect-cuda-archs, --host-machine) but ignores a variable."""
    labels = {"imagekit.torch": "2.11.0", "imagekit.cuda-archs": "8.0;9.0"}
    args, environment = check_invocation(labels, GpuRequest.parse("none"), "x86_64")
    assert args == ["--expect-torch", "2.11.0"]
    assert environment == {"IMAGEKIT_EXPECT_CUDA_ARCHS": "8.0;9.0", "IMAGEKIT_HOST_MACHINE": "x86_64"}
    # a Job (k8s) runs an image this release published: everything as options
    assert check_arguments(labels, GpuRequest.parse("none"), "x86_64") == [
        "--expect-torch", "2.11.0", "--expect-cuda-archs", "8.0;9.0", "--host-machine", "x86_64",
    ]  # fmt: skip


def doc(
    *statuses: str,
    gpu_visible: bool,
    required: bool = True,
    gpu: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Generic checks c0, c1... plus the GPU checks (cuda_available, gemm_gpu: pass unless given)."""
    gpu_checks = {"cuda_available": "pass", "gemm_gpu": "pass"} if gpu is None else gpu
    checks = [{"name": f"c{i}", "status": s, "required": required} for i, s in enumerate(statuses)]
    checks += [{"name": name, "status": s, "required": True} for name, s in gpu_checks.items()]
    return {"gpu_visible": gpu_visible, "checks": checks}


@pytest.mark.parametrize(
    ("document", "gpus", "verdict"),
    [
        (doc("pass", "pass", gpu_visible=True), "all", "validated"),
        (doc("pass", "skip", gpu_visible=False), "none", "checked"),
        # a GPU was asked for and none was visible: never a pass, even if nothing failed
        (doc("pass", "skip", gpu_visible=False), "all", "failed"),
        (doc("pass", "fail", gpu_visible=True), "all", "failed"),
        (doc("pass", "fail", gpu_visible=True, required=False), "all", "validated"),
        # a GPU visible with --gpus none still cannot validate: nothing GPU-side was asked for
        (doc("pass", gpu_visible=True), "none", "checked"),
        ({"checks": []}, "all", "failed"),
        ({}, "none", "failed"),
        # validated needs the GPU checks themselves, present and passed
        (doc("pass", gpu_visible=True, gpu={}), "all", "failed"),
        (doc("pass", gpu_visible=True, gpu={"cuda_available": "pass"}), "all", "failed"),
        (doc("pass", gpu_visible=True, gpu={"gemm_gpu": "pass"}), "all", "failed"),
        (doc("pass", gpu_visible=True, gpu={"cuda_available": "pass", "gemm_gpu": "skip"}), "all", "failed"),
        (doc("pass", gpu_visible=True, gpu={"cuda_available": "skip", "gemm_gpu": "pass"}), "all", "failed"),
        # without a GPU asked for, skipped GPU checks are what is expected
        (
            doc("pass", gpu_visible=False, gpu={"cuda_available": "skip", "gemm_gpu": "skip"}),
            "none",
            "checked",
        ),
        # any status but pass or skip counts as a failure
        (doc("pass", "error", gpu_visible=True), "all", "failed"),
        (doc("pass", "timeout", gpu_visible=False), "none", "failed"),
        (doc("pass", gpu_visible=True, gpu={"cuda_available": "pass", "gemm_gpu": "error"}), "all", "failed"),
    ],
)
def test_verdicts(document: dict[str, Any], gpus: str, verdict: str) -> None:
    assert verdict_of(document, GpuRequest.parse(gpus))[0] == verdict
