"""The CUDA pins of one torch build, from pip's dry-run report of ``torch==<patch>`` as the build's
target installs it: the report read within bounds and checked field by field (an index decides what
it holds; a recorded one may be edited or misnamed), refused where it is of another build, and the
CUDA wheels reached from torch through exact ``==`` pins only (imagekit.facts.cuda_wheels says why).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidName, canonicalize_name
from packaging.version import InvalidVersion, Version

from imagekit.core.errors import InputError
from imagekit.core.limits import NAME_CHARS, SHORT_CHARS, VERSION_CHARS
from imagekit.core.paths import read_regular_file
from imagekit.core.text import shown
from imagekit.facts.cuda_wheels import is_cuda_project
from imagekit.refresh.pip_report import RefreshError, cuda_runtime, runtime_variant
from imagekit.render.wheels import pip_command, platform_tags, target_options

TIMEOUT_S = 600.0
# Bounds on what is read (imagekit.core.limits says why every input has them), each checked before
# the work it protects. pip's report of a CUDA torch installs about 30 distributions, with their
# metadata (torch's long description, ~50 kB, is the largest part); a trimmed recording is ~30 kB.
REPORT_BYTES = 16 << 20
# A report nests 6 levels (install[].download_info.archive_info.hashes); deeper is refused before
# json parses it, whose recursion would otherwise end in a RecursionError.
REPORT_DEPTH = 32
REPORT_INSTALLS = 1_000  # distributions one report installs: a CUDA torch, about 30
REQUIREMENTS = 1_000  # Requires-Dist lines of one distribution: torch's, about 100
REQUIREMENT_CHARS = 1_024  # one Requires-Dist line: the longest, with its markers, about 250
ENVIRONMENT_KEYS = 64  # a marker environment: PEP 508 defines 11 names
PIP_ERROR_BYTES = 64 << 10  # the end of pip's stderr, where its ERROR line is


@dataclass(frozen=True)
class Build:
    """One torch build a matrix installs from an index, and how to resolve it."""

    torch: str
    variant: str
    machine: str
    python: str
    glibc: str | None
    index_url: str

    @property
    def key(self) -> str:
        return f"torch-{self.torch}-{self.variant}-{self.machine}"


# -- pip's report: read within bounds, every value checked ------------------------------------------


def resolve(build: Build) -> str:
    """The text of pip's dry-run report of ``torch==<patch>`` as the build's target installs it.

    pip writes the report and its messages to files that are read back within their bounds: the
    index decides what the report holds, so it is read like any other input, never whole into
    memory whatever its size."""
    with tempfile.TemporaryDirectory(prefix="imagekit-cuda-wheels-") as work:
        report, messages = Path(work) / "report.json", Path(work) / "pip.stderr"
        command = [
            *pip_command(build.python, build.machine),
            "install", "--isolated", "--dry-run", "--ignore-installed", "--quiet",
            "--disable-pip-version-check", "--report", str(report), "--index-url", build.index_url,
            *target_options(build.python, platform_tags(build.glibc, build.machine)),
            "--target", str(Path(work) / "target"), f"torch=={build.torch}",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        with messages.open("wb") as stderr:
            try:
                done = subprocess.run(
                    command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                    timeout=TIMEOUT_S, env=env, check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise RefreshError(f"pip did not resolve within {TIMEOUT_S:g}s") from None
        if done.returncode != 0:
            raise RefreshError(_pip_error(messages))
        return report_text(report, "pip wrote no report")


def _pip_error(messages: Path) -> str:
    """pip's first ERROR line in the end of what it printed (or that end itself)."""
    with messages.open("rb") as handle:
        handle.seek(max(0, os.fstat(handle.fileno()).st_size - PIP_ERROR_BYTES))
        text = handle.read(PIP_ERROR_BYTES).decode("utf-8", errors="replace")
    errors = [line for line in text.splitlines() if line.startswith("ERROR:")]
    return (errors[0] if errors else text.strip()[-300:] or "pip failed and printed nothing")[:500]


def report_text(path: Path, missing: str) -> str:
    """A report file's text: a regular file (a FIFO or /dev/zero is refused before a byte is read)
    of at most REPORT_BYTES, UTF-8. ``missing``: what to say where there is none."""
    try:
        data = read_regular_file(path, REPORT_BYTES, "a pip installation report (`pip install --report`)")
    except FileNotFoundError:
        raise RefreshError(missing) from None
    except InputError as exc:
        raise RefreshError(exc.message) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RefreshError(f"{path}: not UTF-8 text (byte {exc.start})") from None


# A JSON string (its escapes included) or a bracket outside one: what the nesting check counts.
_JSON_NESTING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def parse_report(text: str) -> dict[str, Any]:
    """pip's report from its text, checked and trimmed (``checked_report``)."""
    depth = 0
    for token in _JSON_NESTING.finditer(text):
        mark = token.group()[0]
        if mark in "[{":
            depth += 1
            if depth > REPORT_DEPTH:
                raise _not_a_report(f"nested deeper than {REPORT_DEPTH} levels (pip's nests 6)")
        elif mark in "]}":
            depth -= 1
    try:
        raw = json.loads(text)
    except ValueError as exc:  # not JSON, or a number past int()'s digit limit
        raise _not_a_report(f"not JSON ({exc})") from None
    return checked_report(raw)


def _not_a_report(problem: str) -> RefreshError:
    return RefreshError(f"not a pip installation report: {problem}")


def _kind(value: object) -> str:
    """What a JSON value is, as a message names it."""
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


def _expect(value: object, kind: type, where: str) -> Any:
    if type(value) is not kind:
        raise _not_a_report(f"{where} is {_kind(value)}, not {_kind(kind())}")
    return value


def _text(value: object, where: str, limit: int) -> str:
    text: str = _expect(value, str, where)
    if len(text) > limit:
        raise _not_a_report(f"{where} is {len(text):,} characters long; at most {limit:,}")
    return text


def checked_report(raw: object) -> dict[str, Any]:
    """pip's report trimmed to what the refresh reads (the marker environment; each install's name,
    version and Requires-Dist), each value checked for its type, size and syntax: whatever an index
    or an edited recording put there ends in one RefreshError naming the place, never in a
    traceback or in a value read as something else. What it returns holds no URL (pip's report
    names where each wheel came from, an index's login included), so it is what is saved."""
    report: dict[str, Any] = _expect(raw, dict, "the top level")
    environment: dict[str, Any] = _expect(report.get("environment"), dict, "environment")
    if len(environment) > ENVIRONMENT_KEYS:
        raise _not_a_report(f"environment names {len(environment):,} values; PEP 508 defines 11")
    installs: list[Any] = _expect(report.get("install"), list, "install")
    if len(installs) > REPORT_INSTALLS:
        raise _not_a_report(f"it installs {len(installs):,} distributions; at most {REPORT_INSTALLS:,}")
    checked = [_install(item, f"install[{i}]") for i, item in enumerate(installs)]
    names: set[str] = set()
    for item in checked:
        name = canonicalize_name(item["metadata"]["name"])
        if name in names:  # which of the two would be read is nowhere said
            raise _not_a_report(f"it installs {name} twice")
        names.add(name)
    return {
        "environment": {
            _text(key, "a key of environment", SHORT_CHARS): _text(value, f"environment.{key}", SHORT_CHARS)
            for key, value in environment.items()
        },
        "install": checked,
        "version": _text(report.get("version", "1"), "version", SHORT_CHARS),
    }


def _install(item: object, where: str) -> dict[str, Any]:
    """One install, its metadata only: a project name, a version and requirements as strings
    (each parsed where it is followed: ``_requirement``; most are never read)."""
    metadata: dict[str, Any] = _expect(_expect(item, dict, where).get("metadata"), dict, f"{where}.metadata")
    name = _text(metadata.get("name"), f"{where}.metadata.name", NAME_CHARS)
    version = _text(metadata.get("version"), f"{where}.metadata.version", VERSION_CHARS)
    try:
        canonicalize_name(name, validate=True)
    except InvalidName:
        raise _not_a_report(f"{where}.metadata.name: {shown(name)} is no project name") from None
    try:
        Version(version)
    except InvalidVersion:
        raise _not_a_report(f"{where}.metadata.version: {shown(version)} is no version (PEP 440)") from None
    checked: dict[str, Any] = {"name": name, "version": version}
    requires = metadata.get("requires_dist")
    if requires is not None:  # pip leaves it out where a distribution requires nothing
        lines: list[Any] = _expect(requires, list, f"{where}.metadata.requires_dist")
        if len(lines) > REQUIREMENTS:
            raise _not_a_report(
                f"{where}.metadata.requires_dist names {len(lines):,}; at most {REQUIREMENTS:,}"
            )
        for index, line in enumerate(lines):
            _text(line, f"{where}.metadata.requires_dist[{index}]", REQUIREMENT_CHARS)
        checked["requires_dist"] = list(lines)
    return {"metadata": checked}


def _installed(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A checked report's installs by project name."""
    return {canonicalize_name(i["metadata"]["name"]): i["metadata"] for i in report["install"]}


def _requirement(name: str, text: str) -> Requirement:
    """One of ``name``'s Requires-Dist lines, parsed."""
    try:
        return Requirement(text)
    except InvalidRequirement:
        raise _not_a_report(f"{name} requires {shown(text)}, which is no requirement (PEP 508)") from None


# -- what a report says -----------------------------------------------------------------------------


def built_for(report: Mapping[str, Any]) -> str:
    """The CUDA variant of the resolved torch: the CUDA minor of its runtime wheel; cpu: none."""
    return _built_for(_installed(checked_report(report)))


def _built_for(installs: Mapping[str, Mapping[str, Any]]) -> str:
    runtime = cuda_runtime((name, metadata["version"]) for name, metadata in installs.items())
    return "cpu" if runtime is None else runtime_variant(runtime[1])


# A local version label that names a build: torch 2.1.2+cu121, 2.1.0+cu121.with.pypi.cudnn, 2.9.1+cpu.
_VARIANT_LABEL = re.compile(r"cpu|cu[0-9]+")


def _same_build(build: Build, report: Mapping[str, Any]) -> None:
    """Refuse a report of another build than ``build``, naming both: resolved for another machine,
    of another torch release, or of another variant by its local version label (a recording saved
    or copied under another build's name; an index answering ``torch==X`` with something else)."""
    machine = report["environment"].get("platform_machine")
    if machine != build.machine:
        found = shown(machine) if isinstance(machine, str) else "no machine"
        raise RefreshError(
            f"the report was resolved for {found}, not {build.machine}: another build's report"
        )
    torch = _installed(report).get("torch")
    if torch is None:
        raise RefreshError("the report does not install torch")
    resolved = Version(torch["version"])
    if Version(resolved.public) != Version(build.torch):
        raise RefreshError(
            f"the report resolves torch {shown(torch['version'])}, not {build.torch}: another build's report"
        )
    label = (resolved.local or "").split(".")[0]
    if _VARIANT_LABEL.fullmatch(label) and label != build.variant:
        raise RefreshError(
            f"the report resolves torch {shown(torch['version'])}, a {label} build, not {build.variant}:"
            " another build's report"
        )


def exact_cuda_pins(report: Mapping[str, Any]) -> tuple[str, ...]:
    """The CUDA wheels reached from torch through exact pins, as ``project==version``, sorted.

    Markers are judged in the report's own environment (pip's: the target's, see
    ``imagekit.render.wheels``), each requirement of a package under the extras it was asked with.
    """
    return _exact_cuda_pins(checked_report(report))


def _exact_cuda_pins(report: Mapping[str, Any]) -> tuple[str, ...]:
    installs = _installed(report)
    environment: dict[str, str] = report["environment"]
    pins: dict[str, str] = {}
    queue: list[tuple[str, frozenset[str]]] = [("torch", frozenset())]
    seen: set[tuple[str, frozenset[str]]] = set()
    while queue:
        name, extras = queue.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        metadata = installs.get(name)
        if metadata is None:
            raise RefreshError(f"the report does not install {name}")
        for text in metadata.get("requires_dist") or ():
            requirement = _requirement(name, text)
            if requirement.marker is not None and not _applies(requirement.marker, environment, extras):
                continue
            child = canonicalize_name(requirement.name)
            pinned = _exact_version(requirement)
            if pinned is None or not is_cuda_project(child):
                continue
            resolved = installs.get(child)
            if resolved is None or Version(resolved["version"]) != Version(pinned):
                raise RefreshError(f"{name} pins {shown(text)}, which the report does not install")
            pins[child] = resolved["version"]
            queue.append((child, frozenset(requirement.extras)))
    for name, version in _toolkit_components(installs, environment, pins).items():
        pins.setdefault(name, version)
    return tuple(sorted(f"{name}=={version}" for name, version in pins.items()))


def _toolkit_components(
    installs: Mapping[str, Mapping[str, Any]], environment: dict[str, str], pins: Mapping[str, str]
) -> dict[str, str]:
    """CUDA 13: the CUDA wheels the install holds through an open requirement (nvshmem's any
    ``nvidia-cuda-cccl``) that the pinned ``cuda-toolkit`` release names exactly under one of its
    extras, at the toolkit's version. Left open, torch's step takes the index's newest (cccl 13.3
    beside toolkit 13.2.2), and a devel cell's compiler, ``cuda-toolkit[nvcc,crt,nvvm,cccl]`` at
    torch's pin, then cannot be installed under the image's constraints; pinned, the headers,
    nvcc and the libraries are one release."""
    toolkit = installs.get("cuda-toolkit")
    if toolkit is None or "cuda-toolkit" not in pins:
        return {}
    found: dict[str, str] = {}
    for text in toolkit.get("requires_dist") or ():
        requirement = _requirement("cuda-toolkit", text)
        child = canonicalize_name(requirement.name)
        pinned = _exact_version(requirement)
        marker = requirement.marker
        if pinned is None or child in pins or child not in installs or not is_cuda_project(child):
            continue
        if marker is None:  # no extra names it: torch's own requirement decides, not the toolkit
            continue
        extras = [e for e in _extras_named(marker) if e != "all"]
        if any(_applies(marker, environment, frozenset({e})) for e in extras):
            found.setdefault(child, pinned)
    return found


def _extras_named(marker: Marker | None) -> list[str]:
    """The extras a requirement's marker names (``extra == 'cccl'``)."""
    if marker is None:
        return []
    return re.findall(r"""extra\s*==\s*['"]([^'"]+)['"]""", str(marker))


def _exact_version(requirement: Requirement) -> str | None:
    """The one version ``requirement`` admits: ``==V``, or cuda-toolkit's ``==13.4.1.3.*`` (a full
    release and whatever post-releases follow it: the pin is the release itself); None: a range."""
    specifiers = list(requirement.specifier)
    if len(specifiers) != 1 or specifiers[0].operator != "==":
        return None
    return specifiers[0].version.removesuffix(".*")


def _applies(marker: Marker, environment: dict[str, str], extras: frozenset[str]) -> bool:
    return any(marker.evaluate({**environment, "extra": extra}) for extra in (extras or {""}))


def pins_of(build: Build, report: Mapping[str, Any]) -> tuple[str, ...]:
    """The CUDA pins of ``build`` from its report, which must be of that very build."""
    checked = checked_report(report)
    _same_build(build, checked)
    variant = _built_for(_installed(checked))
    if variant != build.variant:
        raise RefreshError(
            f"{build.index_url} serves torch {build.torch} as a {variant} build, not"
            f" {build.variant}: read it from an index that serves {build.variant}"
        )
    pins = _exact_cuda_pins(checked)
    if not pins:
        raise RefreshError("torch pins no CUDA wheel exactly")
    return pins
