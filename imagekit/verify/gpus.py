"""The GPUs a verification asks for: ``--gpus`` as docker takes it, the runner's devices it covers,
and what one check container of a cell is given (one pinned GPU, or all of them) and runs there.

GPU minutes are what a nightly pays for on an 8-GPU runner, so ``verify --jobs N`` shares the
runner's devices out one per cell (``imagekit.verify.schedule`` decides the order); this module
only says which devices there are and how a container asks for one.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from imagekit.core import cdi
from imagekit.core.errors import InputError
from imagekit.core.limits import GPUS_TEXT_CHARS, MAX_GPUS
from imagekit.core.text import shown
from imagekit.probe import protocol
from imagekit.verify.cdi_specs import DEFAULT_SPEC_DIRS, spec_device_names

if TYPE_CHECKING:  # docker-py is imported by the commands that talk to an engine
    from docker.types import DeviceRequest

# Checks that use every GPU the container sees: a cell pinned to one GPU runs without the
# collectives (they need two), then these on all of them. Kept here, not in the probe's protocol:
# the probe's bytes are in every cell's input digest, and the scheduling is the host's alone.
COLLECTIVE_CHECKS: tuple[str, ...] = (protocol.NCCL, protocol.NCCL_BANDWIDTH)
ALL_GPU_CHECKS: tuple[str, ...] = (protocol.GEMM_GPU, *COLLECTIVE_CHECKS)
# nvidia-smi answers in well under a second; one that hangs (a wedged driver) must not hold the run.
NVIDIA_SMI_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class GpuRequest:
    """``--gpus`` as docker takes it: ``all``, a count, ``device=0,1``, or ``none``; or CDI device
    names (``cdi:nvidia.com/gpu=all``), which the engine's CDI driver injects instead of the NVIDIA
    hook (Docker 25+ with CDI on: ``docker run --device nvidia.com/gpu=all``)."""

    text: str
    count: int  # -1 all, 0 none, N
    device_ids: tuple[str, ...] = ()
    cdi_devices: tuple[str, ...] = ()  # qualified CDI names (imagekit.core.cdi), each once

    @classmethod
    def parse(cls, text: str) -> GpuRequest:
        value = text.strip()
        if value in ("all", "-1"):
            return cls(value, -1)
        if value in ("none", "0", ""):
            return cls("none", 0)
        # ASCII digits, a few of them: str.isdigit() admits '١٢' and int() fails past 4,300 digits
        if re.fullmatch(r"[0-9]{1,4}", value):
            return cls(value, int(value))
        if value.startswith("device=") and len(value) <= 256:
            ids = tuple(part for part in value.removeprefix("device=").split(",") if part)
            if ids and all(re.fullmatch(r"[A-Za-z0-9-]+", part) for part in ids):
                return cls(value, len(ids), ids)
        if value.startswith(cdi.CDI_PREFIX):
            return cls.parse_cdi(text, value.removeprefix(cdi.CDI_PREFIX))
        raise InputError(
            f"--gpus {shown(text)}: use all, none, a count (2), device=0,1 (as docker takes it) or"
            " CDI device names, cdi:nvidia.com/gpu=all"
        )

    @classmethod
    def parse_cdi(cls, text: str, names_text: str) -> GpuRequest:
        """``cdi:NAME[,NAME...]``: ``all`` holds whatever GPUs the engine's spec gives it; explicit
        names hold that many (a MIG device counts as one)."""
        names = cdi.qualified_names(names_text) if len(text) <= GPUS_TEXT_CHARS else None
        if not names or len(names) > MAX_GPUS:
            raise InputError(
                f"--gpus {shown(text)}: CDI devices are vendor/class=name, comma-separated (at most"
                f" {MAX_GPUS}, {GPUS_TEXT_CHARS} characters): cdi:nvidia.com/gpu=all, cdi:nvidia.com/gpu=0,1,"
                " cdi:nvidia.com/gpu=0:1 (a MIG device); `nvidia-ctk cdi list` names the devices"
            )
        every = any(cdi.device_of(name) == cdi.ALL_DEVICES for name in names)
        return cls(cdi.CDI_PREFIX + ",".join(names), -1 if every else len(names), cdi_devices=names)

    @classmethod
    def pinned(cls, device: str) -> GpuRequest:
        """Exactly one device: by its index (or UUID) as nvidia-smi names it, or a CDI name (what
        ``runner_devices`` gives for a CDI request)."""
        if cdi.is_qualified_name(device):
            return cls(cdi.CDI_PREFIX + device, 1, cdi_devices=(device,))
        return cls(f"device={device}", 1, (device,))

    @property
    def requested(self) -> bool:
        return self.count != 0

    def device_requests(self) -> list[DeviceRequest]:
        from docker.types import DeviceRequest

        if not self.requested:
            return []
        if self.cdi_devices:
            # Driver "cdi": the engine resolves the names in its CDI specs (no capabilities needed)
            return [DeviceRequest(driver="cdi", device_ids=list(self.cdi_devices))]
        if self.device_ids:
            return [DeviceRequest(device_ids=list(self.device_ids), capabilities=[["gpu"]])]
        return [DeviceRequest(count=self.count, capabilities=[["gpu"]])]

    def held(self, runner: tuple[str, ...] | None) -> int | None:
        """How many GPUs a container with this request holds (None: ``all`` on a runner whose
        devices are unknown)."""
        if self.count >= 0:
            return self.count
        return None if runner is None else len(runner)


def local_engine(environ: Mapping[str, str]) -> bool:
    """Whether the engine runs on this host: only then are this host's GPUs the containers'."""
    host = environ.get("DOCKER_HOST", "")
    return not host or host.startswith("unix://")


def _nvidia_smi_rows(
    run: Callable[..., subprocess.CompletedProcess[str]], fields: str
) -> list[tuple[str, ...]] | None:
    """nvidia-smi's CSV rows of ``fields`` for each of the host's GPUs; None when it did not answer."""
    try:
        done = run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return [
        tuple(part.strip() for part in line.split(",")) for line in done.stdout.splitlines() if line.strip()
    ]


def _nvidia_smi_indexes(run: Callable[..., subprocess.CompletedProcess[str]]) -> tuple[str, ...] | None:
    rows = _nvidia_smi_rows(run, "index")
    found = tuple(",".join(row) for row in rows or ())
    if not found or not all(re.fullmatch(r"[0-9]{1,3}", i) for i in found):
        return None
    return found[:MAX_GPUS]


_GPU_UUID = re.compile(r"GPU-[0-9A-Fa-f-]{1,64}")  # nvidia-smi's uuid: GPU-4cf8db2d-06c0-...


def _nvidia_smi_gpus(
    run: Callable[..., subprocess.CompletedProcess[str]],
) -> tuple[tuple[str, str], ...] | None:
    """(index, uuid) of each of the host's GPUs, as nvidia-smi lists them."""
    rows = _nvidia_smi_rows(run, "index,uuid")
    if rows is None:
        return None
    gpus = tuple((row[0], row[1]) for row in rows if len(row) == 2)
    valid = all(re.fullmatch(r"[0-9]{1,3}", i) and _GPU_UUID.fullmatch(u) for i, u in gpus)
    if not gpus or len(gpus) != len(rows) or not valid:
        return None
    return gpus[:MAX_GPUS]


def cdi_gpu_names(
    run: Callable[..., subprocess.CompletedProcess[str]], spec_dirs: Sequence[str]
) -> tuple[str, ...] | None:
    """A qualified name per GPU of this host, each as NVIDIA's CDI spec in ``spec_dirs`` names it:
    by index (``nvidia.com/gpu=0``), by UUID (``nvidia.com/gpu=GPU-...``, ``nvidia-ctk cdi generate
    --device-name-strategy=uuid``) or by type and index (``gpu0``), whichever it defines; None when
    no such spec is readable there or it names some GPU none of these ways."""
    defined = spec_device_names(spec_dirs, cdi.NVIDIA_GPU_KIND)
    gpus = _nvidia_smi_gpus(run) if defined is not None else None
    if defined is None or gpus is None:
        return None
    names: list[str] = []
    for index, uuid in gpus:
        name = next((n for n in (index, uuid, f"gpu{index}") if n in defined), None)
        if name is None:
            return None
        names.append(f"{cdi.NVIDIA_GPU_KIND}={name}")
    return tuple(names)


def runner_devices(
    request: GpuRequest,
    environ: Mapping[str, str] | None = None,
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
    spec_dirs: Callable[[], Sequence[str]] = lambda: DEFAULT_SPEC_DIRS,
) -> tuple[str, ...] | None:
    """The devices ``request`` covers on this runner, as docker's device requests name them: the
    ids given, ``0..N-1`` for a count (docker's NVIDIA driver takes the first N), and for ``all``
    the host's nvidia-smi indexes when the engine is local (CDI: the names given, and for
    ``nvidia.com/gpu=all`` a name per GPU as the engine's spec names it, ``spec_dirs`` asked only
    then: :func:`cdi_gpu_names`); None when they cannot be known."""
    if not request.requested:
        return ()
    if request.cdi_devices and request.count > 0:
        return request.cdi_devices  # each pins as a CDI request of its own (GpuRequest.pinned)
    if request.device_ids:
        return request.device_ids
    if request.count > 0:
        return tuple(str(i) for i in range(request.count))
    nvidia_all = (f"{cdi.NVIDIA_GPU_KIND}={cdi.ALL_DEVICES}",)
    if request.cdi_devices and request.cdi_devices != nvidia_all:
        return None  # another vendor's `all`, or `all` beside other names: not nvidia-smi's to count
    if not local_engine(os.environ if environ is None else environ):
        return None
    if request.cdi_devices:
        return cdi_gpu_names(run, spec_dirs())
    return _nvidia_smi_indexes(run)


@dataclass(frozen=True)
class CheckPass:
    """One check container of a cell's verification: the GPUs it is given and the checks it runs.

    A plain run is one pass with the whole request. ``verify --jobs`` on several GPUs runs each
    cell first on one GPU without the collectives (``one_gpu``), then, once the others are done,
    the checks that use every GPU on all of them (``all_gpus``).
    """

    gpus: GpuRequest
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    frontend: bool = True  # a front-end image's own checks run in this pass
    kind: str = "verify"  # names the pass's log file

    @classmethod
    def one_gpu(cls, device: str) -> CheckPass:
        return cls(GpuRequest.pinned(device), skip=COLLECTIVE_CHECKS)

    @classmethod
    def all_gpus(cls, request: GpuRequest) -> CheckPass:
        return cls(request, only=ALL_GPU_CHECKS, frontend=False, kind="all-gpus")

    def arguments(self) -> list[str]:
        """The probe's check selection for this pass."""
        args: list[str] = []
        if self.only:
            args += [protocol.ONLY_OPTION, ",".join(self.only)]
        if self.skip:
            args += [protocol.SKIP_OPTION, ",".join(self.skip)]
        return args
