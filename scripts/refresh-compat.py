#!/usr/bin/env python3
"""Refresh the torch section of imagekit/data/compat.yaml from the package registries' metadata.

Like cibuildwheel's bin/update_* scripts, this rebuilds a table from what the registries publish
and prints a reviewable unified diff; `--write` applies it (atomically).

What it reads (no wheel is downloaded):
  * the configured index's file list of torch, torchvision and torchaudio (PEP 691 JSON, or the
    PEP 503 HTML page): the torch patches of each release, the CPython versions with a manylinux
    x86_64 (and aarch64) wheel, and the upload dates;
  * pip's dry-run report (`pip install --dry-run --report`) for `torch==<patch>` against that
    index, dependencies resolved for one Linux x86_64 CPython: the CUDA variant PyPI's wheel is
    built for (the CUDA runtime it pulls), and the cuDNN, NCCL and cudart versions it pins;
  * pip's dry-run report (`--no-deps`) for the manylinux aarch64 wheel of each torch patch: its
    Requires-Dist (pip reads the PEP 658 metadata file, or the wheel's METADATA by HTTP range
    requests), whose markers, evaluated for Linux aarch64 here (pip would evaluate them for this
    host), say which CUDA build the aarch64 wheel is in effect: `aarch64.pypi`;
  * pip's dry-run report (`--no-deps`) for each recent torchvision / torchaudio release: which
    torch patch it pins (`Requires-Dist: torch==X`) or admits;
  * PyTorch's own wheel index (`--torch-index https://download.pytorch.org/whl`) when given and
    reachable: the CUDA variants of each release and what each variant's wheel pins, and the
    variants with an aarch64 wheel (`aarch64.variants`);
  * the index's file list of `cuda-toolkit`, NVIDIA's metapackage: the newest final release of each
    CUDA minor, written as the `toolkit` of that minor's row of the `cuda` section (the rest of the
    row is left as it is). A CUDA minor on the index that the table lacks is listed as a note: its
    row (the nvidia/cuda tag, the drivers) comes from NVIDIA's release notes and Docker Hub, which
    this tool does not read (neither is reachable from the project's machines).

Facts the registries cannot give (the variant list when PyTorch's index is not reachable, a
variant's pins that were not read, the NumPy caps, the CUDA rows' tags and drivers, the NGC stacks)
are kept from the existing table and listed as "kept" on stderr.

Offline: `--from-reports DIR` reads reports saved earlier (by `--save-reports DIR`) instead of
running pip or fetching anything; tests/fixtures/compat/ holds such a recording.

Examples:
  scripts/refresh-compat.py                          # diff against PyPI, newest release onwards
  scripts/refresh-compat.py --since 2.0 --write      # re-read every release and apply
  scripts/refresh-compat.py --torch-index https://download.pytorch.org/whl
  scripts/refresh-compat.py --from-reports tests/fixtures/compat --compat /tmp/compat.yaml

It imports imagekit from its own checkout (versions, platform and wheel tags, and the table's record
types, which check every release it writes) and `packaging` (PEP 508 markers): run it in the
project's development environment.
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
from typing import Any, NoReturn

# The checkout this script belongs to: its imagekit reads the table this script writes.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml
from packaging.markers import Marker

from imagekit.core import platforms
from imagekit.core.errors import ImagekitError
from imagekit.core.limits import FILE_NAME_BYTES
from imagekit.core.paths import read_regular_file, read_regular_text
from imagekit.core.text import printable, redact
from imagekit.core.versions import compare, cuda_variant, minor_of, version_key
from imagekit.facts.compat import Aarch64Wheels, CudaRelease, Libraries, TorchRelease
from imagekit.render.wheels import platform_tags

REPO = Path(__file__).resolve().parent.parent
DEFAULT_COMPAT = REPO / "imagekit" / "data" / "compat.yaml"
DEFAULT_INDEX = "https://pypi.org/simple"
COMPANIONS = ("torchvision", "torchaudio")
# NVIDIA's metapackage of one CUDA toolkit release: its extras pin that release's library and compiler
# wheels (torch's CUDA 13 wheels require it; a devel cell's `nvcc: wheels` installs its compiler extras).
TOOLKIT_PROJECT = "cuda-toolkit"
# A companion whose torch requirement is not an exact pin pairs with the torch patch it was
# uploaded with: within this many days of that patch's first upload.
RELEASE_WINDOW = dt.timedelta(days=3)
# Python the dry runs resolve for, when the patch has a wheel for it.
DEFAULT_PYTHON = "3.12"
X86_64 = platforms.get("linux/amd64").machine
AARCH64 = platforms.get("linux/arm64").machine
# Environment variables that would point pip at another index, add constraints or links.
PIP_ENV_DROPPED = (
    "PIP_CONSTRAINT",
    "PIP_BUILD_CONSTRAINT",
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
# The keys of a release this tool writes, in the order imagekit's records declare them.
RELEASE_KEYS = tuple(k for k in TorchRelease.model_fields if k != "minor")  # variants ... aarch64, checked
AARCH64_KEYS = tuple(Aarch64Wheels.model_fields)  # pypi, variants, checked
LIBRARY_KEYS = tuple(Libraries.model_fields)  # cudnn, nccl, cudart

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
    "are kept as they are. A release with checked: false holds a fact not read from a source. "
    "aarch64 (linux/arm64, Grace): `pypi` is the build PyPI's manylinux aarch64 wheel is in effect, "
    "read from that wheel's Requires-Dist (2.10.0: every nvidia-*/triton requirement gated to x86_64, "
    "so CPU; 2.11-2.14: cuda-toolkit 13.0.x, cu130; 2.15.0: cuda-toolkit 13.2.2, cu132; before 2.10 "
    "PyPI's aarch64 wheels were CPU builds). `variants`: PyTorch's index's aarch64 wheels, which no "
    "machine of this project can reach: taken from PyTorch's release announcements (CUDA aarch64 "
    "wheels from 2.6, cu126 built for sm_80/sm_90 only; cu128/cu129/cu130 from 2.7-2.9), checked: "
    "false until the refresh reads the index."
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
    return Wheel(normalize(match.group("name")), match.group("version"), python, machines)


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


def variant_of(cuda: str) -> str:
    """The wheel variant of a CUDA version (a cudart or toolkit release): "13.0.96" -> "cu130"."""
    if len(version_key(cuda)) < 2:
        raise ValueError(f"not a CUDA version: {cuda!r}")
    return cuda_variant(cuda)


# --------------------------------------------------------------------------------------------
# Where the metadata comes from: the network (pip, HTTP), or a recording of it


class Source:
    def listing(self, project: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def report(
        self, key: str, requirements: list[str], *, deps: bool, python: str, machine: str = X86_64
    ) -> dict[str, Any]:
        """pip's dry-run report of ``requirements`` for one CPython on a glibc 2.28 Linux ``machine``
        (recorded as ``<key>.json``)."""
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
COMPAT_BYTES = 1_000_000  # the compat table is about 16 kB


def read_json(path: Path) -> Any:
    """A recorded JSON file, bounded; anything else (not UTF-8, not JSON, nested past what the
    parser takes) is one RefreshError naming the file."""
    try:
        # a regular file only (imagekit.core.paths): a FIFO would hang the refresh, /dev/zero be
        # read to the bound
        raw = read_regular_file(path, RECORDING_BYTES, "a JSON recording (a pip report, a listing)")
    except ImagekitError as exc:
        raise RefreshError(exc.message) from None
    try:
        return json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RefreshError(f"{path}: not a JSON recording ({type(exc).__name__}: {one_line(exc)})") from None


class RecordedSource(Source):
    """Reads what `--save-reports` wrote: files-<project>.json, <key>.json and, where PyTorch's
    index was read, <project>-index-files.json."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, name: str) -> Path:
        """The recording ``name``, named after what the listing holds (a release's version): a
        name no file system holds is refused in one line, not an OSError from the stat."""
        if len(name.encode()) > FILE_NAME_BYTES:
            raise RefreshError(
                f"{self.directory}: the listing names {name[:40]}... ({len(name):,} characters), no"
                f" recording's name (at most {FILE_NAME_BYTES} bytes): a release version that long is"
                " no version; record the listing again"
            )
        return self.directory / name

    def _load(self, name: str) -> Any:
        path = self._path(name)
        if not path.is_file():
            raise RefreshError(f"{path} is not recorded (record it with --save-reports)")
        return read_json(path)

    def listing(self, project: str) -> list[dict[str, Any]]:
        files: list[dict[str, Any]] = self._load(f"files-{project}.json")["files"]
        return files

    def report(
        self, key: str, requirements: list[str], *, deps: bool, python: str, machine: str = X86_64
    ) -> dict[str, Any]:
        report: dict[str, Any] = self._load(f"{key}.json")
        return report

    def torch_index_files(self, project: str) -> list[str] | None:
        path = self._path(f"{project}-index-files.json")
        if not path.is_file():
            return None
        files: list[str] = read_json(path)["files"]
        return files

    def torch_index_report(
        self, key: str, requirement: str, variant: str, python: str
    ) -> dict[str, Any] | None:
        path = self._path(f"{key}.json")
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
        self,
        requirements: list[str],
        *,
        deps: bool,
        python: str,
        index: str,
        extra_index: str | None,
        machine: str = X86_64,
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
                # pip does not widen --platform: every tag a glibc 2.28 machine accepts is named
                *(arg for tag in platform_tags(None, machine) for arg in ("--platform", tag)),
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
            report: dict[str, Any] = read_json(out)
            return report

    def report(
        self, key: str, requirements: list[str], *, deps: bool, python: str, machine: str = X86_64
    ) -> dict[str, Any]:
        raw = self._pip_report(
            requirements, deps=deps, python=python, index=self.index_url, extra_index=None, machine=machine
        )
        report = trim_report(raw)
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


def releases_in(
    files: list[dict[str, Any]], *, cpython_only: bool, machine: str = X86_64
) -> dict[str, Patch]:
    """Final releases with a manylinux wheel for ``machine`` (a CPython-specific one when
    `cpython_only`), with the CPythons of their cpXY wheels and their first upload."""
    patches: dict[str, Patch] = {}
    for entry in files:
        wheel = parse_wheel(entry["filename"])
        if wheel is None or machine not in wheel.machines or not plain(wheel.version) or entry.get("yanked"):
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
    torch_key, companion_key = version_key(torch), version_key(companion)
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
        return max(exact, key=lambda c: version_key(c.version)).version
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
        return max(near, key=lambda c: version_key(c.version)).version
    return None


def python_for(patch: Patch) -> str:
    """The CPython a dry run resolves for: DEFAULT_PYTHON, else the newest below it with a wheel."""
    wanted = tuple(int(p) for p in DEFAULT_PYTHON.split("."))
    if not patch.pythons or wanted in patch.pythons:
        return DEFAULT_PYTHON
    below = [p for p in patch.pythons if p <= wanted]
    major, minor = max(below) if below else min(patch.pythons)
    return f"{major}.{minor}"


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
    cuda = [r for r in active if r.name == "cuda-toolkit" or r.name.startswith("nvidia-")]
    if not cuda:
        return "cpu"
    for name in ("cuda-toolkit", "nvidia-cuda-runtime"):
        pins = [exact_pin(r.specifier) for r in cuda if re.fullmatch(rf"{name}(-cu\d+)?", r.name)]
        if pins and pins[0]:
            return variant_of(pins[0])
    names = ", ".join(sorted({r.name for r in cuda}))
    raise RefreshError(f"torch on {machine} requires {names} but pins no CUDA toolkit or runtime version")


@dataclass
class Refresh:
    releases: dict[str, dict[str, Any]]
    kept: list[str]
    notes: list[str]


def by_minor(patches: Iterable[Patch]) -> dict[str, list[Patch]]:
    """Patches grouped by their release (minor), oldest first."""
    minors: dict[str, list[Patch]] = {}
    for patch in sorted(patches, key=lambda p: version_key(p.version)):
        minors.setdefault(minor_of(patch.version), []).append(patch)
    return minors


def refresh(existing: dict[str, Any], source: Source, since: str | None, notes: list[str]) -> Refresh:
    old_releases: dict[str, dict[str, Any]] = {
        str(k): dict(v) for k, v in existing.get("releases", {}).items()
    }
    kept: list[str] = []
    listing = source.listing("torch")
    minors = by_minor(releases_in(listing, cpython_only=True).values())
    if not minors:
        raise RefreshError("the index lists no torch wheels for manylinux x86_64")
    arm = by_minor(releases_in(listing, cpython_only=True, machine=AARCH64).values())
    # default: re-read from the newest release the table has (all of the index for an empty table)
    floor = since or (max(old_releases, key=version_key) if old_releases else min(minors, key=version_key))
    chosen = sorted((m for m in minors if compare(m, floor) >= 0), key=version_key)
    if not chosen:
        raise RefreshError(f"the index has no torch release from {floor} on")
    first_upload = min((p.uploaded for m in chosen for p in minors[m] if p.uploaded), default=None)
    builder = ReleaseBuilder(
        source,
        read_companions(source, first_upload, notes),
        {project: source.torch_index_files(project) for project in ("torch", "torchvision")},
        kept,
        notes,
    )
    releases = {m: v for m, v in old_releases.items() if compare(m, floor) < 0}
    for minor in chosen:
        releases[minor] = builder.release(
            minor, minors[minor], arm.get(minor, []), old_releases.get(minor) or {}
        )
    for minor, entry in releases.items():
        if "checked" not in entry:
            entry["checked"] = True
            if compare(minor, floor) < 0:
                kept.append(f"{minor}: not re-read (older than {floor}); checked: true assumed (no mark)")
    return Refresh(dict(sorted(releases.items(), key=lambda kv: version_key(kv[0]))), kept, notes)


def read_companions(
    source: Source, first_upload: dt.datetime | None, notes: list[str]
) -> dict[str, list[Companion]]:
    """Every torchvision / torchaudio release uploaded since the first chosen torch patch, with the
    torch requirement its metadata states."""
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
            wanted = sorted(versions, key=version_key)[-12:]
            notes.append(f"{project}: the index gives no upload times; reading its 12 newest releases")
        companions[project] = []
        for version in sorted(wanted, key=version_key):
            release = versions[version]
            report = source.report(
                f"{project}-{version}", [f"{project}=={version}"], deps=False, python=python_for(release)
            )
            meta = report_item(report, project)
            requirement = torch_requirement(meta.get("requires_dist"))
            # no cpXY wheel among its files: one wheel for every CPython (stable ABI)
            companions[project].append(Companion(version, release.uploaded, requirement, not release.pythons))
    return companions


@dataclass
class ReleaseBuilder:
    """Rebuilds one release's entry from what the registries say, keeping (and listing in `kept`)
    what they cannot say."""

    source: Source
    companions: dict[str, list[Companion]]
    torch_index: dict[str, list[str] | None]  # file names on PyTorch's index; None: not read
    kept: list[str]
    notes: list[str]

    def release(
        self, minor: str, patches: list[Patch], arm_patches: list[Patch], old: dict[str, Any]
    ) -> dict[str, Any]:
        """``patches``: the x86_64 ones, oldest first; ``arm_patches`` those with an aarch64 wheel."""
        libs = self.pypi_libraries(minor, patches)
        pypi_default = variant_of(libs["cudart"])
        variants, checked = self.variants(minor, patches, pypi_default, old)
        entry: dict[str, Any] = {"variants": variants, "pypi_default": pypi_default}
        cudnn = libs.get("cudnn")
        if cudnn:
            entry["cudnn_major"] = version_key(cudnn)[0]
        elif "cudnn_major" in old:
            entry["cudnn_major"] = old["cudnn_major"]
            self.kept.append(f"{minor}: cudnn_major {old['cudnn_major']} (PyPI's wheel pins no cuDNN)")
        entry["python"] = self.python(minor, patches)
        if "numpy" in old:
            entry["numpy"] = old["numpy"]
            self.kept.append(f"{minor}: numpy {old['numpy']!r} (no registry states it)")
        entry["libraries"] = self.libraries(minor, patches, variants, pypi_default, libs, old)
        entry["patches"] = self.pairs(minor, patches, old)
        entry["checked"] = checked
        entry["aarch64"] = self.aarch64(minor, arm_patches, old)
        for key, value in old.items():
            if key not in RELEASE_KEYS:
                entry[key] = value
                self.kept.append(f"{minor}: {key} (a key this tool does not refresh)")
        return entry

    def pypi_libraries(self, minor: str, patches: list[Patch]) -> dict[str, str]:
        """What PyPI's wheel of the newest patch pulls (cuDNN, NCCL, cudart); every patch is read
        and a patch that pins otherwise is noted."""
        per_patch: dict[str, dict[str, str]] = {}
        for patch in patches:
            report = self.source.report(
                f"torch-{patch.version}", [f"torch=={patch.version}"], deps=True, python=python_for(patch)
            )
            meta = report_item(report, "torch")
            if meta["version"] != patch.version:
                raise RefreshError(f"the report for torch=={patch.version} installs torch {meta['version']}")
            self.requires_python_note(minor, patch, meta.get("requires_python"))
            libs = libraries_from(report)
            if "cudart" not in libs:
                raise RefreshError(
                    f"torch {patch.version} ({report_wheel(report, 'torch')}) pulls no CUDA runtime"
                )
            per_patch[patch.version] = libs
        newest = patches[-1].version
        libs = per_patch[newest]
        for version, other in per_patch.items():
            if other != libs:
                self.notes.append(
                    f"{minor}: torch {version} pins {fmt_libs(other)}, {newest} {fmt_libs(libs)}; "
                    f"the table follows {newest}"
                )
        return libs

    def requires_python_note(self, minor: str, patch: Patch, requires_python: str | None) -> None:
        floor = re.match(r">=\s*(\d+)\.(\d+)", requires_python or "")
        if floor and (int(floor.group(1)), int(floor.group(2))) != min(patch.pythons):
            self.notes.append(
                f"{minor}: torch {patch.version} says Requires-Python {requires_python} "
                f"but its oldest wheel is for CPython {min(patch.pythons)[0]}.{min(patch.pythons)[1]}"
            )

    def index_variants(self, minor: str, patches: list[Patch], machine: str) -> list[str] | None:
        """The variants of these patches on PyTorch's index (torch, and the paired torchvision where
        one exists); None when the index was not read or lists none."""
        if self.torch_index["torch"] is None:
            return None
        found = index_variants(self.torch_index["torch"], "torch", {p.version for p in patches}, machine)
        visions = {v for p in patches if (v := pair(p, self.companions["torchvision"], "torchvision"))}
        if found and visions and self.torch_index["torchvision"] is not None:
            with_vision = index_variants(self.torch_index["torchvision"], "torchvision", visions, machine)
            for variant in by_cuda(found - with_vision):
                self.notes.append(
                    f"{minor}: PyTorch's index has torch+{variant} but no torchvision+{variant} "
                    f"for {machine}; not listed"
                )
            found &= with_vision
        return by_cuda(found) if found else None

    def variants(
        self, minor: str, patches: list[Patch], pypi_default: str, old: dict[str, Any]
    ) -> tuple[list[str], bool]:
        """The x86_64 CUDA variants and whether they were read: PyTorch's index, else the table."""
        read = self.index_variants(minor, patches, X86_64)
        if read:
            variants, checked = read, True
        elif old.get("variants"):
            variants, checked = list(old["variants"]), bool(old.get("checked", True))
            self.kept.append(f"{minor}: variants {', '.join(variants)} (PyTorch's index not read)")
        else:
            variants, checked = [pypi_default], False
            self.kept.append(
                f"{minor}: variants unknown, only PyPI's {pypi_default} listed "
                "(PyTorch's index not read): checked: false"
            )
        if pypi_default not in variants:
            self.notes.append(
                f"{minor}: PyPI's wheel is {pypi_default}, which the variant list lacked; added"
            )
            variants = by_cuda([*variants, pypi_default])
        return variants, checked

    def python(self, minor: str, patches: list[Patch]) -> list[str]:
        """The oldest and newest CPython every patch has a wheel for."""
        lowest = max(min(p.pythons) for p in patches)
        highest = min(max(p.pythons) for p in patches)
        for patch in patches:
            if (min(patch.pythons), max(patch.pythons)) != (lowest, highest):
                span = f"{min(patch.pythons)}-{max(patch.pythons)}"
                self.notes.append(
                    f"{minor}: torch {patch.version} has wheels for CPython {span}; "
                    "the table keeps what all patches have"
                )
        return [f"{lowest[0]}.{lowest[1]}", f"{highest[0]}.{highest[1]}"]

    def libraries(
        self,
        minor: str,
        patches: list[Patch],
        variants: list[str],
        pypi_default: str,
        libs: dict[str, str],
        old: dict[str, Any],
    ) -> dict[str, dict[str, str]]:
        """Per variant: PyPI's from its report, the others from PyPI's index or the table."""
        libraries: dict[str, dict[str, str]] = {}
        old_libraries = old.get("libraries") or {}
        for variant in variants:
            if variant == pypi_default:
                libraries[variant] = libs
                continue
            read = None
            if self.torch_index["torch"] is not None:
                version = f"{patches[-1].version}+{variant}"
                read_report = self.source.torch_index_report(
                    f"torch-{version}", f"torch=={version}", variant, python_for(patches[-1])
                )
                read = libraries_from(read_report) if read_report else None
            if read:
                libraries[variant] = read
            elif variant in old_libraries:
                libraries[variant] = dict(old_libraries[variant])
                self.kept.append(f"{minor}: libraries of {variant} (not read from PyTorch's index)")
        return libraries

    def pairs(self, minor: str, patches: list[Patch], old: dict[str, Any]) -> dict[str, list[str | None]]:
        """torch patch -> [torchvision, torchaudio]; a patch the index no longer lists is kept."""
        pairs: dict[str, list[str | None]] = {}
        for patch in patches:
            pairs[patch.version] = [pair(patch, self.companions[project], project) for project in COMPANIONS]
        for version, value in (old.get("patches") or {}).items():
            if str(version) not in pairs:
                pairs[str(version)] = list(value) if value is not None else [None, None]
                self.kept.append(f"{minor}: patch {version} (not on the index any more)")
        return dict(sorted(pairs.items(), key=lambda kv: version_key(kv[0])))

    def aarch64(self, minor: str, patches: list[Patch], old: dict[str, Any]) -> dict[str, Any]:
        """PyPI's aarch64 build in effect (None: no aarch64 wheel) and the aarch64 variants of
        PyTorch's index, else the table's, else PyPI's alone (checked: false)."""
        pypi = self.pypi_aarch64(minor, patches)
        old_arm = old.get("aarch64") or {}
        read = self.index_variants(minor, patches, AARCH64) if patches else None
        if read:
            variants, checked = read, True
        elif old_arm.get("variants") is not None:
            variants, checked = list(old_arm["variants"]), bool(old_arm.get("checked", False))
            self.kept.append(f"{minor}: aarch64 variants {flow(variants)} (PyTorch's index not read)")
        else:
            variants, checked = [pypi] if pypi else [], False
            self.kept.append(
                f"{minor}: aarch64 variants unknown, only PyPI's {pypi or '(none)'} listed "
                "(PyTorch's index not read): checked: false"
            )
        if pypi and pypi not in variants:
            self.notes.append(
                f"{minor}: PyPI's aarch64 wheel is {pypi}, which the variant list lacked; added"
            )
            variants = by_cuda([*variants, pypi])
        return {"pypi": pypi, "variants": variants, "checked": checked}

    def pypi_aarch64(self, minor: str, patches: list[Patch]) -> str | None:
        """The build PyPI's aarch64 wheel of the newest patch is in effect (its Requires-Dist for
        Linux aarch64); every patch is read and one that differs is noted."""
        builds: dict[str, str] = {}
        for patch in patches:
            python = python_for(patch)
            report = self.source.report(
                f"torch-{patch.version}-{AARCH64}",
                [f"torch=={patch.version}"],
                deps=False,
                python=python,
                machine=AARCH64,
            )
            meta = report_item(report, "torch")
            if meta["version"] != patch.version:
                raise RefreshError(
                    f"the aarch64 report for torch=={patch.version} installs {meta['version']}"
                )
            builds[patch.version] = cuda_build(meta.get("requires_dist"), python, AARCH64)
        if not builds:
            return None
        newest = patches[-1].version
        for version, build in builds.items():
            if build != builds[newest]:
                self.notes.append(
                    f"{minor}: PyPI's aarch64 torch {version} is {build}, {newest} {builds[newest]}; "
                    f"the table follows {newest}"
                )
        return builds[newest]


def fmt_libs(libs: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in libs.items())


# --------------------------------------------------------------------------------------------
# The CUDA section's `toolkit`: the newest cuda-toolkit release of each CUDA minor on the index

# One row of the cuda section's releases, as the table writes them:
#     "13.2": { image: "13.2.1", ..., checked: false }
CUDA_ROW = re.compile(r'^(?P<indent>\s+)"(?P<minor>\d+\.\d+)":\s*\{(?P<body>.*)\}\s*$')
TOOLKIT_KEY = re.compile(r'\btoolkit:\s*(?P<value>"[^"]*"|null)')


def toolkit_releases(files: list[dict[str, Any]]) -> dict[str, str]:
    """CUDA minor -> the newest final cuda-toolkit release of it in a listing, in the form pip
    matches it (PEP 440 ignores trailing zeros: the file 13.0.3.0 is release 13.0.3). Yanked files,
    pre-releases (13.4.0rc1) and the 0.0.0a0 placeholder are left out."""
    newest: dict[str, tuple[int, ...]] = {}
    for entry in files:
        wheel = parse_wheel(entry["filename"])
        if wheel is None or wheel.name != TOOLKIT_PROJECT or not plain(wheel.version) or entry.get("yanked"):
            continue
        key = version_key(wheel.version)
        while len(key) > 3 and key[-1] == 0:
            key = key[:-1]
        if len(key) < 2 or key[0] == 0:
            continue
        minor = f"{key[0]}.{key[1]}"
        newest[minor] = max(newest.get(minor, key), key)
    return {minor: ".".join(map(str, key)) for minor, key in newest.items()}


def cuda_rows(lines: list[str]) -> range:
    """The lines of the cuda section (from `cuda:` to the next top-level key)."""
    start = next((i for i, line in enumerate(lines) if re.match(r"cuda:\s*(#.*)?$", line)), None)
    if start is None:
        raise RefreshError("the compat file has no top-level `cuda:` key")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"[^\s#]", lines[i])), len(lines))
    return range(start + 1, end)


def with_toolkit(body: str, toolkit: str) -> str:
    """A row's flow mapping with its `toolkit` set: replaced where it is, else written before
    `checked` (the order imagekit's record declares), else at the end."""
    value = f'toolkit: "{toolkit}"'
    found = TOOLKIT_KEY.search(body)
    if found:
        return body[: found.start()] + value + body[found.end() :]
    if re.search(r"\bchecked:", body):
        return re.sub(r"\bchecked:", f"{value}, checked:", body, count=1)
    return f"{body.rstrip()}, {value} "


def refresh_toolkits(text: str, toolkits: dict[str, str], kept: list[str], notes: list[str]) -> str:
    """``text`` with every cuda row's `toolkit` set to the index's newest release of its minor; a
    minor the index has past the table's newest row is a note (its row needs facts from elsewhere)."""
    lines = text.splitlines(keepends=True)
    seen: set[str] = set()
    for i in cuda_rows(lines):
        row = CUDA_ROW.match(lines[i].rstrip("\n"))
        if row is None:
            continue
        minor, body = row.group("minor"), row.group("body")
        seen.add(minor)
        toolkit = toolkits.get(minor)
        if toolkit is None:
            old = TOOLKIT_KEY.search(body)
            if old and old.group("value") != "null":
                value = old.group("value")
                kept.append(f"CUDA {minor}: toolkit {value} (the index lists no cuda-toolkit {minor})")
            continue
        lines[i] = f'{row.group("indent")}"{minor}": {{{with_toolkit(body, toolkit)}}}\n'
    # a minor newer than the table's rows is news; older ones it leaves out (12.0, 12.3, 12.5: no
    # torch was built for them) are not
    newest = max(seen, key=version_key, default="0.0")
    for minor in sorted((m for m in toolkits if version_key(m) > version_key(newest)), key=version_key):
        notes.append(
            f"CUDA {minor}: cuda-toolkit {toolkits[minor]} is on the index but the table has no row for it;"
            " add one (its nvidia/cuda tag and drivers: NVIDIA's release notes and Docker Hub)"
        )
    return "".join(lines)


def validate_cuda(text: str, toolkits: dict[str, str]) -> None:
    """Every cuda row as imagekit reads it, each toolkit as written: a refresh that would write what
    imagekit refuses ends here, with nothing written."""
    rows = yaml.safe_load(text)["cuda"]["releases"]
    for minor, entry in rows.items():
        record = CudaRelease(minor=str(minor), **entry)
        if str(minor) in toolkits and record.toolkit != toolkits[str(minor)]:
            raise AssertionError(f"CUDA {minor}: the toolkit written does not read back")  # a bug here


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


def emit_value(key: str, value: Any) -> list[str]:
    """One key of a release, as lines: libraries one flow mapping per variant, patches one pair
    per line, everything else (aarch64 too) on one line."""
    if key == "libraries":
        lines = ["      libraries:\n"] if value else []
        for variant, libs in value.items():
            ordered = {k: libs[k] for k in LIBRARY_KEYS if k in libs} | {
                k: v for k, v in libs.items() if k not in LIBRARY_KEYS
            }
            lines.append(f"        {scalar(variant)}: {flow(ordered)}\n")
        return lines
    if key == "patches":
        pairs = [f"        {json.dumps(str(version))}: {flow(pair_)}\n" for version, pair_ in value.items()]
        return [PATCHES_COMMENT, "      patches:\n", *pairs]
    if key == "aarch64" and isinstance(value, dict):
        ordered = {k: value[k] for k in AARCH64_KEYS if k in value} | {
            k: v for k, v in value.items() if k not in AARCH64_KEYS
        }
        return [f"      aarch64: {flow(ordered)}\n"]
    return [f"      {key}: {flow(value)}\n"]


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
            out += emit_value(key, entry[key])
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


class MaskedParser(argparse.ArgumentParser):
    """argparse, its usage errors masked: it repeats what it could not parse, and
    `--index-urll https://user:password@host/simple` would print the password."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {printable(redact(message))}\n")


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = MaskedParser(
        description="Rebuild the torch section of compat.yaml, and the CUDA rows' cuda-toolkit releases,"
        " from registry metadata and print the diff.",
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
    return args


def make_source(args: argparse.Namespace, notes: list[str]) -> Source:
    if args.from_reports:
        return RecordedSource(args.from_reports)
    return LiveSource(
        args.index_url,
        args.torch_index,
        args.pip.split(),
        args.fast_deps,
        args.keep_pip_config,
        args.save_reports,
        notes,
    )


def load_table(path: Path) -> tuple[str, dict[str, Any]]:
    """The compat file's text and its torch section; RefreshError when it is no compat table."""
    try:
        text = read_regular_text(path, COMPAT_BYTES, "the compat table (imagekit/data/compat.yaml)")
    except ImagekitError as exc:
        raise RefreshError(exc.message) from None
    except OSError as exc:  # none there
        raise RefreshError(f"{path}: {type(exc).__name__}: {one_line(exc)}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RefreshError(f"{path}: {type(exc).__name__}: {one_line(exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("torch") or {}, dict):
        raise RefreshError(f"{path}: no compat table (a mapping with a torch section)")
    return text, data.get("torch") or {}


def validate(releases: dict[str, dict[str, Any]]) -> None:
    """Every release as imagekit reads it (``imagekit.facts.compat.TorchRelease``): a refresh that would
    write what imagekit refuses ends here, with nothing written. A key the record does not know (one
    this tool keeps without refreshing it) is left to whoever added it."""
    for minor, entry in releases.items():
        TorchRelease(minor=minor, **{k: v for k, v in entry.items() if k in TorchRelease.model_fields})


def rebuild(args: argparse.Namespace, source: Source, notes: list[str]) -> tuple[str, str, Refresh]:
    """(the file's text, its refreshed text, the refresh); RefreshError or an exception of the
    kinds main reports when an answer has an unexpected shape."""
    text, table = load_table(args.compat)
    result = refresh(table, source, args.since, notes)
    validate(result.releases)
    new_text = splice(text, emit_section(result.releases, args.today))
    reread = yaml.safe_load(new_text)["torch"]
    if reread["releases"] != result.releases or reread["checked_on"] != args.today:
        raise AssertionError("the written section does not read back as built")  # a bug here, not input
    toolkits = toolkit_releases(source.listing(TOOLKIT_PROJECT))
    if not toolkits:
        raise RefreshError(f"the index lists no {TOOLKIT_PROJECT} release")
    new_text = refresh_toolkits(new_text, toolkits, result.kept, result.notes)
    validate_cuda(new_text, toolkits)
    return text, new_text, result


def say(line: str) -> None:
    """A line on stderr, a login in it masked: --index-url and --torch-index may carry one, and the
    index URL is repeated in the source's description, its notes and its errors."""
    print(printable(redact(line)), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    notes: list[str] = []
    source = make_source(args, notes)
    try:
        text, new_text, result = rebuild(args, source, notes)
    except RefreshError as exc:
        say(f"refresh-compat: {exc}")
        return 2
    except (KeyError, IndexError, TypeError, AttributeError, ValueError, RecursionError) as exc:
        # Every recording and registry answer is untrusted: one of an unexpected shape ends the
        # run in one line, with nothing written.
        detail = f"{type(exc).__name__}: {one_line(exc)}"
        say(f"refresh-compat: {source.describe()}: an answer of unexpected shape ({detail})")
        return 2

    say(f"refresh-compat: read {source.describe()}")
    for line in result.kept:
        say(f"  kept: {line}")
    for line in result.notes:
        say(f"  note: {line}")
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
