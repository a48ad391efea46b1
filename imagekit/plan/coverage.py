"""Which GPUs each cell serves, and which cells serve each GPU generation of a fleet.

A cell's image runs a GPU when its torch carries a kernel for it: a cubin of the same major at or
below the GPU's capability (a cubin for X.Y runs on X.Z, Z >= Y), or PTX at or below it (the
driver compiles PTX for any later capability). The wheels' architectures are the
TORCH_CUDA_ARCH_LIST PyTorch built each variant with (``imagekit/data/gpus.yaml``, the one table
of them); the driver a cell needs at least is its CUDA major's minor-version-compatibility floor
(``compat.yaml``). Facts only: nothing here runs a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.core import platforms
from imagekit.core.versions import version_key
from imagekit.facts.probe_facts import load_gpus, wheel_arch_list
from imagekit.plan.cells import Cell, FrontendCell, Plan, StackCell

Capability = tuple[int, int]


def capability(text: str) -> Capability:
    major, minor = (*version_key(text), 0, 0)[:2]
    return major, minor


def architectures(arch_list: str) -> tuple[tuple[Capability, ...], Capability | None]:
    """A TORCH_CUDA_ARCH_LIST (``"7.0;8.0;8.6;9.0+PTX"``) as (the lowest capability of each major
    with a cubin, the PTX's capability or None)."""
    lowest: dict[int, int] = {}
    ptx: Capability | None = None
    for item in arch_list.split(";"):
        major, minor = capability(item.removesuffix("+PTX"))
        lowest[major] = min(lowest.get(major, minor), minor)
        if item.endswith("+PTX"):
            ptx = (major, minor)
    return tuple(sorted(lowest.items())), ptx


def serves(arch_list: str, gpu: Capability) -> bool:
    """Whether wheels built for ``arch_list`` carry a kernel for a GPU of capability ``gpu``."""
    cubins, ptx = architectures(arch_list)
    return any(major == gpu[0] and minor <= gpu[1] for major, minor in cubins) or (
        ptx is not None and ptx <= gpu
    )


@dataclass(frozen=True)
class Served:
    cell: str
    driver: str | None  # the driver it needs at least (None: CPU, or a CUDA minor the table lacks)


@dataclass(frozen=True)
class FamilyCoverage:
    family: str
    capability: str
    machines: tuple[str, ...]  # the host CPUs it sits beside (uname -m)
    cells: tuple[Served, ...]


def families() -> dict[str, str]:
    """GPU family -> compute capability, from the data."""
    return {str(k): str(v) for k, v in load_gpus()["gpu_families"]["families"].items()}


def family_machines(family: str) -> tuple[str, ...]:
    """The host machines a family sits beside in the fleet (Grace superchips: aarch64)."""
    table = load_gpus()["gpu_families"]["machines"]
    return tuple(str(m) for m in table.get(family, table["default"]))


def arch_list_of(cell: Cell) -> str | None:
    """The architectures the cell's torch carries kernels for; None for a CPU build, a stack with
    its own build (NGC: not in the table), or a variant the table does not know."""
    if not cell.is_cuda or isinstance(cell, StackCell):
        return None
    return wheel_arch_list(cell.variant, cell.torch, platforms.get(cell.platform).machine)


def fleet_coverage(plan: Plan) -> tuple[FamilyCoverage, ...]:
    """For each GPU family of the data, the image cells of ``plan`` that run on it (of its hosts'
    machine, with a kernel for it; front ends are their cells' images) and the driver each needs."""
    out: list[FamilyCoverage] = []
    images = [c for c in plan.cells if not isinstance(c, FrontendCell)]
    for family, text in families().items():
        gpu = capability(text)
        machines = family_machines(family)
        served: list[Served] = []
        for cell in images:
            arch = arch_list_of(cell)
            if platforms.get(cell.platform).machine not in machines or arch is None or not serves(arch, gpu):
                continue
            release = plan.compat.cuda_release(cell.cuda)
            served.append(Served(cell.id, release.driver_minor_floor if release else None))
        out.append(FamilyCoverage(family, text, machines, tuple(served)))
    return tuple(out)
