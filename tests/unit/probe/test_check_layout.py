"""Where the in-image check looks for CUDA libraries (pip wheels' CUDA 12 and CUDA 13 layouts, read
from the real wheels' file lists), its options (--only/--skip, --help), and its scratch space."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.probe import arguments, context, libraries, protocol, tasks
from tests.unit.probe_runs import FIXTURES, SCRIPT, by_name, clean_env, fixture, run_script


def install_listing(root: Path, listing: str) -> None:
    """Lay out a wheel's files (empty) under a fake site-packages, from `unzip -Z1` of the wheel."""
    for line in fixture(listing).splitlines():
        if line and not line.endswith("/"):
            path = root / line
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()


def test_cuda_13_wheels_share_one_lib_directory(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    for name in (
        "wheel-files-nvidia_cuda_runtime-13.0.96.txt",
        "wheel-files-nvidia_cublas-13.1.0.3.txt",
        "wheel-files-nvidia_cudnn_cu13-9.20.0.48.txt",
        "wheel-files-nvidia_nccl_cu13-2.29.7.txt",
    ):
        install_listing(site, name)
    libs = libraries.pip_cuda_libraries([str(site)])
    assert [Path(p).relative_to(site).as_posix() for p in libs["cudart"]] == [
        "nvidia/cu13/lib/libcudart.so.13"
    ]
    assert "nvidia/cu13/lib/libcublas.so.13" in [Path(p).relative_to(site).as_posix() for p in libs["cublas"]]
    cudnn = [Path(p).relative_to(site).as_posix() for p in libs["cudnn"]]
    assert cudnn == ["nvidia/cudnn/lib/libcudnn.so.9"]  # the libcudnn_*.so.9 sub-libraries beside it
    assert [Path(p).relative_to(site).as_posix() for p in libs["nccl"]] == ["nvidia/nccl/lib/libnccl.so.2"]
    candidates = libraries.cudart_candidates("13", [str(site)])
    assert candidates[:3] == ["libcudart.so", "libcudart.so.13", "libcudart.so.13.0"]
    assert candidates[3:] == [str(site / "nvidia/cu13/lib/libcudart.so.13")]
    assert libraries.cudart_candidates("12", [str(site)])[3:] == []  # a CUDA 13 runtime is not a 12 one


def test_cuda_12_wheel_layout_still_found(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    install_listing(site, "wheel-files-nvidia_cuda_runtime_cu12-12.8.90.txt")
    assert libraries.cudart_candidates("12", [str(site)])[3:] == [
        str(site / "nvidia/cuda_runtime/lib/libcudart.so.12")
    ]


def test_pip_cudnn_header_of_the_cu13_wheel(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    install_listing(site, "wheel-files-nvidia_cudnn_cu13-9.20.0.48.txt")
    header = site / "nvidia/cudnn/include/cudnn_version.h"
    header.write_text(fixture("cudnn-version-h-9.20.0-cu13-wheel.txt"), encoding="utf-8")
    assert libraries.pip_cudnn_header([str(site)]) == ("9.20.0", str(header))


def test_cuda_toolkit_metapackage_names_unsuffixed_wheels() -> None:
    """torch >= 2.12 takes the runtime through cuda-toolkit[cudart]: no -cu13 suffix any more."""
    requires = fixture("cuda-toolkit-13.0.2-requires-cudart-cublas-nvrtc.txt")
    assert "nvidia-cuda-runtime==13.0.96.*" in requires and "-cu13" not in requires
    assert "nvidia-cuda-runtime (CUDA 13" in libraries.cudart_package("13")
    assert libraries.cudart_package("12") == "nvidia-cuda-runtime-cu12"


# -- options ---------------------------------------------------------------------------------------


def test_help_works_and_hides_the_internal_roles() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, env=clean_env(), check=False
    )
    assert done.returncode == 0
    assert "--only" in done.stdout and "--skip" in done.stdout
    assert "--task" not in done.stdout and "--collective-worker" not in done.stdout


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


def test_parse_args_check_names() -> None:
    _, invocation = arguments.parse_args(["--only", "gemm_gpu, gemm_perf", "--only", "nccl"], {})
    assert invocation.only == ("gemm_gpu", "gemm_perf", "nccl")
    with pytest.raises(arguments.ArgumentError, match="unknown check gemm"):
        arguments.parse_args(["--skip", "gemm"], {})
    assert set(protocol.CHECK_NAMES) >= {"compile", "extension", "train_step", "gemm_perf"}


# -- scratch space ---------------------------------------------------------------------------------


def test_workdir_lives_under_tmpdir_and_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    ctx = context.Context(arguments.Expect(), clean_env(TMPDIR=str(tmp_path)))
    work = Path(ctx.subdir("compile-cpu"))
    assert work.parent.parent == tmp_path and work.is_dir()
    with ctx.cache_environment():
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path))
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # restored
    ctx.cleanup()
    assert list(tmp_path.iterdir()) == []


def test_task_environment_points_every_cache_into_the_task_dir(tmp_path: Path) -> None:
    ctx = context.Context(arguments.Expect(), clean_env(TMPDIR=str(tmp_path), HOME="/root"))
    taskdir = ctx.subdir("t")
    env = tasks.task_env(ctx, taskdir)
    for name in (
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "TRITON_HOME",
        "TORCH_EXTENSIONS_DIR",
        "CUDA_CACHE_PATH",
        "XDG_CACHE_HOME",
        "TMPDIR",
    ):
        assert env[name].startswith(taskdir), name
    assert env["HOME"] == "/root"  # kept: a --user site-packages must stay importable
    ctx.cleanup()


def test_fixture_dir_has_notes_for_every_file() -> None:
    notes = (FIXTURES / "NOTES.md").read_text(encoding="utf-8")
    for path in FIXTURES.iterdir():
        if path.name != "NOTES.md":
            assert f"`{path.name}`" in notes, path.name
