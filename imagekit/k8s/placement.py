"""Where a cell's workload can run, as GPU feature discovery's node labels say it.

The answer itself is :class:`imagekit.plan.gpu_fit.GpuFit`'s (the CPU architecture, the driver
floor, the compute capabilities the wheel serves); here it is written at the granularity of the
labels the NVIDIA GPU operator's feature discovery puts on nodes: the compute capability as a
major and a minor, the driver by its major only. A DRA claim writes the same fit as CEL
(``imagekit.k8s.dra_cel``), to the full driver version and the exact capability.
"""

from __future__ import annotations

from typing import Any

from imagekit.core.versions import version_key
from imagekit.plan.gpu_fit import GpuFit, gpu_fit
from imagekit.report.lockfile import LockEntry

# GPU feature discovery's node labels (NVIDIA GPU operator); kubernetes.io/arch is the kubelet's.
ARCH_LABEL = "kubernetes.io/arch"
COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
COMPUTE_MINOR = "nvidia.com/gpu.compute.minor"
# The driver's major under both of feature discovery's names: ``cuda.driver-version.major`` since
# k8s-device-plugin v0.15.0 (eba41da, "align cuda driver and runtime labels with the NFD kernel
# version label format"), ``cuda.driver.major`` before it and still written beside it, "(Deprecated)"
# in docs/gpu-feature-discovery/README.md. A node carrying either is selected (terms are ORed), so
# neither a node of an older feature discovery nor one of a release that drops the old label is lost.
DRIVER_MAJOR = "nvidia.com/cuda.driver-version.major"
DEPRECATED_DRIVER_MAJOR = "nvidia.com/cuda.driver.major"
DRIVER_MAJOR_LABELS = (DRIVER_MAJOR, DEPRECATED_DRIVER_MAJOR)


def entry_fit(entry: LockEntry) -> GpuFit:
    """The fit of a published cell, from its platform and its expectations (cuda, torch)."""
    return gpu_fit(entry.platform, entry.expect.get("cuda"), entry.expect.get("torch"))


def _requirement(key: str, operator: str, *values: object) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": [str(v) for v in values]}


def gfd_affinity(fit: GpuFit, gpus: int) -> dict[str, Any]:
    """Node affinity from ``fit``: its platform; with GPUs, the compute capabilities its torch has
    kernels for and a driver at or above the floor (by driver major, the granularity of the
    label, under either of its names; PTX by later majors, the granularity a term of majors can say
    beside the cubins')."""
    arch = _requirement(ARCH_LABEL, "In", fit.platform.arch)
    drivers: list[list[dict[str, Any]]] = [[]]
    capabilities: list[list[dict[str, Any]]] = [[]]
    if gpus and fit.gpu:
        if fit.driver_floor is not None:
            floor = version_key(fit.driver_floor)[0]
            drivers = [[_requirement(label, "Gt", floor - 1)] for label in DRIVER_MAJOR_LABELS]
        if fit.kernels is not None:
            cubins, ptx = fit.kernels.cubins, fit.kernels.ptx
            whole = [major for major, minor in cubins if minor == 0]
            capabilities = [[_requirement(COMPUTE_MAJOR, "In", *whole)]] if whole else []
            for major, minor in cubins:  # a major whose first cubin is past X.0: X.Y and later
                if minor:
                    capabilities.append(
                        [
                            _requirement(COMPUTE_MAJOR, "In", major),
                            _requirement(COMPUTE_MINOR, "Gt", minor - 1),
                        ]
                    )
            if ptx is not None:  # the driver compiles the PTX for every later major
                capabilities.append([_requirement(COMPUTE_MAJOR, "Gt", max(ptx[0], *(m for m, _ in cubins)))])
    # every (driver label, capability) pair a term of its own: the expressions of a term are ANDed,
    # the terms ORed; each term's expressions are its own objects (a writer appends to them)
    terms = [
        {"matchExpressions": [{**e, "values": list(e["values"])} for e in (arch, *driver, *extra)]}
        for driver in drivers
        for extra in capabilities
    ]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
