"""torch, torch_cuda, cudnn and libcudart: the PyTorch install and the CUDA libraries it loads."""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys

from .context import Context, torch_skip
from .proc import read_text
from .results import CheckResult, failed, passed, skipped
from .versions import compare_versions, cuda_minor, cudnn_int_to_version, parse_cudnn_header


def check_torch(ctx: Context) -> CheckResult:
    torch = ctx.torch
    if torch is None:
        return failed(
            "torch",
            f"torch cannot be imported: {ctx.torch_error}",
            "install torch into this interpreter (the image's venv) or run the check with the venv's python",
            expected=ctx.expect.torch,
            actual=None,
            detail={"python": sys.executable},
        )
    actual = str(torch.__version__)
    detail = {
        "file": getattr(torch, "__file__", None),
        "cuda_compiled": bool(torch.cuda._is_compiled()),
        "import_s": ctx.torch_import_s,
    }
    want = ctx.expect.torch
    if want is None:
        return skipped("torch", "no expected torch given", actual=actual, detail=detail)
    ok = actual == want if "+" in want else actual.split("+", maxsplit=1)[0] == want
    if not ok:
        return failed(
            "torch",
            "torch is not the expected build: a later pip step replaced it (or the wrong release was pinned)",
            f"pin torch=={want} (constraints file) so later installs cannot replace it",
            expected=want,
            actual=actual,
            detail=detail,
        )
    return passed("torch", want, actual, detail)


def wheel_fix(torch_version: str | None, cuda: str) -> str:
    variant = "cpu" if cuda == "cpu" else "cu" + cuda_minor(cuda).replace(".", "")
    pin = f"torch=={torch_version.split('+')[0]}" if torch_version else "torch"
    return f"reinstall the right wheel variant: pip install {pin} --index-url https://download.pytorch.org/whl/{variant}"


def check_torch_cuda(ctx: Context) -> CheckResult:
    skip = torch_skip(ctx, "torch_cuda")
    if skip:
        return skip
    want = ctx.expect.cuda
    have = ctx.torch.version.cuda
    actual = str(have) if have else None
    if want is None:
        return skipped("torch_cuda", "no expected CUDA given", actual=actual)
    if want == "cpu":
        if actual is not None:
            return failed(
                "torch_cuda",
                f"a CPU cell holds a CUDA {actual} torch wheel",
                wheel_fix(ctx.expect.torch, "cpu"),
                expected=None,
                actual=actual,
            )
        return passed("torch_cuda", None, None, "CPU build")
    if actual is None or cuda_minor(actual) != cuda_minor(want):
        return failed(
            "torch_cuda",
            f"wrong wheel variant: torch was built for CUDA {actual}, the image is CUDA {cuda_minor(want)}",
            wheel_fix(ctx.expect.torch, want),
            expected=cuda_minor(want),
            actual=actual,
        )
    return passed("torch_cuda", cuda_minor(want), actual)


CUDNN_HEADERS = tuple(
    os.path.join(d, name)
    for d in (
        "/usr/include",
        "/usr/include/x86_64-linux-gnu",
        "/usr/include/aarch64-linux-gnu",
        "/usr/local/cuda/include",
    )
    for name in ("cudnn_version.h", "cudnn_version_v9.h", "cudnn_version_v8.h")
)


def system_cudnn(env: dict[str, str]) -> tuple[str | None, str | None]:
    """(version, source) of the cuDNN the base installed, or (None, None)."""
    for path in CUDNN_HEADERS:
        text = read_text(path)
        version = parse_cudnn_header(text) if text else None
        if version:
            return version, path
    nv = env.get("NV_CUDNN_VERSION")
    if nv and re.match(r"^\d+\.\d+\.\d+", nv):
        return ".".join(nv.split(".")[:3]), "NV_CUDNN_VERSION"
    return None, None


def check_cudnn(ctx: Context) -> CheckResult:
    skip = torch_skip(ctx, "cudnn")
    if skip:
        return skip
    if ctx.expect.is_cpu:
        return skipped("cudnn", "CPU build: no cuDNN")
    raw = ctx.torch.backends.cudnn.version()
    actual = cudnn_int_to_version(int(raw)) if raw else None
    sys_version, source = system_cudnn(ctx.env)
    pip_version, pip_header = pip_cudnn_header()
    detail = {
        "torch_raw": raw,
        "system": sys_version,
        "system_source": source,
        "pip": pip_version,
        "pip_header": pip_header,
        "pip_libraries": pip_cuda_libraries().get("cudnn", []),
    }
    want = ctx.expect.cudnn
    if actual is None:
        if want is None:
            return skipped("cudnn", "no expected cuDNN given and torch reports none", detail=detail)
        return failed(
            "cudnn",
            "torch reports no cuDNN (libcudnn not found or not loadable)",
            "install the nvidia-cudnn pip package torch pins (pip check), or the cuDNN base",
            expected=want,
            actual=None,
            detail=detail,
        )
    problems = []
    if want is not None:
        if "." in want:
            if compare_versions(".".join(want.split(".")[:3]), actual) != 0:
                problems.append(f"torch uses cuDNN {actual}, the cell says {want}")
        elif actual.split(".")[0] != want:
            problems.append(f"torch uses cuDNN {actual}, the cell says major {want}")
    if sys_version is not None and sys_version.split(".")[:2] != actual.split(".")[:2]:
        problems.append(
            f"two cuDNN versions in the image: torch loads {actual}, the base has {sys_version} ({source})"
        )
    if problems:
        return failed(
            "cudnn",
            "; ".join(problems),
            "pick the base's cuDNN flavour per torch release (plain -devel where the wheel brings its own "
            "cuDNN 9; cudnn8 bases only for torch <= 2.3)",
            expected=want,
            actual=actual,
            detail=detail,
        )
    if want is None:
        return skipped("cudnn", "no expected cuDNN given", actual=actual, detail=detail)
    return passed("cudnn", want, actual, detail)


# Where pip wheels put the CUDA libraries, under a site-packages directory:
#   CUDA 11/12 (nvidia-cuda-runtime-cu12 ...): nvidia/cuda_runtime/lib/libcudart.so.12,
#     nvidia/cublas/lib, nvidia/cudnn/lib (nvidia-cudnn-cu12), nvidia/nccl/lib (nvidia-nccl-cu12)
#   CUDA 13 (cuda-toolkit[cudart]==13.0.2 -> nvidia-cuda-runtime 13.0.96, nvidia-cublas 13.1.0.3):
#     one shared nvidia/cu13/lib (libcudart.so.13, libcublas.so.13, libnvrtc.so.13 ...);
#     nvidia-cudnn-cu13 and nvidia-nccl-cu13 keep nvidia/cudnn/lib and nvidia/nccl/lib
# (read from the wheels' file lists; tests/fixtures/check/NOTES.md)
PIP_LIBRARY_PATTERNS: dict[str, tuple[str, ...]] = {
    "cudart": ("nvidia/cu*/lib/libcudart.so*", "nvidia/cuda_runtime/lib/libcudart.so*"),
    "cublas": ("nvidia/cu*/lib/libcublas.so*", "nvidia/cublas/lib/libcublas.so*"),
    "cudnn": ("nvidia/cudnn/lib/libcudnn.so*", "nvidia/cu*/lib/libcudnn.so*"),
    "nccl": ("nvidia/nccl/lib/libnccl.so*", "nvidia/cu*/lib/libnccl.so*"),
}
PIP_CUDNN_HEADERS = ("nvidia/cudnn/include/cudnn_version.h", "nvidia/cu*/include/cudnn_version.h")


def site_dirs() -> list[str]:
    """sys.path entries that are directories (site-packages, dist-packages, a venv's)."""
    return [entry for entry in sys.path if entry and os.path.isdir(entry)]


def pip_cuda_libraries(roots: list[str] | None = None) -> dict[str, list[str]]:
    """The CUDA libraries pip wheels installed, per kind, in both the CUDA 12 and CUDA 13 layouts."""
    found: dict[str, list[str]] = {}
    for root in site_dirs() if roots is None else roots:
        for kind, patterns in PIP_LIBRARY_PATTERNS.items():
            for pattern in patterns:
                for path in sorted(glob.glob(os.path.join(root, pattern))):
                    if path not in found.setdefault(kind, []):
                        found[kind].append(path)
    return found


def pip_cudnn_header(roots: list[str] | None = None) -> tuple[str | None, str | None]:
    """(version, path) from a pip cuDNN wheel's cudnn_version.h, or (None, None)."""
    for root in site_dirs() if roots is None else roots:
        for pattern in PIP_CUDNN_HEADERS:
            for path in sorted(glob.glob(os.path.join(root, pattern))):
                text = read_text(path)
                version = parse_cudnn_header(text) if text else None
                if version:
                    return version, path
    return None, None


def cudart_candidates(major: str | None, roots: list[str] | None = None) -> list[str]:
    """Names and paths to try for libcudart: the loader's (ldconfig, LD_LIBRARY_PATH) first, then
    the pip wheels' copies (CUDA 13: nvidia/cu13/lib; CUDA 11/12: nvidia/cuda_runtime/lib)."""
    names = ["libcudart.so"]
    if major:
        names.append(f"libcudart.so.{major}")
        names.append(f"libcudart.so.{major}.0")
    for path in pip_cuda_libraries(roots).get("cudart", []):
        base = os.path.basename(path)
        if major is None or base.startswith(f"libcudart.so.{major}"):
            names.append(path)
    return names


def check_libcudart(ctx: Context) -> CheckResult:
    if ctx.expect.is_cpu:
        return skipped("libcudart", "CPU build: no CUDA runtime")
    want = ctx.expect.cuda
    major = want.split(".")[0] if want else None
    if major is None and ctx.torch is not None and getattr(ctx.torch.version, "cuda", None):
        major = str(ctx.torch.version.cuda).split(".")[0]
    tried = []
    pip_libs = pip_cuda_libraries()
    for name in cudart_candidates(major):
        try:
            lib = ctypes.CDLL(name)
        except OSError as exc:
            tried.append(f"{name}: {exc}")
            continue
        version = ctypes.c_int(0)
        runtime = None
        try:
            if lib.cudaRuntimeGetVersion(ctypes.byref(version)) == 0:
                runtime = f"{version.value // 1000}.{(version.value % 1000) // 10}"
        except AttributeError:
            pass
        detail = {"loaded": name, "tried": tried, "pip_libraries": pip_libs}
        if want and runtime and runtime.split(".")[0] != want.split(".")[0]:
            return failed(
                "libcudart",
                f"libcudart is CUDA {runtime}, the image is CUDA {want}",
                f"install the CUDA runtime of the cell's major ({cudart_package(want.split('.')[0])})",
                expected=want,
                actual=runtime,
                detail=detail,
            )
        return passed("libcudart", want, runtime or name, detail)
    return failed(
        "libcudart",
        "libcudart.so.* missing: no CUDA runtime library is loadable",
        f"install {cudart_package(major)} (torch's dependency) or use an nvidia/cuda base; check "
        "LD_LIBRARY_PATH",
        expected=want,
        actual=None,
        detail={"tried": tried, "pip_libraries": pip_libs},
    )


def cudart_package(major: str | None) -> str:
    """The pip package that brings libcudart for a CUDA major (CUDA 13 dropped the -cuXX suffix)."""
    if major is not None and major.isdigit() and int(major) >= 13:
        return (
            f"nvidia-cuda-runtime (CUDA {major}: through cuda-toolkit[cudart]=={major}.x; "
            f"lands in nvidia/cu{major}/lib)"
        )
    return "nvidia-cuda-runtime-cu" + (major or "XX")
