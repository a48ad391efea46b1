"""tests/unit/probe/test_run.py's slow tests: the probe runs as a process of its own, several times per
test, or on the real torch CPU wheel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.probe.test_run import assert_no_gpu_pass
from tests.unit.probe_runs import (
    SCRIPT,
    by_name,
    clean_env,
    run_script,
)


def test_bad_arguments_exit_2() -> None:
    for args in (
        ["--expect-cuda", "twelve"],
        ["--flavour", "slim"],
        ["--bogus"],
        ["--only", "gemm,nope"],
        ["--skip", "compiles"],
        ["--task", "compile"],  # an internal role without its --result-file
    ):
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=clean_env(), check=False
        )
        assert proc.returncode == 2, args
        assert "Traceback" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        env=clean_env(IMAGEKIT_EXPECT_CUDA="x"),
        check=False,
    )
    assert proc.returncode == 2


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--require-gpu"], {}),
        ([], {"IMAGEKIT_REQUIRE_GPU": "true"}),
        ([], {"NVIDIA_VISIBLE_DEVICES": "0,1"}),
        ([], {"NVIDIA_VISIBLE_DEVICES": "GPU-b5169cef-2205-c30e-f2b3-220cfa14bafd"}),
    ],
)
def test_gpu_requested_but_missing_fails_with_cause(args: list[str], env: dict[str, str]) -> None:
    rc, report, _ = run_script(sys.executable, "--expect-cuda", "12.1", *args, env=clean_env(**env))
    assert rc == 1
    assert report["gpu_requested"] is True
    for name in ("nvidia_smi", "driver", "cuda_available", "arch", "gemm_gpu", "nccl"):
        result = by_name(report)[name]
        assert result["status"] == "fail", name
        assert "--gpus missing or no NVIDIA runtime" in result["cause"]
        assert "--gpus all" in result["fix"]
    assert_no_gpu_pass(report)


def test_void_devices_do_not_request() -> None:
    for value in ("void", "none", ""):
        _, report, _ = run_script(sys.executable, env=clean_env(NVIDIA_VISIBLE_DEVICES=value))
        assert report["gpu_requested"] is False
        assert by_name(report)["gemm_gpu"]["status"] == "skip"


def test_real_torch_cpu_run_passes_and_skips_gpu(torch_python: str, tmp_path: Path) -> None:
    """The whole script on the real CPU wheel, devel flavour: torch.compile (inductor C++), a C++
    extension built with load_inline and a bf16 training step run for real; nothing written to HOME
    or left in the temporary directory."""
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = clean_env(HOME=str(home), TMPDIR=str(tmp))
    rc, report, stderr = run_script(
        torch_python,
        *(
            "--expect-torch",
            "2.13.0",
            "--expect-cuda",
            "cpu",
            "--expect-python",
            "3.11",
            "--flavour",
            "devel",
        ),
        env=env,
    )
    assert "Traceback" not in stderr
    checks = by_name(report)
    assert rc == 0, report["summary"]
    compiled = checks["compile"]
    assert compiled["status"] == "pass", compiled
    cpu = compiled["detail"]["parts"]["cpu"]
    assert cpu["generated_files"] > 0 and cpu["max_abs_error"] < 1e-4
    assert compiled["detail"]["parts"]["cuda"] == {"status": "skip", "reason": "no GPU requested"}
    extension = checks["extension"]
    assert extension["status"] == "pass", extension
    assert (
        extension["detail"]["parts"]["cpu"]["built"]
        and extension["detail"]["parts"]["cpu"]["max_abs_error"] == 0
    )
    train = checks["train_step"]["detail"]["parts"]["cpu/bfloat16"]
    assert train["status"] == "pass" and train["final_loss"] < 0.5 * train["initial_loss"]
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == []
    assert checks["torch"]["status"] == "pass"
    assert checks["torch"]["actual"] == "2.13.0+cpu"
    assert checks["torch_cuda"]["status"] == "pass"
    gemm = checks["gemm_cpu"]
    assert gemm["status"] == "pass"
    assert gemm["actual"] < 1e-5 and gemm["detail"]["reference"] == "pure Python float64"
    for name in ("cuda_available", "arch", "gemm_gpu", "gemm_perf", "nccl", "nvidia_smi"):
        assert checks[name]["status"] == "skip" and checks[name]["reason"] == "no GPU requested", name
    assert any(p["name"] == "torch" for p in report["inventory"]["packages"])
    assert_no_gpu_pass(report)


def test_real_torch_require_gpu_fails(torch_python: str) -> None:
    rc, report, _ = run_script(
        torch_python,
        "--expect-torch",
        "2.13.0",
        "--expect-cuda",
        "cpu",
        "--require-gpu",
        "--skip",
        "extension",
    )
    assert rc == 1
    checks = by_name(report)
    for name in ("cuda_available", "arch", "gemm_gpu", "nccl"):
        assert checks[name]["status"] == "fail", name
    # the CPU parts ran and passed; the GPU parts of the same checks fail, never read as a pass
    for name in ("compile", "train_step"):
        assert checks[name]["status"] == "fail", name
        parts = checks[name]["detail"]["parts"]
        assert parts["cuda"]["status"] == "fail" and "--gpus missing" in parts["cuda"]["cause"]
        assert [p["status"] for key, p in parts.items() if key.startswith("cpu")] == ["pass"]
        assert "--gpus missing" in checks[name]["cause"]
    assert checks["gemm_cpu"]["status"] == "pass"
    assert_no_gpu_pass(report)


def test_real_torch_wrong_version_and_wrong_variant(torch_python: str) -> None:
    rc, report, _ = run_script(
        torch_python, "--expect-torch", "2.12.0", "--expect-cuda", "12.1", "--skip", "compile,train_step"
    )
    checks = by_name(report)
    assert rc == 1
    assert checks["torch"]["status"] == "fail"
    assert checks["torch_cuda"]["status"] == "fail"
    assert "wrong wheel variant" in checks["torch_cuda"]["cause"]
    assert "--index-url https://download.pytorch.org/whl/cu121" in checks["torch_cuda"]["fix"]


def test_real_collectives_machinery_with_gloo(torch_python: str) -> None:
    """The NCCL check's spawn/all-reduce/broadcast path, run for real on the CPU (gloo)."""
    code = (
        f"import sys, json; sys.path.insert(0, {str(SCRIPT)!r}); from imagekit_probe import collectives; "
        "print(json.dumps(collectives.run_collectives(2, 'gloo', 120)))"
    )
    proc = subprocess.run(
        [torch_python, "-c", code], capture_output=True, text=True, timeout=180, check=False
    )
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["ok"] is True, outcome
    assert [r["all_reduce"] and r["broadcast"] for r in outcome["ranks"]] == [True, True]
