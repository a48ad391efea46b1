"""The wheels a cell installs, resolved on the host, so its build context carries only those.

A wheelhouse may hold several torch releases (tens of GB of CUDA wheels); copying all of it into
every cell's context sends every byte to the engine once per cell. Instead pip resolves each
cell's requirement set (torch, torchvision, torchaudio, the NumPy cap, the cell's pip packages)
against the wheelhouse alone, as the image's Python would see it (``--python-version``, the
manylinux tags its glibc admits, ``--implementation cp``), in dry-run mode:

    python -m pip install --isolated --dry-run --ignore-installed --quiet --report - --no-index
        --find-links WHEELHOUSE --only-binary=:all: --python-version 3.11
        --platform manylinux_2_36_x86_64 ... --implementation cp --target TMP REQUIREMENT...

and the wheel files of its report are the closure. pip runs as a subprocess of the running
interpreter, isolated from the host's pip configuration (a host constraint file or find-links
would change the answer), bounded in time. Answers are cached per requirement set and wheelhouse
listing: in the process and on disk (``$IMAGEKIT_CACHE_DIR`` or ``~/.cache/imagekit``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from imagekit.atomic import atomic_write
from imagekit.errors import EnvironmentProblem, ImagekitError, InputError
from imagekit.limits import CLOSURE_CACHE_BYTES
from imagekit.paths import read_regular_file

TIMEOUT_S = 300.0
ARCH = "x86_64"
DEFAULT_GLIBC = "2.28"  # what PyTorch's own manylinux_2_28 wheels need, for an OS the table lacks
CACHE_ENV = "IMAGEKIT_CACHE_DIR"
CACHE_VERSION = 1


def platform_tags(glibc: str | None, arch: str = ARCH) -> tuple[str, ...]:
    """Every platform tag a Linux with ``glibc`` installs, newest first.

    pip takes ``--platform`` literally: ``manylinux_2_28_x86_64`` alone would miss a wheel tagged
    ``manylinux_2_27`` or ``manylinux2014``, so each is named (PEP 600's and the legacy aliases).
    """
    major, _, minor = (glibc or DEFAULT_GLIBC).partition(".")
    if major != "2" or not minor.isdigit():
        raise InputError(f"glibc {glibc!r}: expected 2.N")
    tags = [f"manylinux_2_{m}_{arch}" for m in range(int(minor), 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{arch}" for m, name in legacy.items() if m <= int(minor)]
    return (*tags, f"linux_{arch}")


@dataclass(frozen=True)
class Request:
    """One requirement set, as one Python on one platform installs it."""

    requirements: tuple[str, ...]
    python: str
    platforms: tuple[str, ...]


def _listing(wheelhouses: Sequence[Path]) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for root in wheelhouses:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                found.append((str(path.relative_to(root)), path.stat().st_size))
    return found


class WheelResolver:
    """Resolves requirement sets against the wheelhouses; one pip run per distinct set."""

    def __init__(
        self, wheelhouses: Sequence[Path], timeout_s: float = TIMEOUT_S, cache_dir: Path | None = None
    ) -> None:
        self.wheelhouses = tuple(wheelhouses)
        self.timeout_s = timeout_s
        env_dir = os.environ.get(CACHE_ENV)
        default = Path(env_dir) if env_dir else Path.home() / ".cache" / "imagekit"
        self.cache_dir = (cache_dir or default) / "closures"
        self._memo: dict[Request, tuple[Path, ...]] = {}
        self._lock = threading.Lock()
        self._listing_digest: str | None = None

    def _key(self, request: Request) -> str:
        if self._listing_digest is None:
            roots = [str(w.resolve()) for w in self.wheelhouses]
            listing = json.dumps([roots, _listing(self.wheelhouses)]).encode()
            self._listing_digest = hashlib.sha256(listing).hexdigest()
        document = [CACHE_VERSION, self._listing_digest, list(request.requirements), request.python]
        document.append(list(request.platforms))
        return hashlib.sha256(json.dumps(document).encode()).hexdigest()

    def closure(self, request: Request) -> tuple[Path, ...]:
        """The wheel files pip would install for ``request``, sorted; InputError when the
        wheelhouse cannot satisfy it, EnvironmentProblem when pip itself cannot run."""
        with self._lock:
            found = self._memo.get(request)
            if found is None:
                found = self._cached(request)
                self._memo[request] = found
            return found

    def _cached(self, request: Request) -> tuple[Path, ...]:
        path = self.cache_dir / f"{self._key(request)}.json"
        try:
            # a closure list is a few kB; anything else there (a FIFO, a device, a huge file) is
            # not read, only replaced by a fresh resolution
            names = json.loads(read_regular_file(path, CLOSURE_CACHE_BYTES, "a closure cache file"))
            files = tuple(self._inside(Path(name)) for name in names)
            if all(f.is_file() for f in files):
                return files
        except (OSError, ValueError, TypeError, InputError):
            pass
        files = self._resolve(request)
        # a read-only home (atomic_write's EnvironmentProblem) or an odd cache path (its
        # InputError): the closure is still right, only resolved again next time
        with contextlib.suppress(ImagekitError):
            atomic_write(path, json.dumps([str(f) for f in files]) + "\n")
        return files

    def _inside(self, path: Path) -> Path:
        resolved = Path(os.path.realpath(path))  # realpath: a link loop must not raise RuntimeError
        for root in self.wheelhouses:
            if resolved.is_relative_to(os.path.realpath(root)):
                return path
        raise InputError(f"pip picked {path}, which is in no wheelhouse")

    def _resolve(self, request: Request) -> tuple[Path, ...]:
        with tempfile.TemporaryDirectory(prefix="imagekit-closure-") as target:
            command = [
                sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed",
                "--quiet", "--disable-pip-version-check", "--report", "-", "--no-index",
                *(arg for w in self.wheelhouses for arg in ("--find-links", str(w))),
                "--only-binary=:all:", "--python-version", request.python,
                *(arg for p in request.platforms for arg in ("--platform", p)),
                "--implementation", "cp", "--target", target, *request.requirements,
            ]  # fmt: skip
            # No PIP_* from the host: its constraint file or find-links would change the answer.
            env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=self.timeout_s, env=env, check=False
                )
            except subprocess.TimeoutExpired:
                raise EnvironmentProblem(
                    f"pip did not resolve {' '.join(request.requirements)} within {self.timeout_s:g}s"
                ) from None
            except OSError as exc:
                raise EnvironmentProblem(f"cannot run pip ({sys.executable} -m pip): {exc}") from None
        if done.returncode != 0:
            errors = [
                line
                for line in done.stderr.splitlines()
                if line.startswith("ERROR:") and "ResolutionImpossible" not in line
            ]
            if not errors and "No module named pip" in done.stderr:
                raise EnvironmentProblem(f"{sys.executable} has no pip; install it to resolve wheelhouses")
            reason = errors[0].removeprefix("ERROR: ") if errors else " ".join(done.stderr.split())[-300:]
            raise InputError(
                f"the wheelhouse cannot satisfy {' '.join(request.requirements)} for Python"
                f" {request.python}: {reason}"
            )
        try:
            report = json.loads(done.stdout)
            urls = [str(item["download_info"]["url"]) for item in report["install"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise EnvironmentProblem(f"pip's dry-run report could not be read ({exc!r})") from None
        files = []
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme != "file":
                raise InputError(f"pip resolved {url}, which is not a wheelhouse file")
            files.append(self._inside(Path(unquote(parts.path))))
        return tuple(sorted(files))


def closure_bytes(files: Sequence[Path]) -> int:
    return sum(f.stat().st_size for f in files)
