"""CUDA's library wheels that each torch build pins exactly: the facts of ``imagekit/data/cuda_wheels.yaml``.

A cell that installs torch from an index (PyPI, PyTorch's index, a mirror of either) installs these
first, in a step of their own (``imagekit.render.recipe``): one layer below torch that every cell
pinning the same wheels shares. They are the wheels reached from torch through exact pins only
(``nvidia-cudnn-cu12==8.9.2.26``; CUDA 13's ``cuda-toolkit[cublas,...]==13.2.2`` and the
``nvidia-cublas==...`` its extras pin): those are on every index that can install that torch at
all. A dependency left open (torch 2.1.2's cuSOLVER asks for any ``nvidia-nvjitlink-cu12``) is not
among them: which version an index serves is not a fact of the build, so torch's own step resolves
it, as before. One exception keeps CUDA 13 images one release: an open requirement on a component
the pinned ``cuda-toolkit`` names exactly under one of its extras (nvshmem's any
``nvidia-cuda-cccl``; the toolkit's ``cccl`` extra pins 13.2.86) is pinned at the toolkit's version,
so a devel cell's compiler (``cuda-toolkit[nvcc,crt,nvvm,cccl]``) installs under the image's pins.

``python -m imagekit.refresh.cuda_wheels`` writes the file from pip's dry-run reports; a torch build it has
no entry for installs in one step, as before, and its Dockerfile says why. Every entry carries the
note of where its pins were read (``sources``): pins compiled from other public sources than a
dry run of the index are entered by hand, with their note. ``bundled`` names the builds of
PyTorch's own index whose wheel brings CUDA's libraries inside it (torch 2.1.2's cu118 and cu121:
no CUDA Requires-Dist at all): nothing to split, so they stay in one step, and the Dockerfile says
why. Where PyPI serves the same CUDA build with its pins (``wheels`` has an entry for it too),
``imagekit.render.layers`` installs torch from PyPI instead, so that its CUDA libraries sit in
layers other cells share. The file is validated when it is read: a hand edit that would put a
non-CUDA project or an open version into the layer, or an entry without its source, fails loudly.

The layers go in ``layer_order``: the projects whose version changes least across the table lowest
(cuBLAS, cuFFT, ... pinned alike from torch 2.1 to 2.5; cuDNN moves with a major; NCCL with nearly
every release), so that cells differing only in NCCL share every layer but the top one, and their
layer chains too (containerd unpacks a layer once per chain of parents).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any

from imagekit.core.platforms import MACHINES
from imagekit.core.text import shown
from imagekit.facts.compat import read_data

DATA_FILE = "cuda_wheels.yaml"
# The projects whose wheels are CUDA's own: CUDA 12's nvidia-*-cu12, and CUDA 13's cuda-toolkit,
# cuda-bindings and suffix-less nvidia-* (FACTS, late November). The one owner of that rule: the
# wheelhouse closure's slices (``imagekit.render.wheels``) and this table both use it.
CUDA_PROJECT_PREFIXES = ("nvidia-", "cuda-")
_TORCH = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+$")
_VARIANT = re.compile(r"^cu[0-9]{3}$")
# project==version, the project normalised (PEP 503) and the version a plain release (PEP 440)
# a source note: a line or two naming a file, a commit or a command (the longest, about 400)
NOTE_CHARS = 2_000
_PIN = re.compile(r"^([a-z0-9]+(?:-[a-z0-9]+)*)==([0-9]+(?:\.[0-9]+)*(?:\.post[0-9]+)?)$")


def is_cuda_project(project: str) -> bool:
    """Whether the (normalised) project is one of CUDA's own wheels."""
    return project.startswith(CUDA_PROJECT_PREFIXES)


Build = tuple[str, str, str]  # (torch patch, variant, machine)


@dataclass(frozen=True)
class CudaWheels:
    """The table: (torch patch, variant, machine) -> its exact CUDA pins, sorted; where each
    entry's pins were read; the builds of PyTorch's index that bundle CUDA, each with its note."""

    pins: Mapping[Build, tuple[str, ...]]
    sources: Mapping[Build, str] = field(default_factory=dict)
    bundled: Mapping[Build, str] = field(default_factory=dict)

    def pinned(self, torch: str, variant: str, machine: str) -> tuple[str, ...] | None:
        """The CUDA wheels torch ``torch`` of ``variant`` pins on ``machine``; None: not known."""
        return self.pins.get((torch, variant, machine))

    def bundles(self, torch: str, variant: str, machine: str) -> str | None:
        """Why PyTorch's index's wheel of this build has no CUDA wheels to split; None: it has."""
        return self.bundled.get((torch, variant, machine))

    @cached_property
    def _versions_seen(self) -> dict[str, int]:
        seen: dict[str, set[str]] = {}
        for pins in self.pins.values():
            for pin in pins:
                project, _, version = pin.partition("==")
                seen.setdefault(project, set()).add(version)
        return {project: len(versions) for project, versions in seen.items()}

    def layer_order(self, pins: tuple[str, ...]) -> tuple[str, ...]:
        """``pins`` bottom to top: the project pinned at fewest versions across the whole table
        first, then by name (one the table never pins, last). The rank is the table's, never the
        cell's: a pin's place does not depend on which other pins a cell has."""
        seen = self._versions_seen
        unknown = len(self.pins) + 1  # a project no entry pins (an open requirement's): on top
        return tuple(sorted(pins, key=lambda pin: (seen.get(pin.partition("==")[0], unknown), pin)))


def _pin_list(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: expected a non-empty list of project==version")
    for pin in value:
        match = _PIN.match(pin) if isinstance(pin, str) else None
        if match is None:
            raise ValueError(
                f"{where}: {_shown(pin)} is not project==version (normalised name, plain version)"
            )
        if not is_cuda_project(match.group(1)):
            raise ValueError(
                f"{where}: {_shown(pin)} is not one of CUDA's wheels ({', '.join(CUDA_PROJECT_PREFIXES)}*)"
            )
    if value != sorted(set(value)):
        raise ValueError(f"{where}: the pins must be sorted, each once (the refresh script writes them so)")
    return tuple(value)


_KINDS = {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "a mapping"}


def _shown(value: Any) -> str:
    """A key or value of the file as a message repeats it: a string cut short and redacted, anything
    else by its kind (a hand edit or another file given to the refresh script may hold anything)."""
    if isinstance(value, str):
        return shown(value)
    return "null" if value is None else _KINDS.get(type(value), type(value).__name__)


def parse_cuda_wheels(raw: Any, source: str = f"imagekit/data/{DATA_FILE}") -> CudaWheels:
    """The data file's value as a table; ValueError names ``source`` and the first malformed entry.
    Any value is checked, not only a mapping: the refresh script reads the table from a path given."""
    pins: dict[tuple[str, str, str], tuple[str, ...]] = {}
    wheels = raw.get("wheels") if isinstance(raw, Mapping) else None
    if not isinstance(wheels, dict):
        raise ValueError(f"{source}: wheels: expected a mapping of torch patch -> variant -> machine -> pins")
    for torch, variants in wheels.items():
        if not isinstance(torch, str) or not _TORCH.match(torch) or not isinstance(variants, dict):
            where = f"{source}: wheels.{_shown(torch)}"
            raise ValueError(f"{where}: expected a torch patch (2.1.2) mapping variants")
        for variant, machines in variants.items():
            if not isinstance(variant, str) or not _VARIANT.match(variant) or not isinstance(machines, dict):
                where = f"{source}: wheels.{torch}.{_shown(variant)}"
                raise ValueError(f"{where}: expected a CUDA variant (cu121) mapping machines")
            for machine, value in machines.items():
                if machine not in MACHINES:
                    where = f"{source}: wheels.{torch}.{variant}.{_shown(machine)}"
                    raise ValueError(f"{where}: machine must be one of {', '.join(MACHINES)}")
                pins[(torch, variant, machine)] = _pin_list(
                    f"{source}: wheels.{torch}.{variant}.{machine}", value
                )
    notes = raw.get("sources", {})
    sources = _notes(notes, f"{source}: sources")
    for build in pins:
        if build not in sources:
            where = f"{source}: wheels.{'.'.join(build)}"
            raise ValueError(f"{where}: no note in sources.{'.'.join(build)} of where its pins were read")
    for build in sources:
        if build not in pins:
            raise ValueError(f"{source}: sources.{'.'.join(build)}: names no entry of wheels")
    bundled = _notes(raw.get("bundled", {}), f"{source}: bundled")
    return CudaWheels(pins, sources, bundled)


def _notes(raw: Any, where: str) -> dict[Build, str]:
    """A mapping torch patch -> variant -> machine -> one note (a non-empty line of text)."""
    found: dict[Build, str] = {}
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a mapping of torch patch -> variant -> machine -> note")
    for torch, variants in raw.items():
        if not isinstance(torch, str) or not _TORCH.match(torch) or not isinstance(variants, dict):
            raise ValueError(f"{where}.{_shown(torch)}: expected a torch patch (2.1.2) mapping variants")
        for variant, machines in variants.items():
            if not isinstance(variant, str) or not _VARIANT.match(variant) or not isinstance(machines, dict):
                raise ValueError(
                    f"{where}.{torch}.{_shown(variant)}: expected a CUDA variant mapping machines"
                )
            for machine, note in machines.items():
                if machine not in MACHINES:
                    place = f"{where}.{torch}.{variant}.{_shown(machine)}"
                    raise ValueError(f"{place}: machine must be one of {', '.join(MACHINES)}")
                if not isinstance(note, str) or not note.strip() or len(note) > NOTE_CHARS:
                    place = f"{where}.{torch}.{variant}.{machine}"
                    raise ValueError(
                        f"{place}: expected a note of 1 to {NOTE_CHARS} characters, not {_shown(note)}"
                    )
                found[(torch, variant, machine)] = " ".join(note.split())
    return found


@cache
def load_cuda_wheels() -> CudaWheels:
    """The packaged table (read once per process, when first asked for)."""
    return parse_cuda_wheels(read_data(DATA_FILE))
