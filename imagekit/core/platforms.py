"""The platforms an image is built for: one owner for their names in every vocabulary.

A platform has four spellings and each consumer wants another: the matrix and the engine's
``--platform`` say ``linux/arm64``; image configs, OCI index entries and Kubernetes'
``kubernetes.io/arch`` label say ``arm64``; ``uname -m``, Python's ``platform.machine()`` and
wheel tags (``manylinux_2_28_aarch64``) say ``aarch64``; cell ids and per-platform tags carry a
short suffix (``-arm64``). They are written here once, as data.

``linux/amd64`` is the default: a matrix without a platform means what it meant before the axis
existed, and its cells keep their ids, tags and input digests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PlatformName = Literal["linux/amd64", "linux/arm64"]


@dataclass(frozen=True)
class Platform:
    name: PlatformName  # what the matrix and the engine say
    arch: str  # GOARCH: image config, OCI index, kubernetes.io/arch
    machine: str  # uname -m, platform.machine(), the wheel tag's architecture
    suffix: str  # appended to the ids and per-platform tags of a non-default platform

    @property
    def os(self) -> str:
        return self.name.partition("/")[0]

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT


DEFAULT: PlatformName = "linux/amd64"
PLATFORMS: dict[str, Platform] = {
    "linux/amd64": Platform("linux/amd64", "amd64", "x86_64", ""),
    "linux/arm64": Platform("linux/arm64", "arm64", "aarch64", "-arm64"),
}
NAMES: tuple[PlatformName, ...] = ("linux/amd64", "linux/arm64")
MACHINES = tuple(sorted({p.machine for p in PLATFORMS.values()}))  # uname -m: aarch64, x86_64
_BY_MACHINE = {p.machine: p for p in PLATFORMS.values()} | {p.arch: p for p in PLATFORMS.values()}


def get(name: str) -> Platform:
    """The platform called ``name`` (the schema admits only known names)."""
    return PLATFORMS[name]


def of_machine(machine: str) -> Platform | None:
    """The platform whose CPU ``uname -m`` (or an engine's ``Architecture``) names, if known."""
    return _BY_MACHINE.get(machine.lower())
