"""What the compat refresh reads in the registries' answers: requirement and specifier texts, wheel
file names, a simple-API project page, and the parts of pip's reports it uses (the versions a
resolved torch pulls, the build a wheel's Requires-Dist makes it on a machine). Every answer is
untrusted: a value of an unexpected shape ends the refresh in one line (``imagekit.refresh.compat``).
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from packaging.markers import Marker
from packaging.utils import canonicalize_name

from imagekit.core import platforms
from imagekit.core.versions import compare, cuda_variant, version_key
from imagekit.facts.compat import Libraries
from imagekit.refresh.pip_report import RefreshError, cuda_runtime, is_cuda_runtime

# NVIDIA's metapackage of one CUDA toolkit release: its extras pin that release's library and compiler
# wheels (torch's CUDA 13 wheels require it; a devel cell's `nvcc: wheels` installs its compiler extras).
TOOLKIT_PROJECT = "cuda-toolkit"
X86_64 = platforms.get("linux/amd64").machine
AARCH64 = platforms.get("linux/arm64").machine
LIBRARY_KEYS = tuple(Libraries.model_fields)  # cudnn, nccl, cudart
# The libraries whose wheel is nvidia-<key>-cuXX (nvidia-cudnn-cu12, nvidia-nccl-cu13); the runtime's
# names are pip_report's
SUFFIXED_LIBRARIES = tuple(k for k in LIBRARY_KEYS if k != "cudart")

# -- versions, requirements, wheel file names -------------------------------------------------------


def admits(specifier: str, version: str) -> bool:
    """Whether a PEP 440 specifier set of plain release versions admits `version`."""
    for clause in (c.strip() for c in specifier.split(",")):
        if not clause:
            continue
        match = re.fullmatch(r"(===|==|!=|<=|>=|~=|<|>)\s*(\S+)", clause)
        if match is None:
            raise ValueError(f"cannot read specifier {clause!r}")
        op, target = match.groups()
        if not target[0].isdigit():  # no release segment to compare
            raise ValueError(f"cannot read specifier {clause!r}")
        if target.endswith(".*"):
            prefix = version_key(target[:-2])
            equal = version_key(version)[: len(prefix)] == prefix
            if (op == "==" and not equal) or (op == "!=" and equal):
                return False
            continue
        order = compare(version, target)
        if op == "~=":
            upper = version_key(target)[:-1]
            if order < 0 or version_key(version)[: len(upper)] != upper:
                return False
            continue
        ok = {
            "==": order == 0,
            "===": version == target,
            "!=": order != 0,
            "<=": order <= 0,
            ">=": order >= 0,
            "<": order < 0,
            ">": order > 0,
        }[op]
        if not ok:
            return False
    return True


@dataclass(frozen=True)
class Requirement:
    name: str
    specifier: str
    marker: str


def parse_requirement(text: str) -> Requirement:
    """Name, specifier and marker of a Requires-Dist value ("torch (==2.9.1)", "torch>=2.11")."""
    body, _, marker = text.partition(";")
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$", body)
    if match is None:
        raise ValueError(f"cannot read requirement {text!r}")
    specifier = match.group(3).strip()
    if specifier.startswith("(") and specifier.endswith(")"):
        specifier = specifier[1:-1].strip()
    return Requirement(canonicalize_name(match.group(1)), specifier.replace(" ", ""), marker.strip())


def torch_requirement(requires_dist: Iterable[str] | None) -> str | None:
    """The specifier a companion puts on torch outside extras; None when it names no torch."""
    for text in requires_dist or ():
        requirement = parse_requirement(text)
        if requirement.name == "torch" and "extra" not in requirement.marker:
            return requirement.specifier
    return None


def exact_pin(specifier: str | None) -> str | None:
    if specifier and re.fullmatch(r"===?[0-9][0-9.]*", specifier):
        return specifier.lstrip("=")
    return None


WHEEL_RE = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    python: tuple[int, int] | None  # the CPython a cpXY-cpXY wheel is for; None for py3 / abi3 / cpXYt
    machines: frozenset[str]  # the CPUs of its manylinux tags (x86_64, aarch64); empty: not manylinux


def parse_wheel(filename: str) -> Wheel | None:
    match = WHEEL_RE.match(filename)
    if match is None:
        return None
    python = None
    py = re.fullmatch(r"cp3(\d+)", match.group("py"))
    if py and match.group("abi") == match.group("py"):
        python = (3, int(py.group(1)))
    tags = match.group("plat").split(".")
    machines = frozenset(
        m for m in (X86_64, AARCH64) for tag in tags if tag.startswith("manylinux") and tag.endswith(f"_{m}")
    )
    return Wheel(canonicalize_name(match.group("name")), match.group("version"), python, machines)


def plain(version: str) -> bool:
    return re.fullmatch(r"\d+(?:\.\d+)*", version) is not None


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


# -- index listings and pip reports ---------------------------------------------------------------


def parse_listing(body: bytes, content_type: str) -> list[dict[str, Any]]:
    """Files of a simple-API project page: PEP 691 JSON, or the PEP 503 HTML page."""
    if "json" in content_type:
        files: list[dict[str, Any]] = json.loads(body)["files"]
        return files
    text = body.decode("utf-8", "replace")
    found: list[dict[str, Any]] = []
    for attrs, label in re.findall(r"<a\s([^>]*)>([^<]*)</a>", text, flags=re.IGNORECASE):
        entry: dict[str, Any] = {"filename": html.unescape(label).strip()}
        requires = re.search(r'data-requires-python\s*=\s*"([^"]*)"', attrs)
        if requires:
            entry["requires-python"] = html.unescape(requires.group(1))
        entry["yanked"] = "data-yanked" in attrs
        if re.search(r"data-(core|dist-info)-metadata", attrs):
            entry["core-metadata"] = True
        found.append(entry)
    return found


def trim_listing(files: list[dict[str, Any]], project: str) -> dict[str, Any]:
    """What the refresh reads of a listing: its manylinux x86_64 and aarch64 wheels (every wheel of
    cuda-toolkit, a py3-none-any metapackage). Deletes, never adds."""
    kept = []
    for entry in files:
        wheel = parse_wheel(entry["filename"])
        if wheel is None or (not wheel.machines and project != TOOLKIT_PROJECT):
            continue
        kept.append(
            {k: entry[k] for k in ("filename", "requires-python", "yanked", "upload-time") if k in entry}
        )
    return {"name": project, "files": kept}


def trim_report(report: dict[str, Any]) -> dict[str, Any]:
    """What the refresh reads of a pip report: the torch, nvidia-* and cuda-* items' name,
    version, Requires-Dist, Requires-Python and wheel URL. Deletes, never adds."""
    items = []
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        name = canonicalize_name(meta.get("name", ""))
        if not (name.startswith(("torch", "nvidia-", "cuda-"))):
            continue
        kept_meta = {k: meta[k] for k in ("name", "version", "requires_dist", "requires_python") if k in meta}
        trimmed: dict[str, Any] = {"metadata": kept_meta}
        if "url" in item.get("download_info", {}):
            trimmed["download_info"] = {"url": item["download_info"]["url"]}
        for key in ("is_yanked", "requested"):
            if key in item:
                trimmed[key] = item[key]
        items.append(trimmed)
    return {k: report[k] for k in ("version", "pip_version") if k in report} | {"install": items}


def report_item(report: dict[str, Any], name: str) -> dict[str, Any]:
    for item in report.get("install", []):
        if canonicalize_name(item["metadata"]["name"]) == name:
            meta: dict[str, Any] = item["metadata"]
            return meta
    raise RefreshError(f"the pip report installs no {name}")


def report_wheel(report: dict[str, Any], name: str) -> str:
    for item in report.get("install", []):
        if canonicalize_name(item["metadata"]["name"]) == name:
            url: str = item.get("download_info", {}).get("url", "")
            return url.rsplit("/", 1)[-1]
    return ""


def libraries_from(report: dict[str, Any]) -> dict[str, str]:
    """cuDNN, NCCL and CUDA runtime versions a resolved torch install pulls."""
    found: dict[str, str] = {}
    installs = [(item["metadata"]["name"], item["metadata"]["version"]) for item in report.get("install", [])]
    for project, version in installs:
        name = canonicalize_name(project)
        for key in SUFFIXED_LIBRARIES:
            if re.fullmatch(rf"nvidia-{key}-cu\d+", name):
                found[key] = version
    runtime = cuda_runtime(installs)
    if runtime is not None:
        found["cudart"] = runtime[1]
    return {k: found[k] for k in LIBRARY_KEYS if k in found}


def variant_of(cuda: str) -> str:
    """The wheel variant of a CUDA version (a cudart or toolkit release): "13.0.96" -> "cu130"."""
    if len(version_key(cuda)) < 2:
        raise ValueError(f"not a CUDA version: {cuda!r}")
    return cuda_variant(cuda)


def index_variants(files: list[str], project: str, versions: set[str], machine: str = X86_64) -> set[str]:
    """Variants of `project` at `versions` with a manylinux wheel for ``machine`` on PyTorch's
    index: the CUDA ones (+cuXYZ), and for aarch64 also the CPU build (+cpu), which the x86_64
    table leaves implicit. A wheel without a local part is no variant: the index mirrors PyPI's."""
    wanted = r"cu\d+|cpu" if machine == AARCH64 else r"cu\d+"
    found = set()
    for name in files:
        wheel = parse_wheel(name)
        if wheel is None or wheel.name != project or machine not in wheel.machines:
            continue
        release, _, local = wheel.version.partition("+")
        if release in versions and re.fullmatch(wanted, local):
            found.add(local)
    return found


def by_cuda(variants: Iterable[str]) -> list[str]:
    """cpu first, then by CUDA version."""
    return sorted(set(variants), key=lambda v: (0, 0) if v == "cpu" else (1, int(v[2:])))


def cuda_build(requires_dist: Iterable[str] | None, python: str, machine: str) -> str:
    """The build a torch wheel with these requirements is in effect on ``machine``: "cpu" when
    no nvidia-* or cuda-toolkit requirement applies there, else the variant of the CUDA version its
    cuda-toolkit pin (CUDA 13 wheels) or nvidia-cuda-runtime pin (CUDA 12 and older) names."""
    python_full = f"{python}.0"
    environment = {
        "platform_machine": machine,
        "platform_system": "Linux",
        "sys_platform": "linux",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "python_version": python,
        "python_full_version": python_full,
        "implementation_version": python_full,
        "extra": "",
    }
    active = [
        r
        for r in map(parse_requirement, requires_dist or ())
        if not r.marker or Marker(r.marker).evaluate(environment)
    ]
    cuda = [r for r in active if r.name == TOOLKIT_PROJECT or r.name.startswith("nvidia-")]
    if not cuda:
        return "cpu"
    for wanted in (lambda name: name == TOOLKIT_PROJECT, is_cuda_runtime):
        pins = [exact_pin(r.specifier) for r in cuda if wanted(r.name)]
        if pins and pins[0]:
            return variant_of(pins[0])
    names = ", ".join(sorted({r.name for r in cuda}))
    raise RefreshError(f"torch on {machine} requires {names} but pins no CUDA toolkit or runtime version")
