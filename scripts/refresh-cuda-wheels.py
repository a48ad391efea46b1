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
cells of other variants are refused, not guessed). `--save-reports DIR` keeps pip's reports;
`--from-reports DIR` reads them instead of running pip (offline). Run it in the project's
development environment (it imports imagekit and `packaging`).
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
from typing import Any

import yaml
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagekit.core.atomic import atomic_write  # noqa: E402
from imagekit.core.errors import ImagekitError  # noqa: E402
from imagekit.core.paths import read_regular_text  # noqa: E402
from imagekit.core.platforms import get as get_platform  # noqa: E402
from imagekit.facts.cuda_wheels import is_cuda_project, parse_cuda_wheels  # noqa: E402
from imagekit.plan.cells import WheelCell  # noqa: E402
from imagekit.plan.matrix import load_plan  # noqa: E402
from imagekit.render.recipe import pip_arguments, uses_wheelhouse  # noqa: E402
from imagekit.render.wheels import pip_command, platform_tags, target_options  # noqa: E402

DATA = REPO / "imagekit" / "data" / "cuda_wheels.yaml"
TIMEOUT_S = 600.0
# What is read, each a regular file (imagekit.core.paths): a FIFO would hang the refresh, /dev/zero
# fill memory. pip's dry-run report of one torch build is a few hundred kB; the table a few kB.
REPORT_BYTES = 64 << 20
DATA_BYTES = 1_000_000
HEADER = """\
# CUDA's library wheels each torch build pins exactly: a cell that installs torch from an index
# installs these first, in a layer of their own (imagekit/facts/cuda_wheels.py says why exactly
# these). Written by scripts/refresh-cuda-wheels.py from pip's dry-run reports; do not edit by hand.
"""


class RefreshError(Exception):
    """One build's report could not give its pins (the line says which and why)."""


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
        torch_args, _ = pip_arguments(cell, plan.matrix)
        url = index_url or _option(torch_args, "--index-url")
        if url is None:
            continue  # no index: nothing to read
        machine = get_platform(cell.platform).machine
        system = plan.compat.operating_systems.get(cell.os)
        build = Build(cell.torch, cell.variant, machine, cell.python, system.glibc if system else None, url)
        found.setdefault((build.torch, build.variant, build.machine), build)
    return [found[k] for k in sorted(found)]


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def resolve(build: Build) -> dict[str, Any]:
    """pip's dry-run report of ``torch==<patch>`` as the build's target installs it."""
    with tempfile.TemporaryDirectory(prefix="imagekit-cuda-wheels-") as target:
        command = [
            *pip_command(build.python, build.machine),
            "install", "--isolated", "--dry-run", "--ignore-installed", "--quiet",
            "--disable-pip-version-check", "--report", "-", "--index-url", build.index_url,
            *target_options(build.python, platform_tags(build.glibc, build.machine)),
            "--target", target, f"torch=={build.torch}",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False
            )
        except subprocess.TimeoutExpired:
            raise RefreshError(f"{build.key}: pip did not resolve within {TIMEOUT_S:g}s") from None
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")]
        raise RefreshError(f"{build.key}: {errors[0] if errors else done.stderr.strip()[-300:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _installs(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    try:
        return {canonicalize_name(i["metadata"]["name"]): i["metadata"] for i in report["install"]}
    except (KeyError, TypeError) as exc:
        raise RefreshError(f"not a pip installation report ({exc!r})") from None


def built_for(report: Mapping[str, Any]) -> str:
    """The CUDA variant of the resolved torch: the CUDA minor of its runtime wheel; cpu: none."""
    for name, metadata in _installs(report).items():
        if name in ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime-cu12"):
            major, minor = str(metadata["version"]).split(".")[:2]
            return f"cu{major}{minor}"
    return "cpu"


def exact_cuda_pins(report: Mapping[str, Any]) -> tuple[str, ...]:
    """The CUDA wheels reached from torch through exact pins, as ``project==version``, sorted.

    Markers are judged in the report's own environment (pip's: the target's, see
    ``imagekit.render.wheels``), each requirement of a package under the extras it was asked with.
    """
    installs = _installs(report)
    environment = {str(k): str(v) for k, v in (report.get("environment") or {}).items()}
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
            requirement = Requirement(text)
            if requirement.marker is not None and not _applies(requirement.marker, environment, extras):
                continue
            child = canonicalize_name(requirement.name)
            pinned = _exact_version(requirement)
            if pinned is None or not is_cuda_project(child):
                continue
            resolved = installs.get(child)
            if resolved is None or Version(str(resolved["version"])) != Version(pinned):
                raise RefreshError(f"{name} pins {text!r}, which the report does not install")
            pins[child] = str(resolved["version"])
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
        requirement = Requirement(text)
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
    variant = built_for(report)
    if variant != build.variant:
        raise RefreshError(
            f"{build.key}: {build.index_url} serves torch {build.torch} as a {variant} build, not"
            f" {build.variant}: read it from an index that serves {build.variant}"
        )
    pins = exact_cuda_pins(report)
    if not pins:
        raise RefreshError(f"{build.key}: torch pins no CUDA wheel exactly")
    return pins


def render(table: Mapping[str, Mapping[str, Mapping[str, Iterable[str]]]], checked_on: str) -> str:
    lines = [HEADER.rstrip("\n"), f'checked_on: "{checked_on}"', "wheels:"]
    for torch in sorted(table, key=lambda v: [int(p) for p in v.split(".")]):
        lines.append(f'  "{torch}":')
        for variant in sorted(table[torch]):
            lines.append(f"    {variant}:")
            for machine in sorted(table[torch][variant]):
                lines.append(f"      {machine}:")
                lines += [f"        - {pin}" for pin in table[torch][variant][machine]]
    text = "\n".join(lines) + "\n"
    parse_cuda_wheels(yaml.safe_load(text))  # what it writes, the package can read
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=REPO / "matrix.yaml")
    parser.add_argument("--data", type=Path, default=DATA, help="the table to refresh")
    parser.add_argument("--index-url", help="read every build from this index (default: each cell's)")
    parser.add_argument("--save-reports", type=Path, metavar="DIR")
    parser.add_argument("--from-reports", type=Path, metavar="DIR")
    parser.add_argument("--today", default=dt.date.today().isoformat())
    parser.add_argument("--write", action="store_true", help="apply the change (default: print the diff)")
    args = parser.parse_args(argv)

    try:
        before = read_regular_text(
            args.data, DATA_BYTES, "the CUDA wheel table (imagekit/data/cuda_wheels.yaml)"
        )
    except FileNotFoundError:
        before = ""
    except ImagekitError as exc:
        print(f"refresh-cuda-wheels: error: {exc.message}", file=sys.stderr)
        return 2
    raw = yaml.safe_load(before) if before else {"wheels": {}}
    table: dict[str, dict[str, dict[str, list[str]]]] = {
        t: {v: {m: list(p) for m, p in ms.items()} for v, ms in vs.items()} for t, vs in raw["wheels"].items()
    }
    read = 0
    for build in builds_of(args.matrix, args.index_url):
        try:
            if args.from_reports:
                recorded = args.from_reports / f"{build.key}.json"
                report = json.loads(
                    read_regular_text(recorded, REPORT_BYTES, "a pip report `--save-reports` wrote")
                )
            else:
                report = resolve(build)
                if args.save_reports:
                    args.save_reports.mkdir(parents=True, exist_ok=True)
                    atomic_write(args.save_reports / f"{build.key}.json", json.dumps(report, indent=1) + "\n")
            pins = pins_of(build, report)
        # ValueError: a report that is not JSON; ImagekitError: not a regular file of a report's size
        except (RefreshError, ImagekitError, OSError, ValueError, RecursionError) as exc:
            kept = table.get(build.torch, {}).get(build.variant, {}).get(build.machine)
            print(f"not read: {exc}{'; the entry is kept' if kept else ''}", file=sys.stderr)
            continue
        table.setdefault(build.torch, {}).setdefault(build.variant, {})[build.machine] = list(pins)
        read += 1
    after = render(table, args.today if read else str(raw.get("checked_on", args.today)))
    if args.write:
        if after != before:
            atomic_write(args.data, after)
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(before.splitlines(True), after.splitlines(True), str(args.data), "refreshed")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
