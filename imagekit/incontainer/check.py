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

Output: {"schema": 1, "checks": [...], "summary": {...}, "gpu_visible", "gpu_requested",
"expected", "inventory"}. Every check has name, status (pass|fail|skip), required, reason (skip),
expected, actual, detail, cause and fix (fail), duration_s. Exit 0 when no required check failed,
1 otherwise, 2 on bad arguments. An exception inside a check becomes that check's failure.

GPU policy (never a pass for something that did not run):
- a GPU is *requested* when --require-gpu / IMAGEKIT_REQUIRE_GPU is given, when
  NVIDIA_VISIBLE_DEVICES names specific devices (indices or UUIDs: someone chose them), or when the
  NVIDIA runtime evidently wired a GPU in (/dev/nvidiactl or /dev/nvidia<N>, or an nvidia-smi on
  PATH, which images do not ship: the container toolkit mounts it). NVIDIA_VISIBLE_DEVICES=all
  alone is NOT a request: nvidia/cuda images set it in their own ENV, so it is there with or
  without `--gpus`. void/none/empty never request. GPU jobs should pass --require-gpu.
- a GPU is *visible* when nvidia-smi lists one or torch counts one.
- requested and not visible: every GPU check FAILS ("--gpus missing or no NVIDIA runtime").
  Not requested and not visible: GPU checks are skip with reason "no GPU requested".

NVIDIA_REQUIRE_* evaluation (as the NVIDIA container toolkit does it): every NVIDIA_REQUIRE_*
variable must hold; inside one, space = OR and comma = AND; properties cuda (the driver's CUDA
version), driver, arch (compute capability, per device) and brand (per device); operators
>= <= > < = == !=; versions compare numerically, component by component. NVIDIA_DISABLE_REQUIRE
(Go's ParseBool true) skips it. An unknown property, or an operator other than =, == or != on
brand, makes that term NOT satisfied (the toolkit refuses such an expression, so it must never
read as met). A term whose value is not known here (brand without nvidia-smi -q) is undetermined;
an undetermined result is a failure, not a pass. With no NVIDIA_REQUIRE_CUDA but a CUDA_VERSION,
"cuda>=<major.minor>" is implied (the toolkit's legacy rule).

Performance (gemm_perf) is reported with required=false: a throttled shared device must not fail an
image; its status still says fail when far below the floor.
"""

# Python 3.8 compatibility: zip(strict=) is 3.10+, so B905 cannot apply; os.path on plain strings.
# ruff: noqa: B905, PTH100, PTH110, PTH112, PTH114, PTH118, PTH123, PTH207

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import glob
import importlib
import json
import os
import platform
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

SCHEMA = 1
SMI_TIMEOUT_S = 20.0
NCCL_TIMEOUT_S = 120.0

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
    "13.0": ("580.82.07", "580.65.06"),
}

# Dense bf16 GEMM floors in TFLOP/s (about 40-50% of the dense bf16 peak; an H200 measured about
# 790 at 8192^3). Matched on the device name, first match wins. Unknown devices get no floor.
GEMM_FLOORS_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 400.0),  # peak 989
    ("H100", 350.0),  # peak 989 SXM, 756 PCIe
    ("A100", 140.0),  # peak 312
    ("RTX 4090", 70.0),  # peak 165 (fp32 accumulate)
    ("L4", 45.0),  # peak 121, 72 W card that throttles
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
    """`nvidia-smi -q` -> the 'Product Brand' of each GPU, lower case ('geforce', 'tesla')."""
    return [m.group(1).strip().lower() for m in re.finditer(r"Product Brand\s*:\s*(.+)", text)]


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
_TERM = re.compile(r"^([A-Za-z_]+)(>=|<=|==|!=|=|>|<)(\S+)$")


@dataclass(frozen=True)
class RequireTerm:
    prop: str
    op: str
    value: str


def parse_require(expression: str) -> list[list[RequireTerm]]:
    """'cuda>=12.1 brand=tesla,driver>=470' -> OR-list of AND-groups. Raises ValueError on syntax."""
    groups = []
    for alternative in expression.split():
        terms = []
        for raw in alternative.split(","):
            match = _TERM.match(raw)
            if match is None:
                raise ValueError(f"cannot parse requirement term {raw!r} in {expression!r}")
            terms.append(RequireTerm(match.group(1).lower(), match.group(2), match.group(3)))
        groups.append(terms)
    return groups


def evaluate_term(term: RequireTerm, props: dict[str, str | None]) -> bool | None:
    """True / False, or None when the property's value is not known here."""
    if term.prop not in REQUIRE_PROPERTIES:
        return False  # unknown property: the toolkit refuses it, so it is never satisfied
    have = props.get(term.prop)
    if have is None:
        return None
    if term.prop == "brand":
        if term.op not in ("=", "==", "!="):
            return False
        same = have.lower() == term.value.lower()
        return same if term.op != "!=" else not same
    try:
        order = compare_versions(have, term.value)
    except ValueError:
        return False
    return {
        ">=": order >= 0,
        "<=": order <= 0,
        ">": order > 0,
        "<": order < 0,
        "=": order == 0,
        "==": order == 0,
        "!=": order != 0,
    }[term.op]


def evaluate_require(expression: str, props: dict[str, str | None]) -> bool | None:
    """Three-valued: OR of AND-groups, unknown values propagate as None (undetermined)."""
    any_unknown = False
    for group in parse_require(expression):
        values = [evaluate_term(term, props) for term in group]
        if False in values:
            continue
        if None in values:
            any_unknown = True
            continue
        return True
    return None if any_unknown else False


def require_variables(env: dict[str, str]) -> dict[str, str]:
    """The NVIDIA_REQUIRE_* variables to enforce, with the toolkit's legacy CUDA_VERSION rule."""
    found = {k: v for k, v in sorted(env.items()) if k.startswith("NVIDIA_REQUIRE_") and v.strip()}
    if "NVIDIA_REQUIRE_CUDA" not in found and env.get("CUDA_VERSION"):
        with contextlib.suppress(ValueError):
            found["NVIDIA_REQUIRE_CUDA"] = "cuda>=" + cuda_minor(env["CUDA_VERSION"])
    return found


def go_parse_bool(value: str | None) -> bool:
    return (value or "").strip() in ("1", "t", "T", "TRUE", "true", "True")


def evaluate_all_requirements(
    variables: dict[str, str],
    cuda: str | None,
    driver: str | None,
    devices: list[dict[str, str | None]],
) -> dict[str, bool | None]:
    """Each variable -> satisfied? Evaluated per device (arch, brand); every device must satisfy."""
    results: dict[str, bool | None] = {}
    for name, expression in variables.items():
        per_device: list[bool | None] = []
        for device in devices or [{}]:
            props = {"cuda": cuda, "driver": driver, "arch": device.get("arch"), "brand": device.get("brand")}
            per_device.append(evaluate_require(expression, props))
        if False in per_device:
            results[name] = False
        elif None in per_device:
            results[name] = None
        else:
            results[name] = True
    return results


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


def gemm_floor(device_name: str) -> float | None:
    for key, floor in GEMM_FLOORS_TFLOPS:
        if key.lower() in device_name.lower():
            return floor
    return None


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


def parse_args(argv: list[str], env: dict[str, str]) -> tuple[Expect, list[str] | None]:
    parser = _Parser(prog="check.py", description="imagekit in-image check (prints one JSON document)")
    parser.add_argument("--expect-torch")
    parser.add_argument("--expect-cuda")
    parser.add_argument("--expect-cudnn")
    parser.add_argument("--expect-python")
    parser.add_argument("--flavour")
    parser.add_argument("--require-gpu", action="store_true", default=None)
    parser.add_argument("--collective-worker", nargs=4, metavar=("RANK", "WORLD", "PORT", "BACKEND"))
    ns = parser.parse_args(argv)

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
    return expect, ns.collective_worker


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


# -- checks ------------------------------------------------------------------------------------


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
    notes = []
    if env.get("NVIDIA_VISIBLE_DEVICES", "").strip().lower() == "all" and not ctx.expect.require_gpu:
        notes.append(
            "NVIDIA_VISIBLE_DEVICES=all is the image default and does not show a GPU request; "
            "GPU jobs pass --require-gpu"
        )
    if go_parse_bool(env.get("NVIDIA_CPU_ONLY")) or env.get("NVIDIA_CPU_ONLY") == "1":
        notes.append("NVIDIA_CPU_ONLY set: NVIDIA's entrypoint saw no GPU")
    detail["notes"] = notes
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
        )
        return passed("driver", f">= {row[1]}" if row else None, driver, detail)
    compat = sorted(glob.glob("/usr/local/cuda/compat/libcuda.so*"))
    detail["forward_compat_libs"] = compat
    variables = require_variables(ctx.env)
    if compat and variables and not go_parse_bool(ctx.env.get("NVIDIA_DISABLE_REQUIRE")):
        verdicts = evaluate_all_requirements(variables, detail["host_cuda"], driver, _device_props(ctx))
        if all(v is True for v in verdicts.values()):
            detail["note"] = (
                "below the minor-version floor; allowed by the image's NVIDIA_REQUIRE_* "
                "through the forward-compatibility package (datacenter GPUs only)"
            )
            return passed("driver", f">= {row[1]}" if row else None, driver, detail)
    return failed(
        "driver",
        f"driver {driver} is too old for CUDA {want} (needs >= {row[1] if row else '?'} for minor-version "
        f"compatibility, >= {row[0] if row else '?'} for full)",
        f"upgrade the host NVIDIA driver to >= {row[0] if row else '?'}, or use an image built for an "
        "older CUDA",
        expected=f">= {row[1] if row else '?'}",
        actual=driver,
        detail=detail,
    )


def _device_props(ctx: Context) -> list[dict[str, str | None]]:
    devices: list[dict[str, str | None]] = []
    brands: list[str] = []
    smi_path = ctx.smi.get("path")
    if smi_path:
        rc, out = _run([smi_path, "-q"])
        if rc == 0:
            brands = parse_nvidia_smi_brands(out)
    for i, gpu in enumerate(ctx.smi.get("gpus") or []):
        arch = gpu.get("compute_cap")
        devices.append(
            {
                "arch": arch if arch and arch != "[N/A]" else None,
                "brand": brands[i] if i < len(brands) else None,
            }
        )
    if not devices and ctx.torch is not None:
        try:
            for i in range(int(ctx.torch.cuda.device_count())):
                major, minor = ctx.torch.cuda.get_device_capability(i)
                devices.append({"arch": f"{major}.{minor}", "brand": brands[i] if i < len(brands) else None})
        except Exception:
            pass
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
                f"{name} cannot be parsed: {exc}",
                "fix the image's NVIDIA_REQUIRE_* syntax (space = OR, comma = AND)",
                expected=expression,
                detail={"variables": variables},
            )
    gate = ctx.gpu_gate("require")
    if gate is not None:
        return gate
    cuda = host_cuda_version(ctx)
    driver = host_driver_version(ctx)
    devices = _device_props(ctx)
    verdicts = evaluate_all_requirements(variables, cuda, driver, devices)
    actual = {"cuda": cuda, "driver": driver, "devices": devices}
    detail = {"variables": variables, "verdicts": verdicts}
    if all(v is True for v in verdicts.values()):
        return passed("require", variables, actual, detail)
    if any(v is False for v in verdicts.values()):
        bad = [name for name, v in verdicts.items() if v is False]
        return failed(
            "require",
            f"the host does not satisfy {', '.join(bad)}: driver too old for the image's CUDA "
            f"(driver {driver}, driver CUDA {cuda})" + (WSL_HINT if ctx.wsl else ""),
            "upgrade the host NVIDIA driver (or run on a datacenter GPU with the forward-compatibility "
            "package the requirement names)",
            expected=variables,
            actual=actual,
            detail=detail,
        )
    return failed(
        "require",
        "the requirement could not be decided: a property it needs (brand or arch) is unknown here",
        "make nvidia-smi available in the container (NVIDIA_DRIVER_CAPABILITIES=compute,utility)",
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
    detail = {"torch_raw": raw, "system": sys_version, "system_source": source}
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


def cudart_candidates(major: str | None) -> list[str]:
    names = ["libcudart.so"]
    if major:
        names.append(f"libcudart.so.{major}")
        names.append(f"libcudart.so.{major}.0")
    for entry in sys.path:
        for sub in ("nvidia/cuda_runtime/lib", f"nvidia/cu{major}/lib" if major else "nvidia/cu*/lib"):
            names.extend(sorted(glob.glob(os.path.join(entry, sub, "libcudart.so*"))))
    return names


def check_libcudart(ctx: Context) -> CheckResult:
    if ctx.expect.is_cpu:
        return skipped("libcudart", "CPU build: no CUDA runtime")
    want = ctx.expect.cuda
    major = want.split(".")[0] if want else None
    tried = []
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
        detail = {"loaded": name, "tried": tried}
        if want and runtime and runtime.split(".")[0] != want.split(".")[0]:
            return failed(
                "libcudart",
                f"libcudart is CUDA {runtime}, the image is CUDA {want}",
                "install the CUDA runtime of the cell's major (nvidia-cuda-runtime-cuXX)",
                expected=want,
                actual=runtime,
                detail=detail,
            )
        return passed("libcudart", want, runtime or name, detail)
    return failed(
        "libcudart",
        "libcudart.so.* missing: no CUDA runtime library is loadable",
        "install nvidia-cuda-runtime-cu" + (major or "XX") + " (torch's dependency) or use an nvidia/cuda "
        "base; check LD_LIBRARY_PATH",
        expected=want,
        actual=None,
        detail={"tried": tried},
    )


def check_cuda_available(ctx: Context) -> CheckResult:
    blocked = _gpu_torch_gate(ctx, "cuda_available")
    if blocked is not None:
        return blocked
    torch = ctx.torch
    if not torch.cuda._is_compiled():
        return failed(
            "cuda_available",
            "a GPU is visible but torch is a CPU build",
            wheel_fix(ctx.expect.torch, ctx.expect.cuda or "12.1"),
            expected=True,
            actual=False,
        )
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


def check_arch(ctx: Context) -> CheckResult:
    blocked = _gpu_torch_gate(ctx, "arch")
    if blocked is not None:
        return blocked
    torch = ctx.torch
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


def _rel_error(torch: Any, got: Any, ref: Any) -> float:
    diff = (got.double() - ref).norm().item()
    return float(diff / max(ref.norm().item(), 1e-30))


def check_gemm_gpu(ctx: Context) -> CheckResult:
    blocked = _gpu_torch_gate(ctx, "gemm_gpu")
    if blocked is not None:
        return blocked
    torch = ctx.torch
    if not torch.cuda.is_available():
        return failed(
            "gemm_gpu",
            "cannot run: torch.cuda.is_available() is False (see cuda_available)",
            "fix cuda_available first",
            expected="GEMM on the GPU",
            actual=None,
        )
    n = 2000
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen)
    b = torch.randn(n, n, generator=gen)
    ref = a.double() @ b.double()
    results: dict[str, Any] = {}
    tolerances = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 3e-2}
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        da, db = a.cuda(), b.cuda()
        out = (da @ db).cpu()
        results["float32"] = _rel_error(torch, out, ref)
        for dtype_name in ("float16", "bfloat16"):
            with torch.autocast(device_type="cuda", dtype=getattr(torch, dtype_name)):
                low = da @ db
            results[dtype_name] = _rel_error(torch, low.float().cpu(), ref)
        torch.cuda.synchronize()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    bad = {k: v for k, v in results.items() if not v <= tolerances[k]}
    detail = {"n": n, "relative_error": results, "tolerance": tolerances, "tf32": False}
    if bad:
        return failed(
            "gemm_gpu",
            f"GPU matmul disagrees with the CPU reference: {bad}",
            "check the device (ECC errors, nvidia-smi -q) and the cuBLAS in the image",
            expected=tolerances,
            actual=results,
            detail=detail,
        )
    return passed("gemm_gpu", tolerances, results, detail)


def check_gemm_perf(ctx: Context) -> CheckResult:
    gate = ctx.gpu_gate("gemm_perf")
    if gate is None:
        gate = _torch_skip(ctx, "gemm_perf")
    if gate is None and not ctx.torch.cuda.is_available():
        gate = skipped("gemm_perf", "torch.cuda.is_available() is False (see cuda_available)")
    if gate is not None:
        return CheckResult(**{**asdict(gate), "required": False})
    torch = ctx.torch
    n, warmup, iters = 8192, 3, 10
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(warmup):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    tflops = round(2 * n**3 * iters / elapsed / 1e12, 1)
    name = str(torch.cuda.get_device_name(0))
    floor = gemm_floor(name)
    detail = {
        "device": name,
        "shape": [n, n, n],
        "dtype": "bfloat16",
        "iterations": iters,
        "seconds": round(elapsed, 4),
        "floor_tflops": floor,
    }
    if floor is None:
        return CheckResult(
            "gemm_perf",
            "skip",
            required=False,
            reason=f"no floor known for {name}",
            actual=tflops,
            detail=detail,
        )
    if tflops < floor:
        return CheckResult(
            "gemm_perf",
            "fail",
            required=False,
            expected=f">= {floor}",
            actual=tflops,
            detail=detail,
            cause="Tensor Cores not in use or device throttled",
            fix="check clocks and power (nvidia-smi -q -d CLOCK,PERFORMANCE), other jobs on "
            "the GPU, and that cuBLAS uses bf16 Tensor Core kernels",
        )
    return CheckResult(
        "gemm_perf", "pass", required=False, expected=f">= {floor}", actual=tflops, detail=detail
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_collectives(world: int, backend: str, timeout: float = NCCL_TIMEOUT_S) -> dict[str, Any]:
    """Spawn `world` worker processes (this script) that all-reduce and broadcast; bounded by timeout."""
    port = _free_port()
    script = os.path.abspath(__file__)
    # Each rank writes to its own temporary file, not a pipe: ranks read one after another
    # through pipes would block a later rank on a full pipe while an earlier one waits for it
    # in a collective (a deadlock until the timeout).
    procs: list[subprocess.Popen[bytes]] = []
    outputs: list[dict[str, Any]] = []
    timed_out = False
    with contextlib.ExitStack() as stack:
        files = [
            (stack.enter_context(tempfile.TemporaryFile()), stack.enter_context(tempfile.TemporaryFile()))
            for _ in range(world)
        ]
        try:
            for rank, (out_file, err_file) in enumerate(files):
                command = [
                    sys.executable,
                    script,
                    "--collective-worker",
                    str(rank),
                    str(world),
                    str(port),
                    backend,
                ]
                procs.append(subprocess.Popen(command, stdout=out_file, stderr=err_file))
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
        for rank, (proc, (out_file, err_file)) in enumerate(zip(procs, files)):
            out_file.seek(0)
            err_file.seek(0)
            out, err = out_file.read(), err_file.read()
            try:
                outputs.append(json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1]))
            except (ValueError, IndexError):
                outputs.append(
                    {
                        "rank": rank,
                        "ok": False,
                        "rc": proc.returncode,
                        "stderr": err.decode("utf-8", "replace")[-600:],
                    }
                )
    return {
        "ok": not timed_out and all(o.get("ok") for o in outputs),
        "timed_out": timed_out,
        "ranks": outputs,
    }


def collective_worker(rank: int, world: int, port: int, backend: str) -> int:
    """One rank: all_reduce(sum) of rank+1 and broadcast of rank 0's tensor; prints one JSON line."""
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
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0 if result["ok"] else 1


def check_nccl(ctx: Context) -> CheckResult:
    blocked = _gpu_torch_gate(ctx, "nccl")
    if blocked is not None:
        return blocked
    torch = ctx.torch
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
    outcome = run_collectives(count, "nccl")
    if not outcome["ok"]:
        return failed(
            "nccl",
            "NCCL all-reduce/broadcast across the GPUs failed"
            + (" (timed out: a hang)" if outcome["timed_out"] else ""),
            "run with NCCL_DEBUG=INFO; check --ipc=host / --shm-size and P2P (NCCL_P2P_DISABLE=1)",
            expected={"world": count},
            actual=outcome,
        )
    return passed("nccl", {"world": count, "ops": ["all_reduce", "broadcast"]}, outcome)


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
    ("nccl", check_nccl),
)


def run_check(name: str, fn: Callable[[Context], CheckResult], ctx: Context) -> CheckResult:
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
    return CheckResult(**{**asdict(result), "duration_s": round(time.monotonic() - started, 3)})


def build_report(ctx: Context) -> dict[str, Any]:
    started = time.monotonic()
    _ = ctx.torch  # import once up front, so its cost is not billed to whichever check asks first
    ctx.torch_import_s = round(time.monotonic() - started, 3)
    checks = [run_check(name, fn, ctx) for name, fn in CHECKS]
    required_failed = [c.name for c in checks if c.status == "fail" and c.required]
    summary = {
        "pass": sum(c.status == "pass" for c in checks),
        "fail": sum(c.status == "fail" for c in checks),
        "skip": sum(c.status == "skip" for c in checks),
        "required_failed": required_failed,
        "ok": not required_failed,
    }
    expect = asdict(ctx.expect)
    return {
        "schema": SCHEMA,
        "checks": [asdict(c) for c in checks],
        "summary": summary,
        "gpu_visible": ctx.gpu_visible,
        "gpu_requested": ctx.gpu_requested,
        "expected": expect,
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
        expect, worker = parse_args(sys.argv[1:] if argv is None else argv, environ)
    except ArgumentError as exc:
        sys.stderr.write(f"check.py: bad arguments: {exc}\n")
        return 2
    if worker is not None:
        try:
            rank, world, port = int(worker[0]), int(worker[1]), int(worker[2])
        except ValueError:
            sys.stderr.write("check.py: --collective-worker RANK WORLD PORT BACKEND\n")
            return 2
        return collective_worker(rank, world, port, worker[3])
    # Libraries may print to stdout (warnings, banners); keep stdout for the one JSON document.
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        report = build_report(Context(expect, environ))
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
