"""Version strings: comparison, CUDA minors, and the parsers of nvcc, version.json, cudnn headers and
os-release."""

from __future__ import annotations

import json
import re


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
