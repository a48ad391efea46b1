"""The rules that refuse combinations which cannot exist, in order, each small and named.

A rule reads one ``Request`` (a combination with its versions resolved as far as the table
allows) and the compatibility facts, and returns the reason a person can act on when the
combination cannot exist, or ``None``. ``first_refusal`` runs them in order: the first reason
wins, so each rule may assume the ones before it passed. The matrix module only expands and
assembles cells; every refusal it reports comes from here.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from imagekit.core import naming, platforms
from imagekit.core.errors import InputError
from imagekit.core.platforms import PlatformName
from imagekit.core.versions import cuda_variant, minor_of, project_key, variant_cuda, version_key
from imagekit.facts.compat import Compat, Stack, TorchRelease
from imagekit.plan.schema import BuildSettings, Matrix

TorchSource = Literal["index", "pypi", "wheelhouse"]
REFRESH_COMMAND = "scripts/refresh-compat.py --write"


@dataclass(frozen=True)
class Request:
    """What one combination asks for, after defaults and before any cell exists."""

    base: str  # the key in `bases`
    torch: str  # "2.1" already resolved to its latest patch; a stack's own version for a stack
    cuda: str  # CUDA minor ("12.1") or "cpu"
    python: str
    flavour: str
    allow_unknown: bool = False
    cuda_written: str | None = None  # the cuda value as written ("12.1.1"), when one was given
    cuda_full: str | None = None  # an explicit cuda_full
    carries_cuda: bool = False  # the base image has a CUDA toolkit
    nvcc_from_wheels: bool = False  # the base's `nvcc: wheels`: a devel cell's compiler from NVIDIA's wheels
    base_python: str | None = None  # the Python the base brings, if it brings one
    base_flavours: tuple[str, ...] | None = None
    os: str = ""
    torch_source: TorchSource = "index"
    torchvision: str | None = None  # a companion version asked for explicitly ("none": skip it)
    torchaudio: str | None = None
    # fixed stacks (NGC): what the combination asked of the stack, unresolved
    stack: Stack | None = None
    image: str = ""
    asked_torch: str | None = None
    asked_cuda: str | None = None
    asked_python: str | None = None
    pip_packages: tuple[str, ...] = ()
    wheelhouse: bool = False
    frontend: str = "none"
    platform: PlatformName = platforms.DEFAULT

    def with_image(self, image: str) -> Request:
        """This request once its base image is resolved (what ``IMAGE_RULES`` read): a copy with
        ``image`` set. ``dataclasses.replace`` gives the same at three times the cost (it walks
        every field's metadata), which planning pays per cell."""
        resolved = copy.copy(self)
        object.__setattr__(resolved, "image", image)  # a fresh copy: nothing else holds it yet
        return resolved


Rule = Callable[[Request, Compat], "str | None"]


def _release(request: Request, compat: Compat) -> TorchRelease | None:
    return compat.torch_release(request.torch)


def _known_patch(request: Request, compat: Compat) -> bool:
    release = _release(request, compat)
    return release is not None and release.patch(request.torch) is not None


# -- torch -------------------------------------------------------------------------------------------


def torch_written_in_full(request: Request, compat: Compat) -> str | None:
    """A release the table does not know has no "latest patch": it must be written in full."""
    if _known_patch(request, compat) or len(version_key(request.torch)) >= 3:
        return None
    return (
        f"torch {request.torch} is not in imagekit's table, so its latest patch is unknown;"
        f" write the full version ({request.torch}.0)"
    )


def torch_is_a_release(request: Request, compat: Compat) -> str | None:
    """An unknown minor older than the table's newest never existed (or predates the table)."""
    newest = compat.newest_torch()
    if _release(request, compat) is None and version_key(request.torch) < version_key(newest):
        return f"torch {request.torch} is not a release imagekit knows (2.0 to {newest})"
    return None


def torch_patch_exists(request: Request, compat: Compat) -> str | None:
    """A patch the table lacks of a release it knows, no newer than the newest it knows, never
    existed: allow_unknown is for releases newer than the table, not for typos in it."""
    release = _release(request, compat)
    if release is None or _known_patch(request, compat):
        return None
    newest = compat.newest_patch()
    if version_key(request.torch) > version_key(newest):
        return None
    patches = ", ".join(sorted(release.patches, key=version_key))
    return (
        f"torch {request.torch} is not a {release.minor} release (its patches: {patches}); pick one of"
        f" those. allow_unknown admits only releases newer than the table's newest ({newest})"
    )


def torch_in_table(request: Request, compat: Compat) -> str | None:
    """A version the table lacks needs allow_unknown (the escape hatch for new releases)."""
    if _known_patch(request, compat) or request.allow_unknown:
        return None
    what = "newer than" if _release(request, compat) is None else "a patch missing from"
    return (
        f"torch {request.torch} is {what} imagekit's compatibility table (newest"
        f" {compat.newest_torch()}, refreshed {compat.checked_on}); refresh it"
        f" ({REFRESH_COMMAND}) or set allow_unknown: true to build it anyway"
    )


# -- CUDA --------------------------------------------------------------------------------------------


def base_matches_accelerator(request: Request, compat: Compat) -> str | None:
    """A CUDA base carries CUDA builds. A plain base carries CPU builds, and runtime images of a
    CUDA wheel (the wheel brings CUDA's libraries, the container toolkit the driver), but no
    devel image: that needs nvcc at the cell's CUDA, which only a CUDA base has, unless the base
    takes its nvcc from NVIDIA's wheels (``nvcc_wheels_hold_nvcc``)."""
    if request.carries_cuda and request.cuda == "cpu":
        return f"base {request.base} carries CUDA; a cpu build belongs on a base without it"
    on_plain = not request.carries_cuda and not request.nvcc_from_wheels
    if on_plain and request.cuda != "cpu" and request.flavour == "devel":
        return (
            f"base {request.base} has no CUDA toolkit, and a devel image needs nvcc {request.cuda};"
            " use flavour runtime (the wheel brings CUDA's libraries), a CUDA devel base, or"
            " `nvcc: wheels` on the base (CUDA 13 and later)"
        )
    return None


# The first CUDA major whose PyPI compiler wheel holds nvcc itself: nvidia-cuda-nvcc-cu12 12.0.76 to
# 12.9.86 hold ptxas, libnvvm and libdevice only (their file lists, read 2026-12-03), while
# nvidia-cuda-nvcc 13.x holds bin/nvcc, cudafe++, fatbinary, nvlink and ptxas, with cicc and the
# crt headers in nvidia-nvvm and nvidia-cuda-crt of the same release (cuda-toolkit's extras).
NVCC_WHEELS_FROM_CUDA = 13


def nvcc_wheels_hold_nvcc(request: Request, compat: Compat) -> str | None:
    """`nvcc: wheels` gives a devel cell the compiler of the CUDA release torch pins, from NVIDIA's
    PyPI wheels; no such wheel holds nvcc before CUDA 13."""
    if not request.nvcc_from_wheels or request.flavour != "devel" or request.cuda == "cpu":
        return None
    if int(request.cuda.split(".", maxsplit=1)[0]) >= NVCC_WHEELS_FROM_CUDA:
        known = compat.cuda_release(request.cuda)
        if known is None or known.toolkit is not None:
            return None
        return (
            f"bases.{request.base}.nvcc: wheels: PyPI has no cuda-toolkit {request.cuda} release (the"
            f" metapackage whose extras hold the compiler); use `nvcc: base` on a -devel base"
        )
    return (
        f"bases.{request.base}.nvcc: wheels: NVIDIA's CUDA {request.cuda.split('.')[0]} compiler wheels"
        " (nvidia-cuda-nvcc-cu12) hold ptxas and libnvvm but no nvcc; use `nvcc: base` on a -devel base"
        f" for CUDA {request.cuda}, or a torch built for CUDA {NVCC_WHEELS_FROM_CUDA}"
    )


def torch_has_cuda_wheel(request: Request, compat: Compat) -> str | None:
    """PyTorch publishes each release for a few CUDA variants only (FACTS: wheel variants)."""
    release = _release(request, compat)
    variant = cuda_variant(request.cuda)
    if release is None or variant == "cpu" or variant in release.variants:
        return None
    available = ", ".join(release.cuda_minors())
    return (
        f"torch {release.minor} has no CUDA {request.cuda} wheel (its wheels: CUDA {available});"
        " pick one of those or another torch"
    )


def torch_has_platform_wheel(request: Request, compat: Compat) -> str | None:
    """aarch64 (Grace) wheels are their own set: PyTorch's index carries CUDA aarch64 variants for
    some releases and not others (FACTS: aarch64 wheels)."""
    release = _release(request, compat)
    if release is None or platforms.get(request.platform).is_default:
        return None
    arm = release.aarch64
    variant = cuda_variant(request.cuda)
    if arm is not None and (variant == "cpu" or variant in arm.variants):
        return None
    if arm is None:
        return f"torch {release.minor} has no aarch64 wheel imagekit knows of; build it for linux/amd64"
    cuda = [variant_cuda(v) for v in arm.variants if v != "cpu"]
    available = f"CUDA {', '.join(cuda)} and CPU" if cuda else "CPU only"
    return (
        f"torch {release.minor} has no aarch64 CUDA {request.cuda} wheel (its aarch64 wheels:"
        f" {available}); pick one of those, another torch, or linux/amd64"
    )


def pypi_serves_one_variant(request: Request, compat: Compat) -> str | None:
    """Without a torch index, torch comes from PyPI, which carries one build per release and
    platform (2.10's x86_64 wheel is cu128, its aarch64 wheel CPU only)."""
    release = _release(request, compat)
    if release is None or request.torch_source != "pypi":
        return None
    wanted = cuda_variant(request.cuda)
    on_arm = not platforms.get(request.platform).is_default
    served = (release.aarch64.pypi if release.aarch64 else None) if on_arm else release.pypi_default
    if wanted == served:
        return None
    if served is None:
        return f"PyPI has no aarch64 wheel of torch {release.minor}; set sources.pip.torch_index_url"
    machine = " aarch64" if on_arm else ""
    return (
        f"with no torch_index_url torch comes from PyPI, whose{machine} torch {release.minor} is the"
        f" {served} build, not {wanted}; set sources.pip.torch_index_url"
    )


def cuda_full_of_the_cells_cuda(request: Request, compat: Compat) -> str | None:
    """An explicit cuda_full names a toolkit of the cell's own CUDA minor."""
    if request.cuda == "cpu" or not request.cuda_full or minor_of(request.cuda_full) == request.cuda:
        return None
    return f"cuda_full {request.cuda_full} is not a CUDA {request.cuda} release"


def cuda_in_table(request: Request, compat: Compat) -> str | None:
    """A CUDA minor the table lacks has no known base tag: it needs allow_unknown and cuda_full."""
    if request.cuda == "cpu" or request.cuda_full or compat.cuda_release(request.cuda) is not None:
        return None
    if not request.carries_cuda and request.allow_unknown:
        return None  # a plain base: the wheel brings CUDA, no nvidia/cuda tag is needed
    if request.allow_unknown:
        return f"CUDA {request.cuda} is not in the compatibility table; set cuda_full (e.g. {request.cuda}.0)"
    return (
        f"CUDA {request.cuda} is not in imagekit's compatibility table; set allow_unknown: true and cuda_full"
    )


def cuda_base_has_a_tag(request: Request, compat: Compat) -> str | None:
    """A CUDA base is nvidia/cuda's tag of the cell's minor: a minor the table knows without one
    (CUDA 13.5: Docker Hub was not read for it) needs cuda_full, the tag the person has checked. A
    base without CUDA needs none: the wheels bring CUDA."""
    if request.cuda == "cpu" or not request.carries_cuda or request.cuda_full:
        return None
    known = compat.cuda_release(request.cuda)
    if known is None or known.image_version is not None:
        return None
    return (
        f"imagekit knows no nvidia/cuda tag of CUDA {request.cuda} (its table was not read from Docker"
        f" Hub); set cuda_full (e.g. {known.toolkit or request.cuda + '.0'}) to build on a tag you"
        " have checked, or use a base without CUDA (the wheels bring it)"
    )


def cuda_patch_is_the_base_toolkit(request: Request, compat: Compat) -> str | None:
    """A CUDA value written with its patch (12.1.9) names the toolkit of the base: it must be the
    one the cell is built on (the table's nvidia/cuda version, or cuda_full), never silently
    another patch of the same minor."""
    written = request.cuda_written
    if request.cuda == "cpu" or written is None or len(version_key(written)) < 3:
        return None
    known = compat.cuda_release(request.cuda)
    built_on = request.cuda_full or (known.image_version if known else None)
    if built_on is None or version_key(written) == version_key(built_on):
        return None
    if request.cuda_full:
        return f"cuda {written} and cuda_full {request.cuda_full} name two toolkits; write one of them"
    return (
        f"CUDA {written} is not the toolkit imagekit builds CUDA {request.cuda} on (nvidia/cuda"
        f" {built_on}); write cuda: {request.cuda}, or set cuda_full: {written} to build on that"
        " nvidia/cuda tag"
    )


# -- extra packages ----------------------------------------------------------------------------------

_TORCH_PACKAGES = frozenset({"torch", "torchvision", "torchaudio"})
_PROJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def pip_packages_leave_torch_alone(request: Request, compat: Compat) -> str | None:
    """torch, torchvision and torchaudio come from the axes, pinned to the cell's build: an extra
    requirement naming one (in any spelling pip accepts) fights that pin and fails only at build
    time, after the download."""
    for requirement in request.pip_packages:
        name = _PROJECT_NAME.match(requirement)
        if name and project_key(name.group(0)) in _TORCH_PACKAGES:
            return (
                f"pip_packages lists {requirement}: torch, torchvision and torchaudio come from the"
                " matrix (the torch axis, the torchvision and torchaudio keys), pinned to the cell's"
                " build; remove it from pip_packages"
            )
    return None


# -- Python and flavour ---------------------------------------------------------------------------------


def base_brings_that_python(request: Request, compat: Compat) -> str | None:
    """A base that brings its own Python serves only that one."""
    if request.base_python is None or request.python == request.base_python:
        return None
    return f"base {request.base} brings Python {request.base_python}, not {request.python}"


def os_packages_python(request: Request, compat: Compat) -> str | None:
    """Where imagekit installs Python, the OS's package archive must carry that version."""
    system = compat.operating_systems.get(request.os)
    if request.base_python is not None or system is None or request.python in system.pythons:
        return None
    return (
        f"{request.os}'s packages carry Python {', '.join(system.pythons)}, not {request.python};"
        " pick one of those or a base that brings its own Python"
    )


def torch_supports_python(request: Request, compat: Compat) -> str | None:
    """Each torch release publishes wheels for a range of CPython versions."""
    release = _release(request, compat)
    if release is None or release.supports_python(request.python):
        return None
    return (
        f"torch {release.minor} publishes wheels for Python {release.python_min} to"
        f" {release.python_max}, not {request.python}"
    )


def companions_pair(request: Request, compat: Compat) -> str | None:
    """torchvision and torchaudio are built against one torch release: another pairing breaks at
    import (undefined symbols) or is refused by pip. "none" always passes (the cell skips it)."""
    release = _release(request, compat)
    patch = release.patch(request.torch) if release else None
    if release is None or patch is None:
        return None  # unknown torch: the cell names its companions itself
    for name, asked, paired in (
        ("torchvision", request.torchvision, patch.torchvision),
        ("torchaudio", request.torchaudio, patch.torchaudio),
    ):
        if asked in (None, "none", paired):
            continue
        if paired is None:
            return (
                f"torch {request.torch} has no {name} release to pair with ({name} {asked} was built for"
                f" another torch); set {name}: none"
            )
        belongs = release.companion_of(name, asked)
        built_for = f"; {name} {asked} pairs with torch {belongs}" if belongs else ""
        return (
            f"{name} {asked} does not pair with torch {request.torch}: its {name} is {paired}{built_for};"
            f" leave {name} unset (or write {paired})"
        )
    return None


def base_serves_flavour(request: Request, compat: Compat) -> str | None:
    if request.base_flavours is None or request.flavour in request.base_flavours:
        return None
    return f"base {request.base} serves only {', '.join(request.base_flavours)}"


# -- fixed stacks (NGC) ------------------------------------------------------------------------------


def _stack(request: Request) -> Stack:
    assert request.stack is not None  # the stack rules run on stack requests only
    return request.stack


def _unless(possible: bool, request: Request, why: str) -> str | None:
    """None when ``possible``, else ``why`` after what the fixed stack is."""
    if possible:
        return None
    stack = _stack(request)
    fixed = (
        f"{request.image} is a fixed stack (torch {stack.torch}, CUDA {stack.cuda}, Python {stack.python})"
    )
    return f"{fixed}: {why}"


def stack_keeps_its_cuda(request: Request, compat: Compat) -> str | None:
    """A stack is its own row: it never crosses the CUDA axis."""
    cuda = _stack(request).cuda
    return _unless(
        request.asked_cuda in (None, minor_of(cuda), cuda),
        request,
        f"it never crosses the CUDA axis, so CUDA {request.asked_cuda} cannot exist; give it its own row"
        " through include",
    )


def stack_keeps_its_torch(request: Request, compat: Compat) -> str | None:
    """Installing another torch over a stack silently replaces the vendor's build."""
    return _unless(
        request.asked_torch in (None, _stack(request).torch),
        request,
        f"installing torch {request.asked_torch} would replace NVIDIA's build",
    )


def stack_keeps_its_python(request: Request, compat: Compat) -> str | None:
    """A stack brings one Python; there is no other to install torch into."""
    possible = request.asked_python in (None, _stack(request).python)
    return _unless(possible, request, f"it has no Python {request.asked_python}")


def stack_extras_from_an_index(request: Request, compat: Compat) -> str | None:
    """A stack's extra packages go into its own Python, which a wheelhouse stage cannot reach."""
    return _unless(
        not (request.pip_packages and request.wheelhouse),
        request,
        "its extra pip packages go into the base's own Python, which a wheelhouse build stage cannot"
        " reach; install them from an index for this row",
    )


def stack_has_no_frontend(request: Request, compat: Compat) -> str | None:
    """A front end installs into the cell's venv under the torch pins; a stack's Python is the
    vendor's own environment (NGC brings its own JupyterLab), which imagekit does not change."""
    return _unless(
        request.frontend == "none",
        request,
        f"imagekit adds a {request.frontend} front end only to images with its own venv; start the"
        " stack's own tools, or use a wheel cell",
    )


def stack_serves_flavour(request: Request, compat: Compat) -> str | None:
    """A stack comes in the flavours its vendor publishes."""
    flavours = _stack(request).flavours
    why = f"it has no {request.flavour} flavour (only {', '.join(flavours)})"
    return _unless(request.flavour in flavours, request, why)


# -- the resolved base image ------------------------------------------------------------------------


def one_cudnn_in_the_image(request: Request, compat: Compat) -> str | None:
    """torch's wheel brings its own cuDNN; an nvidia/cuda `cudnn` base brings another. Two majors
    (or minors) in one image load side by side and crash, and the image carries cuDNN twice:
    such a base is kept only where its cuDNN is the wheel's, at the same major.minor."""
    if request.cuda == "cpu" or "cudnn" not in request.image:
        return None
    repository, tag = naming.split_reference(request.image)
    if "cudnn" not in (tag or "") or not repository.endswith("nvidia/cuda"):
        return None
    release = _release(request, compat)
    libraries = release.libraries.get(cuda_variant(request.cuda)) if release else None
    base_cudnn = compat.base_cudnn.get(minor_of(request.cuda))
    if libraries is None or base_cudnn is None:
        return None  # one of the two cuDNN versions is not known: the in-image check compares them
    if version_key(libraries.cudnn)[:2] == version_key(base_cudnn)[:2]:
        return None
    return (
        f"{request.image} carries cuDNN {base_cudnn} and torch {request.torch}'s {cuda_variant(request.cuda)}"
        f" wheel brings cuDNN {libraries.cudnn}: two cuDNN in one image; use the plain"
        f" nvidia/cuda:{{cuda_full}}-{{image_flavour}} base (the wheel brings its own cuDNN)"
    )


# -- platforms of the base image ----------------------------------------------------------------------


def nvidia_cuda_serves_platform(request: Request, compat: Compat) -> str | None:
    """nvidia/cuda publishes each tag for the platforms its table lists."""
    on_nvidia_cuda = request.carries_cuda and request.cuda != "cpu" and "nvidia/cuda" in request.image
    known = compat.cuda_release(request.cuda) if on_nvidia_cuda else None
    if known is None or request.platform in known.platforms:
        return None
    served = ", ".join(known.platforms)
    return f"nvidia/cuda publishes CUDA {request.cuda} for {served}, not {request.platform}"


def stack_serves_platform(request: Request, compat: Compat) -> str | None:
    """A stack is published for the platforms its vendor builds."""
    served = _stack(request).platforms
    why = f"it is published for {', '.join(served)}, not {request.platform}"
    return _unless(request.platform in served, request, why)


# -- build settings: the whole matrix with the builder it is built with -----------------------------
# Checked where the settings take effect (the renderer, with any --builder/--compression override
# applied), not at planning: the matrix may say classic and the command line buildkit.

BuildRule = Callable[[Matrix, BuildSettings], "str | None"]


def credentials_need_buildkit(matrix: Matrix, build: BuildSettings) -> str | None:
    if matrix.sources.pip.credentials and not build.on_buildkit:
        return (
            "sources.pip.credentials: index credentials need the BuildKit builder (build.builder:"
            " buildkit or --builder buildkit): the classic builder would keep them in a layer"
        )
    return None


def zstd_needs_buildkit(matrix: Matrix, build: BuildSettings) -> str | None:
    if build.compression == "zstd" and not build.on_buildkit:
        return (
            "build.compression: zstd applies to the BuildKit builder's staged images; set"
            " build.builder: buildkit (or --builder buildkit), or compression: gzip"
        )
    return None


BUILD_RULES: tuple[BuildRule, ...] = (credentials_need_buildkit, zstd_needs_buildkit)


def check_build_settings(matrix: Matrix, build: BuildSettings, source: str) -> None:
    """Raise the first ``BUILD_RULES`` refusal as one InputError line naming ``source``."""
    for rule in BUILD_RULES:
        reason = rule(matrix, build)
        if reason is not None:
            raise InputError(f"{source}: {reason}")


# -- the order ----------------------------------------------------------------------------------------

WHEEL_RULES: tuple[Rule, ...] = (
    torch_written_in_full,
    torch_is_a_release,
    torch_patch_exists,
    torch_in_table,
    pip_packages_leave_torch_alone,
    base_matches_accelerator,
    nvcc_wheels_hold_nvcc,
    torch_has_cuda_wheel,
    torch_has_platform_wheel,
    pypi_serves_one_variant,
    nvidia_cuda_serves_platform,
    cuda_full_of_the_cells_cuda,
    cuda_in_table,
    cuda_base_has_a_tag,
    cuda_patch_is_the_base_toolkit,
    base_brings_that_python,
    os_packages_python,
    torch_supports_python,
    companions_pair,
    base_serves_flavour,
)

STACK_RULES: tuple[Rule, ...] = (
    stack_keeps_its_cuda,
    stack_keeps_its_torch,
    pip_packages_leave_torch_alone,
    stack_keeps_its_python,
    stack_extras_from_an_index,
    stack_has_no_frontend,
    stack_serves_flavour,
    stack_serves_platform,
)


# Run once the base image is resolved (its tag says which cuDNN it carries).
IMAGE_RULES: tuple[Rule, ...] = (one_cudnn_in_the_image,)


def first_refusal(rules: tuple[Rule, ...], request: Request, compat: Compat) -> str | None:
    """The first rule's reason that ``request`` cannot exist, or None when every rule passes."""
    for rule in rules:
        reason = rule(request, compat)
        if reason is not None:
            return reason
    return None
