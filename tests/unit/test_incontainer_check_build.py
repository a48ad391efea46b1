"""compile and extension on the real PyTorch CPU wheel when a piece of the toolchain is missing: the
failure must name it (compiler, Python.h, ninja). Runs where the torch CPU wheel is (see
the torch_python fixture of tests/unit/conftest.py); the toolchain is taken away by PATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from imagekit import probe_facts
from imagekit.probe import build
from tests.unit.probe_runs import SCRIPT, by_name, clean_env, run_script

NO_TOOLS = ("g++", "gcc", "cc", "c++", "clang", "clang++", "x86_64-linux-gnu-g++", "x86_64-linux-gnu-gcc")

# gcc's own message when the interpreter's headers are not installed; every other call goes through.
GXX_WITHOUT_PYTHON_H = """#!/bin/sh
for arg in "$@"; do
  case "$arg" in
    *.cpp|*.cxx|*.cc) echo "$arg:1:10: fatal error: Python.h: No such file or directory" >&2
                      echo "compilation terminated." >&2; exit 1 ;;
  esac
done
exec {real} "$@"
"""


def bin_dir(tmp_path: Path, leave_out: tuple[str, ...], keep_only: tuple[str, ...] | None = None) -> Path:
    """A PATH directory of links to /usr/bin's programs, without `leave_out` (or only `keep_only`)."""
    target = tmp_path / "bin"
    target.mkdir()
    for entry in Path("/usr/bin").iterdir():
        if keep_only is not None and entry.name not in keep_only:
            continue
        if entry.name in leave_out or entry.name.startswith(("x86_64-linux-gnu-g", "x86_64-linux-gnu-c")):
            continue
        (target / entry.name).symlink_to(entry.resolve() if entry.is_symlink() else entry)
    return target


def run_build_checks(python: str, tmp_path: Path, path: str, *args: str) -> dict[str, Any]:
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = clean_env(PATH=path, HOME=str(home), TMPDIR=str(tmp))
    _, report, stderr = run_script(python, "--expect-cuda", "cpu", *args, env=env)
    assert "Traceback" not in stderr
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == []  # nothing left behind, even failing
    return by_name(report)


def test_compile_without_a_compiler_names_it(torch_python: str, tmp_path: Path) -> None:
    tools = bin_dir(tmp_path, NO_TOOLS)
    checks = run_build_checks(torch_python, tmp_path, str(tools), "--flavour", "devel", "--only", "compile")
    compiled = checks["compile"]
    assert compiled["status"] == "fail" and compiled["required"] is True
    assert "no C/C++ compiler" in compiled["cause"] and "inductor C++ on the CPU" in compiled["cause"]
    assert "apt-get install -y g++" in compiled["fix"]
    assert compiled["detail"]["toolchain"]["cxx"] is None


def test_compile_is_required_in_a_runtime_image(torch_python: str, tmp_path: Path) -> None:
    """Runtime images carry the compiler now (pytorch issue 116696): without one, compile fails them."""
    tools = bin_dir(tmp_path, NO_TOOLS)
    checks = run_build_checks(
        torch_python, tmp_path, str(tools), "--flavour", "runtime", "--only", "compile,extension"
    )
    assert checks["compile"]["status"] == "fail" and checks["compile"]["required"] is True
    assert "no C/C++ compiler" in checks["compile"]["cause"]
    assert checks["extension"]["status"] == "skip" and "runtime flavour" in checks["extension"]["reason"]


def test_compile_passes_for_real_in_a_runtime_cell_with_the_compiler(
    torch_python: str, tmp_path: Path
) -> None:
    """What a runtime image now carries (g++, Python.h): inductor's C++ on the CPU compiles and agrees."""
    checks = run_build_checks(
        torch_python, tmp_path, "/usr/bin:/bin", "--flavour", "runtime", "--only", "compile"
    )
    compiled = checks["compile"]
    assert compiled["status"] == "pass" and compiled["required"] is True, compiled
    cpu = compiled["detail"]["parts"]["cpu"]
    assert cpu["status"] == "pass" and cpu["generated_files"] > 0 and cpu["max_abs_error"] < 1e-4


def test_compile_without_python_h_names_the_dev_package(torch_python: str, tmp_path: Path) -> None:
    tools = bin_dir(tmp_path, ("g++", "c++"))
    real = shutil.which("g++")
    assert real is not None
    for name in ("g++", "c++"):
        wrapper = tools / name
        wrapper.write_text(GXX_WITHOUT_PYTHON_H.format(real=real), encoding="utf-8")
        wrapper.chmod(0o755)
    checks = run_build_checks(torch_python, tmp_path, str(tools), "--flavour", "devel", "--only", "compile")
    compiled = checks["compile"]
    assert compiled["status"] == "fail"
    assert "Python.h missing" in compiled["cause"]
    version = build.toolchain(dict(os.environ))["python"]  # the test host's 3.11, as the venv's
    assert f"python{version}-dev" in compiled["fix"]


def test_extension_without_ninja_names_it(torch_python: str, tmp_path: Path) -> None:
    tools = bin_dir(tmp_path, ("ninja",))
    checks = run_build_checks(torch_python, tmp_path, str(tools), "--flavour", "devel", "--only", "extension")
    extension = checks["extension"]
    assert extension["status"] == "fail"
    assert "ninja is missing" in extension["cause"] and "pip install ninja" in extension["fix"]
    assert extension["detail"]["parts"]["cpu"]["missing"] == "ninja"


def test_extension_without_a_compiler_names_it(torch_python: str, tmp_path: Path) -> None:
    tools = bin_dir(tmp_path, NO_TOOLS)
    checks = run_build_checks(torch_python, tmp_path, str(tools), "--flavour", "devel", "--only", "extension")
    extension = checks["extension"]
    assert extension["status"] == "fail"
    assert "no C/C++ compiler" in extension["cause"] and "g++" in extension["fix"]
    # no nvcc on that PATH nor a GPU: the CUDA part says why it did not run
    assert extension["detail"]["parts"]["cuda"]["status"] == "skip"


def run_nogpu_task(python: str, tmp_path: Path, arch_list: str | None) -> dict[str, Any]:
    """The extension check's no-GPU part, run as the check runs it (CUDA_VISIBLE_DEVICES empty)."""
    out = tmp_path / "result.json"
    extra = {"CUDA_VISIBLE_DEVICES": "", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "HOME": str(tmp_path)}
    if arch_list is not None:
        extra["TORCH_CUDA_ARCH_LIST"] = arch_list
    env = clean_env(PATH=f"{Path(NVCC).parent}:/usr/bin:/bin", **extra)
    command = [python, str(SCRIPT), "--task", "extension_cuda_nogpu", "--device", "cuda-no-gpu"]
    subprocess.run(
        [*command, "--result-file", str(out)], env=env, capture_output=True, timeout=600, check=False
    )
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
needs_nvcc = pytest.mark.skipif(not Path(NVCC).exists(), reason="no nvcc on this host")


@needs_nvcc
def test_cuda_extension_builds_with_no_gpu_from_the_wheel_arch_list(
    torch_python: str, tmp_path: Path
) -> None:
    """The arch list a CUDA 13 devel image sets (gpus.yaml) compiles with this host's nvcc 13, no GPU."""
    result = run_nogpu_task(torch_python, tmp_path, probe_facts.wheel_arch_list("cu130"))
    assert result["ok"] is True, result
    assert result["visible_gpus"] == 0 and result["built"] == ["kernel.o"]
    assert "-gencode=arch=compute_75,code=sm_75" in result["arch_flags"]


@needs_nvcc
def test_cuda_extension_without_an_arch_list_and_no_gpu_names_it(torch_python: str, tmp_path: Path) -> None:
    """pytorch issue 137261 for real: torch's _get_cuda_arch_flags has nothing to build for."""
    result = run_nogpu_task(torch_python, tmp_path, None)
    assert result["ok"] is False and result["missing"] == "TORCH_CUDA_ARCH_LIST"
    assert "_get_cuda_arch_flags() with no GPU visible raised" in result["error"]
    tools = build.toolchain(dict(os.environ))
    cause, fix = build.diagnose_build(
        "a CUDA extension built with no GPU visible", {"result": result}, tools, "cxx", 600
    )
    assert "TORCH_CUDA_ARCH_LIST is unset and no GPU is visible" in cause and "137261" in cause
    assert "ENV TORCH_CUDA_ARCH_LIST" in fix
