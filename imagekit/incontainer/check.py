#!/usr/bin/env python3
"""imagekit in-image check: verify what this image holds and print ONE JSON document.

Copied alone into every image at /opt/imagekit/check.py. Standard library only (torch is imported
when present); runs on Python 3.8+, so `docker run IMAGE python3 /opt/imagekit/check.py`, a CI job
or a Kubernetes job can run it without imagekit installed.

Expectations come from the image's `imagekit.*` labels, passed as arguments or environment
(arguments win):

    --expect-torch 2.1.2   IMAGEKIT_EXPECT_TORCH     torch.__version__ (public part unless it has '+')
    --expect-cuda 12.1     IMAGEKIT_EXPECT_CUDA      CUDA minor (or x.y.z), or "cpu"
    --expect-cudnn 8       IMAGEKIT_EXPECT_CUDNN     cuDNN major, or a full version (NGC stacks)
    --expect-python 3.10   IMAGEKIT_EXPECT_PYTHON
    --flavour devel        IMAGEKIT_FLAVOUR          devel (nvcc must be there) or runtime (must not)
    --require-gpu          IMAGEKIT_REQUIRE_GPU=1    a GPU must be visible: GPU checks fail without one
    --only a,b / --skip c  IMAGEKIT_CHECK_ONLY/_SKIP run only / leave out these checks (comma lists,
                                                     repeatable); a check left out reads skip, never pass

Output: {"schema": 1, "checks": [...], "summary": {...}, "gpu_visible", "gpu_requested",
"expected", "telemetry", "inventory"}. Every check has name, status (pass|fail|skip), required,
reason (skip), expected, actual, detail, cause and fix (fail), duration_s. Exit 0 when no required
check failed, 1 otherwise, 2 on bad arguments (an unknown check name too). An exception inside a
check becomes that check's failure. `telemetry` is null, or what nvidia-smi sampled on each GPU
while gemm_perf timed its GEMM (min/max/mean per metric, clock throttle reasons).

Checks, in order: environment, python, nvcc, cuda_installs, nvidia_smi, driver, require, torch,
torch_cuda, cudnn, libcudart, cuda_available, arch, gemm_cpu, gemm_gpu, gemm_perf, compile,
extension, train_step, nccl.

GPU policy (never a pass for something that did not run):
- a GPU is *requested* when --require-gpu / IMAGEKIT_REQUIRE_GPU is given, when
  NVIDIA_VISIBLE_DEVICES names specific devices (indices or UUIDs: someone chose them), or when the
  NVIDIA runtime evidently wired a GPU in (/dev/nvidiactl or /dev/nvidia<N>, or an nvidia-smi on
  PATH, which images do not ship: the container toolkit mounts it). NVIDIA_VISIBLE_DEVICES=all
  alone is NOT a request: nvidia/cuda images set it in their own ENV, so it is there with or
  without `--gpus`. void/none/empty never request. GPU jobs should pass --require-gpu.
- a GPU is *visible* when nvidia-smi lists one or torch counts one.
- requested and not visible: every GPU check FAILS ("--gpus missing or no NVIDIA runtime"), and so
  does the GPU part of compile, extension and train_step. Not requested and not visible: GPU
  checks (and those GPU parts) are skip with reason "no GPU requested".
- GPU checks run on EVERY visible device; the detail holds one result per device and one failing
  device fails the check.

environment: a CUDA build (expected CUDA, or torch's own CUDA when none is expected) must have
NVIDIA_DRIVER_CAPABILITIES with compute (or all): without it no compute library is mounted and torch
sees no GPU. Unset counts as utility only (what these machines' runtimes did; the toolkit's
defaults vary by version and path), so an image must set it itself. A CPU build needs nothing.

NVIDIA_REQUIRE_* evaluation, as the NVIDIA container toolkit's nvidia-container-cli does it
(libnvidia-container src/cli/dsl.c and configure.c): every NVIDIA_REQUIRE_* variable must hold (but
NVIDIA_REQUIRE_JETPACK, which the hook does not pass); inside one, space = OR and comma = AND,
evaluated left to right with short cuts (an AND group stops at its first false term, the whole
stops at the first true group). Properties (case-insensitive) cuda (the driver's CUDA version),
driver, arch (compute capability) and brand; arch and brand are evaluated per device and every
device must satisfy. Operators: = != < <= > >= exactly (`==` is NOT one: the toolkit calls it an
invalid expression); brand takes = and != only and compares case-insensitively; versions hold only
digits and dots and compare numerically, component by component. A term the toolkit cannot parse
(unknown property, bad operator, empty or non-numeric version) makes the whole variable invalid
when evaluation reaches it: the container would not start, so it reads as not satisfied. Brands are
the toolkit's names for NVML's brand type: Quadro, Tesla, NVS, GRID, GeForce, TITAN, VApps, VPC,
VCS, VWS, CloudGaming, QuadroRTX, NvidiaRTX, Nvidia, GeForceRTX, TitanRTX, Unknown (read from NVML
through libnvidia-ml.so.1, else from nvidia-smi -q's "Product Brand": "NVIDIA RTX" is NvidiaRTX). A
term whose value is not known here (brand with neither) is undetermined; an undetermined result is
a failure, not a pass. NVIDIA_DISABLE_REQUIRE (Go's ParseBool true) skips it. With no
NVIDIA_REQUIRE_CUDA but a CUDA_VERSION, "cuda>=<major.minor>" is implied (the toolkit's legacy
rule).

driver: NVIDIA's driver table (full and minor-version compatibility); below the minor-version floor
an image may still run through the forward-compatibility libraries (cuda-compat: libcuda.so.<ver>
in /usr/local/cuda/compat in nvidia/cuda images, /usr/local/cuda/compat/lib.real in NGC images),
on datacenter GPUs only; the detail says which libcuda the process loaded.

compile: torch.compile (torch >= 2.0) of a small function compared with eager, on the CPU (inductor,
C++: needs a C++ compiler and Python.h) always and on each visible GPU (Triton: needs a C compiler
and Python.h too). Runs in a child process bounded in time; a failure names the missing compiler or
Python headers. Required except in runtime images (which carry no compiler: reported, not fatal).
extension (devel flavour only): a C++ extension through torch.utils.cpp_extension.load_inline, built
and called; plus a CUDA kernel where nvcc exists and a GPU is visible. train_step: a two-layer MLP
on a fixed synthetic problem, a few optimizer steps under autocast (bf16 on the CPU; fp16 with a
GradScaler, and bf16 where the device supports it, on each GPU); the loss must fall by half.
Every build and cache of these (inductor, Triton, torch extensions, the CUDA JIT cache) goes to a
fresh directory under the temporary directory ($TMPDIR, else /tmp), removed at the end, so nothing
is written outside it and nothing stale is reused.

gemm_gpu: per device and dtype, every element is checked against a float64 CPU reference of the
same (rounded) inputs: |got - ref| <= rtol * scale, scale = sqrt(sum_k (a_ik b_kj)^2), rtol from
the dtype's epsilon and K; any element past it fails (the count and the worst are reported). bf16
is skipped where torch.cuda.is_bf16_supported() is false (pre-Ampere with an old torch).

gemm_perf is reported with required=false: a throttled shared device must not fail an image; its
status still says fail when far below the floor. Timed with CUDA events over at least
PERF_MIN_SECONDS after a warm-up, on every device, bf16 (fp16 below compute capability 8.0); floors
are looked up by the EXACT device name and scaled by the SM fraction for MIG slices.
nccl: all-reduce and broadcast across the GPUs in worker processes, each returning its result in
its own file, so library output (NCCL_DEBUG=INFO) cannot break it.
"""

# Python 3.8 compatibility: zip(strict=) is 3.10+, so B905 cannot apply; os.path on plain strings.
# ruff: noqa: B905, PTH100, PTH103, PTH105, PTH110, PTH112, PTH114, PTH118, PTH119, PTH123, PTH207

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import glob
import importlib
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

SCHEMA = 1
SMI_TIMEOUT_S = 20.0
NCCL_TIMEOUT_S = 120.0
COMPILE_TIMEOUT_S = 300.0  # torch.compile's first call: tens of seconds (inductor + a C++ build)
EXTENSION_TIMEOUT_S = 600.0  # load_inline: torch/extension.h alone takes ~30 s to compile
PERF_MIN_SECONDS = 2.0  # timed GEMM window per device (>= 1 s of wall time, ~10 telemetry samples)
PERF_N = 8192  # the timed GEMM is PERF_N^3
TELEMETRY_INTERVAL_MS = 200

# CUDA minor -> (driver it shipped with = full compatibility, minor-version-compatibility floor).
# Linux x86_64, from imagekit/data/compat.yaml (NVIDIA's "CUDA Toolkit and Corresponding Driver
# Versions" table); a unit test asserts this equals compat.yaml.
CUDA_DRIVER_TABLE: dict[str, tuple[str, str]] = {
    "11.7": ("515.65.01", "450.80.02"),
    "11.8": ("520.61.05", "450.80.02"),
    "12.1": ("530.30.02", "525.60.13"),
    "12.2": ("535.104.05", "525.60.13"),
    "12.4": ("550.54.15", "525.60.13"),
    "12.6": ("560.35.05", "525.60.13"),
    "12.8": ("570.124.06", "525.60.13"),
    "12.9": ("575.57.08", "525.60.13"),
    "13.0": ("580.126.20", "580.65.06"),
    "13.1": ("590.48.01", "580.65.06"),
    "13.2": ("595.58.03", "580.65.06"),
}


@dataclass(frozen=True)
class GemmFloor:
    tflops: float  # floor for the whole device, about 40-50% of the dense peak of `dtype`
    dtype: str  # what gemm_perf times on this device: bfloat16, or float16 below sm_80
    sms: int | None  # the whole device's SM count, to scale the floor for MIG slices


# Keyed by the EXACT name the driver reports (torch.cuda.get_device_name == nvidia-smi's name; a
# substring match once gave "NVIDIA RTX A1000" the A100 floor). Names as read in published
# nvidia-smi / PyTorch outputs (tests/fixtures/check/NOTES.md lists where). An H200 measured about
# 790 TFLOP/s bf16 at 8192^3 through PyTorch. Unknown devices get no floor (skip, never pass).
GEMM_FLOORS: dict[str, GemmFloor] = {
    "NVIDIA H200": GemmFloor(400.0, "bfloat16", 132),  # dense bf16 peak 989
    "NVIDIA H100 80GB HBM3": GemmFloor(350.0, "bfloat16", 132),  # SXM5, peak 989
    "NVIDIA H100 NVL": GemmFloor(330.0, "bfloat16", 132),  # peak 835
    "NVIDIA H100 PCIe": GemmFloor(280.0, "bfloat16", 114),  # peak 756
    "NVIDIA H800": GemmFloor(350.0, "bfloat16", 132),  # peak 989
    "NVIDIA GH200 480GB": GemmFloor(400.0, "bfloat16", 132),  # peak 989
    "NVIDIA A100-SXM4-80GB": GemmFloor(140.0, "bfloat16", 108),  # peak 312
    "NVIDIA A100-SXM4-40GB": GemmFloor(140.0, "bfloat16", 108),
    "NVIDIA A100 80GB PCIe": GemmFloor(130.0, "bfloat16", 108),
    "NVIDIA A100-PCIE-40GB": GemmFloor(130.0, "bfloat16", 108),
    "NVIDIA A10G": GemmFloor(30.0, "bfloat16", 80),  # peak ~70, 300 W cap
    "NVIDIA L4": GemmFloor(45.0, "bfloat16", 58),  # peak 121, 72 W card that throttles
    "NVIDIA RTX A6000": GemmFloor(65.0, "bfloat16", 84),  # peak 155
    "NVIDIA GeForce RTX 4090": GemmFloor(70.0, "bfloat16", 128),  # peak 165 (fp32 accumulate)
    "Tesla V100-SXM2-16GB": GemmFloor(50.0, "float16", 80),  # no bf16; fp16 peak 125
    "Tesla V100-PCIE-32GB": GemmFloor(45.0, "float16", 80),  # fp16 peak 112
    "Tesla T4": GemmFloor(20.0, "float16", 40),  # no bf16; fp16 peak 65, 70 W card
}

# dtype -> machine epsilon (2^-mantissa bits); tolerances of gemm_gpu derive from these.
DTYPE_EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}

# NVML clock event (throttle) reason bits, nvml.h nvmlClocksEventReason* / nvmlClocksThrottleReason*.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
# The reasons that cost speed under load (idle, application clocks and display settings do not).
PERF_LIMITING_REASONS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)

GPU_MISSING_CAUSE = "--gpus missing or no NVIDIA runtime: a GPU was requested but none is visible"
GPU_MISSING_FIX = (
    "run with `docker run --gpus all` (Kubernetes: request nvidia.com/gpu and use the nvidia "
    "runtimeClass); on the host install the NVIDIA driver and nvidia-container-toolkit and run "
    "`nvidia-ctk runtime configure --runtime=docker` then restart Docker"
)
WSL_HINT = (
    " WSL2 detected (/dev/dxg): the GPU comes from the Windows NVIDIA driver; do not install a Linux "
    "driver inside WSL, and make sure /usr/lib/wsl/lib (libcuda, nvidia-smi) is visible."
)
NO_GPU_REQUESTED = "no GPU requested"


# -- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # pass | fail | skip
    required: bool = True
    reason: str | None = None
    expected: Any = None
    actual: Any = None
    detail: Any = None
    cause: str | None = None
    fix: str | None = None
    duration_s: float = 0.0


def passed(name: str, expected: Any = None, actual: Any = None, detail: Any = None) -> CheckResult:
    return CheckResult(name, "pass", expected=expected, actual=actual, detail=detail)


def failed(
    name: str,
    cause: str,
    fix: str,
    expected: Any = None,
    actual: Any = None,
    detail: Any = None,
) -> CheckResult:
    return CheckResult(name, "fail", expected=expected, actual=actual, detail=detail, cause=cause, fix=fix)


def skipped(
    name: str, reason: str, expected: Any = None, actual: Any = None, detail: Any = None
) -> CheckResult:
    return CheckResult(name, "skip", reason=reason, expected=expected, actual=actual, detail=detail)


# -- pure parsers -------------------------------------------------------------------------------


def version_tuple(text: str) -> tuple[int, ...]:
    """'470.57.02' -> (470, 57, 2). Raises ValueError on anything not dotted integers."""
    parts = text.strip().split(".")
    if not parts or any(not p.isdigit() for p in parts):
        raise ValueError(f"not a numeric version: {text!r}")
    return tuple(int(p) for p in parts)


def compare_versions(left: str, right: str) -> int:
    """-1, 0 or 1, comparing numerically with missing components as 0 (12.1 == 12.1.0)."""
    a, b = list(version_tuple(left)), list(version_tuple(right))
    width = max(len(a), len(b))
    a += [0] * (width - len(a))
    b += [0] * (width - len(b))
    return (a > b) - (a < b)


def cuda_minor(version: str) -> str:
    """'12.1.105' / '11.8.20220929' / '12.1' -> '12.1'."""
    parts = version.strip().split(".")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        raise ValueError(f"not a CUDA version: {version!r}")
    return f"{int(parts[0])}.{int(parts[1])}"


def parse_nvcc_version(text: str) -> dict[str, str] | None:
    """`nvcc --version` (or ptxas, same line) -> {'release': '12.1', 'version': '12.1.105'}."""
    match = re.search(r"release (\d+)\.(\d+), V(\d+(?:\.\d+)+)", text)
    if match is None:
        return None
    return {"release": f"{match.group(1)}.{match.group(2)}", "version": match.group(3)}


def parse_version_json(text: str) -> str | None:
    """/usr/local/cuda/version.json -> the toolkit's version ('11.8.20220929', '13.0.1')."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    cuda = data.get("cuda") if isinstance(data, dict) else None
    version = cuda.get("version") if isinstance(cuda, dict) else None
    return version if isinstance(version, str) else None


def parse_nvidia_smi_csv(text: str, fields: list[str]) -> list[dict[str, str]]:
    """`nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]` -> one dict per GPU.

    A header line (the field names, possibly with units) is skipped; lines with another number of
    columns (error messages) are ignored."""
    rows: list[dict[str, str]] = []
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        cells = [cell.strip() for cell in row]
        if len(cells) != len(fields):
            continue
        if [c.split(" [")[0] for c in cells] == fields:
            continue
        rows.append(dict(zip(fields, cells)))
    return rows


def parse_nvidia_smi_header(text: str) -> dict[str, str]:
    """The banner of plain `nvidia-smi`: driver and the driver's CUDA version.

    Handles "Driver Version: X   CUDA Version: Y" and R610's "KMD Version: X  CUDA UMD Version: Y";
    the NVIDIA-SMI number (the tool's own version) is reported separately, not as the driver."""
    found: dict[str, str] = {}
    smi = re.search(r"NVIDIA-SMI\s+([\d.]+)", text)
    driver = re.search(r"(?:Driver|KMD) Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA (?:UMD )?Version:\s*([\d.]+)", text)
    if smi:
        found["smi"] = smi.group(1)
    if driver:
        found["driver"] = driver.group(1)
    if cuda:
        found["cuda"] = cuda.group(1)
    return found


def parse_nvidia_smi_list(text: str) -> list[dict[str, str]]:
    """`nvidia-smi -L` -> [{'index': '0', 'name': 'NVIDIA TITAN V', 'uuid': 'GPU-...'}]."""
    gpus = []
    for match in re.finditer(r"^GPU (\d+): (.+?) \(UUID: ([^)]+)\)", text, re.MULTILINE):
        gpus.append({"index": match.group(1), "name": match.group(2), "uuid": match.group(3)})
    return gpus


def parse_nvidia_smi_brands(text: str) -> list[str]:
    """`nvidia-smi -q` -> the 'Product Brand' of each GPU as printed ('NVIDIA RTX', 'Tesla')."""
    return [m.group(1).strip() for m in re.finditer(r"Product Brand\s*:\s*(.+)", text)]


# NVML's nvmlBrandType_t -> the brand string the NVIDIA container toolkit compares `brand=` against
# (libnvidia-container src/driver.c, driver_get_device_brand_1_svc, since 1.9.0; compared
# case-insensitively by src/cli/dsl.c). Values from nvml.h.
NVML_BRAND_TOOLKIT_NAMES: dict[int, str] = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "GRID",
    5: "GeForce",
    6: "TITAN",
    7: "VApps",  # NVML_BRAND_NVIDIA_VAPPS
    8: "VPC",  # NVML_BRAND_NVIDIA_VPC
    9: "VCS",  # NVML_BRAND_NVIDIA_VCS
    10: "VWS",  # NVML_BRAND_NVIDIA_VWS
    11: "CloudGaming",  # NVML_BRAND_NVIDIA_CLOUD_GAMING (= the deprecated VGAMING)
    12: "QuadroRTX",
    13: "NvidiaRTX",
    14: "Nvidia",
    15: "GeForceRTX",
    16: "TitanRTX",
}

# `nvidia-smi -q` "Product Brand" text (lower case) -> NVML brand type. nvidia-smi prints NVML's
# brand under a display name; the virtual brands have had more than one display name.
SMI_BRAND_TO_NVML: dict[str, int] = {
    "unknown": 0,
    "quadro": 1,
    "tesla": 2,
    "nvs": 3,
    "grid": 4,
    "geforce": 5,
    "titan": 6,
    "nvidia virtual applications": 7,
    "nvidia vapps": 7,
    "nvidia virtual pc": 8,
    "nvidia vpc": 8,
    "nvidia virtual compute server": 9,
    "nvidia vgpu for compute": 9,
    "nvidia vcs": 9,
    "nvidia rtx virtual workstation": 10,
    "nvidia virtual workstation": 10,
    "nvidia vws": 10,
    "nvidia cloud gaming": 11,
    "nvidia vgaming": 11,
    "quadro rtx": 12,
    "nvidia rtx": 13,
    "nvidia": 14,
    "geforce rtx": 15,
    "titan rtx": 16,
}


def toolkit_brand(smi_brand: str | None) -> str | None:
    """nvidia-smi's 'Product Brand' -> the toolkit's brand name ('NVIDIA RTX' -> 'NvidiaRTX');
    None when the text is not a known brand (the requirement is then undetermined)."""
    if smi_brand is None:
        return None
    value = SMI_BRAND_TO_NVML.get(" ".join(smi_brand.split()).lower())
    return None if value is None else NVML_BRAND_TOOLKIT_NAMES[value]


def nvml_brands() -> list[str] | None:
    """The toolkit brand name of every GPU, read from NVML (libnvidia-ml.so.1, mounted with the
    'utility' capability) as the toolkit reads it; None where NVML is not usable here."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    return nvml_brands_from(lib)


def nvml_brands_from(lib: Any) -> list[str] | None:
    try:
        if lib.nvmlInit_v2() != 0:
            return None
    except AttributeError:
        return None
    try:
        count = ctypes.c_uint(0)
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        brands = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            brand = ctypes.c_int(-1)
            if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) != 0:
                return None
            if lib.nvmlDeviceGetBrand(handle, ctypes.byref(brand)) != 0:
                return None
            brands.append(NVML_BRAND_TOOLKIT_NAMES.get(brand.value, "Unknown"))
        return brands
    except AttributeError:
        return None
    finally:
        with contextlib.suppress(Exception):
            lib.nvmlShutdown()


def parse_cudnn_header(text: str) -> str | None:
    """cudnn_version.h (cudnn.h before cuDNN 8) -> '8.9.2'."""
    values = {}
    for key in ("MAJOR", "MINOR", "PATCHLEVEL"):
        match = re.search(rf"^\s*#\s*define\s+CUDNN_{key}\s+(\d+)\b", text, re.MULTILINE)
        if match is None:
            return None
        values[key] = match.group(1)
    return f"{values['MAJOR']}.{values['MINOR']}.{values['PATCHLEVEL']}"


def cudnn_int_to_version(value: int) -> str:
    """torch.backends.cudnn.version(): 8902 -> '8.9.2' (x*1000+y*100+z), 90100 -> '9.1.0' (cuDNN 9)."""
    if value >= 10000:
        return f"{value // 10000}.{(value % 10000) // 100}.{value % 100}"
    return f"{value // 1000}.{(value % 1000) // 100}.{value % 100}"


def parse_os_release(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            found[key.strip()] = value.strip().strip('"')
    return found


# -- NVIDIA_REQUIRE_* ---------------------------------------------------------------------------

REQUIRE_PROPERTIES = ("cuda", "driver", "arch", "brand")
REQUIRE_OPERATORS = ("=", "!=", "<", "<=", ">", ">=")  # dsl.c's table: `==` is not among them
_OPERATOR_CHARS = "<>=!"


class InvalidRequirement(ValueError):
    """A term nvidia-container-cli rejects ("invalid expression"): the container does not start."""


@dataclass(frozen=True)
class RequireTerm:
    prop: str
    op: str
    value: str


def parse_term(raw: str) -> RequireTerm:
    """One `[PROPERTY][OPERATOR][VALUE]` term, split as dsl.c's evaluate_rule splits it: the property
    runs to the first of <>=!, the operator is the whole run of those characters and must be one of
    = != < <= > >= exactly, the value is the rest and must not be empty."""
    prop_end = next((i for i, c in enumerate(raw) if c in _OPERATOR_CHARS), len(raw))
    if prop_end == 0 or prop_end == len(raw):
        raise InvalidRequirement(f"invalid expression {raw!r}: no property or no operator")
    op_end = prop_end
    while op_end < len(raw) and raw[op_end] in _OPERATOR_CHARS:
        op_end += 1
    op, value = raw[prop_end:op_end], raw[op_end:]
    if op not in REQUIRE_OPERATORS:
        raise InvalidRequirement(
            f"invalid expression {raw!r}: operator {op!r} is not one of {REQUIRE_OPERATORS}"
        )
    if not value:
        raise InvalidRequirement(f"invalid expression {raw!r}: empty value")
    return RequireTerm(raw[:prop_end].lower(), op, value)


def parse_require(expression: str) -> list[list[RequireTerm]]:
    """'cuda>=12.1 brand=tesla,driver>=470' -> OR-list of AND-groups. Raises InvalidRequirement
    (a ValueError) on a term that cannot be split; property names are not checked here (the toolkit
    only rejects an unknown one when evaluation reaches it: see evaluate_require_verdict)."""
    groups = []
    for alternative in expression.split(" "):
        terms = [parse_term(raw) for raw in alternative.split(",") if raw]
        if terms:
            groups.append(terms)
    return groups


def dsl_compare_version(left: str, op: str, right: str) -> bool:
    """libnvidia-container's dsl_compare_version: digits and dots only (else InvalidRequirement),
    numeric component by component, trailing zero components ignored (12.1 == 12.1.0)."""
    for text in (left, right):
        if not text or any(c not in "0123456789." for c in text):
            raise InvalidRequirement(f"invalid version {text!r}: only digits and dots compare")
    i = j = 0
    while i < len(left) and j < len(right):
        m1 = re.match(r"\d+", left[i:])
        m2 = re.match(r"\d+", right[j:])
        if m1 is None or m2 is None:
            raise InvalidRequirement(f"invalid version {left!r} or {right!r}")
        n1, n2 = int(m1.group(0)), int(m2.group(0))
        if n1 != n2:
            return {"=": False, "!=": True, "<": n1 < n2, "<=": n1 < n2, ">": n1 > n2, ">=": n1 > n2}[op]
        i += len(m1.group(0))
        j += len(m2.group(0))
        while i < len(left) and left[i] == ".":
            i += 1
        while j < len(right) and right[j] == ".":
            j += 1
    rest1, rest2 = left[i:].lstrip(".0"), right[j:].lstrip(".0")
    if op == "!=":
        return bool(rest1 or rest2)
    if op in ("=", "<=", ">=") and not rest1 and not rest2:
        return True
    if op == "=":
        return False
    if op in ("<", "<="):
        return not rest1 and bool(rest2)
    return bool(rest1) and not rest2


def evaluate_term(term: RequireTerm, props: dict[str, str | None]) -> bool | None:
    """True / False, or None when the property's value is not known here. Raises
    InvalidRequirement where nvidia-container-cli reports "invalid expression"."""
    if term.prop not in REQUIRE_PROPERTIES:
        raise InvalidRequirement(f"invalid expression: unknown property {term.prop!r}")
    if term.op not in REQUIRE_OPERATORS:
        raise InvalidRequirement(f"invalid expression: operator {term.op!r}")
    if term.prop == "brand":
        if term.op not in ("=", "!="):
            raise InvalidRequirement(f"invalid expression: brand takes = or != only, not {term.op!r}")
        have = props.get("brand")
        if have is None:
            return None
        same = have.lower() == term.value.lower()
        return same if term.op == "=" else not same
    have = props.get(term.prop)
    if have is None:
        dsl_compare_version("0", term.op, term.value)  # the toolkit still rejects a bad value
        return None
    return dsl_compare_version(have, term.op, term.value)


@dataclass(frozen=True)
class RequireVerdict:
    satisfied: bool | None  # None: undetermined (a value it needs is not known here)
    invalid: str | None = None  # the toolkit would refuse the expression itself
    by: str | None = None  # the AND group that satisfied it


def evaluate_require_verdict(expression: str, props: dict[str, str | None]) -> RequireVerdict:
    """dsl_evaluate: OR groups left to right, each AND group stops at its first false term, the whole
    stops at the first group that holds; an invalid term fails it when evaluation reaches it."""
    any_unknown = False
    for alternative in expression.split(" "):
        raws = [raw for raw in alternative.split(",") if raw]
        if not raws:
            continue
        group_unknown = False
        group_false = False
        for raw in raws:
            try:
                value = evaluate_term(parse_term(raw), props)
            except InvalidRequirement as exc:
                return RequireVerdict(False, invalid=str(exc))
            if value is False:
                group_false = True
                break
            if value is None:
                group_unknown = True
        if group_false:
            continue
        if group_unknown:
            any_unknown = True
            continue
        return RequireVerdict(True, by=",".join(raws))
    return RequireVerdict(None if any_unknown else False)


def require_variables(env: dict[str, str]) -> dict[str, str]:
    """The NVIDIA_REQUIRE_* variables to enforce (the hook passes all but NVIDIA_REQUIRE_JETPACK*),
    with the toolkit's legacy rule: CUDA_VERSION and no NVIDIA_REQUIRE_CUDA -> cuda>=major.minor."""
    found = {
        k: v
        for k, v in sorted(env.items())
        if k.startswith("NVIDIA_REQUIRE_") and not k.startswith("NVIDIA_REQUIRE_JETPACK") and v.strip()
    }
    if not env.get("NVIDIA_REQUIRE_CUDA") and env.get("CUDA_VERSION"):
        with contextlib.suppress(ValueError):
            found["NVIDIA_REQUIRE_CUDA"] = "cuda>=" + cuda_minor(env["CUDA_VERSION"])
    return found


def go_parse_bool(value: str | None) -> bool:
    return (value or "").strip() in ("1", "t", "T", "TRUE", "true", "True")


def requirement_report(
    variables: dict[str, str],
    cuda: str | None,
    driver: str | None,
    devices: list[dict[str, str | None]],
) -> dict[str, dict[str, Any]]:
    """Each variable -> {"satisfied": bool|None, "invalid": str|None, "devices": [...]}, evaluated
    per device (arch, brand) as configure.c does; every device must satisfy. No device: evaluated
    once with arch and brand unknown (the toolkit would assume them ok; here that is undetermined
    only if the outcome depends on them)."""
    report: dict[str, dict[str, Any]] = {}
    for name, expression in variables.items():
        per_device: list[dict[str, Any]] = []
        for device in devices or [{}]:
            props = {"cuda": cuda, "driver": driver, "arch": device.get("arch"), "brand": device.get("brand")}
            verdict = evaluate_require_verdict(expression, props)
            per_device.append({"satisfied": verdict.satisfied, "by": verdict.by, "invalid": verdict.invalid})
        values = [d["satisfied"] for d in per_device]
        satisfied: bool | None = False if False in values else (None if None in values else True)
        invalid = next((d["invalid"] for d in per_device if d["invalid"]), None)
        report[name] = {"satisfied": satisfied, "invalid": invalid, "devices": per_device}
    return report


def evaluate_all_requirements(
    variables: dict[str, str],
    cuda: str | None,
    driver: str | None,
    devices: list[dict[str, str | None]],
) -> dict[str, bool | None]:
    """Each variable -> satisfied? Evaluated per device (arch, brand); every device must satisfy."""
    report = requirement_report(variables, cuda, driver, devices)
    return {name: entry["satisfied"] for name, entry in report.items()}


# -- driver table ------------------------------------------------------------------------------


def driver_satisfies(driver: str, cuda: str, table: dict[str, tuple[str, str]] | None = None) -> str:
    """'full' (driver >= the release's driver), 'minor' (>= the minor-compatibility floor),
    'too_old', or 'unknown_cuda' (no row for that CUDA minor)."""
    rows = CUDA_DRIVER_TABLE if table is None else table
    row = rows.get(cuda_minor(cuda))
    if row is None:
        return "unknown_cuda"
    full, floor = row
    if compare_versions(driver, full) >= 0:
        return "full"
    if compare_versions(driver, floor) >= 0:
        return "minor"
    return "too_old"


# -- architecture ------------------------------------------------------------------------------


def arch_supported(arch_list: list[str], capability: tuple[int, int]) -> tuple[bool, str]:
    """Can a build with this arch list run on a device of this compute capability?

    SASS sm_XY runs on devices of the same major and minor >= Y (sm_XYa only on XY exactly,
    sm_XYf on the same major); PTX compute_XY is JIT-compiled for any device >= XY."""
    major, minor = capability
    device = major * 10 + minor
    for arch in arch_list:
        match = re.match(r"^sm_(\d+?)(\d)([af]?)$", arch)
        if match is None:
            continue
        a_major, a_minor, suffix = int(match.group(1)), int(match.group(2)), match.group(3)
        if suffix == "a" and (a_major, a_minor) != (major, minor):
            continue
        if a_major == major and a_minor <= minor:
            return True, f"SASS {arch}"
    ptx = []
    for arch in arch_list:
        match = re.match(r"^compute_(\d+)$", arch)
        if match and int(match.group(1)) <= device:
            ptx.append(arch)
    if ptx:
        return True, f"PTX {ptx[-1]} (JIT-compiled on first use)"
    return False, "no SASS or PTX for this device"


def gemm_floor(device_name: str, sm_count: int | None = None) -> tuple[float | None, str]:
    """(floor TFLOP/s, how it was found) for a device, by its EXACT name. A MIG slice ("<board> MIG
    1g.5gb") gets the board's floor scaled by its share of the board's SMs (torch reports the slice's
    own multiprocessor count); (None, reason) when no floor applies."""
    name = device_name.strip()
    entry = GEMM_FLOORS.get(name)
    if entry is not None:
        return entry.tflops, f"exact name {name!r}"
    board, sep, profile = name.partition(" MIG ")
    if not sep:
        return None, f"no floor known for {name!r} (floors are matched by exact device name)"
    entry = GEMM_FLOORS.get(board)
    if entry is None:
        return None, f"MIG slice {profile!r} of {board!r}: no floor known for the board"
    if not sm_count or not entry.sms:
        return (
            None,
            f"MIG slice {profile!r} of {board!r}: its SM count is unknown, the floor cannot be scaled",
        )
    fraction = min(1.0, sm_count / entry.sms)
    return (
        round(entry.tflops * fraction, 1),
        f"MIG slice {profile!r}: {board!r} floor {entry.tflops} x {sm_count}/{entry.sms} SMs",
    )


def perf_dtype(device_name: str, capability: tuple[int, int]) -> str:
    """bfloat16 where the device has bf16 Tensor Cores (sm_80+), else float16."""
    entry = GEMM_FLOORS.get(device_name.partition(" MIG ")[0])
    if entry is not None:
        return entry.dtype
    return "bfloat16" if capability[0] >= 8 else "float16"


# -- expectations and context ------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    torch: str | None = None
    cuda: str | None = None  # "cpu", "12.1" or "12.1.1"
    cudnn: str | None = None
    python: str | None = None
    flavour: str | None = None
    require_gpu: bool = False

    @property
    def is_cpu(self) -> bool:
        return self.cuda == "cpu"


class ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit 2 through main, not argparse's own exit
        raise ArgumentError(message)


@dataclass(frozen=True)
class Invocation:
    """How the script was called besides the expectations: a selection of checks, or an internal
    child role (a collective rank, or a bounded task such as a torch.compile run)."""

    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    worker: tuple[str, ...] | None = None  # --collective-worker RANK WORLD PORT BACKEND
    task: str | None = None  # --task NAME (compile, extension_cpu, extension_cuda)
    device: str = "cpu"
    result_file: str | None = None


def _names(values: list[str] | None, env_value: str | None, option: str) -> tuple[str, ...]:
    raw = list(values or [])
    if not raw and env_value:
        raw = [env_value]
    names = tuple(n.strip() for value in raw for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in CHECK_NAMES]
    if unknown:
        raise ArgumentError(f"{option}: unknown check {', '.join(unknown)} (known: {', '.join(CHECK_NAMES)})")
    return names


def parse_args(argv: list[str], env: dict[str, str]) -> tuple[Expect, Invocation]:
    parser = _Parser(prog="check.py", description="imagekit in-image check (prints one JSON document)")
    parser.add_argument("--expect-torch")
    parser.add_argument("--expect-cuda")
    parser.add_argument("--expect-cudnn")
    parser.add_argument("--expect-python")
    parser.add_argument("--flavour")
    parser.add_argument("--require-gpu", action="store_true", default=None)
    parser.add_argument(
        "--only", action="append", metavar="CHECKS", help="run only these checks (comma list)"
    )
    parser.add_argument(
        "--skip", action="append", metavar="CHECKS", help="leave these checks out (comma list)"
    )
    # internal: the script re-runs itself for work that must be isolated or bounded in time
    parser.add_argument(
        "--collective-worker", nargs=4, metavar=("RANK", "WORLD", "PORT", "BACKEND"), help=argparse.SUPPRESS
    )
    parser.add_argument("--task", choices=TASK_NAMES, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    only = _names(ns.only, env.get("IMAGEKIT_CHECK_ONLY"), "--only")
    skip = _names(ns.skip, env.get("IMAGEKIT_CHECK_SKIP"), "--skip")
    if (ns.collective_worker or ns.task) and not ns.result_file:
        raise ArgumentError("--collective-worker and --task need --result-file")
    invocation = Invocation(
        only=only,
        skip=skip,
        worker=tuple(ns.collective_worker) if ns.collective_worker else None,
        task=ns.task,
        device=ns.device,
        result_file=ns.result_file,
    )

    def pick(arg: str | None, var: str) -> str | None:
        value = arg if arg is not None else env.get(var)
        return value.strip() if value and value.strip() else None

    cuda = pick(ns.expect_cuda, "IMAGEKIT_EXPECT_CUDA")
    if cuda is not None:
        cuda = cuda.lower()
        if cuda != "cpu" and not re.match(r"^\d+\.\d+(\.\d+)?$", cuda):
            raise ArgumentError(f"--expect-cuda: {cuda!r} is neither 'cpu' nor a CUDA version like 12.1")
    cudnn = pick(ns.expect_cudnn, "IMAGEKIT_EXPECT_CUDNN")
    if cudnn is not None and not re.match(r"^\d+(\.\d+)*$", cudnn):
        raise ArgumentError(f"--expect-cudnn: {cudnn!r} is not a cuDNN version like 8 or 8.9.5.29")
    python = pick(ns.expect_python, "IMAGEKIT_EXPECT_PYTHON")
    if python is not None and not re.match(r"^\d+\.\d+$", python):
        raise ArgumentError(f"--expect-python: {python!r} is not like 3.10")
    flavour = pick(ns.flavour, "IMAGEKIT_FLAVOUR")
    if flavour is not None and flavour not in ("devel", "runtime"):
        raise ArgumentError(f"--flavour: {flavour!r} is neither devel nor runtime")
    torch_version = pick(ns.expect_torch, "IMAGEKIT_EXPECT_TORCH")
    if torch_version is not None and not re.match(r"^\d+\.\d+", torch_version):
        raise ArgumentError(f"--expect-torch: {torch_version!r} is not a torch version")
    require_env = env.get("IMAGEKIT_REQUIRE_GPU", "").strip().lower()
    if require_env not in ("", "0", "1", "true", "false", "yes", "no"):
        raise ArgumentError(f"IMAGEKIT_REQUIRE_GPU: {require_env!r} is not a boolean")
    require_gpu = bool(ns.require_gpu) or require_env in ("1", "true", "yes")
    expect = Expect(torch_version, cuda, cudnn, python, flavour, require_gpu)
    return expect, invocation


def _run(cmd: list[str], timeout: float = SMI_TIMEOUT_S) -> tuple[int, str]:
    """Run a command; (returncode, stdout+stderr). 127 when missing, 124 on timeout."""
    try:
        proc = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        return 127, str(exc)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f}s"
    except OSError as exc:
        return 126, str(exc)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


class Context:
    """What the checks share: expectations, environment, and lazily probed facts."""

    def __init__(self, expect: Expect, env: dict[str, str]) -> None:
        self.expect = expect
        self.env = env
        self._smi: dict[str, Any] | None = None
        self._torch: Any = None
        self._torch_error: str | None = None
        self._torch_tried = False
        self.torch_import_s: float | None = None
        self._workdir: str | None = None
        self._devices: list[dict[str, str | None]] | None = None
        self.telemetry: dict[str, Any] | None = None  # set by gemm_perf

    # scratch space ---------------------------------------------------------------------------
    def workdir(self) -> str:
        """One fresh directory under the temporary directory for every build, cache and result file
        of this run (the image's root may be read-only; /tmp is the tmpfs). Removed by cleanup()."""
        if self._workdir is None:
            self._workdir = tempfile.mkdtemp(prefix="imagekit-check-", dir=temp_root(self.env))
        return self._workdir

    def subdir(self, name: str) -> str:
        path = os.path.join(self.workdir(), name)
        os.makedirs(path, exist_ok=True)
        return path

    @contextlib.contextmanager
    def cache_environment(self) -> Iterator[None]:
        """While the checks run, point this process's own torch caches (inductor, which the optimizer
        may touch; Triton; the CUDA JIT cache) into the work directory too; restored afterwards."""
        names = {
            "TORCHINDUCTOR_CACHE_DIR": "inductor",
            "TRITON_CACHE_DIR": "triton",
            "CUDA_CACHE_PATH": "nv-compute-cache",
        }
        saved = {name: os.environ.get(name) for name in names}
        try:
            for name, sub in names.items():
                if not os.environ.get(name):
                    os.environ[name] = os.path.join(self.workdir(), "process", sub)
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def cleanup(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # torch ----------------------------------------------------------------------------------
    @property
    def torch(self) -> Any:
        if not self._torch_tried:
            self._torch_tried = True
            try:
                self._torch = importlib.import_module("torch")
            except Exception as exc:  # ImportError, or a broken install raising OSError
                self._torch_error = f"{type(exc).__name__}: {exc}"
        return self._torch

    @property
    def torch_error(self) -> str | None:
        _ = self.torch
        return self._torch_error

    # nvidia-smi -----------------------------------------------------------------------------
    @property
    def smi(self) -> dict[str, Any]:
        if self._smi is None:
            self._smi = probe_nvidia_smi(self.env)
        return self._smi

    # GPU policy ------------------------------------------------------------------------------
    @property
    def wsl(self) -> bool:
        return os.path.exists("/dev/dxg")

    def gpu_request_reasons(self) -> list[str]:
        reasons = []
        if self.expect.require_gpu:
            reasons.append("--require-gpu")
        visible = self.env.get("NVIDIA_VISIBLE_DEVICES")
        if visible is not None and visible.strip().lower() not in ("", "void", "none", "all"):
            reasons.append(f"NVIDIA_VISIBLE_DEVICES={visible}")
        nodes = sorted(glob.glob("/dev/nvidia[0-9]*"))
        if os.path.exists("/dev/nvidiactl"):
            nodes.append("/dev/nvidiactl")
        if nodes:
            reasons.append("NVIDIA device nodes present: " + ", ".join(nodes[:4]))
        if self.smi.get("path"):
            reasons.append(f"nvidia-smi injected at {self.smi['path']}")
        return reasons

    @property
    def gpu_requested(self) -> bool:
        return bool(self.gpu_request_reasons())

    @property
    def gpu_visible(self) -> bool:
        if self.smi.get("gpus"):
            return True
        torch = self.torch
        if torch is None:
            return False
        try:
            return bool(torch.cuda.is_available()) and int(torch.cuda.device_count()) > 0
        except Exception:
            return False

    def gpu_gate(self, name: str) -> CheckResult | None:
        """The GPU policy: a result to return instead of running a GPU check, or None to run it."""
        if self.gpu_visible:
            return None
        if self.gpu_requested:
            cause = GPU_MISSING_CAUSE + (WSL_HINT if self.wsl else "")
            detail = {
                "requested_by": self.gpu_request_reasons(),
                "NVIDIA_VISIBLE_DEVICES": self.env.get("NVIDIA_VISIBLE_DEVICES"),
                "nvidia_smi": self.smi.get("error") or "lists no GPU",
            }
            return failed(
                name, cause, GPU_MISSING_FIX, expected="a visible GPU", actual="none", detail=detail
            )
        return skipped(name, NO_GPU_REQUESTED)


def temp_root(env: dict[str, str]) -> str:
    """$TMPDIR when it is a writable directory, else /tmp, else Python's own choice."""
    for candidate in (env.get("TMPDIR"), "/tmp"):
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    return tempfile.gettempdir()


def probe_nvidia_smi(env: dict[str, str]) -> dict[str, Any]:
    path = shutil.which("nvidia-smi", path=env.get("PATH", os.defpath))
    found: dict[str, Any] = {"path": path, "gpus": [], "queries": []}
    if path is None:
        found["error"] = "nvidia-smi not found on PATH (the NVIDIA container toolkit mounts it with --gpus)"
        return found
    fields = ["index", "name", "driver_version", "memory.total", "compute_cap"]
    rc, out = _run([path, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
    found["queries"].append({"fields": fields, "rc": rc})
    if rc != 0 or "not a valid field" in out:
        fields = fields[:-1]  # old drivers (470) reject compute_cap
        rc, out = _run([path, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
        found["queries"].append({"fields": fields, "rc": rc})
    if rc == 0:
        found["gpus"] = parse_nvidia_smi_csv(out, fields)
    else:
        found["error"] = f"nvidia-smi exited {rc}: {out.strip()[:400]}"
    hrc, header = _run([path])
    found["header"] = parse_nvidia_smi_header(header) if hrc == 0 else {}
    if not found["gpus"] and hrc == 0:
        lrc, listing = _run([path, "-L"])
        if lrc == 0:
            found["gpus"] = parse_nvidia_smi_list(listing)
    return found


def host_driver_version(ctx: Context) -> str | None:
    for gpu in ctx.smi.get("gpus", []):
        if gpu.get("driver_version"):
            return str(gpu["driver_version"])
    header = ctx.smi.get("header") or {}
    if header.get("driver"):
        return str(header["driver"])
    text = _read("/proc/driver/nvidia/version") or ""
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+([\d.]+)", text)
    return match.group(1) if match else None


def host_cuda_version(ctx: Context) -> str | None:
    """The driver's CUDA version: cuDriverGetVersion from libcuda, else nvidia-smi's banner."""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
            value = ctypes.c_int(0)
            if lib.cuDriverGetVersion(ctypes.byref(value)) == 0 and value.value > 0:
                return f"{value.value // 1000}.{(value.value % 1000) // 10}"
        except (OSError, AttributeError):
            continue
    header = ctx.smi.get("header") or {}
    return str(header["cuda"]) if header.get("cuda") else None


COMPAT_DIRS = (
    "/usr/local/cuda/compat/lib.real",  # NGC images (the entrypoint links compat/lib to it when needed)
    "/usr/local/cuda/compat/lib",
    "/usr/local/cuda/compat",  # nvidia/cuda images (the cuda-compat-X-Y package)
)


def find_forward_compat(dirs: tuple[str, ...] = COMPAT_DIRS) -> dict[str, Any]:
    """The CUDA forward-compatibility libcuda in the image: where, and which driver version it is."""
    found: list[str] = []
    for directory in (*dirs, *sorted(glob.glob("/usr/local/cuda-*/compat"))):
        for path in sorted(glob.glob(os.path.join(directory, "libcuda.so*"))):
            real = os.path.realpath(path)
            if real not in found:
                found.append(real)
    versions = sorted(
        {m.group(1) for f in found for m in [re.search(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$", f)] if m}
    )
    return {"libs": found, "versions": versions, "dirs": [d for d in dirs if os.path.isdir(d)]}


def loaded_libcuda() -> str | None:
    """The libcuda.so this process mapped (after host_cuda_version loaded it): the host driver's
    (/usr/lib/..., mounted by the toolkit) or a forward-compatibility one from the image."""
    maps = _read("/proc/self/maps") or ""
    for line in maps.splitlines():
        match = re.search(r"(/\S*libcuda\.so[.\d]*)$", line)
        if match:
            return os.path.realpath(match.group(1))
    return None


# -- checks ------------------------------------------------------------------------------------


def driver_capabilities(value: str | None) -> set[str]:
    """NVIDIA_DRIVER_CAPABILITIES -> the set it grants; unset or empty counts as {"utility"} (what the
    runtimes on these machines mount: no compute libraries); "all" grants everything."""
    names = {c.strip().lower() for c in (value or "").split(",") if c.strip()}
    if not names:
        return {"utility"}
    if "all" in names:
        return {"all", "compute", "compat32", "graphics", "utility", "video", "display", "ngx"}
    return names


def is_cuda_build(ctx: Context) -> bool:
    """The cell is a CUDA build: an expected CUDA version, or (none expected) a CUDA torch."""
    if ctx.expect.cuda is not None:
        return not ctx.expect.is_cpu
    torch = ctx.torch
    try:
        return torch is not None and bool(torch.version.cuda)
    except AttributeError:
        return False


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
    if cuda_build and "compute" not in capabilities:
        value = env.get("NVIDIA_DRIVER_CAPABILITIES")
        shown = "unset (utility only)" if not (value or "").strip() else repr(value)
        return failed(
            "environment",
            f"NVIDIA_DRIVER_CAPABILITIES is {shown}: without 'compute' the NVIDIA container runtime "
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
    version_json_text = _read("/usr/local/cuda/version.json")
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
    rc, out = _run([path, "--version"], timeout=30)
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
    return passed("nvidia_smi", actual={"driver": host_driver_version(ctx), "gpus": gpus}, detail=detail)


def check_driver(ctx: Context) -> CheckResult:
    if ctx.expect.is_cpu:
        return skipped("driver", "CPU build: no CUDA driver needed")
    gate = ctx.gpu_gate("driver")
    if gate is not None:
        return gate
    if ctx.expect.cuda is None:
        return skipped("driver", "no expected CUDA given")
    driver = host_driver_version(ctx)
    want = cuda_minor(ctx.expect.cuda)
    row = CUDA_DRIVER_TABLE.get(want)
    detail: dict[str, Any] = {"cuda": want, "host_cuda": host_cuda_version(ctx)}
    compat = find_forward_compat()
    loaded = loaded_libcuda()
    compat_in_use = bool(loaded and any(loaded == lib for lib in compat["libs"]))
    detail["forward_compat"] = {**compat, "loaded_libcuda": loaded, "in_use": compat_in_use}
    if row:
        detail.update({"full_compatibility_driver": row[0], "minor_version_floor": row[1]})
    if driver is None:
        return failed(
            "driver",
            "the driver version could not be read (nvidia-smi, /proc/driver/nvidia)",
            "make nvidia-smi available (NVIDIA_DRIVER_CAPABILITIES=compute,utility)",
            expected=row[0] if row else None,
            actual=None,
            detail=detail,
        )
    verdict = driver_satisfies(driver, want)
    detail["verdict"] = verdict
    if verdict == "unknown_cuda":
        return skipped("driver", f"no driver table row for CUDA {want}", actual=driver, detail=detail)
    if verdict == "full":
        return passed("driver", f">= {row[0]}" if row else None, driver, detail)
    if verdict == "minor":
        detail["note"] = (
            "minor-version compatibility: runs, but PTX from a newer toolkit cannot be "
            "JIT-compiled by this driver (see the arch check)"
            + (f"; the image's forward-compatibility libcuda is in use ({loaded})" if compat_in_use else "")
        )
        return passed("driver", f">= {row[1]}" if row else None, driver, detail)
    variables = require_variables(ctx.env)
    if compat["libs"] and variables and not go_parse_bool(ctx.env.get("NVIDIA_DISABLE_REQUIRE")):
        verdicts = evaluate_all_requirements(variables, detail["host_cuda"], driver, _device_props(ctx))
        if all(v is True for v in verdicts.values()) and compat_in_use:
            detail["note"] = (
                "below the minor-version floor; runs through the image's forward-compatibility "
                f"libcuda ({loaded}), which the image's NVIDIA_REQUIRE_* allows (datacenter GPUs only)"
            )
            return passed("driver", f">= {row[1]}" if row else None, driver, detail)
    cause = (
        f"driver {driver} is too old for CUDA {want} (needs >= {row[1] if row else '?'} for minor-version "
        f"compatibility, >= {row[0] if row else '?'} for full)"
    )
    fix = (
        f"upgrade the host NVIDIA driver to >= {row[0] if row else '?'}, or use an image built for an "
        "older CUDA"
    )
    if compat["libs"] and not compat_in_use:
        cause += (
            f"; the image has forward-compatibility libraries ({', '.join(compat['versions']) or '?'} in "
            f"{', '.join(compat['dirs'])}) but this process loaded {loaded or 'no libcuda'}"
        )
        fix += (
            "; or, on a datacenter GPU, put the compat directory first on the loader path "
            "(LD_LIBRARY_PATH=/usr/local/cuda/compat/lib.real in NGC images, /usr/local/cuda/compat in "
            "nvidia/cuda images; NGC's entrypoint does this when it sees an older driver)"
        )
    return failed(
        "driver",
        cause,
        fix,
        expected=f">= {row[1] if row else '?'}",
        actual=driver,
        detail=detail,
    )


def _device_props(ctx: Context) -> list[dict[str, str | None]]:
    """Per GPU: arch (compute capability) and brand (the toolkit's name), as the toolkit sees them.
    The brand comes from NVML where it loads (exactly what the toolkit reads), else from nvidia-smi
    -q's "Product Brand" mapped to the toolkit's names."""
    if ctx._devices is not None:
        return ctx._devices
    devices: list[dict[str, str | None]] = []
    smi_brands: list[str] = []
    smi_path = ctx.smi.get("path")
    if smi_path:
        rc, out = _run([smi_path, "-q"])
        if rc == 0:
            smi_brands = parse_nvidia_smi_brands(out)
    from_nvml = nvml_brands() if smi_path or ctx.smi.get("gpus") else None

    def brand_of(i: int) -> tuple[str | None, str | None, str | None]:
        smi_text = smi_brands[i] if i < len(smi_brands) else None
        if from_nvml is not None and i < len(from_nvml):
            return from_nvml[i], smi_text, "nvml"
        name = toolkit_brand(smi_text)
        return name, smi_text, ("nvidia-smi -q" if name else None)

    for i, gpu in enumerate(ctx.smi.get("gpus") or []):
        arch = gpu.get("compute_cap")
        brand, smi_text, source = brand_of(i)
        devices.append(
            {
                "arch": arch if arch and arch not in ("[N/A]", "N/A") else None,
                "brand": brand,
                "product_brand": smi_text,
                "brand_source": source,
            }
        )
    if not devices and ctx.torch is not None:
        try:
            for i in range(int(ctx.torch.cuda.device_count())):
                major, minor = ctx.torch.cuda.get_device_capability(i)
                brand, smi_text, source = brand_of(i)
                devices.append(
                    {
                        "arch": f"{major}.{minor}",
                        "brand": brand,
                        "product_brand": smi_text,
                        "brand_source": source,
                    }
                )
        except Exception:
            pass
    ctx._devices = devices
    return devices


def check_require(ctx: Context) -> CheckResult:
    variables = require_variables(ctx.env)
    if go_parse_bool(ctx.env.get("NVIDIA_DISABLE_REQUIRE")):
        return skipped("require", "NVIDIA_DISABLE_REQUIRE is true", detail={"variables": variables})
    if not variables:
        return skipped("require", "the image sets no NVIDIA_REQUIRE_* (nor CUDA_VERSION)")
    for name, expression in variables.items():
        try:
            parse_require(expression)
        except ValueError as exc:
            return failed(
                "require",
                f"{name} cannot be parsed: {exc} (nvidia-container-cli refuses the container when its "
                "evaluation reaches such a term)",
                "fix the image's NVIDIA_REQUIRE_* syntax (space = OR, comma = AND; operators = != < <= > >=)",
                expected=expression,
                detail={"variables": variables},
            )
    gate = ctx.gpu_gate("require")
    if gate is not None:
        return gate
    cuda = host_cuda_version(ctx)
    driver = host_driver_version(ctx)
    devices = _device_props(ctx)
    report = requirement_report(variables, cuda, driver, devices)
    verdicts = {name: entry["satisfied"] for name, entry in report.items()}
    actual = {"cuda": cuda, "driver": driver, "devices": devices}
    detail = {"variables": variables, "verdicts": verdicts, "evaluation": report}
    if all(v is True for v in verdicts.values()):
        return passed("require", variables, actual, detail)
    invalid = {name: entry["invalid"] for name, entry in report.items() if entry["invalid"]}
    if invalid:
        return failed(
            "require",
            "the NVIDIA container toolkit would refuse to start this image: "
            + "; ".join(f"{name}: {why}" for name, why in invalid.items()),
            "fix the image's NVIDIA_REQUIRE_* (properties cuda, driver, arch, brand; operators = != < <= > "
            ">=, not ==; space = OR, comma = AND)",
            expected=variables,
            actual=actual,
            detail=detail,
        )
    if any(v is False for v in verdicts.values()):
        bad = [name for name, v in verdicts.items() if v is False]
        brands = sorted({str(d.get("brand")) for d in devices})
        return failed(
            "require",
            f"the host does not satisfy {', '.join(bad)}: driver too old for the image's CUDA "
            f"(driver {driver}, driver CUDA {cuda}, brand {', '.join(brands) or '?'})"
            + (WSL_HINT if ctx.wsl else ""),
            "upgrade the host NVIDIA driver (or run on a datacenter GPU with the forward-compatibility "
            "package the requirement names)",
            expected=variables,
            actual=actual,
            detail=detail,
        )
    return failed(
        "require",
        "the requirement could not be decided: a property it needs (brand or arch) is unknown here",
        "make nvidia-smi and NVML available in the container (NVIDIA_DRIVER_CAPABILITIES=compute,utility)",
        expected=variables,
        actual=actual,
        detail=detail,
    )


def _torch_skip(ctx: Context, name: str) -> CheckResult | None:
    if ctx.torch is None:
        return skipped(name, "torch is not importable (see the torch check)")
    return None


def _gpu_torch_gate(ctx: Context, name: str) -> CheckResult | None:
    """For checks that need both a GPU and torch: the GPU policy first, then torch's presence."""
    return ctx.gpu_gate(name) or _torch_skip(ctx, name)


def needs_gpu_and_torch(
    name: str,
) -> Callable[[Callable[[Context, Any], CheckResult]], Callable[[Context], CheckResult]]:
    """A check that runs only past the GPU policy and with torch importable; it gets torch."""

    def wrap(check: Callable[[Context, Any], CheckResult]) -> Callable[[Context], CheckResult]:
        def gated(ctx: Context) -> CheckResult:
            blocked = _gpu_torch_gate(ctx, name)
            return blocked if blocked is not None else check(ctx, ctx.torch)

        gated.__name__ = check.__name__
        gated.__doc__ = check.__doc__
        return gated

    return wrap


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
    skip = _torch_skip(ctx, "torch_cuda")
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
        text = _read(path)
        version = parse_cudnn_header(text) if text else None
        if version:
            return version, path
    nv = env.get("NV_CUDNN_VERSION")
    if nv and re.match(r"^\d+\.\d+\.\d+", nv):
        return ".".join(nv.split(".")[:3]), "NV_CUDNN_VERSION"
    return None, None


def check_cudnn(ctx: Context) -> CheckResult:
    skip = _torch_skip(ctx, "cudnn")
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
                text = _read(path)
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


@needs_gpu_and_torch("cuda_available")
def check_cuda_available(ctx: Context, torch: Any) -> CheckResult:
    if not torch.cuda._is_compiled():
        fix = wheel_fix(ctx.expect.torch, ctx.expect.cuda or "12.1")
        return failed("cuda_available", "a GPU is visible but torch is a CPU build", fix, True, False)
    if not torch.cuda.is_available():
        cause = (
            "torch.cuda.is_available() is False although a GPU is visible: the driver is too old for "
            "torch's CUDA, or libcuda is not mounted" + (WSL_HINT if ctx.wsl else "")
        )
        return failed(
            "cuda_available",
            cause,
            "compare the driver check; upgrade the host driver or pick the image for an older CUDA",
            expected=True,
            actual=False,
            detail={"torch_cuda": torch.version.cuda},
        )
    devices = []
    for i in range(int(torch.cuda.device_count())):
        props = torch.cuda.get_device_properties(i)
        devices.append(
            {
                "index": i,
                "name": props.name,
                "capability": f"{props.major}.{props.minor}",
                "memory_gib": round(props.total_memory / 2**30, 1),
                "sm_count": props.multi_processor_count,
            }
        )
    if not devices:
        return failed(
            "cuda_available",
            "torch reports CUDA available but no devices",
            GPU_MISSING_FIX,
            expected=">= 1",
            actual=0,
        )
    return passed("cuda_available", True, {"device_count": len(devices), "devices": devices})


@needs_gpu_and_torch("arch")
def check_arch(ctx: Context, torch: Any) -> CheckResult:
    if not torch.cuda.is_available():
        return skipped("arch", "torch.cuda.is_available() is False (see cuda_available)")
    arch_list = list(torch.cuda.get_arch_list())
    per_device: list[dict[str, Any]] = []
    bad: list[str] = []
    for i in range(int(torch.cuda.device_count())):
        capability = tuple(torch.cuda.get_device_capability(i))
        ok, how = arch_supported(arch_list, (int(capability[0]), int(capability[1])))
        sm = f"sm_{capability[0]}{capability[1]}"
        per_device.append({"index": i, "sm": sm, "ok": ok, "how": how})
        if not ok:
            bad.append(sm)
    if bad:
        return failed(
            "arch",
            f"no kernel image is available for execution on the device: torch was built for {arch_list}, "
            f"the device is {', '.join(bad)}",
            "use a torch build (CUDA variant) whose arch list includes this GPU, e.g. a newer CUDA wheel",
            expected=bad,
            actual=arch_list,
            detail=per_device,
        )
    return passed("arch", [d["sm"] for d in per_device], arch_list, per_device)


def _python_matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    cols = list(map(list, zip(*b)))
    return [[sum(x * y for x, y in zip(row, col)) for col in cols] for row in a]


def check_gemm_cpu(ctx: Context) -> CheckResult:
    skip = _torch_skip(ctx, "gemm_cpu")
    if skip:
        return skip
    torch = ctx.torch
    n = 64
    rng = random.Random(1234)
    a = [[rng.uniform(-1, 1) for _ in range(n)] for _ in range(n)]
    b = [[rng.uniform(-1, 1) for _ in range(n)] for _ in range(n)]
    got = (torch.tensor(a, dtype=torch.float32) @ torch.tensor(b, dtype=torch.float32)).tolist()
    ref = _python_matmul(a, b)  # float64, independent of torch's BLAS
    scale = max(abs(v) for row in ref for v in row)
    err = max(abs(g - r) for grow, rrow in zip(got, ref) for g, r in zip(grow, rrow)) / scale
    tolerance = 1e-5
    detail = {
        "n": n,
        "dtype": "float32",
        "reference": "pure Python float64",
        "max_rel_error": err,
        "tolerance": tolerance,
    }
    if not err <= tolerance:
        return failed(
            "gemm_cpu",
            "CPU matmul disagrees with the reference: broken BLAS in this torch build",
            "reinstall torch; check for a conflicting MKL/OpenBLAS in LD_LIBRARY_PATH",
            expected=f"<= {tolerance}",
            actual=err,
            detail=detail,
        )
    return passed("gemm_cpu", f"<= {tolerance}", err, detail)


# -- GEMM correctness ----------------------------------------------------------------------------


def gemm_tolerance(dtype: str, k: int) -> float:
    """rtol of one output element relative to its scale sqrt(sum_k (a_ik b_kj)^2) (the natural size
    of a K-term dot product): output rounding (a few ulps of the output dtype, also covering split-K
    partial sums kept in that dtype) plus fp32 accumulation error growing with sqrt(K)."""
    return 8.0 * DTYPE_EPS[dtype] + 8.0 * math.sqrt(k) * DTYPE_EPS["float32"]


def gemm_references(torch: Any, a: Any, b: Any, dtypes: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
    """dtype -> (reference, scale), both float64 on the CPU, from the inputs rounded to that dtype
    (autocast rounds them before the product): only the GEMM's own error is measured."""
    refs: dict[str, tuple[Any, Any]] = {}
    for name in dtypes:
        ra = a.to(getattr(torch, name)).double()
        rb = b.to(getattr(torch, name)).double()
        refs[name] = (ra @ rb, ((ra * ra) @ (rb * rb)).sqrt())
    return refs


def gemm_error_stats(torch: Any, got: Any, ref: Any, scale: Any, rtol: float) -> dict[str, Any]:
    """Per-element check |got - ref| <= rtol * scale (+ a tiny absolute floor): how many elements
    exceed it (NaN and inf count), and the worst one."""
    err = (got.double() - ref).abs()
    tol = scale * rtol + 1e-30
    ratio = err / tol
    ratio = torch.where(torch.isnan(ratio), torch.full_like(ratio, math.inf), ratio)
    exceeding = int((ratio > 1.0).sum().item())
    flat = int(torch.argmax(ratio).item())
    cols = int(ref.shape[1])
    row, col = divmod(flat, cols)
    return {
        "elements": int(ref.numel()),
        "exceeding": exceeding,
        "max_abs_error": float(err.max().item()),
        "max_error_ratio": float(ratio.max().item()),
        "rtol": rtol,
        "worst": {
            "row": row,
            "col": col,
            "got": float(got[row, col].item()),
            "ref": float(ref[row, col].item()),
            "tolerance": float(tol[row, col].item()),
        },
    }


def bf16_support(torch: Any, index: int) -> tuple[bool, str | None]:
    """(supported, reason if not) for bf16 on CUDA device `index`, asked per device."""
    try:
        with torch.cuda.device(index):
            supported = bool(torch.cuda.is_bf16_supported())
    except Exception as exc:
        return False, f"torch.cuda.is_bf16_supported() raised {type(exc).__name__}: {exc}"
    if supported:
        return True, None
    major, minor = torch.cuda.get_device_capability(index)
    return False, (
        f"torch.cuda.is_bf16_supported() is False on device {index} (sm_{major}{minor}): bf16 needs compute "
        f"capability 8.0, and torch {torch.__version__} raises on bf16 autocast below it"
    )


def cuda_device(torch: Any, index: int) -> str:
    """The torch device of CUDA device `index` ("cuda:N"; a test double of torch may map it)."""
    mapper = getattr(torch, "imagekit_device", None)
    return str(mapper(index)) if callable(mapper) else f"cuda:{index}"


def _cuda_devices(torch: Any) -> list[dict[str, Any]]:
    devices = []
    for i in range(int(torch.cuda.device_count())):
        props = torch.cuda.get_device_properties(i)
        devices.append(
            {
                "index": i,
                "name": str(props.name),
                "capability": (int(props.major), int(props.minor)),
                "sm_count": int(getattr(props, "multi_processor_count", 0) or 0) or None,
                "uuid": str(getattr(props, "uuid", "") or "") or None,
            }
        )
    return devices


@needs_gpu_and_torch("gemm_gpu")
def check_gemm_gpu(ctx: Context, torch: Any) -> CheckResult:
    if not torch.cuda.is_available():
        return failed(
            "gemm_gpu",
            "cannot run: torch.cuda.is_available() is False (see cuda_available)",
            "fix cuda_available first",
            expected="GEMM on the GPU",
            actual=None,
        )
    n = 1024  # M = N = K; the float64 references are computed once on the CPU
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen)
    b = torch.randn(n, n, generator=gen)
    dtypes = ("float32", "float16", "bfloat16")
    refs = gemm_references(torch, a, b, dtypes)
    tolerances = {d: gemm_tolerance(d, n) for d in dtypes}
    per_device: list[dict[str, Any]] = []
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        for device in _cuda_devices(torch):
            i = device["index"]
            entry: dict[str, Any] = {
                "index": i,
                "name": device["name"],
                "capability": "{}.{}".format(*device["capability"]),
                "dtypes": {},
            }
            bf16_ok, bf16_reason = bf16_support(torch, i)
            with torch.cuda.device(i):
                da, db = a.to(cuda_device(torch, i)), b.to(cuda_device(torch, i))
                for dtype_name in dtypes:
                    if dtype_name == "bfloat16" and not bf16_ok:
                        entry["dtypes"][dtype_name] = {"status": "skip", "reason": bf16_reason}
                        continue
                    try:
                        if dtype_name == "float32":
                            out = da @ db
                        else:
                            with torch.autocast(device_type="cuda", dtype=getattr(torch, dtype_name)):
                                out = da @ db
                        torch.cuda.synchronize(i)
                        got = out.float().cpu()
                    except Exception as exc:
                        entry["dtypes"][dtype_name] = {
                            "status": "fail",
                            "error": f"{type(exc).__name__}: {exc}",
                        }
                        continue
                    ref, scale = refs[dtype_name]
                    stats = gemm_error_stats(torch, got, ref, scale, tolerances[dtype_name])
                    stats["status"] = "pass" if stats["exceeding"] == 0 else "fail"
                    entry["dtypes"][dtype_name] = stats
                del da, db
            statuses = [r["status"] for r in entry["dtypes"].values()]
            entry["status"] = "fail" if "fail" in statuses else "pass"
            per_device.append(entry)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    detail = {
        "shape": [n, n, n],
        "reference": "float64 on the CPU, from the same inputs rounded to each dtype",
        "bound": "|got - ref| <= rtol * sqrt(sum_k (a_ik b_kj)^2), every element",
        "rtol": tolerances,
        "tf32": False,
        "devices": per_device,
    }
    actual = [
        {
            "index": d["index"],
            "status": d["status"],
            "exceeding": {k: v.get("exceeding") for k, v in d["dtypes"].items() if "exceeding" in v},
        }
        for d in per_device
    ]
    if not per_device:
        return failed(
            "gemm_gpu",
            "torch reports CUDA available but no devices",
            GPU_MISSING_FIX,
            actual=[],
            detail=detail,
        )
    bad = [d for d in per_device if d["status"] == "fail"]
    if bad:
        parts = []
        for d in bad:
            for dtype_name, r in d["dtypes"].items():
                if r.get("status") != "fail":
                    continue
                if "error" in r:
                    parts.append(f"GPU {d['index']} {dtype_name}: {r['error']}")
                else:
                    w = r["worst"]
                    parts.append(
                        f"GPU {d['index']} ({d['name']}) {dtype_name}: {r['exceeding']} of {r['elements']} "
                        f"elements off by more than the bound (worst [{w['row']},{w['col']}] got "
                        f"{w['got']:.6g}, expected {w['ref']:.6g} +- {w['tolerance']:.3g})"
                    )
        return failed(
            "gemm_gpu",
            "GPU matmul disagrees with the float64 reference: " + "; ".join(parts),
            "check the device (ECC errors and row remapping: nvidia-smi -q -d ECC,ROW_REMAPPER; dmesg for "
            "Xid), and the cuBLAS in the image (one cuBLAS, the one torch pins)",
            expected=tolerances,
            actual=actual,
            detail=detail,
        )
    return passed("gemm_gpu", tolerances, actual, detail)


# -- GEMM performance and telemetry --------------------------------------------------------------

TELEMETRY_BASE_FIELDS = (
    "index",
    "uuid",
    "utilization.gpu",
    "memory.used",
    "power.draw",
    "temperature.gpu",
    "clocks.sm",
)
THROTTLE_FIELDS = ("clocks_throttle_reasons.active", "clocks_event_reasons.active")
TELEMETRY_METRICS = {
    "utilization.gpu": "utilization_gpu_pct",
    "memory.used": "memory_used_mib",
    "power.draw": "power_draw_w",
    "temperature.gpu": "temperature_gpu_c",
    "clocks.sm": "clocks_sm_mhz",
    "clocks.current.sm": "clocks_sm_mhz",
}


def telemetry_number(text: str | None) -> float | None:
    """'176.98' / '176.98 W' / '86 %' -> float; '[N/A]', 'N/A', '[Not Supported]' -> None."""
    if text is None:
        return None
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text)
    return float(match.group(1)) if match else None


def decode_throttle_reasons(text: str | None) -> list[str] | None:
    """'0x0000000000000004' -> ['sw_power_cap']; None when not a bitmask ('[N/A]')."""
    if text is None:
        return None
    match = re.match(r"^\s*0x([0-9A-Fa-f]+)\s*$", text)
    if match is None:
        return None
    mask = int(match.group(1), 16)
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"0x{bit:x}")
            rest &= ~bit
        bit <<= 1
    return names


def _stats(values: list[float]) -> dict[str, float | int]:
    return {
        "min": min(values),
        "max": max(values),
        "mean": round(sum(values) / len(values), 2),
        "n": len(values),
    }


def summarise_telemetry(rows: list[dict[str, str]]) -> dict[str, dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu=...` samples -> per GPU (nvidia-smi index): sample count,
    min/max/mean of each metric, and how many samples had each clock throttle reason."""
    per_gpu: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = row.get("index") or "?"
        entry = per_gpu.setdefault(key, {"samples": 0, "uuid": row.get("uuid"), "_v": {}, "_t": []})
        entry["samples"] += 1
        for field, metric in TELEMETRY_METRICS.items():
            value = telemetry_number(row.get(field))
            if value is not None:
                entry["_v"].setdefault(metric, []).append(value)
        for field in THROTTLE_FIELDS:
            reasons = decode_throttle_reasons(row.get(field))
            if reasons is not None:
                entry["_t"].append(reasons)
    summary: dict[str, dict[str, Any]] = {}
    for key, entry in per_gpu.items():
        counts: dict[str, int] = {}
        for reasons in entry["_t"]:
            for reason in reasons:
                counts[reason] = counts.get(reason, 0) + 1
        limiting = sum(1 for reasons in entry["_t"] if PERF_LIMITING_REASONS.intersection(reasons))
        summary[key] = {
            "samples": entry["samples"],
            "uuid": entry["uuid"],
            "metrics": {metric: _stats(values) for metric, values in sorted(entry["_v"].items())},
            "throttle_reasons": {
                "sampled": len(entry["_t"]),
                "counts": dict(sorted(counts.items())),
                "perf_limiting_samples": limiting,
            },
        }
    return summary


def telemetry_query_fields(smi_path: str) -> tuple[list[str], str | None]:
    """The fields this nvidia-smi answers: the throttle field was renamed clocks_event_reasons in
    newer drivers, and an unknown field fails the whole query, so probe once."""
    error = None
    for throttle in (*THROTTLE_FIELDS, None):
        fields = [*TELEMETRY_BASE_FIELDS, *([throttle] if throttle else [])]
        rc, out = _run(
            [smi_path, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"], timeout=15
        )
        if rc == 0 and "not a valid field" not in out.lower() and parse_nvidia_smi_csv(out, fields):
            return fields, None
        error = f"nvidia-smi --query-gpu exited {rc}: {out.strip()[:200]}"
    return [], error


class TelemetrySampler:
    """`nvidia-smi --query-gpu=... -lms N` in the background, its output in a file under the run's
    work directory; stop() ends it and returns the parsed rows."""

    def __init__(self, smi_path: str, fields: list[str], out_path: str, interval_ms: int) -> None:
        self.smi_path = smi_path
        self.fields = fields
        self.out_path = out_path
        self.interval_ms = interval_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: str | None = None
        self.started = 0.0
        self.seconds = 0.0

    def start(self) -> None:
        command = [
            self.smi_path,
            "--query-gpu=" + ",".join(self.fields),
            "--format=csv,noheader,nounits",
            "-lms",
            str(self.interval_ms),
        ]
        try:
            with open(self.out_path, "wb") as out:
                self.proc = subprocess.Popen(
                    command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
        except OSError as exc:
            self.error = f"could not start nvidia-smi: {exc}"
        self.started = time.monotonic()

    def stop(self) -> list[dict[str, str]]:
        self.seconds = round(time.monotonic() - self.started, 3)
        proc = self.proc
        if proc is not None:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
                if proc.poll() is not None:
                    break
                with contextlib.suppress(OSError):
                    proc.send_signal(sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=3)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        text = _read(self.out_path) or ""
        rows = parse_nvidia_smi_csv(text, self.fields)
        if not rows and self.error is None:
            self.error = "nvidia-smi gave no samples: " + text.strip()[:200]
        return rows


def _uuid_key(value: str | None) -> str | None:
    if not value:
        return None
    text = value.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text or None


def match_smi_gpu(
    device: dict[str, Any], device_names: list[str], summary: dict[str, dict[str, Any]], env: dict[str, str]
) -> tuple[str | None, str | None]:
    """(nvidia-smi index, how) of a CUDA device: by UUID when torch gives one; else by position when
    the order cannot differ (no CUDA_VISIBLE_DEVICES, as many GPUs as nvidia-smi lists, all one
    model, so CUDA's fastest-first order is the PCI order); else (None, None)."""
    want = _uuid_key(device.get("uuid"))
    if want:
        for key, entry in summary.items():
            if _uuid_key(entry.get("uuid")) == want:
                return key, "uuid"
    if (
        not env.get("CUDA_VISIBLE_DEVICES")
        and len(summary) == len(device_names)
        and len(set(device_names)) == 1
        and str(device["index"]) in summary
    ):
        return str(device["index"]), "index"
    return None, None


def time_gemm(
    torch: Any, index: int, dtype_name: str, n: int, min_seconds: float, on_window: Any = None
) -> dict[str, Any]:
    """TFLOP/s of an n^3 GEMM on device `index`, timed with CUDA events over at least min_seconds
    after a warm-up. on_window(start: bool) is called right before and after the timed window."""
    device = cuda_device(torch, index)
    dtype = getattr(torch, dtype_name)
    with torch.cuda.device(index):
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        for _ in range(3):
            torch.matmul(a, b)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b)
        end.record()
        end.synchronize()
        one = max(start.elapsed_time(end) / 1000.0, 1e-6)
        iterations = min(max(math.ceil(min_seconds / one * 1.1), 10), 200000)
        seconds = 0.0
        wall = 0.0
        if on_window is not None:
            on_window(True)
        try:
            # A device that speeds up between rounds (boost clocks, a neighbour's load gone) can
            # finish a round short of the window: aim past it, and try again a bounded few times.
            for _ in range(6):
                wall_start = time.perf_counter()
                start.record()
                for _ in range(iterations):
                    torch.matmul(a, b)
                end.record()
                end.synchronize()
                wall = time.perf_counter() - wall_start
                seconds = start.elapsed_time(end) / 1000.0
                if seconds >= min_seconds:
                    break
                iterations = math.ceil(iterations * min_seconds / max(seconds, 1e-6) * 1.5)
        finally:
            if on_window is not None:
                on_window(False)
        del a, b
    return {
        "dtype": dtype_name,
        "shape": [n, n, n],
        "iterations": iterations,
        "seconds": round(seconds, 4),
        "wall_seconds": round(wall, 4),
        "tflops": float(f"{2 * n**3 * iterations / seconds / 1e12:.4g}") if seconds > 0 else None,
    }


def check_gemm_perf(ctx: Context) -> CheckResult:
    gate = ctx.gpu_gate("gemm_perf")
    if gate is None:
        gate = _torch_skip(ctx, "gemm_perf")
    if gate is None and not ctx.torch.cuda.is_available():
        gate = skipped("gemm_perf", "torch.cuda.is_available() is False (see cuda_available)")
    if gate is not None:
        return CheckResult(**{**asdict(gate), "required": False})
    torch = ctx.torch
    devices = _cuda_devices(torch)
    smi_path = ctx.smi.get("path")
    fields, telemetry_error = telemetry_query_fields(smi_path) if smi_path else ([], "nvidia-smi not found")
    telemetry: dict[str, Any] = {
        "source": "nvidia-smi" if fields else None,
        "interval_ms": TELEMETRY_INTERVAL_MS,
        "fields": fields,
        "error": telemetry_error,
        "devices": [],
    }
    results: list[dict[str, Any]] = []
    for device in devices:
        i = device["index"]
        dtype_name = perf_dtype(device["name"], device["capability"])
        floor, floor_how = gemm_floor(device["name"], device["sm_count"])
        sampler: TelemetrySampler | None = None
        if fields and smi_path:
            sampler = TelemetrySampler(
                smi_path, fields, os.path.join(ctx.subdir("telemetry"), f"gpu{i}.csv"), TELEMETRY_INTERVAL_MS
            )

        def window(begin: bool, sampler: TelemetrySampler | None = sampler) -> None:
            if sampler is not None and begin:
                sampler.start()

        entry: dict[str, Any] = {
            "index": i,
            "device": device["name"],
            "capability": "{}.{}".format(*device["capability"]),
            "sm_count": device["sm_count"],
            "floor_tflops": floor,
            "floor": floor_how,
        }
        try:
            entry.update(time_gemm(torch, i, dtype_name, PERF_N, PERF_MIN_SECONDS, window))
        except Exception as exc:
            entry.update({"status": "fail", "error": f"{type(exc).__name__}: {exc}"})
        window_summary: dict[str, Any] = {"cuda_index": i, "name": device["name"]}
        if sampler is not None:
            rows = sampler.stop()
            summary = summarise_telemetry(rows)
            smi_index, how = match_smi_gpu(device, [d["name"] for d in devices], summary, ctx.env)
            window_summary.update(
                {
                    "window_s": sampler.seconds,
                    "nvidia_smi_index": smi_index,
                    "matched_by": how,
                    "this_gpu": summary.get(smi_index) if smi_index is not None else None,
                    "all_gpus": summary,
                    "error": sampler.error,
                }
            )
            entry["telemetry"] = window_summary["this_gpu"]
        telemetry["devices"].append(window_summary)
        if "status" not in entry:
            tflops = entry.get("tflops")
            if floor is None:
                entry.update({"status": "skip", "reason": floor_how})
            elif tflops is not None and tflops < floor:
                entry["status"] = "fail"
            else:
                entry["status"] = "pass"
        results.append(entry)
    ctx.telemetry = telemetry
    measured = [r for r in results if r.get("tflops") is not None]
    # the figure the report shows: the device furthest below its floor (else the slowest measured)
    floored = [r for r in measured if r.get("floor_tflops")]
    if floored:
        slowest: dict[str, Any] | None = min(floored, key=lambda r: r["tflops"] / r["floor_tflops"])
    else:
        slowest = min(measured, key=lambda r: r["tflops"]) if measured else None
    detail: dict[str, Any] = {
        "device": slowest["device"] if slowest else None,
        "floor_tflops": slowest["floor_tflops"] if slowest else None,
        "dtype": slowest["dtype"] if slowest else None,
        "shape": [PERF_N, PERF_N, PERF_N],
        "timing": f"CUDA events, >= {PERF_MIN_SECONDS} s per device after 3 warm-up GEMMs",
        "devices": results,
    }
    actual = slowest["tflops"] if slowest else None
    failing = [r for r in results if r["status"] == "fail"]
    floors = {str(r["index"]): f">= {r['floor_tflops']}" for r in results if r.get("floor_tflops")}
    if failing:
        parts = []
        for r in failing:
            if "error" in r:
                parts.append(f"GPU {r['index']}: {r['error']}")
                continue
            text = f"GPU {r['index']} ({r['device']}) {r['tflops']} TFLOP/s < floor {r['floor_tflops']}"
            tel = r.get("telemetry") or {}
            throttle = tel.get("throttle_reasons") or {}
            limiting = throttle.get("perf_limiting_samples") or 0
            clocks = (tel.get("metrics") or {}).get("clocks_sm_mhz")
            if limiting:
                limiting_names = [k for k in throttle.get("counts", {}) if k in PERF_LIMITING_REASONS]
                sampled = throttle.get("sampled")
                text += f": throttled in {limiting}/{sampled} samples ({', '.join(limiting_names)})"
            elif tel:
                text += ": no throttle reason active while timed"
            if clocks:
                text += f", SM clock {clocks['min']:.0f}-{clocks['max']:.0f} MHz"
            parts.append(text)
        throttled = any(
            ((r.get("telemetry") or {}).get("throttle_reasons") or {}).get("perf_limiting_samples")
            for r in failing
        )
        return CheckResult(
            "gemm_perf",
            "fail",
            required=False,
            expected=floors,
            actual=actual,
            detail=detail,
            cause=("device throttled: " if throttled else "Tensor Cores not in use or device slowed: ")
            + "; ".join(parts),
            fix="check clocks, power and temperature (the telemetry in the detail; nvidia-smi -q -d "
            "CLOCK,PERFORMANCE), other jobs on the GPU, and that cuBLAS uses bf16 Tensor Core kernels",
        )
    if not any(r["status"] == "pass" for r in results):
        reasons = "; ".join(f"GPU {r['index']}: {r.get('reason')}" for r in results) or "no device"
        return CheckResult("gemm_perf", "skip", required=False, reason=reasons, actual=actual, detail=detail)
    return CheckResult("gemm_perf", "pass", required=False, expected=floors, actual=actual, detail=detail)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_result(path: str, result: dict[str, Any]) -> None:
    """A child's result, written whole (temporary name, then rename): the parent reads this file and
    never the child's stdout, which libraries (NCCL_DEBUG, compilers, warnings) may fill."""
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(result, handle, default=str)
    os.replace(partial, path)


def read_result(path: str) -> dict[str, Any] | None:
    text = _read(path)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def run_collectives(
    world: int, backend: str, timeout: float = NCCL_TIMEOUT_S, workdir: str | None = None
) -> dict[str, Any]:
    """Spawn `world` worker processes (this script) that all-reduce and broadcast; bounded by timeout.

    Each rank returns its result in its own file (--result-file); its stdout and stderr go to files
    too (not pipes: a rank blocked on a full pipe while another waits for it in a collective would
    hang until the timeout), and are only quoted when a rank wrote no result."""
    port = _free_port()
    script = os.path.abspath(__file__)
    procs: list[subprocess.Popen[bytes]] = []
    outputs: list[dict[str, Any]] = []
    timed_out = False
    own_dir = workdir is None
    directory = tempfile.mkdtemp(prefix="imagekit-collective-") if workdir is None else workdir
    try:
        logs = [os.path.join(directory, f"rank{rank}.log") for rank in range(world)]
        results = [os.path.join(directory, f"rank{rank}.json") for rank in range(world)]
        try:
            for rank in range(world):
                command = [
                    sys.executable,
                    script,
                    "--collective-worker",
                    str(rank),
                    str(world),
                    str(port),
                    backend,
                    "--result-file",
                    results[rank],
                ]
                with open(logs[rank], "wb") as log:
                    procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
            deadline = time.monotonic() + timeout
            for proc in procs:
                try:
                    proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    timed_out = True
                    for other in procs:
                        other.kill()
                    proc.wait()
        finally:
            for proc in procs:  # also on an exception: no rank outlives the check
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        for rank, proc in enumerate(procs):
            result = read_result(results[rank])
            if result is None:
                output = _read(logs[rank]) or ""
                result = {"rank": rank, "ok": False, "rc": proc.returncode, "output": output[-600:]}
            outputs.append(result)
    finally:
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)
    return {
        "ok": not timed_out and len(outputs) == world and all(o.get("ok") for o in outputs),
        "timed_out": timed_out,
        "ranks": outputs,
    }


def collective_worker(rank: int, world: int, port: int, backend: str, result_file: str) -> int:
    """One rank: all_reduce(sum) of rank+1 and broadcast of rank 0's tensor; writes its result file."""
    from datetime import timedelta

    result: dict[str, Any] = {"rank": rank, "ok": False}
    try:
        torch: Any = importlib.import_module("torch")
        dist: Any = importlib.import_module("torch.distributed")
        device = f"cuda:{rank}" if backend == "nccl" else "cpu"
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=60),
        )
        t = torch.full((1024,), float(rank + 1), device=device)
        dist.all_reduce(t)
        want_sum = world * (world + 1) / 2
        reduce_ok = bool((t == want_sum).all().item())
        expected = torch.arange(1024, dtype=torch.float32, device=device)
        src = expected.clone() if rank == 0 else torch.zeros(1024, device=device)
        dist.broadcast(src, 0)
        broadcast_ok = bool((src == expected).all().item())
        dist.barrier()
        dist.destroy_process_group()
        result.update({"all_reduce": reduce_ok, "broadcast": broadcast_ok, "ok": reduce_ok and broadcast_ok})
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
    write_result(result_file, result)
    return 0 if result["ok"] else 1


@needs_gpu_and_torch("nccl")
def check_nccl(ctx: Context, torch: Any) -> CheckResult:
    count = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    if count < 2:
        return skipped("nccl", f"fewer than 2 GPUs ({count})", actual=count)
    dist = importlib.import_module("torch.distributed")
    if not dist.is_available() or not dist.is_nccl_available():
        return failed(
            "nccl",
            "torch.distributed has no NCCL backend in this build",
            "install a CUDA torch wheel (it ships NCCL through nvidia-nccl-cu*)",
            expected="nccl",
            actual=None,
        )
    outcome = run_collectives(count, "nccl", workdir=ctx.subdir("nccl"))
    if not outcome["ok"]:
        return failed(
            "nccl",
            "NCCL all-reduce/broadcast across the GPUs failed"
            + (" (timed out: a hang)" if outcome["timed_out"] else ""),
            "run with NCCL_DEBUG=INFO (its output does not disturb the check); check --ipc=host / "
            "--shm-size and P2P (NCCL_P2P_DISABLE=1)",
            expected={"world": count},
            actual=outcome,
        )
    return passed("nccl", {"world": count, "ops": ["all_reduce", "broadcast"]}, outcome)


# -- bounded child tasks: torch.compile, C++/CUDA extensions ------------------------------------

TASK_NAMES = ("compile", "extension_cpu", "extension_cuda")

EXT_CPP = """
#include <torch/extension.h>
torch::Tensor scaled_add(torch::Tensor a, torch::Tensor b, double alpha) {
  TORCH_CHECK(a.sizes() == b.sizes(), "shape mismatch");
  auto ac = a.contiguous().to(torch::kFloat);
  auto bc = b.contiguous().to(torch::kFloat);
  auto out = torch::empty_like(ac);
  const float* pa = ac.data_ptr<float>();
  const float* pb = bc.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const float s = static_cast<float>(alpha);
  for (int64_t i = 0; i < ac.numel(); ++i) po[i] = pa[i] + s * pb[i];
  return out;
}
"""
EXT_CUDA_DECL = "torch::Tensor scaled_add_cuda(torch::Tensor a, torch::Tensor b, double alpha);"
EXT_CUDA = """
#include <torch/extension.h>
#include <cuda_runtime.h>
__global__ void scaled_add_kernel(const float* a, const float* b, float* out, float alpha, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + alpha * b[i];
}
torch::Tensor scaled_add_cuda(torch::Tensor a, torch::Tensor b, double alpha) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.sizes() == b.sizes(), "CUDA tensors of one shape expected");
  auto ac = a.contiguous().to(torch::kFloat);
  auto bc = b.contiguous().to(torch::kFloat);
  auto out = torch::empty_like(ac);
  const int64_t n = ac.numel();
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  scaled_add_kernel<<<blocks, threads>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(),
                                        static_cast<float>(alpha), n);
  cudaError_t err = cudaGetLastError();
  TORCH_CHECK(err == cudaSuccess, "kernel launch failed: ", cudaGetErrorString(err));
  return out;
}
"""


def _files_under(directory: str | None) -> list[str]:
    found: list[str] = []
    if not directory or not os.path.isdir(directory):
        return found
    for root, _dirs, files in os.walk(directory):
        found.extend(os.path.join(root, f) for f in files)
    return found


def task_compile(device: str) -> dict[str, Any]:
    """torch.compile (inductor) of a small function, compared with eager, on one device."""
    torch: Any = importlib.import_module("torch")
    dynamo: Any = importlib.import_module("torch._dynamo")
    dynamo.config.suppress_errors = False  # a failed compile must raise, not quietly run eager

    def fn(x: Any, y: Any) -> Any:
        return torch.nn.functional.gelu(x @ y) * torch.sigmoid(y.sum(dim=0)) + torch.sin(x).mean(
            dim=1, keepdim=True
        )

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 64, generator=gen).to(device)
    y = torch.randn(64, 64, generator=gen).to(device)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    started = time.monotonic()
    compiled = torch.compile(fn, fullgraph=True)
    out = compiled(x, y)
    sync()
    first = time.monotonic() - started
    started = time.monotonic()
    again = compiled(x, y)
    sync()
    second = time.monotonic() - started
    ref = fn(x, y)
    max_err = float((out - ref).abs().max().item())
    close = bool(torch.allclose(out, ref, rtol=1e-4, atol=1e-4)) and bool(torch.equal(out, again))
    generated = [
        f
        for f in _files_under(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
        if f.endswith((".cpp", ".py", ".so", ".cubin", ".ptx"))
    ]
    result: dict[str, Any] = {
        "ok": close and bool(generated),
        "device": device,
        "torch": str(torch.__version__),
        "max_abs_error": max_err,
        "first_call_s": round(first, 2),
        "second_call_s": round(second, 4),
        "generated_files": len(generated),
    }
    if not close:
        result["error"] = f"compiled result differs from eager (max abs error {max_err:.3g})"
    elif not generated:
        result["error"] = "no generated code in TORCHINDUCTOR_CACHE_DIR: torch.compile did not compile"
    return result


def task_extension(cuda: bool) -> dict[str, Any]:
    """A C++ (or CUDA) extension through load_inline, built into a fresh directory, then called."""
    torch: Any = importlib.import_module("torch")
    cpp_extension: Any = importlib.import_module("torch.utils.cpp_extension")
    info: dict[str, Any] = {
        "torch": str(torch.__version__),
        "cuda_home": getattr(cpp_extension, "CUDA_HOME", None),
    }
    if not cpp_extension.is_ninja_available():
        return {
            **info,
            "ok": False,
            "missing": "ninja",
            "error": "ninja is not available (load_inline needs it)",
        }
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or tempfile.mkdtemp()
    build = os.path.join(root, "cuda" if cuda else "cpu")
    os.makedirs(build, exist_ok=True)
    name = f"imagekit_check_{'cuda' if cuda else 'cpu'}_{os.getpid()}"
    started = time.monotonic()
    if cuda:
        module = cpp_extension.load_inline(
            name=name,
            cpp_sources=[EXT_CUDA_DECL],
            cuda_sources=[EXT_CUDA],
            functions=["scaled_add_cuda"],
            build_directory=build,
            verbose=False,
        )
    else:
        module = cpp_extension.load_inline(
            name=name, cpp_sources=[EXT_CPP], functions=["scaled_add"], build_directory=build, verbose=False
        )
    build_s = time.monotonic() - started
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(4097, generator=gen)
    b = torch.randn(4097, generator=gen)
    if cuda:
        a, b = a.cuda(), b.cuda()
        got = module.scaled_add_cuda(a, b, 0.5)
        torch.cuda.synchronize()
    else:
        got = module.scaled_add(a, b, 0.5)
    ref = a + 0.5 * b
    max_err = float((got - ref).abs().max().item())
    built = [os.path.basename(f) for f in _files_under(build) if f.endswith(".so")]
    ok = bool(torch.allclose(got, ref, rtol=1e-6, atol=1e-6)) and bool(built)
    result = {**info, "ok": ok, "build_s": round(build_s, 1), "max_abs_error": max_err, "built": built}
    if not ok:
        result["error"] = f"the extension's result differs (max abs error {max_err:.3g}) or no .so was built"
    return result


def run_task_child(task: str, device: str, result_file: str) -> int:
    """Child side of run_task: do the task, write its result file, exit 0 when it passed."""
    try:
        if task == "compile":
            result = task_compile(device)
        elif task == "extension_cpu":
            result = task_extension(cuda=False)
        else:
            result = task_extension(cuda=True)
    except Exception as exc:
        result = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}"[-4000:],
            "traceback": traceback.format_exc(limit=8)[-3000:],
        }
    write_result(result_file, result)
    return 0 if result.get("ok") else 1


def task_env(ctx: Context, taskdir: str) -> dict[str, str]:
    """The child's environment: every cache and build directory inside the run's work directory,
    so nothing lands outside the temporary directory and no stale build is reused."""
    env = dict(ctx.env)
    scratch = os.path.join(taskdir, "tmp")
    os.makedirs(scratch, exist_ok=True)
    env.update(
        {
            "TORCHINDUCTOR_CACHE_DIR": os.path.join(taskdir, "inductor"),
            "TORCHINDUCTOR_COMPILE_THREADS": "1",  # compile in the child itself: no worker pool to outlive it
            "TRITON_CACHE_DIR": os.path.join(taskdir, "triton"),
            "TRITON_HOME": taskdir,
            "TORCH_EXTENSIONS_DIR": os.path.join(taskdir, "extensions"),
            "CUDA_CACHE_PATH": os.path.join(taskdir, "nv-compute-cache"),
            "XDG_CACHE_HOME": os.path.join(taskdir, "cache"),
            "TMPDIR": scratch,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def run_task(ctx: Context, task: str, device: str, timeout: float) -> dict[str, Any]:
    """Run `check.py --task` in a child process (own process group) bounded by `timeout`; its result
    comes back through a file, its output (kept for diagnosis) through another."""
    taskdir = ctx.subdir(f"{task}-{device.replace(':', '')}")
    result_file = os.path.join(taskdir, "result.json")
    log_path = os.path.join(taskdir, "output.log")
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--task",
        task,
        "--device",
        device,
        "--result-file",
        result_file,
    ]
    started = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=task_env(ctx, taskdir),
            cwd=taskdir,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)  # the child and whatever it started
            rc = proc.wait()
    return {
        "rc": rc,
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - started, 1),
        "result": read_result(result_file),
        "output_tail": (_read(log_path) or "")[-2000:],
    }


def toolchain(env: dict[str, str]) -> dict[str, Any]:
    """What torch.compile and cpp_extension need from the image: a C++ and a C compiler (inductor
    builds C++ on the CPU, Triton a C launcher on the GPU) and the interpreter's Python.h."""
    path = env.get("PATH", os.defpath)

    def first(*names: str | None) -> str | None:
        for name in names:
            if name:
                found = shutil.which(name.split()[0], path=path)
                if found:
                    return found
        return None

    include = sysconfig.get_paths().get("include") or ""
    header = os.path.join(include, "Python.h") if include else ""
    return {
        "cxx": first(env.get("CXX"), "g++", "c++", "clang++"),
        "cc": first(env.get("CC"), "gcc", "cc", "clang"),
        "python_h": header if header and os.path.exists(header) else None,
        "python_include": include or None,
        "python": "{}.{}".format(*sys.version_info[:2]),
    }


COMPILER_MISSING = re.compile(
    r"(InvalidCxxCompiler|No working C compiler|Failed to find C compiler|[gc]\+\+: not found|gcc: not found"
    r"|\bcc: not found|No such file or directory: '(?:g\+\+|gcc|c\+\+|cc|clang\+?\+?)'|compiler.*not found)",
    re.IGNORECASE,
)
PYTHON_H_MISSING = re.compile(r"Python\.h: No such file|fatal error: Python\.h", re.IGNORECASE)
# dlopen of a freshly compiled .so on a noexec mount (Docker mounts --tmpfs noexec by default).
NOEXEC = re.compile(r"failed to map segment from shared object|mounted with noexec", re.IGNORECASE)
NVCC_MISMATCH = re.compile(
    r"detected CUDA version \(([\d.]+)\) mismatches the version that was used to compile", re.I
)


def diagnose_build(
    what: str, outcome: dict[str, Any], tools: dict[str, Any], needs: str, timeout: float
) -> tuple[str, str]:
    """(cause, fix) for a failed torch.compile / extension child, naming the missing piece."""
    result = outcome.get("result") or {}
    text = "\n".join(
        str(x) for x in (result.get("error"), result.get("traceback"), outcome.get("output_tail")) if x
    )
    python_dev = f"python{tools['python']}-dev"
    compiler_fix = (
        "install a compiler in the image: apt-get install -y g++ (or build-essential); or set CXX/CC"
    )
    header_fix = (
        f"install the Python headers for this interpreter: apt-get install -y {python_dev} (Debian/Ubuntu; "
        f"they belong in {tools.get('python_include')})"
    )
    if outcome.get("timed_out"):
        return (
            f"{what} did not finish within {timeout:.0f} s (killed)",
            "give the check more CPU time; see the output tail in the detail",
        )
    if result.get("missing") == "ninja":
        return (
            f"{what}: ninja is missing (torch.utils.cpp_extension.load_inline builds with it)",
            "install it in the image: pip install ninja (or apt-get install -y ninja-build)",
        )
    mismatch = NVCC_MISMATCH.search(text)
    if mismatch:
        return (
            f"{what}: nvcc is CUDA {mismatch.group(1)}, not the CUDA torch was built with: torch's extension "
            "builder refuses a differing major",
            "use the -devel base of torch's CUDA version (nvcc at /usr/local/cuda/bin/nvcc)",
        )
    compiler = tools.get("cxx") if needs == "cxx" else tools.get("cc")
    if COMPILER_MISSING.search(text) or compiler is None:
        looked = "CXX, g++, c++, clang++" if needs == "cxx" else "CC, gcc, cc, clang"
        return (f"{what}: no C/C++ compiler in the image (looked for {looked} on PATH)", compiler_fix)
    if PYTHON_H_MISSING.search(text) or tools.get("python_h") is None:
        return (f"{what}: Python.h missing (no {tools.get('python_include')}/Python.h)", header_fix)
    if NOEXEC.search(text):
        return (
            f"{what}: the temporary directory is mounted noexec, and the library it compiled must be"
            " loaded from there (failed to map segment)",
            "give the container an exec /tmp (`docker run --tmpfs /tmp:exec`; `imagekit verify` does)"
            " or point TMPDIR at an exec mount",
        )
    first_line = (result.get("error") or outcome.get("output_tail") or "no output").strip().splitlines()
    return (
        f"{what} failed: {first_line[0][:400] if first_line else 'no output'} (exit {outcome.get('rc')})",
        "see the output tail in the check's detail",
    )


def _torch_at_least(torch: Any, major: int, minor: int) -> bool:
    match = re.match(r"^(\d+)\.(\d+)", str(torch.__version__))
    if match is None:
        return False
    return (int(match.group(1)), int(match.group(2))) >= (major, minor)


def _gpu_part(ctx: Context, name: str) -> dict[str, Any] | None:
    """The GPU policy for the GPU part of a CPU+GPU check: None to run it, else the part's verdict."""
    gate = ctx.gpu_gate(name)
    if gate is not None:
        if gate.status == "fail":
            return {"status": "fail", "cause": gate.cause, "fix": gate.fix}
        return {"status": "skip", "reason": gate.reason}
    if not ctx.torch.cuda.is_available():
        return {
            "status": "fail",
            "cause": "a GPU is visible but torch.cuda.is_available() is False (see cuda_available)",
            "fix": "fix cuda_available first",
        }
    return None


def _combine(
    name: str, parts: dict[str, dict[str, Any]], detail: dict[str, Any], required: bool
) -> CheckResult:
    """One check from its parts (cpu, cuda:N, ...): any failed part fails it; passes when at least one
    part passed and none failed; otherwise skip with the parts' reasons."""
    detail = {**detail, "parts": parts}
    actual = {key: part["status"] for key, part in parts.items()}
    bad = {key: part for key, part in parts.items() if part["status"] == "fail"}
    if bad:
        return CheckResult(
            name,
            "fail",
            required=required,
            expected=dict.fromkeys(parts, "pass"),
            actual=actual,
            detail=detail,
            cause="; ".join(f"[{key}] {part.get('cause')}" for key, part in bad.items()),
            fix="; ".join(dict.fromkeys(str(part.get("fix")) for part in bad.values())),
        )
    if any(part["status"] == "pass" for part in parts.values()):
        return CheckResult(name, "pass", required=required, actual=actual, detail=detail)
    reasons = "; ".join(f"[{key}] {part.get('reason')}" for key, part in parts.items())
    return CheckResult(name, "skip", required=required, reason=reasons, actual=actual, detail=detail)


def build_part(
    ctx: Context, task: str, key: str, what: str, needs: str, timeout: float, tools: dict[str, Any]
) -> dict[str, Any]:
    """One compile/extension run in its child process, as a part: pass, or fail with the missing piece."""
    outcome = run_task(ctx, task, key, timeout)
    result = outcome["result"] or {}
    part: dict[str, Any] = {k: v for k, v in result.items() if k != "traceback"}
    part["seconds"] = outcome["seconds"]
    if result.get("ok"):
        part["status"] = "pass"
    else:
        cause, fix = diagnose_build(what, outcome, tools, needs, timeout)
        part.update({"status": "fail", "cause": cause, "fix": fix, "output_tail": outcome["output_tail"]})
    return part


def check_compile(ctx: Context) -> CheckResult:
    skip = _torch_skip(ctx, "compile")
    if skip:
        return skip
    torch = ctx.torch
    if not _torch_at_least(torch, 2, 0) or not hasattr(torch, "compile"):
        return skipped("compile", f"torch {torch.__version__} has no torch.compile (needs >= 2.0)")
    # Runtime images carry no compiler: a failure there is reported, not fatal to the image.
    required = ctx.expect.flavour != "runtime"
    tools = toolchain(ctx.env)
    detail: dict[str, Any] = {"toolchain": tools, "timeout_s": COMPILE_TIMEOUT_S}
    parts: dict[str, dict[str, Any]] = {}
    devices = [("cpu", "inductor C++ on the CPU", "cxx")]
    gpu = _gpu_part(ctx, "compile")
    if gpu is None:
        devices.append(("cuda:0", "inductor Triton on GPU 0", "cc"))
    else:
        parts["cuda"] = gpu
    for device, what, needs in devices:
        parts[device] = build_part(
            ctx, "compile", device, f"torch.compile ({what})", needs, COMPILE_TIMEOUT_S, tools
        )
    return _combine("compile", parts, detail, required)


def check_extension(ctx: Context) -> CheckResult:
    flavour = ctx.expect.flavour
    if flavour is None:
        return skipped("extension", "no flavour given (extensions are checked in devel images)")
    if flavour == "runtime":
        return skipped(
            "extension", "runtime flavour: no compiler toolchain expected, extensions are not built"
        )
    skip = _torch_skip(ctx, "extension")
    if skip:
        return skip
    tools = toolchain(ctx.env)
    nvcc = shutil.which("nvcc", path=ctx.env.get("PATH", os.defpath))
    if nvcc is None and os.path.exists("/usr/local/cuda/bin/nvcc"):
        nvcc = "/usr/local/cuda/bin/nvcc"
    detail: dict[str, Any] = {
        "toolchain": tools,
        "nvcc": nvcc,
        "timeout_s": EXTENSION_TIMEOUT_S,
        "TORCH_EXTENSIONS_DIR": ctx.env.get("TORCH_EXTENSIONS_DIR"),
        "build_dir": "a fresh directory under the temporary directory (a cached build would prove nothing)",
    }
    parts: dict[str, dict[str, Any]] = {}
    runs = [("extension_cpu", "cpu", "a C++ extension (load_inline)")]
    gpu = _gpu_part(ctx, "extension")
    if gpu is not None:
        parts["cuda"] = gpu
    elif nvcc is None:
        parts["cuda"] = {"status": "skip", "reason": "no nvcc in the image (PATH, /usr/local/cuda/bin)"}
    elif ctx.expect.is_cpu or not ctx.torch.version.cuda:
        parts["cuda"] = {"status": "skip", "reason": "torch is a CPU build: no CUDA extension to build"}
    else:
        runs.append(("extension_cuda", "cuda:0", "a CUDA extension (load_inline, nvcc)"))
    for task, key, what in runs:
        parts[key] = build_part(ctx, task, key, what, "cxx", EXTENSION_TIMEOUT_S, tools)
    return _combine("extension", parts, detail, True)


# -- a training step -------------------------------------------------------------------------------

TRAIN_STEPS = 40


def grad_scaler(torch: Any) -> Any:
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        with contextlib.suppress(TypeError):
            return amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def train_run(torch: Any, index: int | None, dtype_name: str, use_scaler: bool) -> dict[str, Any]:
    """A 2-layer MLP on a fixed synthetic regression (seeded generators, no global RNG), TRAIN_STEPS
    Adam steps under autocast on the CPU (index None) or CUDA device `index`; the loss (float32,
    without autocast) before and after."""
    device = "cpu" if index is None else cuda_device(torch, index)
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(512, 16, generator=gen)
    w = torch.randn(16, 1, generator=gen)
    y = torch.sin(x @ w) + 0.05 * torch.randn(512, 1, generator=gen)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.2)
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    device_type = "cpu" if index is None else "cuda"
    dtype = getattr(torch, dtype_name)

    def full_loss() -> float:
        with torch.no_grad():
            return float(torch.nn.functional.mse_loss(model(x).float(), y).item())

    initial = full_loss()
    scaler = grad_scaler(torch) if use_scaler else None
    losses = []
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device_type, dtype=dtype):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        losses.append(round(float(loss.item()), 6))
    final = full_loss()
    ok = math.isfinite(final) and final < 0.5 * initial
    return {
        "device": device,
        "dtype": dtype_name,
        "grad_scaler": use_scaler,
        "steps": TRAIN_STEPS,
        "initial_loss": round(initial, 6),
        "final_loss": round(final, 6),
        "ratio": round(final / initial, 4) if initial else None,
        "losses": losses[:: max(1, TRAIN_STEPS // 8)],
        "status": "pass" if ok else "fail",
    }


def check_train_step(ctx: Context) -> CheckResult:
    skip = _torch_skip(ctx, "train_step")
    if skip:
        return skip
    torch = ctx.torch
    parts: dict[str, dict[str, Any]] = {}
    runs: list[tuple[str, int | None, str, bool]] = [("cpu/bfloat16", None, "bfloat16", False)]
    gpu = _gpu_part(ctx, "train_step")
    if gpu is not None:
        parts["cuda"] = gpu
    else:
        for i in range(int(torch.cuda.device_count())):
            runs.append((f"cuda:{i}/float16", i, "float16", True))
            bf16_ok, reason = bf16_support(torch, i)
            if bf16_ok:
                runs.append((f"cuda:{i}/bfloat16", i, "bfloat16", False))
            else:
                parts[f"cuda:{i}/bfloat16"] = {"status": "skip", "reason": reason}
    for key, index, dtype_name, scaler in runs:
        device = "cpu" if index is None else f"cuda:{index}"
        try:
            part = train_run(torch, index, dtype_name, scaler)
        except Exception as exc:
            part = {"status": "fail", "error": f"{type(exc).__name__}: {exc}"}
        if part["status"] == "fail":
            part["cause"] = (
                part.get("error")
                or f"the loss did not fall by half in {TRAIN_STEPS} steps ({part.get('initial_loss')} -> "
                f"{part.get('final_loss')}): autocast/backward/optimizer broken on {device} in {dtype_name}"
            )
            part["fix"] = (
                "check torch's build for this device (autocast kernels, cuBLAS/cuDNN) and the gemm checks"
            )
        parts[key] = part
    detail = {
        "model": "Linear(16,64)-ReLU-Linear(64,1), Adam lr 1e-2, MSE on a fixed synthetic set",
        "pass_if": "final < 0.5 * initial",
    }
    return _combine("train_step", parts, detail, True)


def inventory() -> dict[str, Any]:
    packages: list[dict[str, str]] = []
    try:
        from importlib import metadata

        seen = set()
        for dist in metadata.distributions():
            name = dist.metadata["Name"]
            if name and name.lower() not in seen:
                seen.add(name.lower())
                packages.append({"name": name, "version": dist.version})
    except Exception as exc:
        packages.append({"name": "<error>", "version": str(exc)})
    packages.sort(key=lambda p: p["name"].lower())
    return {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "os_release": parse_os_release(_read("/etc/os-release") or ""),
        "packages": packages,
    }


CHECKS: tuple[tuple[str, Callable[[Context], CheckResult]], ...] = (
    ("environment", check_environment),
    ("python", check_python),
    ("nvcc", check_nvcc),
    ("cuda_installs", check_cuda_installs),
    ("nvidia_smi", check_nvidia_smi),
    ("driver", check_driver),
    ("require", check_require),
    ("torch", check_torch),
    ("torch_cuda", check_torch_cuda),
    ("cudnn", check_cudnn),
    ("libcudart", check_libcudart),
    ("cuda_available", check_cuda_available),
    ("arch", check_arch),
    ("gemm_cpu", check_gemm_cpu),
    ("gemm_gpu", check_gemm_gpu),
    ("gemm_perf", check_gemm_perf),
    ("compile", check_compile),
    ("extension", check_extension),
    ("train_step", check_train_step),
    ("nccl", check_nccl),
)
CHECK_NAMES = tuple(name for name, _ in CHECKS)
NOT_REQUIRED = frozenset({"gemm_perf"})  # reported, never fails an image (a shared device may be busy)


def run_check(name: str, fn: Callable[[Any], CheckResult], ctx: Any) -> CheckResult:
    """One check, timed; an exception inside it is that check's failure (frontend_check.py too)."""
    started = time.monotonic()
    try:
        result = fn(ctx)
    except Exception as exc:
        result = failed(
            name,
            f"the check raised {type(exc).__name__}: {exc}",
            "see detail for the traceback",
            detail=traceback.format_exc(limit=6),
        )
        if name in NOT_REQUIRED:
            result = CheckResult(**{**asdict(result), "required": False})
    return CheckResult(**{**asdict(result), "duration_s": round(time.monotonic() - started, 3)})


def selected(name: str, invocation: Invocation) -> str | None:
    """None when the check runs, else the reason it was left out (--only / --skip)."""
    if invocation.only and name not in invocation.only:
        return "not selected (--only " + ",".join(invocation.only) + ")"
    if name in invocation.skip:
        return "left out (--skip)"
    return None


def summarize(checks: list[CheckResult]) -> dict[str, Any]:
    """The report's summary: counts per status, the required checks that failed, and the verdict."""
    required_failed = [c.name for c in checks if c.status == "fail" and c.required]
    return {
        "pass": sum(c.status == "pass" for c in checks),
        "fail": sum(c.status == "fail" for c in checks),
        "skip": sum(c.status == "skip" for c in checks),
        "required_failed": required_failed,
        "ok": not required_failed,
    }


def build_report(ctx: Context, invocation: Invocation | None = None) -> dict[str, Any]:
    chosen = invocation or Invocation()
    started = time.monotonic()
    _ = ctx.torch  # import once up front, so its cost is not billed to whichever check asks first
    ctx.torch_import_s = round(time.monotonic() - started, 3)
    checks = []
    try:
        with ctx.cache_environment():
            for name, fn in CHECKS:
                reason = selected(name, chosen)
                checks.append(skipped(name, reason) if reason else run_check(name, fn, ctx))
    finally:
        ctx.cleanup()  # builds, caches and result files of this run: nothing stays behind
    summary = summarize(checks)
    expect = asdict(ctx.expect)
    return {
        "schema": SCHEMA,
        "checks": [asdict(c) for c in checks],
        "summary": summary,
        "gpu_visible": ctx.gpu_visible,
        "gpu_requested": ctx.gpu_requested,
        "expected": expect,
        "telemetry": ctx.telemetry,
        "inventory": inventory(),
    }


def _flush_c_stdio() -> None:
    """fflush(NULL): flush every C stdio stream (a native library's printf buffer)."""
    # no libc symbol table (static or unusual runtimes): nothing to flush
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    environ = dict(os.environ if env is None else env)
    try:
        expect, invocation = parse_args(sys.argv[1:] if argv is None else argv, environ)
    except ArgumentError as exc:
        sys.stderr.write(f"check.py: bad arguments: {exc}\n")
        return 2
    if invocation.worker is not None:
        worker = invocation.worker
        try:
            rank, world, port = int(worker[0]), int(worker[1]), int(worker[2])
        except ValueError:
            sys.stderr.write("check.py: --collective-worker RANK WORLD PORT BACKEND --result-file PATH\n")
            return 2
        return collective_worker(rank, world, port, worker[3], str(invocation.result_file))
    if invocation.task is not None:
        return run_task_child(invocation.task, invocation.device, str(invocation.result_file))
    # Libraries may print to stdout (warnings, banners); keep stdout for the one JSON document.
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        report = build_report(Context(expect, environ), invocation)
    finally:
        sys.stdout.flush()
        _flush_c_stdio()  # C libraries' buffered stdout must land on stderr, not after the JSON
        os.dup2(saved, 1)
        os.close(saved)
    sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
    sys.stdout.flush()
    return 0 if report["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
