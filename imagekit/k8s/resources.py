"""What each imagekit pod asks of its node: CPU and memory requests, a memory limit that covers the
memory-backed ``/dev/shm``, and the sizes of its emptyDirs.

Every workload gets requests by default, so that no GPU pod is BestEffort (the first evicted under
memory pressure, and refused by the usual "requests required" admission policies). The defaults
are sized for the image's probe, which is what a Job runs unless ``--command`` says otherwise:

- **CPU**: one core for the probe's own sequence (its process and one task child at a time:
  torch.compile with TORCHINDUCTOR_COMPILE_THREADS=1, the C++ extension's build, the training step),
  and one per GPU for the collectives, which start one process per GPU at once, each with NCCL's
  busy-polling proxy thread. No CPU limit by default: a CFS quota throttles exactly those threads
  and the DataLoader workers (``--cpu-limit`` sets one).
- **memory**: 4Gi for the probe's process and its task child: the whole probe's peak on the CPU
  image of torch 2.13 was 1.1 GiB (the container cgroup's ``max_usage_in_bytes``, page cache of
  the libraries read included; 2 CPUs, no GPU), and a CUDA image's torch maps some 3 GB more of
  CUDA libraries (cuBLAS, cuDNN, NCCL) into the pages it touches; and 2Gi per GPU for the
  collectives' processes, each loading those libraries and holding a CUDA context on the host
  side (an estimate: no GPU run was measured).
- **memory limit**: the request plus ``/dev/shm``. A memory-backed emptyDir reserves nothing, and
  every page written there counts against the container's memory limit (the kubelet's
  ``sizeLimit`` check, and the cgroup itself): a limit of the request alone would OOM-kill a pod
  whose DataLoader or NCCL filled the /dev/shm it was given.

Quantities are checked strictly, as Kubernetes would parse them (``resource.Quantity``), and then
for what each field can mean: a whole number of bytes for memory, at most millicores for CPU, a
value above zero and below the bounds beside them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from imagekit.core.errors import InputError
from imagekit.core.text import shown
from imagekit.k8s.options import JobOptions

# Kubernetes' quantity: a decimal number (no sign here: a request is never negative) and a suffix,
# binary (Ki..Ei) or decimal (m, k, M..E). The exponent forms (1e3) are valid too but unusual in a
# flag; they are refused with the forms to use.
_QUANTITY = re.compile(r"(?P<number>[0-9]+(\.[0-9]+)?)(?P<suffix>m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_UNITS |= {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
NUMBER_CHARS = 32  # digits of one quantity: far past any real size, far below Decimal's limits

TMP_SIZE = "8Gi"  # torch.compile and extension builds write and load their output here
SHM_PER_GPU_GI = 8  # DataLoader workers pass batches through /dev/shm: one GPU's worth each
SHM_MIN_GI = 2  # NCCL's intra-node transport alone needs more than Docker's 64 MiB
SHM_MIN_BYTES = 2**20  # below a MiB, /dev/shm holds not one NCCL buffer
CPU_BASE = 1  # cores: the probe's process and its one task child at a time
CPU_PER_GPU = 1  # cores: one collective process per GPU, each with NCCL's proxy thread
MEMORY_BASE_GI = 4  # the probe and its task child: 1.1 GiB measured (CPU image), CUDA's libraries
MEMORY_PER_GPU_GI = 2  # torch's CUDA libraries and a CUDA context in each collective process
# Past these a value is a typo (a unit left out, 64Ti for 64Gi): the largest GPU nodes hold a few
# hundred cores and a few TiB of memory.
MAX_CPU_CORES = 4_096
MAX_MEMORY_BYTES = 64 * 2**40


def quantity(option: str, value: str) -> Decimal:
    """``value`` as Kubernetes parses it, in base units (cores, bytes); InputError naming ``option``."""
    match = _QUANTITY.fullmatch(value)
    if match is None or len(match["number"]) > NUMBER_CHARS:
        raise InputError(f"{option} {shown(value)}: not a Kubernetes quantity (like 8, 500m, 16Gi)")
    suffix = match["suffix"] or ""
    number = Decimal(match["number"])
    return number / 1000 if suffix == "m" else number * _UNITS[suffix]


def check_quantity(option: str, value: str | None) -> str | None:
    """``value`` unchanged where it is a Kubernetes quantity (None: not given)."""
    if value is not None:
        quantity(option, value)
    return value


def cpu_cores(option: str, value: str) -> Decimal:
    """A CPU quantity: above zero, whole millicores (Kubernetes rounds finer ones up), bounded."""
    cores = quantity(option, value)
    if cores <= 0 or cores > MAX_CPU_CORES or (cores * 1000) % 1:
        raise InputError(
            f"{option} {shown(value)}: give CPUs from 1m to {MAX_CPU_CORES} in whole millicores"
            " (like 8, 1.5 or 500m)"
        )
    return cores


def memory_bytes(option: str, value: str, minimum: int = 1) -> int:
    """A memory quantity: a whole number of bytes, at least ``minimum``, bounded."""
    count = quantity(option, value)
    if count % 1:
        raise InputError(f"{option} {shown(value)}: not a whole number of bytes; give a size like 16Gi")
    if not minimum <= count <= MAX_MEMORY_BYTES:
        raise InputError(f"{option} {shown(value)}: give a size from {size(minimum)} to 64Ti (like 16Gi)")
    return int(count)


def size(count: int) -> str:
    """Bytes as the largest binary unit that holds them whole (``16Gi``, ``1536Mi``)."""
    for unit in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        if count and count % _UNITS[unit] == 0:
            return f"{count // _UNITS[unit]}{unit}"
    return str(count)


def shm_default(gpus: int) -> str:
    """/dev/shm for ``gpus`` GPUs: 8Gi each, at least 2Gi."""
    return f"{max(SHM_MIN_GI, SHM_PER_GPU_GI * gpus)}Gi"


def cpu_default(gpus: int) -> str:
    return str(CPU_BASE + CPU_PER_GPU * gpus)


def memory_default(gpus: int) -> str:
    return f"{MEMORY_BASE_GI + MEMORY_PER_GPU_GI * gpus}Gi"


@dataclass(frozen=True)
class Sizes:
    """A pod's sizes as written: each a quantity Kubernetes takes as it is."""

    cpu: str  # request
    cpu_limit: str | None  # None: no CPU limit
    memory: str  # request
    memory_limit: str
    shm: str  # /dev/shm's sizeLimit

    def requests(self) -> dict[str, str]:
        return {"cpu": self.cpu, "memory": self.memory}

    def limits(self) -> dict[str, str]:
        limits = {"cpu": self.cpu_limit} if self.cpu_limit is not None else {}
        return {**limits, "memory": self.memory_limit}


def sizes(options: JobOptions) -> Sizes:
    """The flags as checked, or the defaults for ``--gpus``; one InputError naming the flag for a
    value that is no quantity, means nothing for its field, or contradicts another (a request
    above its limit, /dev/shm past the memory limit it counts against)."""
    cpu = options.cpu or cpu_default(options.gpus)
    cores = cpu_cores("--cpu", cpu)
    if options.cpu_limit is not None and cpu_cores("--cpu-limit", options.cpu_limit) < cores:
        raise InputError(
            f"--cpu-limit {shown(options.cpu_limit)}: below the CPU request {cpu}; raise it or lower --cpu"
        )
    memory = options.memory or memory_default(options.gpus)
    requested = memory_bytes("--memory", memory, SHM_MIN_BYTES)
    shm = options.shm or shm_default(options.gpus)
    shm_bytes = memory_bytes("--shm", shm, SHM_MIN_BYTES)
    if options.memory_limit is None:
        return Sizes(cpu, options.cpu_limit, memory, size(requested + shm_bytes), shm)
    limit = memory_bytes("--memory-limit", options.memory_limit, SHM_MIN_BYTES)
    if limit < requested:
        raise InputError(
            f"--memory-limit {shown(options.memory_limit)}: below the memory request {memory};"
            " raise it or lower --memory"
        )
    if options.shm is None and shm_bytes > limit:
        shm, shm_bytes = options.memory_limit, limit  # the default, never past the limit it counts against
    if shm_bytes > limit:
        raise InputError(
            f"--shm {shown(shm)}: larger than --memory-limit {options.memory_limit}; /dev/shm is"
            " memory the container's limit counts: raise --memory-limit or lower --shm"
        )
    return Sizes(cpu, options.cpu_limit, memory, options.memory_limit, shm)
