"""What the image holds, for its SBOM: Python distributions, Debian packages (dpkg's status file),
and the CUDA libraries this process actually loaded (their paths, and the cuDNN and NCCL versions
torch reports). Standard library only, Python 3.8+; nothing here fails a check or the run: a part
that cannot be read is left empty and named in ``problems``."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import sys
from typing import Any

from .proc import read_text
from .protocol import SCHEMA
from .versions import cudnn_int_to_version, parse_os_release

DPKG_STATUS = "/var/lib/dpkg/status"
DPKG_STATUS_BYTES = 64 << 20  # a CUDA devel image's status file is about 1 MB
MAX_PACKAGES = 1000  # what the host's report keeps per list; more is marked clipped
# The CUDA libraries an SBOM names when they are mapped into this process.
CUDA_LIBRARY = re.compile(
    r"/(lib(?:cublas|cublasLt|cudnn[a-z_]*|nccl|cudart|cufft|curand|cusparse|cusolver|nvrtc)\.so[^/]*)$"
)


def python_packages() -> list[dict[str, str]]:
    packages: list[dict[str, str]] = []
    from importlib import metadata

    seen = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and name.lower() not in seen:
            seen.add(name.lower())
            packages.append({"name": str(name), "version": str(dist.version)})
    packages.sort(key=lambda p: p["name"].lower())
    return packages


def dpkg_packages(path: str = DPKG_STATUS) -> list[dict[str, str]] | None:
    """Installed Debian packages from dpkg's status file; None when the image has none."""
    if not os.path.isfile(path) or os.path.getsize(path) > DPKG_STATUS_BYTES:
        return None
    text = read_text(path)
    if text is None:
        return None
    found: list[dict[str, str]] = []
    for paragraph in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        if fields.get("Package") and fields.get("Status", "").endswith(" installed"):
            found.append(
                {
                    "name": fields["Package"],
                    "version": fields.get("Version", ""),
                    "arch": fields.get("Architecture", ""),
                }
            )
    found.sort(key=lambda p: p["name"])
    return found


def loaded_cuda_libraries(maps: str = "/proc/self/maps") -> list[str]:
    """The CUDA libraries mapped into this process (resolved paths, which often carry the full
    version, e.g. libcublas.so.12.1.3.1)."""
    text = read_text(maps) or ""
    paths = set()
    for line in text.splitlines():
        path = line.split(None, 5)[5] if len(line.split(None, 5)) == 6 else ""
        if CUDA_LIBRARY.search(path):
            paths.add(os.path.realpath(path))
    return sorted(paths)


def torch_libraries(torch: Any) -> dict[str, str]:
    """cuDNN and NCCL as the loaded torch reports them (none for a CPU build)."""
    found: dict[str, str] = {}
    if torch is None:
        return found
    try:
        raw = torch.backends.cudnn.version()
        if raw:
            found["cudnn"] = cudnn_int_to_version(int(raw))
    except Exception:  # a CPU build, or a cuDNN that cannot load: nothing to name
        pass
    try:
        nccl = torch.cuda.nccl.version()
        if isinstance(nccl, tuple):
            found["nccl"] = ".".join(str(part) for part in nccl)
        elif nccl:
            value = int(nccl)  # NCCL_VERSION_CODE: 2.7.8 is 2708, from 2.9 on 2.18.1 is 21801
            major, rest = divmod(value, 10000 if value >= 10000 else 1000)
            found["nccl"] = f"{major}.{rest // 100}.{rest % 100}"
    except Exception:
        pass
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    if cuda:
        found["cuda_runtime"] = str(cuda)
    return found


def _clip(items: list[dict[str, str]], problems: list[str], what: str) -> list[dict[str, str]]:
    if len(items) > MAX_PACKAGES:
        problems.append(f"{what}: {len(items)} packages, the first {MAX_PACKAGES} listed")
    return items[:MAX_PACKAGES]


def probe_identity() -> dict[str, Any]:
    """The probe's own version: its protocol schema and, shipped as a zipapp, the archive's sha256
    (the same sources give the same bytes, so this names the probe's sources exactly)."""
    found: dict[str, Any] = {"schema": SCHEMA, "sha256": None}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isfile(root):
        digest = hashlib.sha256()
        with open(root, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        found["sha256"] = "sha256:" + digest.hexdigest()
    return found


def inventory(torch: Any = None, duplicates: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the image holds; ``duplicates`` is the libraries_once scan (None: it did not run)."""
    problems: list[str] = []
    try:
        packages = _clip(python_packages(), problems, "python")
    except Exception as exc:
        packages = []
        problems.append(f"python: {exc}")
    try:
        debian = dpkg_packages()
    except Exception as exc:
        debian = None
        problems.append(f"dpkg: {exc}")
    try:
        loaded = loaded_cuda_libraries()
    except Exception as exc:
        loaded = []
        problems.append(f"loaded libraries: {exc}")
    return {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "os_release": parse_os_release(read_text("/etc/os-release") or ""),
        "packages": packages,
        "os_packages": None if debian is None else _clip(debian, problems, "dpkg"),
        "cuda_libraries": torch_libraries(torch),
        "loaded_libraries": loaded[:MAX_PACKAGES],
        "probe": probe_identity(),
        "duplicate_libraries": duplicates,
        "problems": problems,
    }
