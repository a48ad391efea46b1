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
would change the answer), bounded in time. Answers are cached per requirement set, target machine
and wheelhouse listing: in the process and on disk (``$IMAGEKIT_CACHE_DIR`` or ``~/.cache/imagekit``).

The target is another machine than the host (an aarch64 image resolved on x86_64) or another
Python: ``--platform`` and ``--python-version`` choose wheel tags and ``Requires-Python``, but pip
evaluates environment markers (PEP 508) against the interpreter it runs in. torch 2.10.0's aarch64
wheel gates every ``nvidia-*`` and ``triton`` requirement on ``platform_machine == "x86_64"``: true
on an x86 host, so a plain dry run would put CUDA wheels into a closure that a real aarch64 install
never gets; a ``python_version >= "3.12"`` requirement would be left out of a 3.12 image resolved
by a 3.11 pip. For such a target pip runs under ``_RUNNER``, which answers the marker variables
for the target (``marker_overrides``). The same owner fills wheelhouses for setup scripts:

    python -m imagekit.render.wheels download --machine aarch64 --python-version 3.11 --glibc 2.36
        --dest DIR REQUIREMENT... [-- PIP-OPTION...]
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from imagekit.core.atomic import atomic_write
from imagekit.core.errors import EnvironmentProblem, ImagekitError, InputError
from imagekit.core.limits import CLOSURE_CACHE_BYTES
from imagekit.core.paths import depends_on, read_regular_file
from imagekit.core.platforms import DEFAULT as DEFAULT_PLATFORM
from imagekit.core.platforms import MACHINES
from imagekit.core.platforms import get as get_platform
from imagekit.core.versions import project_key
from imagekit.facts.cuda_wheels import is_cuda_project
from imagekit.render.contract import CONSTRAINT_ENV
from imagekit.render.wheel_toolkit import COMPILER_PROJECTS

TIMEOUT_S = 300.0
DOWNLOAD_TIMEOUT_S = 3600.0  # a download of CUDA wheels is GBs
DEFAULT_MACHINE = get_platform(DEFAULT_PLATFORM).machine  # what every matrix without a platform means
DEFAULT_GLIBC = "2.28"  # what PyTorch's own manylinux_2_28 wheels need, for an OS the table lacks
CACHE_ENV = "IMAGEKIT_CACHE_DIR"
CACHE_VERSION = 2  # 2: the target machine is part of the key; markers are the target's
RUNNER_FAILED = 70  # _RUNNER's exit status when it cannot set pip's marker environment (EX_SOFTWARE)

# pip with the target's environment markers: the marker values named by the JSON object in argv[1]
# (those of ``marker_overrides``) replace the running interpreter's in every marker pip evaluates
# (pip's vendored ``packaging.markers.default_environment``, which each ``Marker.evaluate`` calls);
# the rest of argv is pip's. Nothing else in pip changes.
_RUNNER = """\
import json, sys
try:
    from pip._vendor.packaging import markers
    host_environment = markers.default_environment
except (ImportError, AttributeError) as exc:
    sys.stderr.write(f"imagekit: cannot set pip's marker environment: {exc!r}\\n")
    sys.exit(__RUNNER_FAILED__)
overrides = json.loads(sys.argv.pop(1))
def target_environment():
    environment = host_environment()
    environment.update(overrides)
    return environment
markers.default_environment = target_environment
from pip._internal.cli.main import main
sys.exit(main())
""".replace("__RUNNER_FAILED__", str(RUNNER_FAILED))


def platform_tags(glibc: str | None, machine: str = DEFAULT_MACHINE) -> tuple[str, ...]:
    """Every platform tag a Linux on ``machine`` with ``glibc`` installs, newest first.

    pip takes ``--platform`` literally: ``manylinux_2_28_x86_64`` alone would miss a wheel tagged
    ``manylinux_2_27`` or ``manylinux2014``, so each is named (PEP 600's and the legacy aliases).
    """
    major, _, minor = (glibc or DEFAULT_GLIBC).partition(".")
    if major != "2" or not minor.isdigit():
        raise InputError(f"glibc {glibc!r}: expected 2.N")
    if machine not in MACHINES:
        raise InputError(f"machine {machine!r}: expected one of {', '.join(MACHINES)}")
    tags = [f"manylinux_2_{m}_{machine}" for m in range(int(minor), 4, -1)]
    # manylinux2014 is the first legacy tag with aarch64 wheels (PEP 599); 2010 and 1 are x86 only
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    if machine != "x86_64":
        legacy = {17: "manylinux2014"}
    tags += [f"{name}_{machine}" for m, name in legacy.items() if m <= int(minor)]
    return (*tags, f"linux_{machine}")


def marker_overrides(python: str, machine: str) -> dict[str, str]:
    """The environment-marker values in which the target (``machine``, Python ``python``) differs
    from the interpreter running pip; empty when pip may judge markers as it is."""
    overrides: dict[str, str] = {}
    if machine != platform.machine():
        overrides["platform_machine"] = machine
    if python.split(".")[:2] != [str(n) for n in sys.version_info[:2]]:
        # as pip's --python-version reads it for Requires-Python: "3.12" compares as 3.12.0
        overrides |= {
            "python_version": ".".join(python.split(".")[:2]),
            "python_full_version": python,
            "implementation_version": python,
        }
    return overrides


def pip_command(python: str, machine: str) -> list[str]:
    """How to start the running interpreter's pip so that it judges environment markers as the
    target would (plain ``-m pip`` when the target's markers are the host's)."""
    overrides = marker_overrides(python, machine)
    if not overrides:
        return [sys.executable, "-m", "pip"]
    return [sys.executable, "-c", _RUNNER, json.dumps(overrides, sort_keys=True)]


def target_options(python: str, tags: Sequence[str]) -> list[str]:
    """pip's options that pick the wheels an image's Python installs, whatever the host."""
    return [
        "--only-binary=:all:", "--python-version", python,
        *(arg for tag in tags for arg in ("--platform", tag)), "--implementation", "cp",
    ]  # fmt: skip


@dataclass(frozen=True)
class Request:
    """One requirement set, as one Python on one platform installs it."""

    requirements: tuple[str, ...]
    python: str
    platforms: tuple[str, ...]  # wheel platform tags (platform_tags), all for ``machine``
    machine: str = DEFAULT_MACHINE  # uname -m of the target: whose environment markers pip judges

    def __post_init__(self) -> None:
        # tags of one machine with markers of another would resolve a closure no image installs
        if self.machine not in MACHINES or not all(t.endswith(f"_{self.machine}") for t in self.platforms):
            raise ValueError(f"a request for {self.machine!r} names platforms {self.platforms}")


def _listing(wheelhouses: Sequence[Path]) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for root in wheelhouses:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                depends_on(path)  # its size keys the closure cache
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
        document += [list(request.platforms), request.machine]
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
                *pip_command(request.python, request.machine),
                "install", "--isolated", "--dry-run", "--ignore-installed",
                "--quiet", "--disable-pip-version-check", "--report", "-", "--no-index",
                *(arg for w in self.wheelhouses for arg in ("--find-links", str(w))),
                *target_options(request.python, request.platforms),
                "--target", target, *request.requirements,
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
            raise _failure(request, done)
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


def _failure(request: Request, done: subprocess.CompletedProcess[str]) -> ImagekitError:
    """What a failed resolution means: pip (or the marker runner) could not run, or the
    wheelhouse cannot satisfy the request (pip's first error line says why)."""
    if done.returncode == RUNNER_FAILED and "imagekit: " in done.stderr:
        return EnvironmentProblem(done.stderr.strip().rpartition("imagekit: ")[2])
    errors = [
        line
        for line in done.stderr.splitlines()
        if line.startswith("ERROR:") and "ResolutionImpossible" not in line
    ]
    if not errors and "No module named pip" in done.stderr:
        return EnvironmentProblem(f"{sys.executable} has no pip; install it to resolve wheelhouses")
    reason = errors[0].removeprefix("ERROR: ") if errors else " ".join(done.stderr.split())[-300:]
    target = "" if request.machine == DEFAULT_MACHINE else f" on {request.machine}"
    return InputError(
        f"the wheelhouse cannot satisfy {' '.join(request.requirements)}"
        f" for Python {request.python}{target}: {reason}"
    )


def closure_bytes(files: Sequence[Path]) -> int:
    return sum(f.stat().st_size for f in files)


def download(
    requirements: Sequence[str],
    dest: Path,
    python: str,
    machine: str = DEFAULT_MACHINE,
    glibc: str | None = None,
    pip_options: Sequence[str] = (),
    timeout_s: float = DOWNLOAD_TIMEOUT_S,
) -> int:
    """``pip download`` of ``requirements`` and their closure as Python ``python`` on ``machine``
    with ``glibc`` installs them, into ``dest``; pip's exit status. Unlike a resolution it uses the
    host's index configuration (where wheels come from), except a constraint file (some hosts cap
    torch; pip's or uv's, for installs or builds), which must not change what an image gets."""
    command = [
        *pip_command(python, machine), "download", "--dest", str(dest),
        *target_options(python, platform_tags(glibc, machine)), *pip_options, *requirements,
    ]  # fmt: skip
    env = {**os.environ, **dict.fromkeys(CONSTRAINT_ENV, "")}
    try:
        return subprocess.run(command, env=env, timeout=timeout_s, check=False).returncode
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(
            f"pip did not download {' '.join(requirements)} within {timeout_s:g}s"
        ) from None
    except OSError as exc:
        raise EnvironmentProblem(f"cannot run pip ({sys.executable}): {exc}") from None


# -- a closure in layers (the BuildKit builder) -----------------------------------------------------

# The top slice: a cell's own torch build and companions (what differs between torch releases).
TORCH_FAMILY = ("torch", "torchvision", "torchaudio")
# The bottom slice: the venv's own pip and setuptools (``Recipe.venv_tools``), installed right after
# the venv is made, before anything else.
VENV_TOOL_PROJECTS = ("pip", "setuptools")


def wheel_pin(filename: str) -> tuple[str, str]:
    """(normalised project name, version) of a wheel file (PEP 427: ``{name}-{version}(-{build})?-
    {python}-{abi}-{platform}.whl``; the name's ``_`` stand for any of ``-_.``)."""
    parts = PurePosixPath(filename).name.split("-")
    if len(parts) < 5 or not filename.endswith(".whl"):
        raise InputError(f"{filename}: not a wheel file name (name-version-python-abi-platform.whl)")
    return project_key(parts[0]), parts[1]


@dataclass(frozen=True)
class ClosureSlices:
    """A cell's closure as three installs, bottom to top, each ``(project==version, ...)`` with its
    files: what many cells share goes lowest (the CUDA wheels, then the other dependencies), the
    cell's own torch family last. Each slice is a context directory of its own, so a step's cache
    key holds only its own wheels."""

    cuda: tuple[tuple[str, Path], ...]  # (file name, path)
    deps: tuple[tuple[str, Path], ...]
    top: tuple[tuple[str, Path], ...]
    # CUDA's compiler wheels (a devel cell's `nvcc: wheels`), installed right above ``cuda``
    compiler: tuple[tuple[str, Path], ...] = ()
    # the venv's pip and setuptools, installed first
    tools: tuple[tuple[str, Path], ...] = ()

    @staticmethod
    def pins(files: Sequence[tuple[str, Path]]) -> tuple[str, ...]:
        return tuple(sorted("==".join(wheel_pin(name)) for name, _ in files))


def slice_closure(
    files: Sequence[tuple[str, Path]], top_projects: Sequence[str] = TORCH_FAMILY
) -> ClosureSlices:
    """Splits closure ``files`` (their names as in the context) by project: the venv's tools
    (``VENV_TOOL_PROJECTS``), CUDA's, CUDA's compiler (``wheel_toolkit.COMPILER_PROJECTS``),
    ``top_projects`` (torch and its companions), the rest."""
    tools: list[tuple[str, Path]] = []
    cuda: list[tuple[str, Path]] = []
    compiler: list[tuple[str, Path]] = []
    deps: list[tuple[str, Path]] = []
    top: list[tuple[str, Path]] = []
    for name, path in sorted(files, key=lambda f: PurePosixPath(f[0]).name):
        project = wheel_pin(name)[0]
        bucket = top if project in top_projects else tools if project in VENV_TOOL_PROJECTS else deps
        if is_cuda_project(project):
            bucket = compiler if project in COMPILER_PROJECTS else cuda
        bucket.append((PurePosixPath(name).name, path))
    return ClosureSlices(tuple(cuda), tuple(deps), tuple(top), tuple(compiler), tuple(tools))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m imagekit.render.wheels download ...``: fill a wheelhouse for a target (setup scripts)."""
    import argparse  # this entry point's alone: a render imports this module and parses no argv

    args = list(sys.argv[1:] if argv is None else argv)
    pip_options: list[str] = []
    if "--" in args:  # what follows goes to pip as it is (--extra-index-url, --retries, ...)
        args, pip_options = args[: args.index("--")], args[args.index("--") + 1 :]
    parser = argparse.ArgumentParser(prog="python -m imagekit.render.wheels", description=main.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    fill = commands.add_parser("download", help="pip download a closure for a target machine and Python")
    fill.add_argument("--machine", choices=MACHINES, default=DEFAULT_MACHINE, help="uname -m of the target")
    fill.add_argument("--python-version", required=True, help="the image's Python, e.g. 3.11")
    fill.add_argument("--glibc", default=None, help=f"the image's glibc (default {DEFAULT_GLIBC})")
    fill.add_argument("--dest", type=Path, required=True, help="the wheelhouse to fill")
    fill.add_argument("--timeout-s", type=float, default=DOWNLOAD_TIMEOUT_S)
    fill.add_argument("requirements", nargs="+", metavar="REQUIREMENT")
    options = parser.parse_args(args)
    try:
        return download(
            options.requirements,
            options.dest,
            options.python_version,
            options.machine,
            options.glibc,
            pip_options,
            options.timeout_s,
        )
    except ImagekitError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
