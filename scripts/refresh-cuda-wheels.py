#!/usr/bin/env python3
"""Refresh imagekit/data/cuda_wheels.yaml: the CUDA wheels each torch build of a matrix pins exactly.

For every cell of the matrix that installs torch from an index (not a wheelhouse, not a fixed stack,
not CPU), pip resolves `torch==<patch>` against that cell's torch index, as the cell's Python on the
cell's machine would install it (the target's wheel tags and environment markers, whatever the
host), in dry-run mode with a report (PEP 658 metadata where the index serves it: no wheel is
installed). From the report it keeps the CUDA wheels reached from torch through exact `==` pins only
(imagekit.facts.cuda_wheels says why), checks each against the version pip resolved, and checks that
the build is the cell's variant (its CUDA runtime wheel is that CUDA minor): an index that serves
another build under that version (PyPI's torch 2.5.1 is cu124, not cu121) is refused for that cell.

It prints a reviewable unified diff; `--write` applies it (atomically). Entries it did not read are
kept, and listed on stderr.

  scripts/refresh-cuda-wheels.py                           # each cell's own index (matrix.yaml)
  scripts/refresh-cuda-wheels.py --index-url https://pypi.org/simple --write
  scripts/refresh-cuda-wheels.py --from-reports tests/fixtures/cuda_wheels --data /tmp/out.yaml

`--index-url` replaces every cell's torch index (PyPI carries one CUDA build per torch release: the
cells of other variants are refused, not guessed). `--save-reports DIR` keeps pip's reports, trimmed
to what is read; `--from-reports DIR` reads them instead of running pip (offline). Run it in the
project's development environment (it imports imagekit and `packaging`).

Every input is untrusted: a report (an index answers its content; a recorded one may be edited or
misnamed), the table, the flags. A report is checked for its size, nesting and every type it is read
for, and must be of the very build asked for (torch version, variant, machine); one that is not is a
"not read: <build>: <why>" line, its entry kept. A table, matrix or flag that cannot be used ends the
run in one line and exit 2 (3 where the machine is at fault), nothing written. A login in a URL
(`--index-url https://user:password@host/...`) is masked in every line printed, and never written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import yaml
from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidName, canonicalize_name
from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagekit.core.atomic import atomic_write  # noqa: E402
from imagekit.core.errors import MESSAGE_CHARS, ExitCode, ImagekitError, InputError  # noqa: E402
from imagekit.core.limits import NAME_CHARS, SHORT_CHARS, URL_CHARS, VERSION_CHARS  # noqa: E402
from imagekit.core.paths import check_length, os_problem, read_regular_file, read_regular_text  # noqa: E402
from imagekit.core.platforms import get as get_platform  # noqa: E402
from imagekit.core.text import printable, redact, shown  # noqa: E402
from imagekit.core.yamlsource import parse_yaml  # noqa: E402
from imagekit.facts.cuda_wheels import is_cuda_project, parse_cuda_wheels  # noqa: E402
from imagekit.plan.cells import WheelCell  # noqa: E402
from imagekit.plan.matrix import load_plan  # noqa: E402
from imagekit.render.pip_sources import pip_arguments, uses_wheelhouse  # noqa: E402
from imagekit.render.wheels import pip_command, platform_tags, target_options  # noqa: E402

DATA = REPO / "imagekit" / "data" / "cuda_wheels.yaml"
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
DATA_BYTES = 1_000_000  # the table: 20 kB for 16 builds
PIP_ERROR_BYTES = 64 << 10  # the end of pip's stderr, where its ERROR line is
PYPI_SIMPLE = "https://pypi.org/simple"  # pip's default index
HEADER = """\
# CUDA's library wheels each torch build pins exactly: a cell that installs torch from an index
# installs these first, in a layer of their own (imagekit/facts/cuda_wheels.py says why exactly
# these). Written by scripts/refresh-cuda-wheels.py from pip's dry-run reports, or entered by hand
# from the public sources its note in `sources` names (PyTorch's own index is not reachable from
# every machine); `bundled` names the builds of PyTorch's index whose wheel brings CUDA inside it.
"""


class RefreshError(Exception):
    """One build's report could not give its pins (the line says why; the caller names the build)."""


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


def builds_of(matrix_path: Path, index_url: str | None) -> list[Build]:
    """The distinct torch builds the matrix's index-installed CUDA cells install."""
    plan = load_plan(matrix_path)
    found: dict[tuple[str, str, str], Build] = {}
    for cell in plan.cells:
        if not isinstance(cell, WheelCell) or not cell.is_cuda or uses_wheelhouse(cell, plan.matrix):
            continue
        if plan.matrix.sources.pip.no_index:
            continue  # no index: nothing to read
        torch_args, _ = pip_arguments(cell, plan.matrix)
        # no --index-url: pip's own default, PyPI (torch 2.1.2 cu121 comes from there: its build on
        # PyTorch's index bundles CUDA, imagekit.render.pip_sources)
        url = index_url or _option(torch_args, "--index-url") or PYPI_SIMPLE
        machine = get_platform(cell.platform).machine
        system = plan.compat.operating_systems.get(cell.os)
        build = Build(cell.torch, cell.variant, machine, cell.python, system.glibc if system else None, url)
        found.setdefault((build.torch, build.variant, build.machine), build)
    return [found[k] for k in sorted(found)]


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


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
    for name, metadata in installs.items():
        if name in ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime-cu12"):
            release = Version(metadata["version"]).release
            if len(release) < 2:
                raise RefreshError(f"{name} {shown(metadata['version'])} names no CUDA minor version")
            return f"cu{release[0]}{release[1]}"
    return "cpu"


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
        if pinned is None or child in pins or child not in installs or not is_cuda_project(child):
            continue
        extras = [e for e in _extras_named(requirement.marker) if e != "all"]
        if any(_applies(requirement.marker, environment, frozenset({e})) for e in extras):
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


# -- the table ---------------------------------------------------------------------------------------

Table = dict[str, dict[str, dict[str, list[str]]]]
TABLE = "the CUDA wheel table (imagekit/data/cuda_wheels.yaml or a copy of it)"


def read_table_text(path: Path) -> str | None:
    """The table's text; None where there is none yet.

    Read as imagekit reads every file it did not make (``imagekit.core.paths.read_regular_file``: a
    regular file, checked on the descriptor opened, within its bound), and never through a symbolic
    link: `--write` replaces the file where it is (``atomic_write`` refuses to replace a link), so a
    diff read through a link would be one that cannot be written."""
    check_length(path, "--data")
    try:
        return read_regular_text(path, DATA_BYTES, f"--data: {TABLE}", follow_links=False)
    except FileNotFoundError:
        return None


Build3 = tuple[str, str, str]
Notes = dict[str, dict[Build3, str]]  # "sources" and "bundled": (torch, variant, machine) -> note


def read_table(path: Path, notes: Notes | None = None) -> tuple[str, Table, str | None]:
    """The table at ``path``: its text ("" where there is none yet), its entries, its checked_on;
    its ``sources`` and ``bundled`` notes into ``notes`` where given (a rewrite keeps them).
    Anything but a table the package would read is one InputError naming the file and the place."""
    text = read_table_text(path)
    if text is None:
        return "", {}, None
    # imagekit's own YAML reader: bounded in size, nesting and alias expansion, plain tags only
    value = parse_yaml(text, str(path)).value
    if value is None:  # nothing but comments: no entry yet
        return text, {}, None
    try:
        wheels = parse_cuda_wheels(value, str(path))
    except ValueError as exc:
        raise InputError(f"{exc}; fix the entry, or refresh into a new file with --data") from None
    checked_on = value.get("checked_on")
    if checked_on is not None and checked_on != "" and not _is_date(checked_on):
        shown_value = shown(checked_on) if isinstance(checked_on, str) else f"a {type(checked_on).__name__}"
        raise InputError(f"{path}: checked_on: {shown_value} is not a date (YYYY-MM-DD)")
    if notes is not None:
        notes["sources"] = dict(wheels.sources)
        notes["bundled"] = dict(wheels.bundled)
    table: Table = {}
    for (torch, variant, machine), pins in wheels.pins.items():
        table.setdefault(torch, {}).setdefault(variant, {})[machine] = list(pins)
    return text, table, checked_on


_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _is_date(value: object) -> bool:
    """Whether ``value`` is a date as the table writes it (ISO 8601, ``2026-12-03``)."""
    if not isinstance(value, str) or not _DATE.fullmatch(value):
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def render(
    table: Mapping[str, Mapping[str, Mapping[str, Iterable[str]]]],
    checked_on: str,
    notes: Notes | None = None,
) -> str:
    """The file's text: the pins, then each entry's source note (one written for an entry that has
    none: the dry run of ``checked_on``), then the bundled builds' notes."""
    sources = dict((notes or {}).get("sources", {}))
    lines = [HEADER.rstrip("\n"), f'checked_on: "{checked_on}"', "wheels:" if table else "wheels: {}"]
    for torch in sorted(table, key=_release):
        lines.append(f'  "{torch}":')
        for variant in sorted(table[torch]):
            lines.append(f"    {variant}:")
            for machine in sorted(table[torch][variant]):
                lines.append(f"      {machine}:")
                lines += [f"        - {pin}" for pin in table[torch][variant][machine]]
                sources.setdefault(
                    (torch, variant, machine),
                    f"pip --dry-run --report of torch=={torch} from its index, {checked_on}",
                )
    for section, found in (("sources", sources), ("bundled", (notes or {}).get("bundled", {}))):
        if found:
            lines.append(f"{section}:")
            lines += _note_lines(found)
    text = "\n".join(lines) + "\n"
    parse_cuda_wheels(yaml.safe_load(text))  # what it writes, the package can read
    return text


def _release(version: str) -> list[int]:
    return [int(p) for p in version.split(".")]


def _note_lines(notes: Mapping[Build3, str]) -> list[str]:
    lines: list[str] = []
    last: tuple[str, ...] = ()
    for torch, variant, machine in sorted(notes, key=lambda b: (_release(b[0]), b[1], b[2])):
        if last[:1] != (torch,):
            lines.append(f'  "{torch}":')
        if last[:2] != (torch, variant):
            lines.append(f"    {variant}:")
        lines.append(f"      {machine}: {json.dumps(notes[(torch, variant, machine)])}")
        last = (torch, variant)
    return lines


# -- the command line --------------------------------------------------------------------------------

PROG = "refresh-cuda-wheels"


class _Parser(argparse.ArgumentParser):
    """argparse, its usage errors masked and on one line: it repeats what it could not parse, and
    `--index-urll https://user:password@host/simple` would print the password."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(ExitCode.INVALID_INPUT, f"{PROG}: error: {printable(redact(message))}\n")


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=REPO / "matrix.yaml")
    parser.add_argument("--data", type=Path, default=DATA, help="the table to refresh")
    parser.add_argument("--index-url", help="read every build from this index (default: each cell's)")
    parser.add_argument("--save-reports", type=Path, metavar="DIR")
    parser.add_argument("--from-reports", type=Path, metavar="DIR")
    parser.add_argument("--today", default=dt.date.today().isoformat())
    parser.add_argument("--write", action="store_true", help="apply the change (default: print the diff)")
    args = parser.parse_args(argv)
    if not _is_date(args.today):
        raise InputError(f"--today: {shown(args.today)} is not a date; give it as YYYY-MM-DD")
    if args.index_url is not None:
        _check_index_url(args.index_url)
    for flag in ("matrix", "data", "save_reports", "from_reports"):
        if getattr(args, flag) is not None:
            check_length(getattr(args, flag), f"--{flag.replace('_', '-')}")
    if args.from_reports is not None and not args.from_reports.is_dir():
        raise InputError(
            f"--from-reports {args.from_reports}: not a directory; pass the one --save-reports wrote"
        )
    return args


def _check_index_url(url: str) -> None:
    """--index-url: an http(s) or file URL in printable ASCII (it reaches pip's command line and
    every line about a build). A login in it is pip's to use, and never printed."""
    if len(url) > URL_CHARS:
        raise InputError(f"--index-url: {len(url):,} characters long; a URL has at most {URL_CHARS:,}")
    if not all(" " < char < "\x7f" for char in url):
        raise InputError(
            f"--index-url: {shown(url)} holds a space or a character that is not printable ASCII"
        )
    try:
        parts = urlsplit(url)
        port = parts.port  # reading it refuses a port past 65535, or one that is not a number
        del port
    except ValueError:
        raise InputError(f"--index-url: {shown(url)} names no valid host or port") from None
    if parts.scheme not in ("http", "https", "file") or (parts.scheme != "file" and not parts.hostname):
        raise InputError(
            f"--index-url: {shown(url)} is not an index's http(s) or file URL (like https://pypi.org/simple)"
        )


def _say(line: str) -> None:
    """One line on stderr as a person may read it: no login (an index URL's password), no control
    character (a value from a report), bounded (pip's error line)."""
    text = printable(redact(line))
    print(text if len(text) <= MESSAGE_CHARS else f"{text[: MESSAGE_CHARS - 3]}...", file=sys.stderr)


def _read_build(build: Build, args: argparse.Namespace) -> tuple[str, ...]:
    """The pins of one build, from its recorded report or from pip; saved where asked (trimmed)."""
    if args.from_reports:
        path = args.from_reports / f"{build.key}.json"
        text = report_text(
            path, f"no report {path.name} in {args.from_reports}; record it with --save-reports"
        )
    else:
        text = resolve(build)
    report = parse_report(text)
    if args.save_reports:
        saved = json.dumps(report, indent=1, sort_keys=True) + "\n"
        atomic_write(args.save_reports / f"{build.key}.json", saved)
    return pins_of(build, report)


def refresh(args: argparse.Namespace) -> int:
    notes: Notes = {}
    before, table, checked_on = read_table(args.data, notes)
    builds = builds_of(args.matrix, args.index_url)
    if args.save_reports:
        try:
            args.save_reports.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise os_problem(
                exc, args.save_reports, "make the directory", "pass a directory as --save-reports"
            ) from None
    read = 0
    for build in builds:
        try:
            pins = _read_build(build, args)
        # ValueError: packaging's own refusal of a value the report's checks let through
        except (RefreshError, ValueError) as exc:
            kept = table.get(build.torch, {}).get(build.variant, {}).get(build.machine)
            _say(f"not read: {build.key}: {exc}{'; the entry is kept' if kept else ''}")
            continue
        table.setdefault(build.torch, {}).setdefault(build.variant, {})[build.machine] = list(pins)
        read += 1
    after = render(
        table, args.today if read else (checked_on if checked_on is not None else args.today), notes
    )
    if args.write:
        if after != before:
            atomic_write(args.data, after)
        return 0
    name = printable(redact(str(args.data)))
    sys.stdout.writelines(
        difflib.unified_diff(before.splitlines(True), after.splitlines(True), name, "refreshed")
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return refresh(parse_arguments(argv))
    except ImagekitError as exc:  # a table, matrix, flag or directory that cannot be used: one line
        print(f"{PROG}: error: {exc.message}", file=sys.stderr)
        return int(exc.exit_code)


if __name__ == "__main__":
    sys.exit(main())
