"""Compatibility knowledge: which torch x CUDA x Python x base combinations can exist.

The facts live in ``imagekit/data/compat.yaml``; this module only types them and answers
questions. Each ``refusal_*`` function returns ``None`` when a combination can exist, or the
reason (a sentence a person can act on) when it cannot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml


def version_key(version: str) -> tuple[int, ...]:
    """Numeric sort key of a dotted version (``"12.10" > "12.9"``); stops at the first non-digit."""
    parts: list[int] = []
    for piece in version.split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


def minor_of(version: str) -> str:
    """``"2.1.2" -> "2.1"``, ``"12.1.1" -> "12.1"``, ``"2.1.0a0+32f93b1" -> "2.1"``."""
    key = version_key(version)
    return ".".join(str(n) for n in key[:2])


def cuda_variant(cuda: str) -> str:
    """The wheel variant of a CUDA minor: ``"12.1" -> "cu121"``; ``"cpu"`` stays ``"cpu"``."""
    if cuda == "cpu":
        return "cpu"
    return "cu" + "".join(str(n) for n in version_key(cuda)[:2])


@dataclass(frozen=True)
class TorchPatch:
    torch: str
    torchvision: str
    torchaudio: str


@dataclass(frozen=True)
class TorchRelease:
    minor: str
    variants: tuple[str, ...]
    pypi_default: str
    cudnn_major: int
    python_min: str
    python_max: str
    patches: tuple[TorchPatch, ...]
    numpy: str | None  # a cap for the NumPy its wheels were compiled against ("<2"), if any

    @property
    def latest(self) -> TorchPatch:
        return max(self.patches, key=lambda p: version_key(p.torch))

    def patch(self, version: str) -> TorchPatch | None:
        for candidate in self.patches:
            if candidate.torch == version:
                return candidate
        return None

    def supports_python(self, python: str) -> bool:
        key = version_key(python)[:2]
        return version_key(self.python_min) <= key <= version_key(self.python_max)

    def cuda_minors(self) -> tuple[str, ...]:
        """The CUDA minors this release has wheels for, as ``"11.8"`` strings."""
        out = []
        for variant in self.variants:
            digits = variant.removeprefix("cu")
            out.append(f"{digits[:-1]}.{digits[-1]}")
        return tuple(out)


@dataclass(frozen=True)
class CudaRelease:
    minor: str
    image_version: str  # the nvidia/cuda tag version serving this minor, e.g. 12.1.1
    driver_min: str  # driver the toolkit shipped with (full compatibility)
    driver_minor_floor: str  # floor under minor-version compatibility
    checked: bool


@dataclass(frozen=True)
class Stack:
    """A base image that brings its own PyTorch build (NGC): a fixed matrix row."""

    name: str
    image: str
    torch: str
    cuda: str
    cudnn: str
    nccl: str
    cublas: str
    python: str
    os: str
    require_cuda: str
    flavours: tuple[str, ...]


@dataclass(frozen=True)
class OperatingSystem:
    name: str
    pythons: tuple[str, ...]
    apt_archives: tuple[tuple[str, str], ...]  # (archive URL, what follows the mirror URL)


@dataclass(frozen=True)
class Compat:
    torch: Mapping[str, TorchRelease]
    cuda: Mapping[str, CudaRelease]
    plain_cudnn_from: str
    stacks: Mapping[str, Stack]
    operating_systems: Mapping[str, OperatingSystem]

    # -- lookups ---------------------------------------------------------------------------

    def torch_release(self, version: str) -> TorchRelease | None:
        return self.torch.get(minor_of(version))

    def newest_torch(self) -> str:
        return max(self.torch, key=version_key)

    def cuda_release(self, cuda: str) -> CudaRelease | None:
        return self.cuda.get(minor_of(cuda))

    def resolve_torch(self, requested: str) -> str:
        """``"2.1"`` means the latest patch of 2.1; a full version is kept as written."""
        release = self.torch_release(requested)
        if release is not None and requested == release.minor:
            return release.latest.torch
        return requested

    def cudnn_tag(self, cuda: str, cudnn_major: int) -> str:
        """The cuDNN part of an nvidia/cuda tag, with its trailing dash: ``cudnn8-`` / ``cudnn-``."""
        if version_key(cuda) >= version_key(self.plain_cudnn_from):
            return "cudnn-"
        return f"cudnn{cudnn_major}-"

    # -- refusals ----------------------------------------------------------------------------

    def refusal_torch_cuda(self, torch: str, cuda: str) -> str | None:
        """Why torch ``torch`` has no wheel for ``cuda`` (None: it has one, or we do not know)."""
        release = self.torch_release(torch)
        if release is None:
            return None  # unknown release: handled by the allow_unknown rule
        variant = cuda_variant(cuda)
        if variant == "cpu" or variant in release.variants:
            return None
        available = ", ".join(release.cuda_minors())
        return (
            f"torch {release.minor} has no CUDA {cuda} wheel (its wheels: CUDA {available});"
            " pick one of those or another torch"
        )

    def refusal_python(self, torch: str, python: str) -> str | None:
        release = self.torch_release(torch)
        if release is None or release.supports_python(python):
            return None
        return (
            f"torch {release.minor} publishes wheels for Python {release.python_min} to"
            f" {release.python_max}, not {python}"
        )

    def refusal_os_python(self, os_name: str, python: str) -> str | None:
        system = self.operating_systems.get(os_name)
        if system is None or python in system.pythons:
            return None
        return (
            f"{os_name}'s packages carry Python {', '.join(system.pythons)}, not {python};"
            " pick one of those or a base that brings its own Python"
        )


def _require(mapping: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in mapping:
        raise KeyError(f"compat data: {where} lacks {key!r}")
    return mapping[key]


def parse_compat(raw: Mapping[str, Any]) -> Compat:
    torch_section = _require(raw, "torch", "top level")
    releases: dict[str, TorchRelease] = {}
    for minor, entry in torch_section["releases"].items():
        patches = tuple(
            TorchPatch(torch=torch, torchvision=pair[0], torchaudio=pair[1])
            for torch, pair in entry["patches"].items()
        )
        releases[minor] = TorchRelease(
            minor=minor,
            variants=tuple(entry["variants"]),
            pypi_default=entry["pypi_default"],
            cudnn_major=int(entry["cudnn_major"]),
            python_min=entry["python"][0],
            python_max=entry["python"][1],
            patches=patches,
            numpy=entry.get("numpy"),
        )
    cuda = {
        minor: CudaRelease(
            minor=minor,
            image_version=entry["image"],
            driver_min=entry["driver"],
            driver_minor_floor=entry["minor_floor"],
            checked=bool(entry.get("checked", True)),
        )
        for minor, entry in raw["cuda"]["releases"].items()
    }
    stacks = {
        name: Stack(
            name=name,
            image=entry["image"],
            torch=entry["torch"],
            cuda=entry["cuda"],
            cudnn=entry["cudnn"],
            nccl=entry["nccl"],
            cublas=entry["cublas"],
            python=entry["python"],
            os=entry["os"],
            require_cuda=entry["require_cuda"],
            flavours=tuple(entry["flavours"]),
        )
        for name, entry in raw["stacks"].items()
    }
    systems = {
        name: OperatingSystem(
            name=name,
            pythons=tuple(entry["python"]),
            # longest first: debian-security must be rewritten before its prefix debian
            apt_archives=tuple(sorted(entry["apt_archives"].items(), key=lambda kv: -len(kv[0]))),
        )
        for name, entry in raw["operating_systems"].items()
        if name != "source"
    }
    return Compat(
        torch=releases,
        cuda=cuda,
        plain_cudnn_from=raw["nvidia_cuda_image"]["plain_cudnn_from"],
        stacks=stacks,
        operating_systems=systems,
    )


@cache
def load_compat() -> Compat:
    """The packaged compatibility data (read once per process)."""
    text = resources.files("imagekit.data").joinpath("compat.yaml").read_text(encoding="utf-8")
    return parse_compat(yaml.safe_load(text))
