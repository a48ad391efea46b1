"""Where a check container runs: the image's own platform, on this engine, natively or emulated.

An image's config names its platform (``Os``/``Architecture``: ``linux``/``arm64``); verify starts
its check container for exactly that platform, and the probe is told the engine host's machine
(docker info's ``Architecture``) so that it records whether it ran emulated. An image for another
machine than the engine's runs under QEMU user emulation (binfmt_misc, ``scripts/engine.sh
emulation``): its checks mean what they say, but an emulated process cannot use a GPU, so a GPU
request for it is refused with the reason, and its verdict is never ``validated``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from imagekit.core import platforms
from imagekit.core.text import shown

EMULATED_GPU = (
    "{image} is {platform}: on this {host} engine it runs emulated (QEMU user emulation), and an "
    "emulated process cannot use a GPU; verify it here with --gpus none (checked without GPU), and with "
    "a GPU on an {machine} machine"
)


def uname(machine: str) -> str:
    """``uname -m``'s name for a machine however an engine or an image spells it (arm64 -> aarch64);
    one imagekit builds no images for, lower-cased as is."""
    known = platforms.of_machine(machine)
    return known.machine if known is not None else machine.strip().lower()


@dataclass(frozen=True)
class Placement:
    """The platform a check container is created for, and how it runs on this engine."""

    platform: str | None  # linux/arm64: what the container is created with (None: the image names none)
    machine: str | None  # the image's machine, uname -m's name (None: the image names none)
    host_machine: str  # the engine's machine, uname -m's name
    emulated: bool

    @property
    def text(self) -> str:
        return where_it_ran(self.machine, self.host_machine, self.emulated)


def where_it_ran(machine: str | None, host_machine: str | None, emulated: bool) -> str:
    """``aarch64 (emulated on x86_64)``, ``x86_64``: how a run's machine is shown everywhere."""
    where = machine or "?"
    return f"{where} (emulated on {host_machine or '?'})" if emulated else where


def engine_machine(info: Mapping[str, Any]) -> str:
    """The engine host's machine from docker info (``Architecture``: x86_64, aarch64)."""
    return uname(str(info.get("Architecture") or ""))


def place(image: Mapping[str, Any], host_machine: str, wanted: str | None = None) -> Placement | str:
    """Where the image's check container runs on an engine of ``host_machine``: its config's platform
    (``wanted``, the cell's platform, when the image names none); a string saying why not when the
    image is for another platform than ``wanted``."""
    arch = str(image.get("Architecture") or "").strip()
    if not arch:
        wanted_platform = platforms.PLATFORMS.get(wanted) if wanted else None
        if wanted_platform is None:
            return Placement(None, None, host_machine, False)
        machine = wanted_platform.machine
        return Placement(wanted_platform.name, machine, host_machine, machine != host_machine)
    known = platforms.of_machine(arch)
    name = known.name if known is not None else f"{image.get('Os') or 'linux'}/{arch.lower()}"
    if wanted is not None and wanted != name:
        return f"the image is for {shown(name)}, not {shown(wanted)} as its cell says; build it again"
    machine = uname(arch)
    return Placement(name, machine, host_machine, machine != host_machine)


def gpu_refusal(image: str, placement: Placement) -> str | None:
    """Why GPUs cannot be asked for this image on this engine (an emulated run), or None."""
    if not placement.emulated:
        return None
    return EMULATED_GPU.format(
        image=image, platform=placement.platform, host=placement.host_machine, machine=placement.machine
    )
