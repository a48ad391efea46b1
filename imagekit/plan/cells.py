"""The records a plan is made of: cells of three kinds, local bases, refusals and the plan.

A cell is one image to build, every version fixed and every string validated. How its torch gets
into the image makes its kind, and each kind is its own type, so that code downstream matches on
the type instead of asking which optional fields are set:

- ``WheelCell``: torch installed from wheels on an nvidia/cuda or a plain base (maybe one built
  from a local context);
- ``StackCell``: a base that brings its own PyTorch build (NGC), a fixed row of the matrix;
- ``FrontendCell``: JupyterLab or SSH added FROM another cell's image.

``Cell`` is their closed union. Made by ``imagekit.plan.resolve``; nothing else constructs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cached_property
from pathlib import Path
from typing import Any

from imagekit.core import naming, platforms
from imagekit.core.errors import InputError
from imagekit.core.platforms import PlatformName
from imagekit.facts.advisories import AdvisoryFinding
from imagekit.facts.compat import Compat, Stack, load_compat
from imagekit.plan.advisories import AdvisoryPolicy
from imagekit.plan.schema import AXIS_KEYS, Matrix
from imagekit.plan.schema_values import ServedFrontend


@dataclass(frozen=True)
class LocalBase:
    """A base image built from a local context before the cells that use it."""

    name: str
    image: str
    context: Path
    dockerfile: str
    args: tuple[tuple[str, str], ...]
    platform: PlatformName = platforms.DEFAULT  # what it is built for (its image holds only that)

    @property
    def id(self) -> str:
        """Its name, with the platform's suffix: a base built for two platforms is two builds."""
        return self.name + platforms.get(self.platform).suffix


@dataclass(frozen=True)
class CellFields:
    """What every kind of cell is: its name, its base, the versions it holds, its tag."""

    id: str
    origin: str  # where the matrix asked for it: "axes" or "include[i]"
    base: str  # the key in `bases`
    base_image: str
    os: str
    flavour: str
    torch: str
    torchvision: str | None
    torchaudio: str | None
    cuda: str  # CUDA minor ("12.1") or "cpu"
    cuda_full: str | None  # full toolkit version in the base (12.1.1); None for cpu and plain bases
    variant: str  # wheel variant: cu121, cpu
    cudnn: str | None  # cuDNN major torch uses ("8"), or the stack's full version
    python: str
    env: tuple[tuple[str, str], ...]
    readable_tag: str  # the published name, shared by the platforms of one group (see `groups`)
    platform: PlatformName  # linux/amd64 unless the matrix says otherwise
    # The base image brings CUDA and the NVIDIA environment (nvidia/cuda, NGC); on a plain base a
    # CUDA wheel brings CUDA's libraries itself and the image sets the NVIDIA environment.
    base_carries_cuda: bool
    # The advisories that affect what it installs (``imagekit.plan.advisories``): each waived by
    # the matrix (with its reason) or below the matrix's threshold; a refused cell is no cell.
    advisories: tuple[AdvisoryFinding, ...]

    @property
    def is_cuda(self) -> bool:
        return self.cuda != "cpu"

    @property
    def image_tag(self) -> str:
        """This platform's own tag: the engine's store and a staging repository hold one image
        per tag, so each platform of a group is built, verified and staged under its own; only the
        published index carries ``readable_tag`` alone."""
        return self.readable_tag + platforms.get(self.platform).suffix

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "torch": self.torch,
            "torchvision": self.torchvision,
            "torchaudio": self.torchaudio,
            "cuda": self.cuda,
            "cuda_full": self.cuda_full,
            "cudnn": self.cudnn,
            "python": self.python,
            "base": self.base,
            "base_image": self.base_image,
            "flavour": self.flavour,
            "os": self.os,
            "origin": self.origin,
            "platform": self.platform,
            "advisories": [finding.as_json() for finding in self.advisories],
        }


@dataclass(frozen=True)
class WheelCell(CellFields):
    """torch from wheels (PyPI, PyTorch's index or a wheelhouse) into a venv of its own."""

    local_base: LocalBase | None  # the base, when it is built from a local context
    python_from_base: bool  # the base brings the interpreter (else the OS archive's pythonX.Y)
    pip_packages: tuple[str, ...]
    apt_packages: tuple[str, ...]
    build_args: tuple[tuple[str, str], ...]
    numpy_cap: str | None = None  # "<2" where torch was compiled against NumPy 1.x
    # devel: nvcc, its headers and cudart's from NVIDIA's wheels at torch's own CUDA pins (the base's
    # `nvcc: wheels`), not from a toolkit in the base: each CUDA library in the image once
    nvcc_from_wheels: bool = False


@dataclass(frozen=True)
class StackCell(CellFields):
    """A base that brings its own PyTorch build (NGC): nothing may replace its torch."""

    stack: Stack
    pip_packages: tuple[str, ...]
    apt_packages: tuple[str, ...]
    build_args: tuple[tuple[str, str], ...]
    numpy_cap: str | None = None  # "<2" where its torch was compiled against NumPy 1.x


@dataclass(frozen=True)
class FrontendCell(CellFields):
    """A front end built FROM its parent cell's image: the versions are the parent's."""

    frontend: ServedFrontend
    parent: str  # the id of the cell it is built FROM


Cell = WheelCell | StackCell | FrontendCell
# The kinds whose image installs torch's environment itself (a front end adds to one).
ImageCell = WheelCell | StackCell


def frontend_of(cell: Cell) -> ServedFrontend | None:
    """Which front end ``cell`` serves, if it is one."""
    return cell.frontend if isinstance(cell, FrontendCell) else None


def local_base_of(cell: Cell) -> LocalBase | None:
    """The locally built base ``cell`` is built FROM, if any."""
    return cell.local_base if isinstance(cell, WheelCell) else None


@dataclass(frozen=True)
class Refusal:
    combination: Mapping[str, Any]
    origin: str
    reason: str

    def describe(self) -> str:
        keys = ", ".join(f"{k}={self.combination[k]}" for k in AXIS_KEYS if k in self.combination)
        return f"{keys or self.origin}: {self.reason}"


@dataclass(frozen=True)
class Plan:
    matrix: Matrix
    root: Path  # the directory the matrix file lives in; relative paths start here
    source_name: str
    cells: tuple[Cell, ...]
    refused: tuple[Refusal, ...]
    warnings: tuple[str, ...] = field(default=())
    # every base built from a local context, also one that only other bases derive from
    local_bases: tuple[LocalBase, ...] = field(default=())
    compat: Compat = field(default_factory=load_compat, compare=False, repr=False)  # the facts it used
    # the matrix's advisories, threshold and waivers as the plan resolved them: publish's scan
    # gate holds a scanner's findings against the same waivers (None: a plan made by hand)
    advisory_policy: AdvisoryPolicy | None = field(default=None, compare=False, repr=False)

    @property
    def repository(self) -> str:
        """Where this matrix's images are named: ``registry/repository`` (or a local name)."""
        return naming.repository(self.matrix.publish.registry, self.matrix.publish.repository)

    @cached_property
    def _cells_by_id(self) -> dict[str, Cell]:
        return {c.id: c for c in self.cells}

    def cell(self, cell_id: str) -> Cell:
        found = self._cells_by_id.get(cell_id)
        if found is None:
            raise InputError(f"{self.source_name}: no cell {cell_id}; see `imagekit plan`")
        return found

    def image_cell(self, cell_id: str) -> ImageCell:
        """The cell a front end is built FROM (never itself a front end)."""
        found = self.cell(cell_id)
        assert not isinstance(found, FrontendCell), "a front end is built FROM an image cell"
        return found

    def with_parents(self, cells: Sequence[Cell]) -> tuple[Cell, ...]:
        """``cells`` and, first, the cells their front ends are built FROM that are not among them."""
        chosen = {c.id for c in cells}
        parents = [
            self.cell(c.parent) for c in cells if isinstance(c, FrontendCell) and c.parent not in chosen
        ]
        unique = {p.id: p for p in parents}
        return (*unique.values(), *cells)

    def groups(self, cells: Sequence[Cell] | None = None) -> dict[str, tuple[Cell, ...]]:
        """``cells`` (every cell by default) by the published name they share: the platforms of
        one group publish one image index (a group of one publishes its image alone)."""
        by_tag: dict[str, list[Cell]] = {}
        for cell in self.cells if cells is None else cells:
            by_tag.setdefault(cell.readable_tag, []).append(cell)
        return {tag: tuple(members) for tag, members in by_tag.items()}

    def select(self, patterns: Sequence[str]) -> tuple[Cell, ...]:
        """The cells whose id matches any shell-style pattern (all cells when none given)."""
        chosen = set(select_ids([c.id for c in self.cells], patterns, self.source_name))
        return tuple(c for c in self.cells if c.id in chosen)


def select_ids(ids: Sequence[str], patterns: Sequence[str], source: str) -> list[str]:
    """The ids matching any of ``patterns`` (every id when none given): what ``--only`` means
    everywhere. A pattern list that matches nothing is an input error, never an empty result."""
    if not patterns:
        return list(ids)
    chosen = [i for i in ids if any(fnmatchcase(i, p) for p in patterns)]
    if not chosen:
        shown = " ".join(f"--only {p}" for p in patterns)
        raise InputError(f"{shown} matches no cell of {source}; see `imagekit plan`")
    return chosen
