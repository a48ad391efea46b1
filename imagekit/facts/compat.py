"""Compatibility knowledge as typed records: the facts of ``imagekit/data/compat.yaml``.

This module only types the facts and answers lookups; the rules that refuse combinations which
cannot exist are ``imagekit.plan.rules``. Facts are data, refreshed from the registries by
``python -m imagekit.refresh.compat`` (cibuildwheel keeps its build-platforms table the same way). The
file is validated when it is read: a malformed entry (a hand edit, a bad refresh) fails loudly
instead of turning into a wrong refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from imagekit.core.platforms import PlatformName
from imagekit.core.versions import minor_of, variant_cuda, version_key

Version = Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?(\+[a-z0-9.]+)?$")]
Variant = Annotated[str, StringConstraints(pattern=r"^(cpu|cu[0-9]{3})$")]


class _Facts(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


@dataclass(frozen=True)
class TorchPatch:
    """A torch patch release and the companions released with it (None: there is none)."""

    torch: str
    torchvision: str | None
    torchaudio: str | None


class Libraries(_Facts):
    """What one variant's wheel pins: the CUDA libraries torch brings itself (None: not read)."""

    cudnn: Version
    nccl: Version | None = None
    cudart: Version | None = None


class Aarch64Wheels(_Facts):
    """A release's wheels for linux/arm64 (Grace: GH200, GB200), which differ from x86_64's."""

    # the build PyPI's manylinux aarch64 wheel is in effect ("cpu" where every CUDA requirement is
    # gated to x86_64, as in 2.10.0); None: PyPI has no aarch64 wheel of this release
    pypi: Variant | None
    variants: tuple[Variant, ...]  # the variants PyTorch's index publishes for aarch64
    checked: bool = True  # False: `variants` were not read from the index


class TorchRelease(_Facts):
    minor: str
    variants: tuple[Variant, ...]  # the CUDA variants PyTorch's index publishes
    pypi_default: Variant  # the variant PyPI's wheel is built for
    cudnn_major: int
    python: tuple[Version, Version]  # oldest and newest CPython with wheels
    numpy: str | None = None  # a cap for the NumPy its wheels were compiled against ("<2"), if any
    libraries: dict[Variant, Libraries] = Field(default_factory=dict)
    patches: dict[Version, tuple[Version | None, Version | None]]  # -> (torchvision, torchaudio)
    aarch64: Aarch64Wheels | None = None  # None: no aarch64 wheel is known
    checked: bool = True

    @property
    def python_min(self) -> str:
        return self.python[0]

    @property
    def python_max(self) -> str:
        return self.python[1]

    @cached_property
    def latest(self) -> TorchPatch:
        newest = max(self.patches, key=version_key)
        return self.patch(newest)  # type: ignore[return-value]  # a key of patches

    @cached_property
    def _patch_records(self) -> dict[str, TorchPatch]:
        # made once: a plan asks every cell's rules for the same few patches
        return {version: TorchPatch(version, *pair) for version, pair in self.patches.items()}

    def patch(self, version: str) -> TorchPatch | None:
        return self._patch_records.get(version)

    @cached_property
    def _python_keys(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return version_key(self.python_min), version_key(self.python_max)

    def supports_python(self, python: str) -> bool:
        oldest, newest = self._python_keys  # asked for every cell of a plan
        return oldest <= version_key(python)[:2] <= newest

    def cuda_minors(self) -> tuple[str, ...]:
        """The CUDA minors this release has wheels for, as ``"11.8"`` strings."""
        return tuple(variant_cuda(v) for v in self.variants if v != "cpu")

    def companion_of(self, name: str, version: str) -> str | None:
        """The torch patch whose companion ``name`` (torchvision/torchaudio) is ``version``."""
        index = 0 if name == "torchvision" else 1
        return next((torch for torch, pair in self.patches.items() if pair[index] == version), None)


class CudaRelease(_Facts):
    minor: str
    # the nvidia/cuda tag version serving this minor; None: no tag was read (a CUDA base needs cuda_full)
    image_version: Version | None = Field(alias="image")
    # driver the toolkit shipped with (full compatibility); None: NVIDIA's row was not read
    driver_min: Version | None = Field(alias="driver")
    driver_minor_floor: Version = Field(alias="minor_floor")  # floor under minor-version compatibility
    # toolkit patch (13.2.2) -> the driver it shipped with, for patches newer than `image`
    patch_drivers: dict[Version, Version] = Field(default_factory=dict)
    # the newest cuda-toolkit metapackage of this minor on PyPI (CUDA 13 on); None: none there
    toolkit: Version | None = None
    # the platforms nvidia/cuda publishes this minor's tags for
    platforms: tuple[PlatformName, ...] = ("linux/amd64", "linux/arm64")
    checked: bool = True

    @property
    def newest_driver(self) -> str | None:
        """The full-compatibility driver of the newest toolkit patch of this minor that is known
        (None: none is; the minor-version floor still holds)."""
        known = [d for d in (self.driver_min, *self.patch_drivers.values()) if d is not None]
        return max(known, key=version_key) if known else None


class Stack(_Facts):
    """A base image that brings its own PyTorch build (NGC): a fixed matrix row."""

    name: str
    image: str
    torch: Version
    cuda: Version
    cudnn: Version
    nccl: Version
    cublas: Version
    python: Version
    os: str
    require_cuda: str | None  # the image's NVIDIA_REQUIRE_CUDA; None: not read
    flavours: tuple[str, ...]
    platforms: tuple[PlatformName, ...] = ("linux/amd64",)  # the platforms the image is published for


class OperatingSystem(_Facts):
    name: str
    pythons: tuple[Version, ...] = Field(alias="python")
    apt_archives: tuple[tuple[str, str], ...]  # (archive URL, what follows the mirror URL)
    glibc: str | None = None  # its libc6 version: the manylinux_2_X wheels it can install


@dataclass(frozen=True)
class Compat:
    torch: Mapping[str, TorchRelease]
    cuda: Mapping[str, CudaRelease]
    plain_cudnn_from: str
    base_cudnn: Mapping[str, str]  # CUDA minor -> the cuDNN its nvidia/cuda `cudnn` images carry
    stacks: Mapping[str, Stack]
    operating_systems: Mapping[str, OperatingSystem]
    checked_on: str  # when the torch table was last refreshed from the registries

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
        return self.torch[self.newest].latest.torch

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


def parse_compat(raw: Mapping[str, Any]) -> Compat:
    """The data file's mapping as validated records (a malformed entry raises ValidationError)."""
    torch = raw["torch"]
    systems = {name: entry for name, entry in raw["operating_systems"].items() if name != "source"}
    return Compat(
        torch={m: TorchRelease(minor=m, **entry) for m, entry in torch["releases"].items()},
        cuda={m: CudaRelease(minor=m, **entry) for m, entry in raw["cuda"]["releases"].items()},
        plain_cudnn_from=str(raw["nvidia_cuda_image"]["plain_cudnn_from"]),
        base_cudnn={str(k): str(v) for k, v in (raw["nvidia_cuda_image"].get("cudnn") or {}).items()},
        stacks={
            name: Stack(name=name, **{k: v for k, v in entry.items() if k != "source"})
            for name, entry in raw["stacks"].items()
        },
        operating_systems={
            name: OperatingSystem(
                name=name,
                pythons=entry["python"],
                # longest first: debian-security must be rewritten before its prefix debian
                apt_archives=tuple(sorted(entry["apt_archives"].items(), key=lambda kv: -len(kv[0]))),
                glibc=str(entry["glibc"]) if entry.get("glibc") else None,
            )
            for name, entry in systems.items()
        },
        checked_on=str(torch.get("checked_on", "")),
    )


def read_data(name: str) -> Any:
    """One of imagekit's own data files (``imagekit/data/NAME``), parsed.

    libyaml's safe loader when PyYAML has it (the same safe tag set, ~20x faster than the pure
    Python one: 3 ms instead of 50 for compat.yaml on every `imagekit plan`); these files are
    imagekit's own, so no position or depth bound is needed (a matrix goes through yamlsource).
    """
    text = resources.files("imagekit.data").joinpath(name).read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)  # a safe loader, either way


@cache
def load_compat() -> Compat:
    """The packaged compatibility data (read once per process, when first asked for)."""
    return parse_compat(read_data("compat.yaml"))
