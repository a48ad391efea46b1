"""How a cell's install splits into layers: what many cells share goes lowest, in a step of its own.

Two sources of the split: a wheelhouse closure resolved on the host (``wheels.slice_closure``, the
BuildKit builder: each slice a context directory bound to its step), and, for torch from an index,
the CUDA wheels its build pins exactly (``imagekit.facts.cuda_wheels``), installed before torch.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def wheel_layers(slices: ClosureSlices, options: StepOptions) -> tuple[WheelLayer, ...]:
    """The installs of a cell's closure, bottom to top: the venv's pip and setuptools (right after
    the venv is made, as in every other cell), its CUDA wheels, CUDA's compiler wheels (a
    devel cell's `nvcc: wheels`), its other dependencies, torch and its companions (each skipped
    when empty). ``--no-deps`` everywhere: each slice is exactly what the closure says, and pip
    never re-resolves a lower one (an upgrade in a higher layer would leave whiteouts and a second
    copy); the template runs ``pip check`` after the last. The CUDA wheels are not byte-compiled:
    they hold no module worth it."""
    common = ("--disable-pip-version-check", "--no-index", "--no-deps")
    layers: list[WheelLayer] = []
    for context, files, extra in (
        (VENV_TOOLS_CONTEXT, slices.tools, ()),
        (CUDA_WHEELS_CONTEXT, slices.cuda, ("--no-compile",)),
        (COMPILER_WHEELS_CONTEXT, slices.compiler, ("--no-compile",)),
        (DEPS_WHEELS_CONTEXT, slices.deps, ()),
        (WHEELHOUSE_CONTEXT, slices.top, ()),
    ):
        if files:
            args = (*common, "--find-links", wheel_dir(context), *extra)
            layers.append(WheelLayer(context, options.wheel_slice(context), args, ClosureSlices.pins(files)))
    return tuple(layers)


@dataclass(frozen=True)
class PinnedCudaWheels:
    """torch from an index, its build's CUDA wheels in the table: a step of their own below torch."""

    pins: tuple[str, ...]  # project==version, sorted


@dataclass(frozen=True)
class UnknownCudaWheels:
    """torch from an index, its build not in the table: one install step, and the Dockerfile says why."""

    build: str  # "torch 2.5.1 cu118 on x86_64"


IndexCudaWheels = PinnedCudaWheels | UnknownCudaWheels


def index_cuda_wheels(torch: str, variant: str, platform: PlatformName) -> IndexCudaWheels:
    """What the table says of the CUDA wheels of a CUDA cell that installs torch from an index."""
    machine = platforms.get(platform).machine
    pins = load_cuda_wheels().pinned(torch, variant, machine)
    return (
        UnknownCudaWheels(f"torch {torch} {variant} on {machine}") if pins is None else PinnedCudaWheels(pins)
    )
