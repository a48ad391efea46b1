"""Which GPUs each cell serves, and which cells serve each GPU generation of a fleet.

A cell's image runs a GPU when its torch carries a kernel for it: a cubin of the same major at or
below the GPU's capability (a cubin for X.Y runs on X.Z, Z >= Y), or PTX at or below it (the
driver compiles PTX for any later capability). The wheels' architectures are the
TORCH_CUDA_ARCH_LIST PyTorch built each variant with (``imagekit/data/gpus.yaml``, the one table
of them); the driver a cell needs at least is its CUDA major's minor-version-compatibility floor
(``compat.yaml``). Which GPUs a cell can run is ``imagekit.plan.gpu_fit``'s answer (the same one
Kubernetes placement is written from); this module applies it to a fleet. Facts only: nothing here
runs a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.facts.compat import Compat
from imagekit.facts.probe_tables import load_gpus
from imagekit.plan.cells import Cell, FrontendCell, Plan, StackCell
from imagekit.plan.gpu_fit import Capability, GpuFit, Kernels, capability, gpu_fit


def serves(arch_list: str, gpu: Capability) -> bool:
    """Whether wheels built for ``arch_list`` carry a kernel for a GPU of capability ``gpu``."""
    return Kernels.of(arch_list).serve(gpu)


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


def cell_fit(cell: Cell, compat: Compat) -> GpuFit:
    """The cell's fit; a stack with its own build (NGC) has no arch list in the table."""
    return gpu_fit(
        cell.platform,
        cell.cuda if cell.is_cuda else None,
        cell.torch,
        compat,
        known_list=not isinstance(cell, StackCell),
    )


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
            fit = cell_fit(cell, plan.compat)
            if fit.platform.machine in machines and fit.runs_on(gpu):
                served.append(Served(cell.id, fit.driver_floor))
        out.append(FamilyCoverage(family, text, machines, tuple(served)))
    return tuple(out)
