"""The tables the in-image probe looks up, generated from ``imagekit/data`` (never a hand copy).

``probe_tables()`` gathers them from compat.yaml (the CUDA driver table), gpus.yaml (GEMM floors,
NCCL bandwidth floors, forward-compatibility brands, the wheels' CUDA arch lists) and
``imagekit.core.platforms`` (the spellings of each machine, to tell an emulated run); ``tables_json()``
is the byte-deterministic JSON that ``imagekit.render.probe_bundle`` writes into the zipapp as
``imagekit_probe/tables.json``. The probe reads it with the standard library only (``probe/tables.py``);
run from this source tree it falls back to ``probe_tables()`` itself.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from imagekit.core import platforms
from imagekit.core.versions import version_key
from imagekit.facts.compat import load_compat, read_data


@cache
def load_gpus() -> dict[str, Any]:
    """imagekit/data/gpus.yaml as read (the tables and their source notes)."""
    data: dict[str, Any] = read_data("gpus.yaml")
    return data


def _without(entry: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in names}


def cuda_driver_table() -> dict[str, list[str | None]]:
    """CUDA minor -> [full-compatibility driver of its newest known patch (None: not read),
    minor-version floor]."""
    table = load_compat().cuda
    return {
        minor: [release.newest_driver, release.driver_minor_floor]
        for minor, release in sorted(table.items(), key=lambda kv: version_key(kv[0]))
    }


def wheel_arch_list(variant: str, torch: str | None = None, machine: str = "x86_64") -> str | None:
    """The TORCH_CUDA_ARCH_LIST PyTorch built the ``variant`` wheels of ``torch`` for ``machine``
    with (None: unknown). aarch64 wheels have lists of their own where the data knows them."""
    entry = load_gpus()["wheel_arch_lists"]["variants"].get(variant)
    if entry is None:
        return None
    if machine != "x86_64" and (own := (entry.get("machines") or {}).get(machine)):
        return str(own)
    if torch is not None:
        minor = ".".join(torch.split("+")[0].split(".")[:2])
        override = (entry.get("torch") or {}).get(minor)
        if override:
            return str(override)
    return str(entry["list"])


def machines() -> dict[str, str]:
    """Every spelling of a machine an engine or ``uname -m`` may say -> its ``uname -m`` name."""
    spellings = {p.machine: p.machine for p in platforms.PLATFORMS.values()}
    spellings.update({p.arch: p.machine for p in platforms.PLATFORMS.values()})
    return dict(sorted(spellings.items()))


def cpuinfo_keys() -> dict[str, str]:
    """A /proc/cpuinfo key only one machine's kernel writes -> that machine: QEMU user emulation
    passes the host's file through, so an arm64 process reading x86's ``vendor_id`` is emulated."""
    amd64, arm64 = (platforms.get(name) for name in platforms.NAMES)
    return {"vendor_id": amd64.machine, "CPU implementer": arm64.machine}


def probe_tables() -> dict[str, Any]:
    """Everything the probe looks up, as plain JSON types, each table with its source note."""
    gpus = load_gpus()
    floors = gpus["gemm_floors"]
    bandwidth = gpus["allreduce_bandwidth"]
    compat = gpus["forward_compatibility"]
    arch = gpus["wheel_arch_lists"]
    return {
        "cuda_drivers": {
            "source": "imagekit/data/compat.yaml, cuda.releases (driver of the newest patch, minor_floor)",
            "table": cuda_driver_table(),
        },
        "gemm_floors": {
            "source": floors["source"],
            "products": {name: _without(e, "checked") for name, e in floors["products"].items()},
        },
        "allreduce_bandwidth": _without(bandwidth, "checked"),
        "forward_compatibility": dict(compat),
        "wheel_arch_lists": {
            "source": arch["source"],
            "variants": {v: _without(e, "checked") for v, e in arch["variants"].items()},
        },
        "machines": {
            "source": "imagekit/core/platforms.py (PLATFORMS: each platform's GOARCH and uname -m names)",
            "aliases": machines(),
            "cpuinfo_keys": cpuinfo_keys(),
        },
    }


def tables_json() -> bytes:
    """``probe_tables()`` as bytes that depend on nothing but the data files (sorted keys, ASCII)."""
    return (json.dumps(probe_tables(), sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode("ascii")
