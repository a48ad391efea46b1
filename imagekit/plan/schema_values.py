"""The value types of ``matrix.yaml``'s schema (``imagekit.plan.schema``): checked strings, the
enumerations, and the strict base model every part of the schema is made of.

Every string that can reach a Dockerfile, an image tag, a label or a shell command is checked by a
type here that says what it is (``TorchVersion``, ``Requirement``, ``SafeText``...), once.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from imagekit.core import platforms
from imagekit.core.errors import InputError
from imagekit.core.limits import (
    NAME_CHARS,
    PACKAGE_CHARS,
    PATH_CHARS,
    VALUE_CHARS,
    VERSION_CHARS,
    VERSION_COMPONENT_DIGITS,
)
from imagekit.core.paths import check_length, relative_path_is_inside
from imagekit.core.safetypes import SECRET_WORDS, SafeString, host_port_problem, port_problem
from imagekit.core.text import printable, shown

# -- safe strings -------------------------------------------------------------------------
# The checks themselves (and the types the state files share) are ``imagekit.core.safetypes``'.

_V = VERSION_COMPONENT_DIGITS


def _version(pattern: str) -> str:
    """A version pattern whose numeric components are bounded: ``N`` stands for 1 to 9 digits."""
    return pattern.replace("N", f"[0-9]{{1,{_V}}}")


TorchVersion = Annotated[
    str,
    SafeString(
        _version(r"N\.N(\.N)?([a-z]+[0-9]*)?(\+[a-z0-9.]+)?"),
        "a torch version",
        "2.1.2",
        numeric_ok=True,
        max_length=VERSION_CHARS,
    ),
]
CudaVersion = Annotated[
    str,
    SafeString(
        _version(r"cpu|N\.N(\.N)?"),
        "a CUDA version or 'cpu'",
        "12.1",
        numeric_ok=True,
        max_length=VERSION_CHARS,
    ),
]
CudaFullVersion = Annotated[
    str,
    SafeString(
        _version(r"N\.N\.N"), "a full CUDA version", "12.1.1", numeric_ok=True, max_length=VERSION_CHARS
    ),
]
PythonVersion = Annotated[
    str, SafeString(r"3\.[0-9]{1,3}", "a Python minor version", "3.10", numeric_ok=True, max_length=8)
]
PackageVersion = Annotated[
    str,
    SafeString(
        _version(r"none|N(\.N)*([a-z]+[0-9]*)?(\+[a-z0-9.]+)?"),
        "a version or 'none'",
        "0.16.2",
        numeric_ok=True,
        max_length=VERSION_CHARS,
    ),
]
Name = Annotated[
    str, SafeString(r"[a-z0-9][a-z0-9._-]{0,62}", "a lower-case name", "nvidia-cuda", max_length=63)
]
OsName = Annotated[
    str, SafeString(r"[a-z]+[0-9]+(\.[0-9]+)?", "an OS name with its version", "ubuntu22.04", max_length=32)
]
# An image reference that may hold {placeholders}; the rendered reference is checked again.
ImagePattern = Annotated[
    str,
    SafeString(r"[a-zA-Z0-9{][a-zA-Z0-9._/:@{}-]*", "an image reference", "nvidia/cuda:{cuda_full}-devel"),
]
IMAGE_PREFIX = SafeString(
    r"[a-z0-9.-]+(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*",
    "an image name prefix",
    "nvidia/cuda",
    extra=host_port_problem,
)
ImagePrefix = Annotated[str, IMAGE_PREFIX]
TagPattern = Annotated[str, SafeString(r"[a-zA-Z0-9_{][a-zA-Z0-9_.{}-]*", "a tag pattern", "{torch}-{stack}")]
Repository = Annotated[str, SafeString(r"[a-z0-9]+([._/-][a-z0-9]+)*", "a repository path", "acme/pytorch")]
Host = Annotated[
    str, SafeString(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?", "a host name", "pypi.example.org", extra=port_problem)
]


def _inside(value: str) -> str:
    if not relative_path_is_inside(value):
        raise PydanticCustomError(
            "path_escapes",
            "{detail}",
            {"detail": f"{shown(value)} must stay inside the matrix directory (no absolute path, no '..')"},
        )
    try:
        check_length(Path(value), repr(value))
    except InputError as exc:
        raise PydanticCustomError("path_too_long", "{detail}", {"detail": exc.message}) from None
    return value


RelativePath = Annotated[
    str,
    SafeString(r"[A-Za-z0-9._/-]+", "a relative path", "wheelhouse", max_length=PATH_CHARS),
    AfterValidator(_inside),
]
Requirement = Annotated[
    str,
    SafeString(
        r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?([<>=!~]=?[A-Za-z0-9.*+!-]+,?)*",
        "a pip requirement",
        "numpy<2",
        max_length=PACKAGE_CHARS,
    ),
]
AptPackage = Annotated[
    str,
    SafeString(
        r"[a-z0-9][a-z0-9.+-]*(=[A-Za-z0-9.+:~-]+)?", "a Debian package name", "git", max_length=PACKAGE_CHARS
    ),
]


def _no_secret_names(code: str, kind: str, why: str) -> Callable[[str], str]:
    """A validator refusing names that look like a secret (``SECRET_WORDS``): ``why`` says where
    the value would end up and what to do instead."""

    def check(name: str) -> str:
        if any(word in name.upper() for word in SECRET_WORDS):
            raise PydanticCustomError(
                code,
                "{detail}",
                {"detail": f"{kind} {name!r} looks like a secret; {why}"},
            )
        return name

    return check


_not_a_secret_build_arg = _no_secret_names(
    "secret_build_arg",
    "build argument",
    "the classic builder keeps every build argument in the image history (`docker history`), so it"
    " would ship with the image. Give pip a credentialed mirror through the engine host instead"
    " (README: 'Private mirrors')",
)
_not_a_secret_variable = _no_secret_names(
    "secret_env",
    "environment variable",
    "ENV is baked into every layer and every published image (`docker inspect` shows it). Give it at"
    " run time instead: a Kubernetes Secret or `docker run --env-file`",
)


EnvName = Annotated[
    str,
    SafeString(r"[A-Za-z_][A-Za-z0-9_]*", "a variable name", "TORCH_CUDA_ARCH_LIST", max_length=NAME_CHARS),
]
# ENV values and build arguments never pass through a shell, so ';' (TORCH_CUDA_ARCH_LIST) is fine.
BuildArgName = Annotated[EnvName, AfterValidator(_not_a_secret_build_arg)]
ImageEnvName = Annotated[EnvName, AfterValidator(_not_a_secret_variable)]
SafeText = Annotated[str, SafeString(r"[^\s'\"`$\\]+", "plain text", "8.0;9.0", max_length=VALUE_CHARS)]

Flavour = Literal["devel", "runtime"]
# What a person reaches the image through: none (today's image), JupyterLab, or an SSH server.
ServedFrontend = Literal["jupyter", "ssh"]  # a front end a cell actually serves
PlatformName = platforms.PlatformName  # linux/amd64, linux/arm64
Frontend = Literal["none", ServedFrontend]
PublishPolicy = Literal["gpu-validated", "checked", "built"]


def unique(values: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    for index, value in enumerate(values):
        if value in seen:
            raise PydanticCustomError(
                "duplicate_value",
                "{detail}",
                {"detail": f"value {shown(str(value))} at index {index} is listed twice"},
            )
        seen.add(value)
    return values


def non_empty_unique(values: list[Any]) -> list[Any]:
    if not values:
        raise PydanticCustomError(
            "empty_axis", "{detail}", {"detail": "is empty; list at least one value or remove it"}
        )
    return unique(values)


# -- models ---------------------------------------------------------------------------------


class StrictModel(BaseModel):
    """Frozen, no unknown keys; an unknown key is reported with the nearest valid one."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            known = sorted(cls.model_fields)
            for key in data:
                if key in cls.model_fields:
                    continue
                close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(known)}"
                raise PydanticCustomError(
                    "unknown_key", "{detail}", {"detail": f"unknown key; {hint}", "key": str(key)}
                )
        return data


# What a waiver's reason may be: one line a person reads in a report, a lock or a job summary.
WAIVER_REASON_CHARS = 300  # a sentence; the report's finding record holds up to SHORT_CHARS


def _a_reason(value: str) -> str:
    if not value.strip():
        detail = "is empty; say why the cells are built anyway (the report and the lock carry it)"
        raise PydanticCustomError("empty_reason", "{detail}", {"detail": detail})
    if printable(value) != value:
        raise PydanticCustomError("bad_reason", "{detail}", {"detail": "must be one line of printable text"})
    return value


WaiverReason = Annotated[str, StringConstraints(max_length=WAIVER_REASON_CHARS), AfterValidator(_a_reason)]
