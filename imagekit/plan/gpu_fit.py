"""Which GPUs can run a cell's image: the one owner of that answer.

A cell's image runs on a GPU when three facts hold, and only these three:

- the host's CPU is the cell's platform (an arm64 image on an amd64 node dies with "exec format
  error");
- the driver is at or above the cell's CUDA minor's minor-version-compatibility floor, a FULL
  driver version (``compat.yaml``'s ``minor_floor``, like 525.60.13);
- its torch carries a kernel for the GPU's compute capability: a cubin of the same major at or
  below it (a cubin for X.Y runs on X.Z, Z >= Y), or PTX at or below it (the driver compiles PTX
  for any later capability, later majors included). The architectures are the
  TORCH_CUDA_ARCH_LIST PyTorch built the wheel variant with (``gpus.yaml``, ``wheel_arch_list``).

:class:`GpuFit` holds them; the fleet coverage (``imagekit plan --coverage``), the Kubernetes node
affinity on GPU feature discovery's labels and the DRA claim's CEL selectors are all written from
it, each at the granularity its mechanism allows. Facts only: nothing here runs a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.core import platforms
from imagekit.core.versions import cuda_variant, version_key
from imagekit.facts.compat import Compat, load_compat
from imagekit.facts.probe_tables import wheel_arch_list

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


@dataclass(frozen=True)
class Kernels:
    """The compute capabilities a wheel has kernels for."""

    cubins: tuple[Capability, ...]  # the lowest capability of each major with a cubin, by major
    ptx: Capability | None  # the capability the PTX is for; None: no PTX

    @classmethod
    def of(cls, arch_list: str) -> Kernels:
        cubins, ptx = architectures(arch_list)
        return cls(cubins, ptx)

    def serve(self, gpu: Capability) -> bool:
        """Whether a GPU of capability ``gpu`` finds a kernel here."""
        return any(major == gpu[0] and minor <= gpu[1] for major, minor in self.cubins) or (
            self.ptx is not None and self.ptx <= gpu
        )

    def ranges(self) -> tuple[tuple[Capability, Capability | None], ...]:
        """The capabilities served, as [low, below) ranges (below None: no end), in order, ranges
        that meet joined: a cubin's major from its lowest minor on, and the PTX's capability and
        everything after it."""
        spans: list[tuple[Capability, Capability | None]] = [
            ((major, minor), (major + 1, 0)) for major, minor in self.cubins
        ]
        if self.ptx is not None:
            spans.append((self.ptx, None))
        joined: list[tuple[Capability, Capability | None]] = []
        for low, below in sorted(spans, key=lambda span: span[0]):
            if joined and (joined[-1][1] is None or low <= joined[-1][1]):
                last_low, last_below = joined[-1]
                end = None if last_below is None or below is None else max(last_below, below)
                joined[-1] = (last_low, end)
            else:
                joined.append((low, below))
        return tuple(joined)


@dataclass(frozen=True)
class GpuFit:
    """Where a cell's image can run. ``gpu`` False: a CPU build (no driver, no kernel asked for)."""

    platform: platforms.Platform
    gpu: bool
    driver_floor: str | None  # the full driver version; None: CPU, or a CUDA minor compat lacks
    kernels: Kernels | None  # None: CPU, or an arch list the data does not know (any capability)

    def runs_on(self, gpu: Capability) -> bool:
        """Whether the image is known to carry a kernel for ``gpu`` (unknown lists: not known)."""
        return self.kernels is not None and self.kernels.serve(gpu)


def gpu_fit(
    platform: str,
    cuda: str | None,
    torch: str | None,
    compat: Compat | None = None,
    *,
    known_list: bool = True,
) -> GpuFit:
    """The fit of an image for ``platform`` with ``cuda`` (a CUDA minor like "12.1", "cpu" or None)
    and ``torch``. ``known_list`` False: a build whose arch list is not PyTorch's wheels' (NGC)."""
    where = platforms.get(platform)
    if not cuda or cuda == "cpu":
        return GpuFit(where, False, None, None)
    release = (compat or load_compat()).cuda_release(cuda)
    listed = wheel_arch_list(cuda_variant(cuda), torch, where.machine) if known_list else None
    return GpuFit(
        where,
        True,
        release.driver_minor_floor if release is not None else None,
        Kernels.of(listed) if listed is not None else None,
    )
