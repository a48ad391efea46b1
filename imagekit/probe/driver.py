"""driver: the host driver against NVIDIA's table (full and minor-version compatibility) and the
forward-compatibility libraries."""

from __future__ import annotations

import glob
import os
import re
from typing import Any

from .context import Context
from .proc import read_text
from .require import device_props, evaluate_all_requirements, go_parse_bool, require_variables
from .results import CheckResult, failed, passed, skipped
from .smi import host_cuda_version, host_driver_version
from .tables import cuda_driver_table, datacenter_brands
from .versions import compare_versions, cuda_minor

# CUDA minor -> (driver its newest known patch shipped with = full compatibility, minor-version-
# compatibility floor). Linux x86_64, generated from imagekit/data/compat.yaml (NVIDIA's "CUDA Toolkit
# and Corresponding Driver Versions" table) into the zipapp's tables.json: no copy lives here.
CUDA_DRIVER_TABLE: dict[str, tuple[str | None, str]] = cuda_driver_table()


def driver_satisfies(driver: str, cuda: str, table: dict[str, tuple[str | None, str]] | None = None) -> str:
    """'full' (driver >= the release's driver), 'minor' (>= the minor-compatibility floor; also
    where the release's own driver is not known), 'too_old', or 'unknown_cuda' (no row for that
    CUDA minor)."""
    rows = CUDA_DRIVER_TABLE if table is None else table
    row = rows.get(cuda_minor(cuda))
    if row is None:
        return "unknown_cuda"
    full, floor = row
    if full is not None and compare_versions(driver, full) >= 0:
        return "full"
    if compare_versions(driver, floor) >= 0:
        return "minor"
    return "too_old"


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
    maps = read_text("/proc/self/maps") or ""
    for line in maps.splitlines():
        match = re.search(r"(/\S*libcuda\.so[.\d]*)$", line)
        if match:
            return os.path.realpath(match.group(1))
    return None


def _driver_gate(ctx: Context) -> CheckResult | None:
    if ctx.expect.is_cpu:
        return skipped("driver", "CPU build: no CUDA driver needed")
    gate = ctx.gpu_gate("driver")
    if gate is not None:
        return gate
    if ctx.expect.cuda is None:
        return skipped("driver", "no expected CUDA given")
    return None


def _runs_through_forward_compat(
    ctx: Context, driver: str, detail: dict[str, Any], compat: dict[str, Any], compat_in_use: bool
) -> bool:
    """Below the floor, yet running: the image's forward-compatibility libcuda is loaded, every
    NVIDIA_REQUIRE_* of the image holds, and every GPU is of a datacenter brand (forward compatibility
    works on nothing else: NVIDIA's compatibility guide; the brands are data)."""
    variables = require_variables(ctx.env)
    if not (compat["libs"] and variables and not go_parse_bool(ctx.env.get("NVIDIA_DISABLE_REQUIRE"))):
        return False
    devices = device_props(ctx)
    brands = [d.get("brand") for d in devices]
    allowed = datacenter_brands()
    detail["forward_compat"]["brands"] = brands
    detail["forward_compat"]["datacenter_brands"] = sorted(allowed)
    if not brands or not all(b in allowed for b in brands):
        detail["forward_compat"]["brand_note"] = (
            "forward-compatibility libraries count only on datacenter GPUs (brands "
            + ", ".join(sorted(allowed))
            + f"); this host's GPUs are {brands or 'unknown'}"
        )
        return False
    verdicts = evaluate_all_requirements(variables, detail["host_cuda"], driver, devices)
    return all(v is True for v in verdicts.values()) and compat_in_use


def _too_old(
    driver: str,
    want: str,
    row: tuple[str | None, str] | None,
    detail: dict[str, Any],
    loaded: str | None,
    compat_in_use: bool,
) -> CheckResult:
    compat = detail["forward_compat"]
    floor = row[1] if row else "?"
    full = row[0] if row and row[0] else None  # None: the release's own driver is not in the table
    cause = (
        f"driver {driver} is too old for CUDA {want} (needs >= {floor} for minor-version "
        f"compatibility, >= {full or 'an unrecorded driver'} for full)"
    )
    fix = f"upgrade the host NVIDIA driver to >= {full or floor}, or use an image built for an older CUDA"
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


def check_driver(ctx: Context) -> CheckResult:
    gate = _driver_gate(ctx)
    if gate is not None:
        return gate
    assert ctx.expect.cuda is not None
    driver = host_driver_version(ctx.smi)
    want = cuda_minor(ctx.expect.cuda)
    row = CUDA_DRIVER_TABLE.get(want)
    detail: dict[str, Any] = {"cuda": want, "host_cuda": host_cuda_version(ctx.smi)}
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
    if _runs_through_forward_compat(ctx, driver, detail, compat, compat_in_use):
        detail["note"] = (
            "below the minor-version floor; runs through the image's forward-compatibility "
            f"libcuda ({loaded}), which the image's NVIDIA_REQUIRE_* allows (datacenter GPUs only)"
        )
        return passed("driver", f">= {row[1]}" if row else None, driver, detail)
    return _too_old(driver, want, row, detail, loaded, compat_in_use)
