"""What an engine's refusal of a check container's GPU request means, said as what to do.

Docker registers its GPU device drivers at start: the NVIDIA one when the NVIDIA hook
(``nvidia-container-runtime-hook``) is on its PATH, the CDI one when CDI is on (``"features":
{"cdi": true}`` on Docker 25-27; ``docker info`` then lists its ``CDISpecDirs``, else none). A
request no registered driver takes is refused with ``could not select device driver "<driver>" with
capabilities: ...``; a CDI name that no spec defines with ``unresolvable CDI devices <names>``.
Hosts set up the CDI way (the GPU operator since 25.10, ``nvidia-ctk cdi generate``) have no hook,
so ``--gpus all`` fails there while ``--gpus cdi:nvidia.com/gpu=all`` works: the line says so.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from imagekit.core import cdi
from imagekit.core.errors import EnvironmentProblem, InputError
from imagekit.core.limits import CDI_SPEC_HEAD_BYTES, MAX_CDI_SPEC_FILES
from imagekit.core.paths import open_regular_file
from imagekit.verify.cdi_specs import spec_paths
from imagekit.verify.gpus import GpuRequest, cdi_gpu_names

NO_GPU_DRIVER = "could not select device driver"
UNRESOLVABLE_CDI = "unresolvable CDI devices"
GENERATE_SPEC = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
GPU_FIX = (
    "the Docker engine has no GPU support ({detail}): install nvidia-container-toolkit, run"
    " `nvidia-ctk runtime configure --runtime=docker` and restart the engine; or pass --gpus none"
    " to run the checks that need no GPU"
)
NO_HOOK_BUT_CDI = (
    "the Docker engine has no NVIDIA hook for --gpus {gpus} ({detail}) but takes CDI devices"
    " (its CDI spec dirs: {dirs}): pass --gpus {instead}{spec}"
)
SPEC_MISSING = f" once a spec lists the GPUs (`{GENERATE_SPEC}`; `nvidia-ctk cdi list` names them)"
CDI_OFF = (
    "the Docker engine does not take CDI devices ({detail}): turn CDI on in its daemon.json"
    ' ("features": {{"cdi": true}} on Docker 25-27; scripts/engine.sh does) and restart it, or pass'
    " --gpus all for the NVIDIA hook"
)
CDI_UNKNOWN = (
    "--gpus {gpus}: the engine's CDI specs (in {dirs}) define no {names}: `nvidia-ctk cdi list` names"
    f" the devices there (none: `{GENERATE_SPEC}`)"
)

# a spec's kind, as YAML (kind: nvidia.com/gpu) or JSON ("kind": "nvidia.com/gpu") writes it
_NVIDIA_KIND = re.compile(
    rb"""^\s*"?kind"?\s*:\s*["']?""" + re.escape(cdi.NVIDIA_GPU_KIND.encode()) + rb"""["']?\s*,?\s*$""",
    re.MULTILINE,
)


def spec_dirs(info: Mapping[str, Any]) -> tuple[str, ...]:
    """The engine's CDI spec directories (``docker info``'s CDISpecDirs): none when CDI is off."""
    found = info.get("CDISpecDirs")
    if not isinstance(found, list):
        return ()
    return tuple(d for d in found[:MAX_CDI_SPEC_FILES] if isinstance(d, str) and d)


def _head(path: Path) -> bytes:
    """The first bytes of a spec; none of what is no regular file (a FIFO named like a spec must
    not hold the run) or cannot be read: only a hint depends on it."""
    try:
        with open_regular_file(path, "a CDI spec") as (fd, _):
            return os.read(fd, CDI_SPEC_HEAD_BYTES)
    except (OSError, InputError):
        return b""


def nvidia_spec_present(dirs: Iterable[str]) -> bool:
    """Whether a spec of kind nvidia.com/gpu is in ``dirs`` (on this host: a local engine's)."""
    return any(_NVIDIA_KIND.search(_head(path)) for path in spec_paths(dirs))


def refusal_problem(
    text: str,
    gpus: GpuRequest,
    info: Callable[[], Mapping[str, Any]],
    local_engine: bool,
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
) -> EnvironmentProblem | None:
    """The line for an engine's refusal ``text`` of ``gpus`` (None: not a GPU refusal). ``info``
    is asked only when the answer depends on it; ``local_engine``: the engine's spec dirs are this
    host's, so whether NVIDIA's spec is there, and how it names the GPUs (``run`` runs nvidia-smi),
    can be looked at."""
    if UNRESOLVABLE_CDI in text and gpus.cdi_devices:
        missing = text.split(UNRESOLVABLE_CDI, 1)[1].strip() or ", ".join(gpus.cdi_devices)
        where = ", ".join(spec_dirs(info())) or "none"
        return EnvironmentProblem(CDI_UNKNOWN.format(gpus=gpus.text, dirs=where, names=missing))
    if NO_GPU_DRIVER not in text:
        return None
    if gpus.cdi_devices:
        return EnvironmentProblem(CDI_OFF.format(detail=text))
    dirs = spec_dirs(info())
    if not dirs:
        return EnvironmentProblem(GPU_FIX.format(detail=text))
    spec = "" if not local_engine or nvidia_spec_present(dirs) else SPEC_MISSING
    # a local engine's spec says how it names each GPU (by index, or by UUID: cdi_gpu_names)
    named = cdi_gpu_names(run, dirs) if local_engine and gpus.count > 0 else None
    line = NO_HOOK_BUT_CDI.format(
        gpus=gpus.text, detail=text, dirs=", ".join(dirs), instead=cdi_equivalent(gpus, named), spec=spec
    )
    return EnvironmentProblem(line)


def cdi_equivalent(gpus: GpuRequest, named: tuple[str, ...] | None = None) -> str:
    """``--gpus`` for the NVIDIA hook said as NVIDIA's CDI names: ``all``, the ids given, or the
    first N GPUs (what the hook's count takes); an index as ``named`` (the spec's qualified name of
    each GPU by index, :func:`cdi_gpu_names`) names it where given, else as the index itself."""
    ids = gpus.device_ids or tuple(str(i) for i in range(max(gpus.count, 0)))
    if not ids:
        return f"{cdi.CDI_PREFIX}{cdi.NVIDIA_GPU_KIND}={cdi.ALL_DEVICES}"
    devices = [
        cdi.device_of(named[int(i)])
        if named and re.fullmatch(r"[0-9]{1,3}", i) and int(i) < len(named)
        else i
        for i in ids
    ]
    return f"{cdi.CDI_PREFIX}{cdi.NVIDIA_GPU_KIND}={','.join(devices)}"
