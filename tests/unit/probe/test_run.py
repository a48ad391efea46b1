"""The check run (imagekit/probe/run.py) as it ships: the zipapp run by the host's Python without
torch and by a real Python 3.8, the GPU policy without a GPU, --only/--skip, and stdout kept for
the one JSON document. Fixture provenance: tests/fixtures/check/NOTES.md."""

from __future__ import annotations

import ast
import json
import os
import platform
import subprocess
import sys
import textwrap
import zipfile
from typing import Any

import pytest

from tests.unit.probe_runs import (
    FIXTURES,
    PROBE,
    REPO,
    SCRIPT,
    by_name,
    clean_env,
    python_3_8,
    run_script,
)

GPU_CHECKS = (
    "nvidia_smi",
    "driver",
    "require",
    "cuda_available",
    "arch",
    "gemm_gpu",
    "cudnn_conv",
    "gemm_perf",
    "nccl",
    "nccl_bandwidth",
)


TORCH_CHECKS = ("torch_cuda", "cudnn", "gemm_cpu", "compile", "extension", "train_step")


def assert_no_gpu_pass(report: dict[str, Any]) -> None:
    """The rule the whole script exists for: without a GPU no GPU check may read pass."""
    assert report["gpu_visible"] is False
    for name in GPU_CHECKS:
        assert by_name(report)[name]["status"] != "pass", name


def test_script_is_python_3_8_syntax() -> None:
    """Always runs (no 3.8 interpreter needed): the grammar check behind the real 3.8 run below."""
    with zipfile.ZipFile(SCRIPT) as archive:
        names = archive.namelist()
        sources = {name: archive.read(name).decode("utf-8") for name in names if name.endswith(".py")}
    assert "__main__.py" in sources and len(sources) == len(list(PROBE.rglob("*.py"))) + 1
    assert len(names) == len(sources) + 1  # and the generated tables.json
    for name, text in sources.items():
        ast.parse(text, filename=name, feature_version=(3, 8))


def test_host_run_without_torch_fails_clearly() -> None:
    rc, report, stderr = run_script(sys.executable, "--expect-torch", "2.13.0", "--expect-cuda", "cpu")
    assert "Traceback" not in stderr
    assert rc == 1
    assert report["schema"] == 2
    assert report["platform"] == {"machine": platform.machine(), "host_machine": None, "emulated": None}
    torch_check = by_name(report)["torch"]
    assert torch_check["status"] == "fail"
    assert "cannot be imported" in torch_check["cause"] and torch_check["fix"]
    assert report["summary"]["required_failed"] == ["torch"]
    # nothing that needs torch pretends to have run
    for name in TORCH_CHECKS:
        assert by_name(report)[name]["status"] == "skip", name
    assert report["telemetry"] is None
    assert report["inventory"]["packages"]
    assert_no_gpu_pass(report)


def test_gpu_not_requested_means_skip() -> None:
    # NVIDIA_VISIBLE_DEVICES=all is the nvidia/cuda image default, not a request
    _, report, _ = run_script(sys.executable, env=clean_env(NVIDIA_VISIBLE_DEVICES="all"))
    assert report["gpu_requested"] is False
    for name in ("nvidia_smi", "cuda_available", "gemm_gpu", "nccl"):
        assert by_name(report)[name]["status"] == "skip"
        assert by_name(report)[name]["reason"] == "no GPU requested"
    assert_no_gpu_pass(report)


@pytest.mark.skipif(python_3_8() is None, reason="no Python 3.8 here (the syntax check above still runs)")
def test_script_runs_on_python_3_8() -> None:
    python = python_3_8()
    assert python is not None
    rc, report, stderr = run_script(python, "--expect-cuda", "cpu")
    assert "Traceback" not in stderr
    assert rc == 1  # no torch in that interpreter
    assert by_name(report)["torch"]["status"] == "fail"


def test_c_stdio_written_during_the_checks_never_follows_the_json() -> None:
    program = textwrap.dedent(
        """
        import ctypes, sys
        from imagekit.probe import run
        real = run.build_report
        def noisy(ctx, invocation=None):
            report = real(ctx, invocation)
            ctypes.CDLL(None).printf(b"banner from a C library\\n")  # left in C's stdout buffer
            return report
        run.build_report = noisy
        sys.exit(run.main([]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=REPO,
        # PYTHONUNBUFFERED would make C's stdout unbuffered too, hiding the problem
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    document = json.loads(done.stdout)  # nothing before or after the one document
    assert "checks" in document
    assert "banner from a C library" in done.stderr


def test_only_and_skip_leave_checks_out_as_skips() -> None:
    rc, report, _ = run_script(sys.executable, "--only", "python,environment", "--expect-python", "3.0")
    checks = by_name(report)
    assert rc == 1 and checks["python"]["status"] == "fail"  # what runs still counts
    assert checks["environment"]["status"] == "pass"
    assert checks["gemm_cpu"] == {**checks["gemm_cpu"], "status": "skip"}
    assert checks["gemm_cpu"]["reason"] == "not selected (--only python,environment)"
    _, report, _ = run_script(sys.executable, "--skip", "torch", env=clean_env(IMAGEKIT_CHECK_SKIP="nvcc"))
    checks = by_name(report)
    assert checks["torch"]["reason"] == "left out (--skip)" and checks["torch"]["status"] == "skip"
    assert checks["nvcc"]["status"] == "skip" and checks["nvcc"]["reason"] != "left out (--skip)"  # args win
    _, report, _ = run_script(sys.executable, env=clean_env(IMAGEKIT_CHECK_ONLY="python"))
    assert by_name(report)["torch"]["reason"] == "not selected (--only python)"


def test_fixture_dir_has_notes_for_every_file() -> None:
    notes = (FIXTURES / "NOTES.md").read_text(encoding="utf-8")
    for path in FIXTURES.iterdir():
        if path.name != "NOTES.md":
            assert f"`{path.name}`" in notes, path.name
