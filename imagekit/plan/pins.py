"""Bases pinned by digest: a lock file beside the matrix (``matrix.yaml`` -> ``matrix.bases.lock.json``)
that maps each base the matrix pulls, as the matrix names it (``nvidia/cuda:12.1.1-devel-ubuntu22.04``),
to the manifest digest its tag named when ``imagekit pin-bases`` asked the registry.

Where the lock exists, every cell is planned FROM ``name:tag@sha256:...``: a tag that moves upstream
changes nothing until the pins are refreshed and committed, and a refresh that moves a digest changes
the cells' input digests (the base is an input), so those cells are built again. A lock that lacks a
base the matrix pulls is refused (a new base, unpinned beside pinned ones, is what a lock is there to
stop); so is one that pins a base the matrix does not name, a digest that is no sha256, or a file
past its bound: it was edited or is stale, and the fix is the command that writes it. A matrix with
``require_base_pins: true`` is refused without its lock. Bases built here (``bases.NAME.build``) and
front ends' parents are this run's own images: their identity is their inputs, not a registry's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from imagekit.core import naming
from imagekit.core.errors import InputError
from imagekit.core.paths import read_regular_file
from imagekit.core.safetypes import parse_json_object
from imagekit.core.text import shown
from imagekit.plan.cells import Cell, FrontendCell, local_base_of
from imagekit.plan.pin_file import pins_path

VERSION = 1
# A lock names each base a matrix pulls once: a real one holds a few dozen entries of ~120 bytes.
PINS_BYTES = 1 << 20
MAX_PINS = 1_000


def fix_command(matrix: Path) -> str:
    return f"`imagekit pin-bases --matrix {matrix.name}`"


def pulled_bases(cells: Iterable[Cell]) -> tuple[str, ...]:
    """The bases ``cells`` pull from a registry, as the matrix names them, sorted; a base the
    matrix already names by digest needs no pin."""
    return tuple(
        sorted(
            {
                cell.base_image
                for cell in cells
                if not isinstance(cell, FrontendCell)
                and local_base_of(cell) is None
                and "@" not in cell.base_image
            }
        )
    )


def read_pins(path: Path, matrix: Path) -> dict[str, str]:
    """The lock at ``path``: base reference -> sha256 digest. Each problem is one InputError that
    names the file, the entry and the command that writes a good one."""
    fix = f"run {fix_command(matrix)} to write it again"
    try:
        raw = read_regular_file(path, PINS_BYTES, "a lock of base digests (JSON)")
    except InputError as exc:  # too large, not a regular file: the same fix
        raise InputError(f"{exc.message}; {fix}") from None
    document = parse_json_object(raw, str(path), "lock of base digests", fix, VERSION)
    extra = sorted(set(document) - {"version", "bases"})
    if extra:
        raise InputError(f"{path}: unknown key {shown(extra[0])}; {fix}")
    bases = document.get("bases")
    if not isinstance(bases, dict):
        raise InputError(f"{path}: bases: an object of base -> digest is required; {fix}")
    if len(bases) > MAX_PINS:
        raise InputError(f"{path}: bases: {len(bases)} entries, more than {MAX_PINS}; {fix}")
    for reference, digest in bases.items():
        if "@" in reference or not naming.is_reference(reference):
            raise InputError(f"{path}: bases: {shown(reference)} is not an image reference by tag; {fix}")
        if not isinstance(digest, str) or not naming.DIGEST.fullmatch(digest):
            raise InputError(f"{path}: bases.{reference}: {shown(str(digest))} is not sha256:<64 hex>; {fix}")
    return dict(bases)


def apply_pins(cells: Sequence[Cell], matrix: Path, required: bool) -> tuple[Cell, ...]:
    """``cells`` FROM their bases' pinned digests, when the matrix has a lock (refused when it is
    ``required`` and has none). The lock must pin exactly the bases the cells pull."""
    path = pins_path(matrix)
    wanted = pulled_bases(cells)
    if not path.exists() and not path.is_symlink():
        if required and wanted:
            raise InputError(
                f"{matrix.name}: require_base_pins is set and {path.name} does not exist; run"
                f" {fix_command(matrix)} where the registries are reachable, and commit {path.name}"
            )
        return tuple(cells)
    pins = read_pins(path, matrix)
    missing = [ref for ref in wanted if ref not in pins]
    if missing:
        raise InputError(
            f"{path.name}: no digest for base {missing[0]}"
            f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; run {fix_command(matrix)}"
        )
    unknown = sorted(set(pins) - set(wanted))
    if unknown:
        raise InputError(
            f"{path.name}: pins base {shown(unknown[0])}, which no cell of {matrix.name} pulls;"
            f" run {fix_command(matrix)} to write it again"
        )
    return tuple(_pinned(cell, pins) for cell in cells)


def _pinned(cell: Cell, pins: Mapping[str, str]) -> Cell:
    digest = pins.get(cell.base_image)
    if digest is None or isinstance(cell, FrontendCell) or local_base_of(cell) is not None:
        return cell
    return replace(cell, base_image=f"{cell.base_image}@{digest}")


def pins_document(pins: Mapping[str, str]) -> str:
    """The lock's text: sorted, one base a line, so that a refresh's diff shows what moved."""
    return json.dumps({"version": VERSION, "bases": dict(sorted(pins.items()))}, indent=2) + "\n"
