"""Compatibility knowledge as typed records: the facts of ``imagekit/data/compat.yaml``.

This module only types the facts and answers lookups; the rules that refuse combinations which
cannot exist are ``imagekit.rules``. Facts are data, refreshed from the registries by
``scripts/refresh-compat.py`` (cibuildwheel keeps its build-platforms table the same way).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from typing import Any

import yaml

from imagekit.versions import minor_of, variant_cuda, version_key


@dataclass(frozen=True)
class TorchPatch:
    """A torch patch release and the companions released with it (None: there is none)."""

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
        return tuple(variant_cuda(v) for v in self.variants if v != "cpu")


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
    glibc: str | None = None  # its libc6 version: the manylinux_2_X wheels it can install


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

    @cached_property
    def newest(self) -> str:
        return max(self.torch, key=version_key)

    def newest_torch(self) -> str:
        """The newest release (minor) the table knows."""
        return self.newest

    def newest_patch(self) -> str:
        """The newest torch version the table knows: what "newer than the table" is measured by."""
        return self.torch[self.newest_torch()].latest.torch

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
            glibc=str(entry["glibc"]) if entry.get("glibc") else None,
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
