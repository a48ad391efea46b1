"""compile and extension on the real PyTorch CPU wheel when a piece of the toolchain is missing: the
failure must name it (compiler, Python.h, ninja). Runs where the torch CPU wheel is (see
the torch_python fixture of tests/slow/conftest.py); the toolchain is taken away by PATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from imagekit.facts import probe_tables
from imagekit.probe import compilation, prebuilt, protocol
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


def run_build_checks(
    python: str, tmp_path: Path, path: str, *args: str, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = clean_env(PATH=path, HOME=str(home), TMPDIR=str(tmp), **(extra or {}))
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
    version = compilation.toolchain(dict(os.environ))["python"]  # the test host's 3.11, as the venv's
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
    result = run_nogpu_task(torch_python, tmp_path, probe_tables.wheel_arch_list("cu130"))
    assert result["ok"] is True, result
    assert result["visible_gpus"] == 0 and result["built"] == ["kernel.o"]
    assert "-gencode=arch=compute_75,code=sm_75" in result["arch_flags"]


@needs_nvcc
def test_cuda_extension_without_an_arch_list_and_no_gpu_names_it(torch_python: str, tmp_path: Path) -> None:
    """pytorch issue 137261 for real: torch's _get_cuda_arch_flags has nothing to build for."""
    result = run_nogpu_task(torch_python, tmp_path, None)
    assert result["ok"] is False and result["missing"] == "TORCH_CUDA_ARCH_LIST"
    assert "_get_cuda_arch_flags() with no GPU visible raised" in result["error"]
    tools = compilation.toolchain(dict(os.environ))
    cause, fix = compilation.diagnose_build(
        "a CUDA extension built with no GPU visible", {"result": result}, tools, "cxx", 600
    )
    assert "TORCH_CUDA_ARCH_LIST is unset and no GPU is visible" in cause and "137261" in cause
    assert "ENV TORCH_CUDA_ARCH_LIST" in fix


# -- the modules a devel image builds at image build time (check.py build-extensions) ------------


def build_step(python: str, tmp_path: Path, path: str, modules: Path) -> subprocess.CompletedProcess[str]:
    """``check.py build-extensions`` as a Dockerfile runs it, into ``modules``."""
    env = clean_env(
        PATH=path, HOME=str(tmp_path), TMPDIR=str(tmp_path), **{prebuilt.DIRECTORY_ENV: str(modules)}
    )
    command = [python, str(SCRIPT), protocol.BUILD_EXTENSIONS]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)


def step_line(done: subprocess.CompletedProcess[str], stream: str) -> str:
    """The build step's one line (torch's own warnings may precede it on stderr)."""
    (line,) = [x for x in getattr(done, stream).splitlines() if x.startswith("check.py build-extensions: ")]
    return line


def test_the_check_loads_the_module_the_image_build_made(torch_python: str, tmp_path: Path) -> None:
    """The build step builds the CPU module (a CPU torch: no CUDA one) into a directory that holds
    only the library and the manifest; the check, with that directory read-only, loads and runs it
    and builds nothing. A library that then fails to load sends the check back to building, and the
    part says why."""
    modules = tmp_path / "extensions"
    scratch = tmp_path / "build"
    scratch.mkdir()
    done = build_step(torch_python, scratch, "/usr/bin:/bin", modules)
    assert done.returncode == 0, done.stderr[-3000:]
    line = step_line(done, "stdout")
    assert line.startswith("check.py build-extensions: built cpu (") and line.endswith(
        f"s) into {modules}; no CUDA module: torch is a CPU build"
    )
    assert sorted(p.name for p in modules.iterdir()) == ["imagekit_check_cpu.so", "manifest.json"]
    assert list(scratch.iterdir()) == []  # load_inline's build directory (build.ninja, lock) is gone
    modules.chmod(0o555)  # verification's root is read-only; nothing may be written or locked there
    only_extension = ("--only", "extension", "--flavour", "devel")
    checks = run_build_checks_with(torch_python, tmp_path / "loaded", modules, *only_extension)
    extension = checks["extension"]
    assert extension["status"] == "pass", extension
    cpu = extension["detail"]["parts"]["cpu"]
    assert cpu["how"] == compilation.PREBUILT_HOW and cpu["max_abs_error"] == 0 and cpu["build_s_saved"] > 0
    assert cpu["module"] == str(modules / "imagekit_check_cpu.so") and "built" not in cpu
    summary = extension["detail"]["prebuilt"]
    assert summary == {
        "directory": str(modules),
        "loaded": ["cpu"],
        "built_here": {},
        "build_s_saved": cpu["build_s_saved"],
    }
    assert "build_dir" not in extension["detail"]

    # a library that does not load, though the manifest names its bytes: built here, and said why
    modules.chmod(0o755)
    library = modules / "imagekit_check_cpu.so"
    library.write_bytes(b"not an ELF file")
    manifest = json.loads((modules / "manifest.json").read_text())
    manifest["modules"]["cpu"]["sha256"] = prebuilt.file_sha256(str(library))
    (modules / "manifest.json").write_text(json.dumps(manifest))
    checks = run_build_checks_with(torch_python, tmp_path / "rebuilt", modules, *only_extension)
    extension = checks["extension"]
    assert extension["status"] == "pass", extension
    cpu = extension["detail"]["parts"]["cpu"]
    assert cpu["built"] and cpu["max_abs_error"] == 0 and "how" not in cpu
    assert cpu["prebuilt"].startswith(f"not used: did not load: loading {library}: ImportError")
    assert extension["detail"]["prebuilt"]["loaded"] == []
    assert extension["detail"]["prebuilt"]["built_here"] == {"cpu": cpu["prebuilt"]}
    assert extension["detail"]["build_dir"] == compilation.FRESH_BUILD_DIR


def run_build_checks_with(python: str, tmp_path: Path, modules: Path, *args: str) -> dict[str, Any]:
    tmp_path.mkdir()
    return run_build_checks(
        python, tmp_path, "/usr/bin:/bin", *args, extra={prebuilt.DIRECTORY_ENV: str(modules)}
    )


@pytest.mark.parametrize(
    ("leave_out", "cause", "fix"),
    [
        (("ninja",), "a C++ extension (load_inline): ninja is missing", "pip install ninja"),
        (NO_TOOLS, "a C++ extension (load_inline): no C/C++ compiler in the image", "apt-get install -y g++"),
    ],
)
def test_the_build_step_fails_the_image_build_naming_the_missing_piece(
    torch_python: str, tmp_path: Path, leave_out: tuple[str, ...], cause: str, fix: str
) -> None:
    tools = bin_dir(tmp_path, leave_out)
    modules = tmp_path / "extensions"
    scratch = tmp_path / "build"
    scratch.mkdir()
    done = build_step(torch_python, scratch, str(tools), modules)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    line = step_line(done, "stderr")
    assert cause in line and fix in line, line
    assert not modules.exists() and list(scratch.iterdir()) == []
