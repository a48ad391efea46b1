"""How a cell's install splits into layers: what many cells share goes lowest, in a step of its own.

Two sources of the split: a wheelhouse closure resolved on the host (``wheels.slice_closure``, the
BuildKit builder: each slice a context directory bound to its step), and, for torch from an index,
the CUDA wheels its build pins exactly (``imagekit.facts.cuda_wheels``), installed before torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagekit.core import platforms
from imagekit.core.platforms import PlatformName
from imagekit.facts.cuda_wheels import load_cuda_wheels
from imagekit.render.run_options import (
    COMPILER_WHEELS_CONTEXT,
    CUDA_WHEELS_CONTEXT,
    DEPS_WHEELS_CONTEXT,
    VENV_TOOLS_CONTEXT,
    WHEELHOUSE_CONTEXT,
    StepOptions,
    wheel_dir,
)
from imagekit.render.wheels import ClosureSlices


@dataclass(frozen=True)
class WheelLayer:
    """One ``pip install --no-deps`` of a slice of the cell's resolved closure (BuildKit): its own
    step, so its own layer, shared by every cell that installs the same slice."""

    context: str  # the slice's directory in the build context
    run: str  # what follows RUN: offline, the slice's directory bound
    pip_args: tuple[str, ...]
    requirements: tuple[str, ...]  # project==version, by name: a path would write direct_url.json


def cuda_wheel_context(project: str) -> str:
    """The context directory of one CUDA wheel's layer: named by its project alone, so the step's
    mount (and the mount point's stub in its layer) is the same in every cell that installs it."""
    return f"{CUDA_WHEELS_CONTEXT}-{project}"


def slice_contexts(slices: ClosureSlices) -> tuple[tuple[str, tuple[tuple[str, Path], ...]], ...]:
    """Each install of a cell's closure as (context directory, its files), bottom to top: the venv's
    pip and setuptools, each CUDA wheel alone (in the table's ``layer_order``), CUDA's compiler
    wheels, the other dependencies, torch and its companions; empty slices left out."""
    cuda = {ClosureSlices.pins([file])[0]: file for file in slices.cuda}
    ordered = load_cuda_wheels().layer_order(tuple(cuda))
    found = [
        (VENV_TOOLS_CONTEXT, slices.tools),
        *((cuda_wheel_context(pin.partition("==")[0]), (cuda[pin],)) for pin in ordered),
        (COMPILER_WHEELS_CONTEXT, slices.compiler),
        (DEPS_WHEELS_CONTEXT, slices.deps),
        (WHEELHOUSE_CONTEXT, slices.top),
    ]
    return tuple((context, files) for context, files in found if files)


def wheel_layers(slices: ClosureSlices, options: StepOptions) -> tuple[WheelLayer, ...]:
    """The installs of a cell's closure, bottom to top (``slice_contexts``): the venv's pip and
    setuptools right after the venv is made, as in every other cell, then each CUDA wheel in a
    step of its own, so that its layer is the same in every cell that installs that wheel whatever
    else the cell pins. ``--no-deps`` everywhere: each slice is exactly what the closure says, and
    pip never re-resolves a lower one (an upgrade in a higher layer would leave whiteouts and a
    second copy); the template runs ``pip check`` after the last. The CUDA wheels are not
    byte-compiled: they hold no module worth it."""
    common = ("--disable-pip-version-check", "--no-index", "--no-deps")
    layers: list[WheelLayer] = []
    for context, files in slice_contexts(slices):
        cuda = context.startswith(f"{CUDA_WHEELS_CONTEXT}-") or context == COMPILER_WHEELS_CONTEXT
        extra = ("--no-compile",) if cuda else ()
        args = (*common, "--find-links", wheel_dir(context), *extra)
        layers.append(WheelLayer(context, options.wheel_slice(context), args, ClosureSlices.pins(files)))
    return tuple(layers)


@dataclass(frozen=True)
class PinnedCudaWheels:
    """torch from an index, its build's CUDA wheels in the table: each in a step of its own below
    torch, in the table's ``layer_order``."""

    pins: tuple[str, ...]  # project==version, bottom to top
    # PyTorch's index's wheel of this build bundles CUDA (the table's ``bundled``) and PyPI's wheel
    # of the same CUDA build pins these: torch comes from PyPI (the matrix's index_url), not from
    # sources.pip.torch_index_url, so that its CUDA libraries sit in layers other cells share
    # instead of a second copy inside torch
    from_pypi: bool = False


@dataclass(frozen=True)
class UnknownCudaWheels:
    """torch from an index, its build not in the table: one install step, and the Dockerfile says why."""

    build: str  # "torch 2.5.1 cu118 on x86_64"


@dataclass(frozen=True)
class BundledCudaWheels:
    """torch from PyTorch's index, whose wheel of this build brings CUDA's libraries inside it:
    nothing to split, one install step, and the Dockerfile says why."""

    build: str  # "torch 2.1.2 cu118 on x86_64"
    note: str  # the table's: where that was read


IndexCudaWheels = PinnedCudaWheels | UnknownCudaWheels | BundledCudaWheels


def index_cuda_wheels(
    torch: str, variant: str, platform: PlatformName, torch_index: bool = True
) -> IndexCudaWheels:
    """What the table says of the CUDA wheels of a CUDA cell that installs torch from an index:
    PyTorch's own (``torch_index``: the matrix names sources.pip.torch_index_url) or PyPI's."""
    machine = platforms.get(platform).machine
    table = load_cuda_wheels()
    pins = table.pinned(torch, variant, machine)
    build = f"torch {torch} {variant} on {machine}"
    bundled = table.bundles(torch, variant, machine) if torch_index else None
    if pins is None:
        return UnknownCudaWheels(build) if bundled is None else BundledCudaWheels(build, bundled)
    return PinnedCudaWheels(table.layer_order(pins), from_pypi=bundled is not None)


def torch_from_pypi(found: IndexCudaWheels | None) -> bool:
    """Whether torch comes from the index of everything else: PyTorch's index's build bundles CUDA
    and PyPI's wheel of the same build pins it (``PinnedCudaWheels.from_pypi``)."""
    return isinstance(found, PinnedCudaWheels) and found.from_pypi
