"""environment, python, nvcc, cuda_installs and nvidia_smi: what the image and its runtime provide."""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import sys
from typing import Any

from .context import Context, driver_capabilities, is_cuda_build
from .proc import read_text, run_command
from .require import go_parse_bool, parse_require, require_variables
from .results import CheckResult, failed, passed, skipped
from .smi import host_driver_version
from .versions import cuda_minor, parse_nvcc_version, parse_version_json

CAPABILITIES_UNSET_WARNING = (
    "NVIDIA_DRIVER_CAPABILITIES is unset: current NVIDIA container toolkits default to utility,compute "
    "(NVIDIA's user guide; nerdctl changed its default to match), so torch gets the GPU there, but older "
    "runtimes (nvidia-docker2) mounted utility only, and torch then sees no GPU; set it in the image "
    "(ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility, as nvidia/cuda and imagekit's images do)"
)


def check_environment(ctx: Context) -> CheckResult:
    env = ctx.env
    names = (
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_CPU_ONLY",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_DISABLE_REQUIRE",
    )
    detail: dict[str, Any] = {name: env.get(name) for name in names}
    detail["NVIDIA_REQUIRE"] = {k: v for k, v in sorted(env.items()) if k.startswith("NVIDIA_REQUIRE_")}
    detail["require_disabled"] = go_parse_bool(env.get("NVIDIA_DISABLE_REQUIRE"))
    parsed: dict[str, Any] = {}
    for name, expression in require_variables(env).items():
        try:
            groups = parse_require(expression)
            parsed[name] = [[f"{t.prop}{t.op}{t.value}" for t in group] for group in groups]
        except ValueError as exc:
            parsed[name] = f"unparseable: {exc}"
    detail["require_parsed"] = parsed
    detail["gpu_requested_by"] = ctx.gpu_request_reasons()
    detail["wsl"] = ctx.wsl
    for name in ("CUDA_VERSION", "NV_CUDNN_VERSION", "NCCL_VERSION"):
        detail[name] = env.get(name)
    capabilities = driver_capabilities(env.get("NVIDIA_DRIVER_CAPABILITIES"))
    detail["driver_capabilities"] = sorted(capabilities)
    cuda_build = is_cuda_build(ctx)
    detail["cuda_build"] = cuda_build
    notes = []
    if env.get("NVIDIA_VISIBLE_DEVICES", "").strip().lower() == "all" and not ctx.expect.require_gpu:
        notes.append(
            "NVIDIA_VISIBLE_DEVICES=all is the image default and does not show a GPU request; "
            "GPU jobs pass --require-gpu"
        )
    if go_parse_bool(env.get("NVIDIA_CPU_ONLY")) or env.get("NVIDIA_CPU_ONLY") == "1":
        notes.append("NVIDIA_CPU_ONLY set: NVIDIA's entrypoint saw no GPU")
    if cuda_build and "utility" not in capabilities:
        notes.append("no 'utility' capability: nvidia-smi and NVML are not mounted (no brand, no telemetry)")
    detail["notes"] = notes
    value = env.get("NVIDIA_DRIVER_CAPABILITIES")
    if cuda_build and not (value or "").strip():
        # A third-party image may leave it unset: a warning, not a failure (imagekit's images set it).
        detail["warnings"] = [CAPABILITIES_UNSET_WARNING]
        return passed("environment", actual=detail.get("NVIDIA_VISIBLE_DEVICES"), detail=detail)
    if cuda_build and "compute" not in capabilities:
        return failed(
            "environment",
            f"NVIDIA_DRIVER_CAPABILITIES is {value!r}: without 'compute' the NVIDIA container runtime "
            "mounts no CUDA driver library (libcuda), so torch sees no GPU even with --gpus",
            "set it in the image: ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility "
            "(nvidia/cuda images do; an image on another base must set both itself)",
            expected="compute in NVIDIA_DRIVER_CAPABILITIES",
            actual=value,
            detail=detail,
        )
    return passed("environment", actual=detail.get("NVIDIA_VISIBLE_DEVICES"), detail=detail)


def check_python(ctx: Context) -> CheckResult:
    actual = "{}.{}".format(*sys.version_info[:2])
    detail = {"version": platform.python_version(), "executable": sys.executable}
    if ctx.expect.python is None:
        return skipped("python", "no expected Python given", actual=actual, detail=detail)
    if actual != ctx.expect.python:
        return failed(
            "python",
            "the image's python3 is not the cell's Python",
            "install torch into the interpreter named by the cell (the venv's python), first on PATH",
            expected=ctx.expect.python,
            actual=actual,
            detail=detail,
        )
    return passed("python", ctx.expect.python, actual, detail)


def check_nvcc(ctx: Context) -> CheckResult:
    expect = ctx.expect
    if expect.is_cpu:
        return skipped("nvcc", "CPU build: no CUDA toolkit expected")
    path = shutil.which("nvcc", path=ctx.env.get("PATH", os.defpath))
    if path is None and os.path.exists("/usr/local/cuda/bin/nvcc"):
        path = "/usr/local/cuda/bin/nvcc"
    version_json_text = read_text("/usr/local/cuda/version.json")
    toolkit = parse_version_json(version_json_text) if version_json_text else None
    detail: dict[str, Any] = {"path": path, "version_json": toolkit}
    if expect.flavour is None:
        return skipped("nvcc", "no flavour given", actual=path, detail=detail)
    if expect.flavour == "runtime":
        if path is not None:
            return failed(
                "nvcc",
                "a runtime image contains nvcc (the devel toolkit leaked into it)",
                "build runtime images from the -runtime base and do not install cuda-nvcc / the toolkit",
                expected="absent",
                actual=path,
                detail=detail,
            )
        return passed("nvcc", "absent", None, detail)
    if path is None:
        return failed(
            "nvcc",
            "a devel image has no nvcc (extensions cannot be built)",
            "build devel images from the nvidia/cuda -devel base (nvcc at /usr/local/cuda/bin/nvcc)",
            expected=expect.cuda,
            actual=None,
            detail=detail,
        )
    rc, out = run_command([path, "--version"], timeout=30)
    parsed = parse_nvcc_version(out) if rc == 0 else None
    detail["nvcc"] = parsed
    if parsed is None:
        return failed(
            "nvcc",
            f"`nvcc --version` failed or was not understood (rc {rc})",
            "check the CUDA toolkit install under /usr/local/cuda",
            expected=expect.cuda,
            actual=out.strip()[:200],
            detail=detail,
        )
    want = cuda_minor(expect.cuda or "")
    mismatches = []
    if parsed["release"] != want:
        mismatches.append(f"nvcc is {parsed['release']}")
    if toolkit is not None and cuda_minor(toolkit) != want:
        mismatches.append(f"version.json says {toolkit}")
    if mismatches:
        return failed(
            "nvcc",
            "the CUDA toolkit is not the cell's CUDA (" + "; ".join(mismatches) + "); torch's extension "
            "builder refuses an nvcc whose major differs from torch.version.cuda",
            f"use the nvidia/cuda:{want}.x-devel base for this cell",
            expected=want,
            actual=parsed["version"],
            detail=detail,
        )
    return passed("nvcc", want, parsed["version"], detail)


def list_cuda_installs(root: str = "/usr/local") -> list[str]:
    """Real /usr/local/cuda-X.Y directories (symlinks like cuda, cuda-12 do not count)."""
    found = []
    for path in sorted(glob.glob(os.path.join(root, "cuda-*"))):
        if os.path.isdir(path) and not os.path.islink(path) and re.search(r"cuda-\d+\.\d+$", path):
            found.append(path)
    return found


def check_cuda_installs(ctx: Context) -> CheckResult:
    if ctx.expect.is_cpu:
        return skipped("cuda_installs", "CPU build: no CUDA toolkit expected")
    installs = list_cuda_installs()
    link = os.path.realpath("/usr/local/cuda") if os.path.exists("/usr/local/cuda") else None
    detail = {"installs": installs, "/usr/local/cuda": link}
    if len(installs) > 1:
        return failed(
            "cuda_installs",
            "more than one CUDA install under /usr/local: libraries and nvcc may come from different ones",
            "install a single CUDA toolkit (do not apt-install another cuda-toolkit over the base's)",
            expected="exactly one",
            actual=installs,
            detail=detail,
        )
    if not installs:
        if ctx.expect.flavour is None and ctx.expect.cuda is None:
            return skipped("cuda_installs", "no CUDA expected", actual=[], detail=detail)
        # pip-wheel CUDA (torch brings its own libraries) is legitimate on a non-nvidia base
        return skipped(
            "cuda_installs",
            "no CUDA toolkit under /usr/local (CUDA from pip packages)",
            actual=[],
            detail=detail,
        )
    want = ctx.expect.cuda
    have = installs[0].rsplit("cuda-", 1)[1]
    if want and cuda_minor(want) != have:
        return failed(
            "cuda_installs",
            f"the CUDA under /usr/local is {have}, not the cell's {cuda_minor(want)}",
            "use the nvidia/cuda base of the cell's CUDA version",
            expected=cuda_minor(want),
            actual=installs,
            detail=detail,
        )
    return passed("cuda_installs", "exactly one", installs, detail)


def check_nvidia_smi(ctx: Context) -> CheckResult:
    gate = ctx.gpu_gate("nvidia_smi")
    if gate is not None:
        return gate
    smi = ctx.smi
    detail = {k: smi.get(k) for k in ("path", "header", "queries", "error") if smi.get(k)}
    if not smi.get("path"):
        # torch sees a GPU but nvidia-smi is absent: NVIDIA_DRIVER_CAPABILITIES lacks 'utility'
        return failed(
            "nvidia_smi",
            "nvidia-smi is not in the container although a GPU is visible: the 'utility' driver "
            "capability was not requested",
            "set NVIDIA_DRIVER_CAPABILITIES=compute,utility (nvidia/cuda images do)",
            expected="nvidia-smi runs",
            actual=None,
            detail=detail,
        )
    gpus = smi.get("gpus") or []
    if not gpus:
        return failed(
            "nvidia_smi",
            "nvidia-smi lists no GPU: " + str(smi.get("error")),
            "check the host driver (`nvidia-smi` on the host) and the container runtime",
            expected="at least one GPU",
            actual=[],
            detail=detail,
        )
    return passed("nvidia_smi", actual={"driver": host_driver_version(ctx.smi), "gpus": gpus}, detail=detail)
