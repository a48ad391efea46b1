"""The tables the probe looks up (driver table, GEMM and NCCL floors, datacenter brands, the wheels'
arch lists, the spellings of each machine), read from ``tables.json`` beside this module in the
zipapp. imagekit/render/probe_bundle.py generates it from imagekit/data and imagekit/core/platforms.py
at build time (``imagekit.facts.probe_tables``); there is no hand copy here. Run from the source tree
(the host's tests), the same tables come from ``imagekit.facts.probe_tables`` itself."""

from __future__ import annotations

import importlib
import json
import pkgutil
from typing import Any

TABLES_NAME = "tables.json"
# the host module that generates them (imported by name: the zipapp has no imagekit package)
HOST_MODULE = "imagekit.facts.probe_tables"
_CACHE: dict[str, Any] = {}


def _read() -> dict[str, Any]:
    data: bytes | None = None
    try:
        data = pkgutil.get_data(__package__ or __name__.rpartition(".")[0], TABLES_NAME)
    except OSError:
        data = None
    if data is not None:
        loaded: dict[str, Any] = json.loads(data.decode("ascii"))
        return loaded
    # the source tree (imagekit.probe): generate them from the data files, as the bundle does
    host: Any = importlib.import_module(HOST_MODULE)
    generated: dict[str, Any] = host.probe_tables()
    return generated


def tables() -> dict[str, Any]:
    """All the tables (read once per process)."""
    if not _CACHE:
        _CACHE.update(_read())
    return _CACHE


def cuda_driver_table() -> dict[str, tuple[str | None, str]]:
    """CUDA minor -> (full-compatibility driver, None where NVIDIA's row was not read; the
    minor-version-compatibility floor)."""
    return {minor: (row[0], row[1]) for minor, row in tables()["cuda_drivers"]["table"].items()}


def gemm_products() -> dict[str, dict[str, Any]]:
    """Exact device name -> its GEMM floors (floor, dtype, sms, and fp8_floor where it has FP8)."""
    products: dict[str, dict[str, Any]] = tables()["gemm_floors"]["products"]
    return products


def nccl_bandwidth() -> dict[str, Any]:
    table: dict[str, Any] = tables()["allreduce_bandwidth"]
    return table


def datacenter_brands() -> frozenset[str]:
    return frozenset(tables()["forward_compatibility"]["datacenter_brands"])


def machine_aliases() -> dict[str, str]:
    """Every spelling of a machine (amd64, arm64, x86_64, aarch64) -> its ``uname -m`` name."""
    aliases: dict[str, str] = tables()["machines"]["aliases"]
    return aliases


def cpuinfo_keys() -> dict[str, str]:
    """A /proc/cpuinfo key only one machine's kernel writes (vendor_id) -> that machine."""
    keys: dict[str, str] = tables()["machines"]["cpuinfo_keys"]
    return keys
