"""nvidia-smi and NVML: parsers of nvidia-smi's outputs, the toolkit's brand names, the host driver
and CUDA version."""

from __future__ import annotations

import contextlib
import csv
import ctypes
import os
import re
import shutil
from typing import Any

from .proc import read_text, run_command


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


def probe_nvidia_smi(env: dict[str, str]) -> dict[str, Any]:
    path = shutil.which("nvidia-smi", path=env.get("PATH", os.defpath))
    found: dict[str, Any] = {"path": path, "gpus": [], "queries": []}
    if path is None:
        found["error"] = "nvidia-smi not found on PATH (the NVIDIA container toolkit mounts it with --gpus)"
        return found
    fields = ["index", "name", "driver_version", "memory.total", "compute_cap"]
    rc, out = run_command([path, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
    found["queries"].append({"fields": fields, "rc": rc})
    if rc != 0 or "not a valid field" in out:
        fields = fields[:-1]  # old drivers (470) reject compute_cap
        rc, out = run_command([path, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
        found["queries"].append({"fields": fields, "rc": rc})
    if rc == 0:
        found["gpus"] = parse_nvidia_smi_csv(out, fields)
    else:
        found["error"] = f"nvidia-smi exited {rc}: {out.strip()[:400]}"
    hrc, header = run_command([path])
    found["header"] = parse_nvidia_smi_header(header) if hrc == 0 else {}
    if not found["gpus"] and hrc == 0:
        lrc, listing = run_command([path, "-L"])
        if lrc == 0:
            found["gpus"] = parse_nvidia_smi_list(listing)
    return found


def host_driver_version(smi: dict[str, Any]) -> str | None:
    """The host's driver version: from ``smi`` (what ``probe_nvidia_smi`` found), else the kernel
    module's own file."""
    for gpu in smi.get("gpus", []):
        if gpu.get("driver_version"):
            return str(gpu["driver_version"])
    header = smi.get("header") or {}
    if header.get("driver"):
        return str(header["driver"])
    text = read_text("/proc/driver/nvidia/version") or ""
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+([\d.]+)", text)
    return match.group(1) if match else None


def host_cuda_version(smi: dict[str, Any]) -> str | None:
    """The driver's CUDA version: cuDriverGetVersion from libcuda, else nvidia-smi's banner (in
    ``smi``, what ``probe_nvidia_smi`` found)."""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
            value = ctypes.c_int(0)
            if lib.cuDriverGetVersion(ctypes.byref(value)) == 0 and value.value > 0:
                return f"{value.value // 1000}.{(value.value % 1000) // 10}"
        except (OSError, AttributeError):
            continue
    header = smi.get("header") or {}
    return str(header["cuda"]) if header.get("cuda") else None
