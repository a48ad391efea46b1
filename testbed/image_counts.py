"""What an image's manifests and layers hold, counted: the bytes an empty node downloads, the layers
and the files that differ between two builds (bench/pull_cost.py, bench/reproducible.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any


def distinct_bytes(manifests: Iterable[dict[str, Any]]) -> int:
    """What an empty node downloads for these image manifests: each config and layer digest once
    (the manifests themselves are not counted)."""
    sizes: dict[str, int] = {}
    for manifest in manifests:
        for blob in (manifest["config"], *manifest["layers"]):
            sizes[blob["digest"]] = blob["size"]
    return sum(sizes.values())


def layer_diff(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> list[int]:
    """The positions whose layer digests differ (a missing layer differs too)."""
    return [i for i in range(max(len(first), len(second))) if first[i : i + 1] != second[i : i + 1]]


def entry_differences(a: dict[str, tuple[object, ...]], b: dict[str, tuple[object, ...]]) -> list[str]:
    """The tar paths whose (type, size, mode, uid, gid, mtime, content hash) differ, or are in one only."""
    return sorted(path for path in a.keys() | b.keys() if a.get(path) != b.get(path))


# a closure step's pip line names what it installs: one CUDA wheel alone, or the wheelhouse of the
# other dependencies (imagekit's layered install, dockerfiles/templates/)
CUDA_WHEEL = re.compile(r"\b(nvidia-[a-z0-9-]+-cu\d+)==")
DEPS_STEP = "/tmp/wheelhouse-deps "


def closure_layers(manifest: dict[str, Any], config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The image's CUDA wheel layers (by wheel name) and its other-dependencies layer ("deps"), each
    {"digest", "size"}: the config's history entries that made a layer, in order, are the manifest's
    layers, and each entry's created_by is the step's command line."""
    made = [h for h in config.get("history", []) if not h.get("empty_layer", False)]
    if len(made) != len(manifest["layers"]):
        raise ValueError(
            f"{len(made)} history entries made a layer, the manifest has {len(manifest['layers'])}"
        )
    found: dict[str, dict[str, Any]] = {}
    for entry, layer in zip(made, manifest["layers"], strict=True):
        step = entry.get("created_by", "")
        wheel = CUDA_WHEEL.search(step)
        name = wheel.group(1) if wheel else "deps" if DEPS_STEP in step else None
        if name is not None:
            found[name] = {"digest": layer["digest"], "size": layer["size"]}
    return found


def layer_sharing(cells: dict[str, dict[str, dict[str, Any]]]) -> dict[str, list[str]]:
    """Which closure layers (CUDA wheel or "deps") have one digest in every cell ("shared") and which
    do not ("differ": another digest somewhere, or missing from a cell)."""
    names = sorted({name for layers in cells.values() for name in layers})
    sharing: dict[str, list[str]] = {"shared": [], "differ": []}
    for name in names:
        digests = {layers[name]["digest"] if name in layers else None for layers in cells.values()}
        sharing["shared" if len(digests) == 1 and None not in digests else "differ"].append(name)
    return sharing


def one_layer_per_cell_bytes(distinct: int, cells: dict[str, dict[str, dict[str, Any]]]) -> int:
    """What an empty node would download for these cells had each cell its CUDA wheels and other
    dependencies in a layer of its own (the layout before issue 36): the new layout's distinct bytes
    plus, for each closure layer that cells share, its size once more for every further cell that
    holds it. Compressing files in one layer or in several gives about the same bytes, so the sum of
    a cell's closure layers stands for its single layer."""
    holders: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for layers in cells.values():
        for layer in layers.values():
            holders[layer["digest"]] = holders.get(layer["digest"], 0) + 1
            sizes[layer["digest"]] = layer["size"]
    return distinct + sum(sizes[d] * (n - 1) for d, n in holders.items())


def ratio(part: int, whole: int) -> float:
    """part / whole to four places; a zero whole is a bench that measured nothing, said so."""
    if whole <= 0:
        raise ValueError(f"nothing to compare with: the whole is {whole} bytes")
    return round(part / whole, 4)
