#!/usr/bin/env python3
"""Refresh the torch section of imagekit/data/compat.yaml from the package registries' metadata.

Like cibuildwheel's bin/update_* scripts, this rebuilds a table from what the registries publish
and prints a reviewable unified diff; `--write` applies it (atomically).

What it reads (no wheel is downloaded):
  * the configured index's file list of torch, torchvision and torchaudio (PEP 691 JSON, or the
    PEP 503 HTML page): the torch patches of each release, the CPython versions with a manylinux
    x86_64 wheel, and the upload dates;
  * pip's dry-run report (`pip install --dry-run --report`) for `torch==<patch>` against that
    index, dependencies resolved for one Linux x86_64 CPython: the CUDA variant PyPI's wheel is
    built for (the CUDA runtime it pulls), and the cuDNN, NCCL and cudart versions it pins;
  * pip's dry-run report (`--no-deps`) for each recent torchvision / torchaudio release: which
    torch patch it pins (`Requires-Dist: torch==X`) or admits;
  * PyTorch's own wheel index (`--torch-index https://download.pytorch.org/whl`) when given and
    reachable: the CUDA variants of each release and what each variant's wheel pins.

Facts the registries cannot give (the variant list when PyTorch's index is not reachable, a
variant's pins that were not read, the NumPy caps) are kept from the existing table and listed as
"kept" on stderr.

Offline: `--from-reports DIR` reads reports saved earlier (by `--save-reports DIR`) instead of
running pip or fetching anything; tests/fixtures/compat/ holds such a recording.

Examples:
  scripts/refresh-compat.py                          # diff against PyPI, newest release onwards
  scripts/refresh-compat.py --since 2.0 --write      # re-read every release and apply
  scripts/refresh-compat.py --torch-index https://download.pytorch.org/whl
  scripts/refresh-compat.py --from-reports tests/fixtures/compat --compat /tmp/compat.yaml

Standalone on purpose: it needs PyYAML and the standard library, and no part of imagekit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import html
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
DEFAULT_COMPAT = REPO / "imagekit" / "data" / "compat.yaml"
DEFAULT_INDEX = "https://pypi.org/simple"
COMPANIONS = ("torchvision", "torchaudio")
# A companion whose torch requirement is not an exact pin pairs with the torch patch it was
# uploaded with: within this many days of that patch's first upload.
RELEASE_WINDOW = dt.timedelta(days=3)
# Python the dry runs resolve for, when the patch has a wheel for it.
DEFAULT_PYTHON = "3.12"
# pip does not widen --platform: name every manylinux tag a glibc 2.28 x86_64 machine accepts.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(28, 4, -1)] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
]
# Environment variables that would point pip at another index, add constraints or links.
PIP_ENV_DROPPED = (
    "PIP_CONSTRAINT",
    "PIP_FIND_LINKS",
    "PIP_EXTRA_INDEX_URL",
    "PIP_INDEX_URL",
    "PIP_NO_INDEX",
    "PIP_REQUIREMENT",
    "PIP_TARGET",
    "PIP_PREFIX",
    "PIP_USER",
    "PIP_ONLY_BINARY",
    "PIP_NO_BINARY",
)
RELEASE_KEYS = (
    "variants",
    "pypi_default",
    "cudnn_major",
    "python",
    "numpy",
    "libraries",
    "patches",
    "checked",
)
LIBRARY_KEYS = ("cudnn", "nccl", "cudart")

SOURCE_NOTE = (
    "Refreshed by scripts/refresh-compat.py from registry metadata (no wheel downloaded). "
    "pypi_default, cudnn_major and the PyPI variant's libraries (the nvidia-cudnn-cuX, nvidia-nccl-cuX "
    "and nvidia-cuda-runtime versions a resolution of torch==<patch> installs): pip's dry-run report "
    "(--report) against PyPI. python: the oldest and newest CPython with a manylinux x86_64 wheel of "
    "every patch, from PyPI's file list. patches: torchvision's and torchaudio's Requires-Dist (the "
    "release pinning torch==<patch>, else the one uploaded with that patch whose torch requirement "
    "admits it; null: none). variants and the other variants' libraries: PyTorch's wheel index "
    "(download.pytorch.org/whl/<variant>) when reachable, otherwise kept from this table, which took "
    "them from that index, PyTorch's release announcements, pytorch/pytorch's RELEASE.md and "
    "pytorch/test-infra's release build matrix (see shared/FACTS.md); corrected in December 2026: "
    "2.9 has cu129 (torch-2.9.1+cu129 wheels for x86_64 and aarch64), 2.12 and 2.13 have none (CUDA "
    "12.9 dropped in 2.12, pytorch issue 187834), 2.15 has cu130 and cu132 (RFC 190385). numpy caps "
    "are kept as they are. A release with checked: false holds a fact not read from a source."
)
NUMPY_COMMENT = (
    '  # numpy: releases compiled against NumPy 1.x break under NumPy 2 ("Numpy is not available",\n'
    '  # "A module that was compiled using NumPy 1.x cannot be run in NumPy 2"); torch 2.4 is the first\n'
    "  # release built against NumPy 2, so earlier ones get a cap (checked: false; kept by the refresh).\n"
)
PATCHES_COMMENT = "      # torch patch -> [torchvision, torchaudio] released with it; null: none\n"


class RefreshError(Exception):
    """Something the refresh cannot work around (an index that does not answer, a report missing)."""


# --------------------------------------------------------------------------------------------
# Versions, requirements, wheel file names


def vkey(version: str) -> tuple[int, ...]:
    """The release segment of a version as integers ("2.10.0+cu126" -> (2, 10, 0))."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(0).split("."))


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def compare(a: str, b: str) -> int:
    left, right = _padded(vkey(a), vkey(b))
    return (left > right) - (left < right)


def minor_of(version: str) -> str:
    major, minor = vkey(version)[:2]
    return f"{major}.{minor}"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def admits(specifier: str, version: str) -> bool:
    """Whether a PEP 440 specifier set of plain release versions admits `version`."""
    for clause in (c.strip() for c in specifier.split(",")):
        if not clause:
            continue
        match = re.fullmatch(r"(===|==|!=|<=|>=|~=|<|>)\s*(\S+)", clause)
        if match is None:
            raise ValueError(f"cannot read specifier {clause!r}")
        op, target = match.groups()
        if target.endswith(".*"):
            prefix = vkey(target[:-2])
            equal = vkey(version)[: len(prefix)] == prefix
            if (op == "==" and not equal) or (op == "!=" and equal):
                return False
            continue
        order = compare(version, target)
        if op == "~=":
            upper = vkey(target)[:-1]
            if order < 0 or vkey(version)[: len(upper)] != upper:
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
    return Requirement(normalize(match.group(1)), specifier.replace(" ", ""), marker.strip())


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
    x86_64_manylinux: bool


def parse_wheel(filename: str) -> Wheel | None:
    match = WHEEL_RE.match(filename)
    if match is None:
        return None
    python = None
    py = re.fullmatch(r"cp3(\d+)", match.group("py"))
    if py and match.group("abi") == match.group("py"):
        python = (3, int(py.group(1)))
    platforms = match.group("plat").split(".")
    manylinux = any(p.startswith("manylinux") and p.endswith("_x86_64") for p in platforms)
    return Wheel(normalize(match.group("name")), match.group("version"), python, manylinux)


def plain(version: str) -> bool:
    return re.fullmatch(r"\d+(?:\.\d+)*", version) is not None


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


# --------------------------------------------------------------------------------------------
# Index listings and pip reports


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
    """What the refresh reads of a listing: its manylinux x86_64 wheels. Deletes, never adds."""
    kept = []
    for entry in files:
        wheel = parse_wheel(entry["filename"])
        if wheel is None or not wheel.x86_64_manylinux:
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
        name = normalize(meta.get("name", ""))
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
        if normalize(item["metadata"]["name"]) == name:
            meta: dict[str, Any] = item["metadata"]
            return meta
    raise RefreshError(f"the pip report installs no {name}")


def report_wheel(report: dict[str, Any], name: str) -> str:
    for item in report.get("install", []):
        if normalize(item["metadata"]["name"]) == name:
            url: str = item.get("download_info", {}).get("url", "")
            return url.rsplit("/", 1)[-1]
    return ""


def libraries_from(report: dict[str, Any]) -> dict[str, str]:
    """cuDNN, NCCL and CUDA runtime versions a resolved torch install pulls."""
    found: dict[str, str] = {}
    for item in report.get("install", []):
        name = normalize(item["metadata"]["name"])
        version = item["metadata"]["version"]
        if re.fullmatch(r"nvidia-cudnn-cu\d+", name):
            found["cudnn"] = version
        elif re.fullmatch(r"nvidia-nccl-cu\d+", name):
            found["nccl"] = version
        elif re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?", name):
            found["cudart"] = version
    return {k: found[k] for k in LIBRARY_KEYS if k in found}


def variant_of(cudart: str) -> str:
    major, minor = vkey(cudart)[:2]
    return f"cu{major}{minor}"


# --------------------------------------------------------------------------------------------
# Where the metadata comes from: the network (pip, HTTP), or a recording of it


class Source:
    def listing(self, project: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def report(self, key: str, requirements: list[str], *, deps: bool, python: str) -> dict[str, Any]:
        raise NotImplementedError

    def torch_index_files(self, project: str) -> list[str] | None:
        """File names of a project on PyTorch's index; None when it was not reachable or not asked."""
        raise NotImplementedError

    def torch_index_report(
        self, key: str, requirement: str, variant: str, python: str
    ) -> dict[str, Any] | None:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


RECORDING_BYTES = 64 << 20  # pip's largest dry-run report of a torch release is a few hundred KB


def read_json(path: Path) -> Any:
    """A recorded JSON file, bounded; anything else (not UTF-8, not JSON, nested past what the
    parser takes) is one RefreshError naming the file."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(RECORDING_BYTES + 1)
        if len(raw) > RECORDING_BYTES:
            raise RefreshError(f"{path}: larger than {RECORDING_BYTES:,} bytes; not a recording")
        return json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RefreshError(f"{path}: not a JSON recording ({type(exc).__name__}: {one_line(exc)})") from None


class RecordedSource(Source):
    """Reads what `--save-reports` wrote: files-<project>.json, <key>.json and, where PyTorch's
    index was read, <project>-index-files.json."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _load(self, name: str) -> Any:
        path = self.directory / name
        if not path.is_file():
            raise RefreshError(f"{path} is not recorded (record it with --save-reports)")
        return read_json(path)

    def listing(self, project: str) -> list[dict[str, Any]]:
        files: list[dict[str, Any]] = self._load(f"files-{project}.json")["files"]
        return files

    def report(self, key: str, requirements: list[str], *, deps: bool, python: str) -> dict[str, Any]:
        report: dict[str, Any] = self._load(f"{key}.json")
        return report

    def torch_index_files(self, project: str) -> list[str] | None:
        path = self.directory / f"{project}-index-files.json"
        if not path.is_file():
            return None
        files: list[str] = read_json(path)["files"]
        return files

    def torch_index_report(
        self, key: str, requirement: str, variant: str, python: str
    ) -> dict[str, Any] | None:
        path = self.directory / f"{key}.json"
        if not path.is_file():
            return None
        report: dict[str, Any] = read_json(path)
        return report

    def describe(self) -> str:
        return f"reports recorded in {self.directory}"


def pip_environment(keep_config: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PIP_ENV_DROPPED}
    if not keep_config:
        env["PIP_CONFIG_FILE"] = os.devnull  # no pip.conf: its constraints or extra indexes
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


class LiveSource(Source):
    def __init__(
        self,
        index_url: str,
        torch_index: str | None,
        pip: list[str],
        fast_deps: str,
        keep_pip_config: bool,
        save_dir: Path | None,
        notes: list[str],
    ) -> None:
        self.index_url = index_url.rstrip("/")
        self.torch_index = torch_index.rstrip("/") if torch_index else None
        self.pip = pip
        self.fast_deps_mode = fast_deps
        self.fast_deps = fast_deps == "on"
        self.keep_pip_config = keep_pip_config
        self.save_dir = save_dir
        self.notes = notes
        cafile = os.environ.get("SSL_CERT_FILE") or os.environ.get("PIP_CERT") or None
        self.ssl = ssl.create_default_context(cafile=cafile)
        self._torch_index_files: dict[str, list[str] | None] = {}
        if save_dir:
            save_dir.mkdir(parents=True, exist_ok=True)

    def _get(self, url: str, accept: str) -> tuple[bytes, str]:
        request = urllib.request.Request(
            url, headers={"Accept": accept, "User-Agent": "imagekit-refresh-compat"}
        )
        with urllib.request.urlopen(request, timeout=60, context=self.ssl) as response:
            return response.read(), response.headers.get("Content-Type", "")

    def _save(self, name: str, data: Any) -> None:
        if self.save_dir:
            (self.save_dir / name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")

    def listing(self, project: str) -> list[dict[str, Any]]:
        url = f"{self.index_url}/{project}/"
        accept = "application/vnd.pypi.simple.v1+json, text/html;q=0.5"
        try:
            body, content_type = self._get(url, accept)
        except (urllib.error.URLError, OSError) as exc:
            raise RefreshError(f"{url}: {exc}") from exc
        files = parse_listing(body, content_type)
        if project == "torch" and self.fast_deps_mode == "auto":
            wheels = [f for f in files if f["filename"].endswith(".whl")]
            served = any(f.get("core-metadata") or f.get("data-dist-info-metadata") for f in wheels)
            self.fast_deps = not served
            if self.fast_deps:
                self.notes.append(
                    f"{self.index_url} serves no wheel metadata files (PEP 658): pip reads each wheel's "
                    "METADATA by HTTP range requests (--use-feature=fast-deps) instead of downloading it"
                )
        self._save(f"files-{project}.json", trim_listing(files, project))
        return files

    def _pip_report(
        self, requirements: list[str], *, deps: bool, python: str, index: str, extra_index: str | None
    ) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="refresh-compat-") as tmp:
            out = Path(tmp) / "report.json"
            command = [
                *self.pip,
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                "--target",  # pip < 24 takes --platform only with --target; nothing is written
                str(Path(tmp) / "target"),
                "--report",
                str(out),
                "--python-version",
                python,
                "--only-binary=:all:",
                "--index-url",
                index,
                *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
            ]
            if extra_index:
                command += ["--extra-index-url", extra_index]
            if not deps:
                command.append("--no-deps")
            if self.fast_deps:
                command.append("--use-feature=fast-deps")
            command += requirements
            result = subprocess.run(
                command,
                env=pip_environment(self.keep_pip_config),
                capture_output=True,
                text=True,
                check=False,
                timeout=900,
            )
            if result.returncode != 0 or not out.is_file():
                tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-8:])
                raise RefreshError(f"pip could not resolve {' '.join(requirements)}:\n{tail}")
            report: dict[str, Any] = json.loads(out.read_text())
            return report

    def report(self, key: str, requirements: list[str], *, deps: bool, python: str) -> dict[str, Any]:
        report = trim_report(
            self._pip_report(requirements, deps=deps, python=python, index=self.index_url, extra_index=None)
        )
        self._save(f"{key}.json", report)
        return report

    def torch_index_files(self, project: str) -> list[str] | None:
        if not self.torch_index:
            return None
        if project in self._torch_index_files:
            return self._torch_index_files[project]
        url = f"{self.torch_index}/{project}/"
        names: list[str] | None
        try:
            body, content_type = self._get(url, "text/html")
        except (urllib.error.URLError, OSError) as exc:
            self.notes.append(f"PyTorch's index {url} is not reachable ({exc})")
            names = None
        else:
            names = sorted({f["filename"] for f in parse_listing(body, content_type)})
            self._save(f"{project}-index-files.json", {"index": self.torch_index, "files": names})
        self._torch_index_files[project] = names
        return names

    def torch_index_report(
        self, key: str, requirement: str, variant: str, python: str
    ) -> dict[str, Any] | None:
        if not self.torch_index:
            return None
        try:
            raw = self._pip_report(
                [requirement],
                deps=True,
                python=python,
                index=f"{self.torch_index}/{variant}",
                extra_index=self.index_url,
            )
        except RefreshError as exc:
            self.notes.append(f"{requirement} not read from PyTorch's index: {exc}")
            return None
        report = trim_report(raw)
        self._save(f"{key}.json", report)
        return report

    def describe(self) -> str:
        pip = " ".join(self.pip)
        torch_index = f", PyTorch's index {self.torch_index}" if self.torch_index else ""
        return f"{self.index_url} via `{pip}`{torch_index}"


# --------------------------------------------------------------------------------------------
# Building the table


@dataclass
class Patch:
    version: str
    uploaded: dt.datetime | None
    pythons: set[tuple[int, int]] = field(default_factory=set)


def releases_in(files: list[dict[str, Any]], *, cpython_only: bool) -> dict[str, Patch]:
    """Final releases with a manylinux x86_64 wheel (a CPython-specific one when `cpython_only`),
    with the CPythons of their cpXY wheels and their first upload."""
    patches: dict[str, Patch] = {}
    for entry in files:
        wheel = parse_wheel(entry["filename"])
        if wheel is None or not wheel.x86_64_manylinux or not plain(wheel.version) or entry.get("yanked"):
            continue
        if cpython_only and wheel.python is None:
            continue
        patch = patches.setdefault(wheel.version, Patch(wheel.version, None))
        if wheel.python:
            patch.pythons.add(wheel.python)
        uploaded = parse_time(entry.get("upload-time"))
        if uploaded and (patch.uploaded is None or uploaded < patch.uploaded):
            patch.uploaded = uploaded
    return patches


@dataclass
class Companion:
    version: str
    uploaded: dt.datetime | None
    torch: str | None  # its torch specifier; None: it names no torch
    stable_abi: bool = False  # only py3-none / abi3 wheels: no operator compiled against one torch


# torchvision 0.(m+15) and torchaudio 2.m with CPython-specific wheels are built for torch 2.m:
# their C++ operators are compiled against that release, so one of another minor is no pair,
# whatever its metadata admits. Stable-ABI companions (a single py3-none or abi3 wheel, as from
# torch 2.15 on: torchvision 0.29.2 requires torch>=2.14.0, torchaudio 2.11.1 torch>=2.11, both
# uploaded with torch 2.15.0) state the torch range they accept themselves: their requirement
# decides, not version arithmetic.
COMPANION_MINOR_OFFSET = {"torchvision": 15, "torchaudio": 0}


def built_for(name: str, companion: str, torch: str) -> bool:
    """Whether ``companion``'s release line is the one for torch's minor."""
    torch_key, companion_key = vkey(torch), vkey(companion)
    if len(torch_key) < 2 or len(companion_key) < 2 or name not in COMPANION_MINOR_OFFSET:
        return True
    return companion_key[1] == torch_key[1] + COMPANION_MINOR_OFFSET[name]


def pair(patch: Patch, companions: list[Companion], name: str) -> str | None:
    """The companion release that goes with a torch patch: the newest that pins it exactly, else
    the newest uploaded with it (within RELEASE_WINDOW) whose torch requirement admits it and that
    is of the release line built for its minor, or of stable ABI."""
    exact = [
        c for c in companions if exact_pin(c.torch) and compare(exact_pin(c.torch) or "0", patch.version) == 0
    ]
    if exact:
        return max(exact, key=lambda c: vkey(c.version)).version
    near = [
        c
        for c in companions
        if c.uploaded
        and patch.uploaded
        and abs(c.uploaded - patch.uploaded) <= RELEASE_WINDOW
        and (c.torch is None or admits(c.torch, patch.version))
        and (c.stable_abi or built_for(name, c.version, patch.version))
    ]
    if near:
        return max(near, key=lambda c: vkey(c.version)).version
    return None


def python_for(patch: Patch) -> str:
    """The CPython a dry run resolves for: DEFAULT_PYTHON, else the newest below it with a wheel."""
    wanted = tuple(int(p) for p in DEFAULT_PYTHON.split("."))
    if not patch.pythons or wanted in patch.pythons:
        return DEFAULT_PYTHON
    below = [p for p in patch.pythons if p <= wanted]
    major, minor = max(below) if below else min(patch.pythons)
    return f"{major}.{minor}"


def index_variants(files: list[str], project: str, versions: set[str]) -> set[str]:
    """CUDA variants (cuXYZ) of `project` at `versions` with a manylinux x86_64 wheel."""
    found = set()
    for name in files:
        wheel = parse_wheel(name)
        if wheel is None or wheel.name != project or not wheel.x86_64_manylinux:
            continue
        release, _, local = wheel.version.partition("+")
        if release in versions and re.fullmatch(r"cu\d+", local):
            found.add(local)
    return found


def by_cuda(variants: Iterable[str]) -> list[str]:
    return sorted(set(variants), key=lambda v: int(v[2:]))


@dataclass
class Refresh:
    releases: dict[str, dict[str, Any]]
    kept: list[str]
    notes: list[str]


def refresh(existing: dict[str, Any], source: Source, since: str | None, notes: list[str]) -> Refresh:
    old_releases: dict[str, dict[str, Any]] = {
        str(k): dict(v) for k, v in existing.get("releases", {}).items()
    }
    kept: list[str] = []
    patches = releases_in(source.listing("torch"), cpython_only=True)
    if not patches:
        raise RefreshError("the index lists no torch wheels for manylinux x86_64")
    minors: dict[str, list[Patch]] = {}
    for patch in patches.values():
        minors.setdefault(minor_of(patch.version), []).append(patch)
    floor = since or (max(old_releases, key=vkey) if old_releases else min(minors, key=vkey))
    chosen = sorted((m for m in minors if compare(m, floor) >= 0), key=vkey)
    if not chosen:
        raise RefreshError(f"the index has no torch release from {floor} on")

    # Companions: every torchvision / torchaudio release uploaded since the first chosen patch.
    first_upload = min((p.uploaded for m in chosen for p in minors[m] if p.uploaded), default=None)
    companions: dict[str, list[Companion]] = {}
    for project in COMPANIONS:
        versions = releases_in(source.listing(project), cpython_only=False)
        if first_upload is not None:
            wanted = [
                v
                for v, r in versions.items()
                if r.uploaded is None or r.uploaded >= first_upload - RELEASE_WINDOW
            ]
        else:
            wanted = sorted(versions, key=vkey)[-12:]
            notes.append(f"{project}: the index gives no upload times; reading its 12 newest releases")
        companions[project] = []
        for version in sorted(wanted, key=vkey):
            release = versions[version]
            report = source.report(
                f"{project}-{version}", [f"{project}=={version}"], deps=False, python=python_for(release)
            )
            meta = report_item(report, project)
            requirement = torch_requirement(meta.get("requires_dist"))
            # no cpXY wheel among its files: one wheel for every CPython (stable ABI)
            companions[project].append(Companion(version, release.uploaded, requirement, not release.pythons))

    torch_index = {project: source.torch_index_files(project) for project in ("torch", "torchvision")}
    releases = {m: v for m, v in old_releases.items() if compare(m, floor) < 0}
    for minor in chosen:
        releases[minor] = build_release(
            minor, sorted(minors[minor], key=lambda p: vkey(p.version)), old_releases.get(minor), source,
            companions, torch_index, kept, notes,
        )  # fmt: skip
    for minor, entry in releases.items():
        if "checked" not in entry:
            entry["checked"] = True
            if compare(minor, floor) < 0:
                kept.append(f"{minor}: not re-read (older than {floor}); checked: true assumed (no mark)")
    return Refresh(dict(sorted(releases.items(), key=lambda kv: vkey(kv[0]))), kept, notes)


def build_release(
    minor: str,
    patches: list[Patch],
    old: dict[str, Any] | None,
    source: Source,
    companions: dict[str, list[Companion]],
    torch_index: dict[str, list[str] | None],
    kept: list[str],
    notes: list[str],
) -> dict[str, Any]:
    old = old or {}
    old_checked = bool(old.get("checked", True))
    entry: dict[str, Any] = {}

    # PyPI's wheel of every patch: its CUDA variant and what it pins.
    per_patch: dict[str, dict[str, str]] = {}
    requires_python: dict[str, str | None] = {}
    for patch in patches:
        report = source.report(
            f"torch-{patch.version}", [f"torch=={patch.version}"], deps=True, python=python_for(patch)
        )
        meta = report_item(report, "torch")
        if meta["version"] != patch.version:
            raise RefreshError(f"the report for torch=={patch.version} installs torch {meta['version']}")
        requires_python[patch.version] = meta.get("requires_python")
        libs = libraries_from(report)
        if "cudart" not in libs:
            raise RefreshError(
                f"torch {patch.version} ({report_wheel(report, 'torch')}) pulls no CUDA runtime"
            )
        per_patch[patch.version] = libs
    newest = patches[-1].version
    libs = per_patch[newest]
    pypi_default = variant_of(libs["cudart"])
    for version, other in per_patch.items():
        if other != libs:
            notes.append(
                f"{minor}: torch {version} pins {fmt_libs(other)}, {newest} {fmt_libs(libs)}; "
                f"the table follows {newest}"
            )

    # Variants: PyTorch's index (torch, and the paired torchvision where one exists), else the table.
    read_variants = None
    if torch_index["torch"] is not None:
        found = index_variants(torch_index["torch"], "torch", {p.version for p in patches})
        visions = {v for p in patches if (v := pair(p, companions["torchvision"], "torchvision"))}
        if found and visions and torch_index["torchvision"] is not None:
            with_vision = index_variants(torch_index["torchvision"], "torchvision", visions)
            for variant in by_cuda(found - with_vision):
                notes.append(
                    f"{minor}: PyTorch's index has torch+{variant} but no torchvision+{variant}; not listed"
                )
            found &= with_vision
        read_variants = by_cuda(found) if found else None
    if read_variants:
        variants = read_variants
        variants_checked = True
    elif old.get("variants"):
        variants = list(old["variants"])
        variants_checked = old_checked
        kept.append(f"{minor}: variants {', '.join(variants)} (PyTorch's index not read)")
    else:
        variants = [pypi_default]
        variants_checked = False
        kept.append(
            f"{minor}: variants unknown, only PyPI's {pypi_default} listed "
            "(PyTorch's index not read): checked: false"
        )
    if pypi_default not in variants:
        notes.append(f"{minor}: PyPI's wheel is {pypi_default}, which the variant list lacked; added")
        variants = by_cuda([*variants, pypi_default])
    entry["variants"] = variants
    entry["pypi_default"] = pypi_default
    cudnn = libs.get("cudnn")
    if cudnn:
        entry["cudnn_major"] = vkey(cudnn)[0]
    elif "cudnn_major" in old:
        entry["cudnn_major"] = old["cudnn_major"]
        kept.append(f"{minor}: cudnn_major {old['cudnn_major']} (PyPI's wheel pins no cuDNN)")

    # Python: the CPythons every patch has a wheel for.
    lowest = max(min(p.pythons) for p in patches)
    highest = min(max(p.pythons) for p in patches)
    entry["python"] = [f"{lowest[0]}.{lowest[1]}", f"{highest[0]}.{highest[1]}"]
    for patch in patches:
        if (min(patch.pythons), max(patch.pythons)) != (lowest, highest):
            span = f"{min(patch.pythons)}-{max(patch.pythons)}"
            notes.append(
                f"{minor}: torch {patch.version} has wheels for CPython {span}; "
                "the table keeps what all patches have"
            )
        floor = re.match(r">=\s*(\d+)\.(\d+)", requires_python[patch.version] or "")
        if floor and (int(floor.group(1)), int(floor.group(2))) != min(patch.pythons):
            notes.append(
                f"{minor}: torch {patch.version} says Requires-Python {requires_python[patch.version]} "
                f"but its oldest wheel is for CPython {min(patch.pythons)[0]}.{min(patch.pythons)[1]}"
            )
    if "numpy" in old:
        entry["numpy"] = old["numpy"]
        kept.append(f"{minor}: numpy {old['numpy']!r} (no registry states it)")

    # Libraries per variant: PyPI's from its report, the others from PyTorch's index or the table.
    libraries: dict[str, dict[str, str]] = {}
    old_libraries = old.get("libraries") or {}
    for variant in variants:
        if variant == pypi_default:
            libraries[variant] = libs
            continue
        read = None
        if torch_index["torch"] is not None:
            version = f"{newest}+{variant}"
            read_report = source.torch_index_report(
                f"torch-{version}", f"torch=={version}", variant, python_for(patches[-1])
            )
            read = libraries_from(read_report) if read_report else None
        if read:
            libraries[variant] = read
        elif variant in old_libraries:
            libraries[variant] = dict(old_libraries[variant])
            kept.append(f"{minor}: libraries of {variant} (not read from PyTorch's index)")
    entry["libraries"] = libraries

    # Companions.
    old_patches = old.get("patches") or {}
    pairs: dict[str, list[str | None]] = {}
    for patch in patches:
        pairs[patch.version] = [pair(patch, companions[project], project) for project in COMPANIONS]
    for version, value in old_patches.items():
        if str(version) not in pairs:
            pairs[str(version)] = list(value) if value is not None else [None, None]
            kept.append(f"{minor}: patch {version} (not on the index any more)")
    entry["patches"] = dict(sorted(pairs.items(), key=lambda kv: vkey(kv[0])))
    entry["checked"] = variants_checked
    for key, value in old.items():
        if key not in RELEASE_KEYS:
            entry[key] = value
            kept.append(f"{minor}: {key} (a key this tool does not refresh)")
    return entry


def fmt_libs(libs: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in libs.items())


# --------------------------------------------------------------------------------------------
# Writing the section


def scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    reserved = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text) and text.lower() not in reserved:
        return text
    return json.dumps(text)


def flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{scalar(k)}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return scalar(value)


def wrap(text: str, indent: str, width: int = 100) -> list[str]:
    lines: list[str] = []
    current = ""
    for word in text.split():
        if current and len(indent) + len(current) + 1 + len(word) > width:
            lines.append(indent + current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        lines.append(indent + current)
    return lines


def emit_section(releases: dict[str, dict[str, Any]], checked_on: str) -> str:
    out = ["torch:\n", "  source: >-\n"]
    out += [line + "\n" for line in wrap(SOURCE_NOTE, "    ")]
    out.append(f"  checked_on: {json.dumps(checked_on)}  # date of the last refresh\n")
    out.append(NUMPY_COMMENT)
    out.append("  releases:\n")
    for minor, entry in releases.items():
        out.append(f"    {json.dumps(minor)}:\n")
        order = [k for k in RELEASE_KEYS if k in entry] + [k for k in entry if k not in RELEASE_KEYS]
        for key in order:
            value = entry[key]
            if key == "libraries":
                if not value:
                    continue
                out.append("      libraries:\n")
                for variant, libs in value.items():
                    ordered = {k: libs[k] for k in LIBRARY_KEYS if k in libs} | {
                        k: v for k, v in libs.items() if k not in LIBRARY_KEYS
                    }
                    out.append(f"        {scalar(variant)}: {flow(ordered)}\n")
            elif key == "patches":
                out.append(PATCHES_COMMENT)
                out.append("      patches:\n")
                for version, pair_ in value.items():
                    out.append(f"        {json.dumps(str(version))}: {flow(pair_)}\n")
            else:
                out.append(f"      {key}: {flow(value)}\n")
    return "".join(out)


def splice(text: str, section: str) -> str:
    """Replace everything from `torch:` to the next top-level key (less the blank lines and
    top-level comments that lead into that key) with `section`."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(r"torch:\s*(#.*)?$", line)), None)
    if start is None:
        raise RefreshError("the compat file has no top-level `torch:` key")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"[^\s#]", lines[i])), len(lines))
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1
    return "".join(lines[:start]) + section + "".join(lines[end:])


def write_atomically(path: Path, text: str) -> None:
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).chmod(mode)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------------------------


def label(path: Path) -> str:
    """The path a diff names: relative to the repository when inside it."""
    try:
        return path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return path.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Rebuild the torch section of compat.yaml from registry metadata and print the diff.",
        epilog="Example: scripts/refresh-compat.py --since 2.10 --write",
    )
    parser.add_argument("--compat", type=Path, default=DEFAULT_COMPAT, help="compat.yaml to refresh")
    parser.add_argument("--write", action="store_true", help="apply the change (atomically)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the table would change")
    parser.add_argument("--index-url", default=DEFAULT_INDEX, help="package index (default: PyPI)")
    parser.add_argument(
        "--torch-index",
        help="PyTorch's wheel index, e.g. https://download.pytorch.org/whl: the variant lists and "
        "their pins (skipped with a note when unreachable)",
    )
    parser.add_argument("--since", help="oldest release to re-read (default: the newest in the table)")
    parser.add_argument("--from-reports", type=Path, metavar="DIR", help="read recorded reports, run nothing")
    parser.add_argument("--save-reports", type=Path, metavar="DIR", help="record what was read (trimmed)")
    parser.add_argument(
        "--pip", default=f"{sys.executable} -m pip", help="pip command (default: %(default)s)"
    )
    parser.add_argument(
        "--fast-deps",
        choices=("auto", "on", "off"),
        default="auto",
        help="read wheel METADATA by HTTP range requests; auto: when the index serves no PEP 658 metadata",
    )
    parser.add_argument("--keep-pip-config", action="store_true", help="let pip read its config files")
    parser.add_argument("--today", default=dt.date.today().isoformat(), help="checked_on date (YYYY-MM-DD)")
    args = parser.parse_args(argv)
    if args.from_reports and args.save_reports:
        parser.error("--from-reports and --save-reports exclude each other")
    if args.since and not plain(args.since):
        parser.error(f"--since takes a release like 2.10, not {args.since!r}")

    notes: list[str] = []
    source: Source
    if args.from_reports:
        source = RecordedSource(args.from_reports)
    else:
        source = LiveSource(
            args.index_url,
            args.torch_index,
            args.pip.split(),
            args.fast_deps,
            args.keep_pip_config,
            args.save_reports,
            notes,
        )
    try:
        text = args.compat.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
        if not isinstance(data, dict) or not isinstance(data.get("torch") or {}, dict):
            raise RefreshError(f"{args.compat}: no compat table (a mapping with a torch section)")
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        print(f"refresh-compat: {args.compat}: {type(exc).__name__}: {one_line(exc)}", file=sys.stderr)
        return 2
    except RefreshError as exc:
        print(f"refresh-compat: {exc}", file=sys.stderr)
        return 2
    try:
        result = refresh(data.get("torch") or {}, source, args.since, notes)
        section = emit_section(result.releases, args.today)
        new_text = splice(text, section)
    except RefreshError as exc:
        print(f"refresh-compat: {exc}", file=sys.stderr)
        return 2
    except (KeyError, IndexError, TypeError, AttributeError, ValueError, RecursionError) as exc:
        # Every recording and registry answer is untrusted: one of an unexpected shape ends the
        # run in one line, with nothing written.
        detail = f"{type(exc).__name__}: {one_line(exc)}"
        print(
            f"refresh-compat: {source.describe()}: an answer of unexpected shape ({detail})", file=sys.stderr
        )
        return 2
    reread = yaml.safe_load(new_text)["torch"]
    if reread["releases"] != result.releases or reread["checked_on"] != args.today:
        raise AssertionError("the written section does not read back as built")  # a bug here, not input

    print(f"refresh-compat: read {source.describe()}", file=sys.stderr)
    for line in result.kept:
        print(f"  kept: {line}", file=sys.stderr)
    for line in result.notes:
        print(f"  note: {line}", file=sys.stderr)
    name = label(args.compat)
    diff = list(
        difflib.unified_diff(text.splitlines(True), new_text.splitlines(True), f"a/{name}", f"b/{name}")
    )
    sys.stdout.writelines(diff)
    if not diff:
        print("refresh-compat: no change", file=sys.stderr)
    elif args.write:
        write_atomically(args.compat, new_text)
        print(f"refresh-compat: wrote {args.compat}", file=sys.stderr)
    return 1 if (args.check and diff) else 0


if __name__ == "__main__":
    sys.exit(main())
