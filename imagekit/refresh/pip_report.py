"""What both refresh tools read alike in pip's dry-run reports (``pip install --dry-run --report``):
the error they end a read with, and the CUDA runtime a resolved torch installs, by ONE list of its
project names.

The runtime is how a report says which CUDA build torch is: the CUDA minor of its runtime wheel
(``nvidia-cuda-runtime-cu12 12.4.127``: cu124). NVIDIA has spelt that wheel three ways; the two
refresh tools each kept a list of their own, and the lists differed (the CUDA wheel refresh lacked
``-cu13``, the compat refresh took any ``-cuNNN``, NVIDIA's warning placeholders among them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from imagekit.core.errors import ExitCode, ImagekitError
from imagekit.core.text import shown


class RefreshError(ImagekitError):
    """What a refresh cannot read or work around (a report missing or of another build, an index
    that does not answer): one line; the compat refresh ends with it (exit 2), the CUDA wheel
    refresh names the build and keeps its entry."""

    exit_code = ExitCode.INVALID_INPUT


# The CUDA runtime's wheel, as PyPI names it, and the CUDA major its name states (None: any, the
# name is the same for every major from 13 on). Not the project names NVIDIA keeps only to refuse an
# install: nvidia-cuda-runtime-cu110 ... -cu116 (0.0.1.dev5, "a fake package to warn the user").
CUDA_RUNTIME_PROJECTS: Mapping[str, int | None] = {
    "nvidia-cuda-runtime-cu11": 11,  # CUDA 11.x: torch's cu117 and cu118 builds
    "nvidia-cuda-runtime-cu12": 12,  # CUDA 12.x: cu121 ... cu129
    # CUDA 13 before NVIDIA dropped the suffix; on PyPI now a 0.0.1 placeholder pointing to the
    # plain name, which the major check below refuses as a runtime
    "nvidia-cuda-runtime-cu13": 13,
    "nvidia-cuda-runtime": None,  # CUDA 13.x on (cuda-toolkit[cudart]==13.0.2 -> 13.0.96)
}


def is_cuda_runtime(name: str) -> bool:
    """Whether ``name`` (any spelling: ``nvidia_cuda_runtime_cu12``) is the CUDA runtime's wheel."""
    return canonicalize_name(name) in CUDA_RUNTIME_PROJECTS


def cuda_runtime(installs: Iterable[tuple[str, str]]) -> tuple[str, str] | None:
    """The CUDA runtime among a report's installs, ``(project, version)`` pairs: its canonical
    project name and version; None where torch pulls none (a CPU build). A runtime whose version
    is not of the CUDA major its name states, or names no CUDA minor, is a RefreshError."""
    for project, version in installs:
        name = canonicalize_name(project)
        if name not in CUDA_RUNTIME_PROJECTS:
            continue
        try:
            release = Version(version).release
        except InvalidVersion:
            raise RefreshError(f"{name} {shown(version)} is no version (PEP 440)") from None
        major = CUDA_RUNTIME_PROJECTS[name]
        if major is not None and release[0] != major:
            raise RefreshError(
                f"{name} {shown(version)} is no CUDA {major} runtime (NVIDIA's placeholder?):"
                " the report does not say which CUDA build torch is"
            )
        if len(release) < 2:
            raise RefreshError(f"{name} {shown(version)} names no CUDA minor version")
        return name, version
    return None


def runtime_variant(version: str) -> str:
    """The wheel variant of a CUDA runtime version ``cuda_runtime`` gave: "12.4.127" -> "cu124"."""
    release = Version(version).release
    return f"cu{release[0]}{release[1]}"
