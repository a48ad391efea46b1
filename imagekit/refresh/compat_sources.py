"""Where the compat refresh's metadata comes from: the network (an index's project pages by HTTP,
pip's dry-run reports), or a recording of it (``--save-reports`` writes one, ``--from-reports``
reads it: tests/fixtures/compat/ holds such a recording)."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from imagekit.core.atomic import atomic_write
from imagekit.core.errors import ImagekitError, one_line
from imagekit.core.limits import FILE_NAME_BYTES
from imagekit.core.paths import read_regular_file
from imagekit.refresh.compat_metadata import X86_64, parse_listing, trim_listing, trim_report
from imagekit.refresh.pip_report import RefreshError
from imagekit.render.wheels import platform_tags

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


RECORDING_BYTES = 64 << 20  # pip's largest dry-run report of a torch release is a few hundred KB
ERROR_CHARS = 200  # of an exception's own text in a line about a recording or an answer


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
        raise RefreshError(
            f"{path}: not a JSON recording ({type(exc).__name__}: {one_line(exc, ERROR_CHARS)})"
        ) from None


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
            atomic_write(self.save_dir / name, json.dumps(data, indent=1, sort_keys=True) + "\n")

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
