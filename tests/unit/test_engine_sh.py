"""scripts/engine.sh on engine binaries that do not run here: each is named in one line, the suite
is not used, and nothing is moved into the engine's prefix (issue 46, "Bad input").

The binaries are real programs made unrunnable the ways a download or a mirror makes them: this
host's /bin/true truncated, built for another machine (its ELF header's machine), linked against
a library that is not here, or needing a newer glibc. engine.sh is sourced (it then only defines
its functions) and its own checks run on them. Where install_engine is run whole, its download step
(unpack_suite: Debian's archive, tests/integration/test_first_run.py's) is replaced by a copy of a
tree made here, so that no network is needed; everything after it is engine.sh's own.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO

ENGINE_SH = REPO / "scripts" / "engine.sh"
# engine.sh's ENGINE_BINARIES: what an engine needs to run a container (and `docker run --init`)
NEEDED = (
    "usr/sbin/dockerd",
    "usr/bin/containerd",
    "usr/bin/containerd-shim-runc-v2",
    "usr/bin/docker",
    "usr/libexec/docker/cli-plugins/docker-buildx",
    "usr/bin/tini-static",
)
TRUE = Path(shutil.which("true") or "/bin/true").resolve()
EXIT_NO_ENGINE = 3


def run_engine_sh(
    script: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``script`` run in bash after engine.sh is sourced; ``args`` are its $1, $2... (and $0 is not
    engine.sh: where it is, engine.sh runs its main as a script)"""
    return subprocess.run(
        ["bash", "-c", f'source "$ENGINE_SH"\n{script}', "engine-test", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {}), "ENGINE_SH": str(ENGINE_SH)},
    )


def program(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def truncated(path: Path) -> Path:
    return program(path, TRUE.read_bytes()[:8000])


def headless(path: Path) -> Path:
    return program(path, TRUE.read_bytes()[:10])


def other_machine(path: Path) -> Path:
    data = bytearray(TRUE.read_bytes())
    host = bytes(data[18:20])
    # e_machine: s390 (0x16), or x86-64 (0x3e) on an s390 host: never this host's
    data[18:20] = b"\x3e\x00" if host in (b"\x16\x00", b"\x00\x16") else b"\x16\x00"
    if data[5] == 2:  # a big-endian ELF
        data[18:20] = bytes(reversed(data[18:20]))
    return program(path, bytes(data))


def missing_library(path: Path) -> Path:
    data = TRUE.read_bytes()
    assert b"libc.so.6\x00" in data
    return program(path, data.replace(b"libc.so.6\x00", b"libx.so.6\x00"))


def newer_glibc(path: Path) -> Path:
    data = TRUE.read_bytes()
    assert b"GLIBC_2." in data
    return program(path, data.replace(b"GLIBC_2.", b"GLIBC_9."))


def problem(binary: Path) -> str:
    done = run_engine_sh('binary_problem "$1"', str(binary))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_binary_that_runs_has_no_problem(tmp_path: Path) -> None:
    assert problem(program(tmp_path / "dockerd", TRUE.read_bytes())) == ""


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (truncated, "truncated or damaged"),
        (headless, "not an ELF program (truncated or damaged)"),
        (other_machine, "built for another machine (ELF machine 0x"),
        (missing_library, "libx.so.6: cannot open shared object file"),
        (newer_glibc, "needs a newer glibc than this system's ("),
    ],
)
def test_a_binary_that_does_not_run_is_named_with_why(
    tmp_path: Path, make: Callable[[Path], Path], expected: str
) -> None:
    said = problem(make(tmp_path / "dockerd"))
    assert expected in said, said
    assert "\n" not in said


def test_a_missing_binary_is_named(tmp_path: Path) -> None:
    assert problem(tmp_path / "dockerd") == "missing"


def engine_tree(root: Path) -> Path:
    """Every binary an engine needs, each a program that runs here (answers --version)."""
    for rel in NEEDED:
        program(root / rel, TRUE.read_bytes())
    return root


def test_the_engine_check_names_the_first_needed_binary_that_does_not_run(tmp_path: Path) -> None:
    tree = engine_tree(tmp_path / "engine")
    check = run_engine_sh('engine_problem "$1"', str(tree))
    assert check.returncode == 0 and check.stdout == "", check
    missing_library(tree / "usr/bin/containerd-shim-runc-v2")
    check = run_engine_sh('engine_problem "$1"', str(tree))
    assert check.stdout.startswith("containerd-shim-runc-v2 exit 127 on -v: "), check
    (tree / "usr/bin/tini-static").unlink()  # a suite without a static tini: no docker-init
    (tree / "usr/bin/containerd-shim-runc-v2").write_bytes(TRUE.read_bytes())
    check = run_engine_sh('engine_problem "$1"', str(tree))
    assert check.stdout == "tini-static missing\n", check


# install_engine with each suite's "download" a copy of tmp/suites/SUITE (see the module's doc)
INSTALL = """
unpack_suite() {
    [[ -d $SUITES/$1 ]] || { suite_failed "apt-get update of $1 failed"; return 1; }
    mkdir -p "$2" && cp -a "$SUITES/$1/." "$2/"
}
install_engine
"""


def install(tmp_path: Path, suites: str) -> subprocess.CompletedProcess[str]:
    return run_engine_sh(
        INSTALL,
        env={
            "SUITES": str(tmp_path / "suites"),
            "IMAGEKIT_ENGINE_SUITE": suites,
            "IMAGEKIT_ENGINE_PREFIX": str(tmp_path / "prefix"),
        },
    )


def test_no_suite_whose_engine_runs_is_one_line_exit_3_and_nothing_installed(tmp_path: Path) -> None:
    truncated(engine_tree(tmp_path / "suites/sid") / "usr/sbin/dockerd")
    other_machine(engine_tree(tmp_path / "suites/trixie") / "usr/bin/docker")
    # an older engine already in the prefix (not running) stays as it was
    old = engine_tree(tmp_path / "prefix")
    (old / ".complete").write_text("suites=trixie packages=docker.io\nsuite=trixie dockerd 26.1.5\n")
    done = install(tmp_path, "sid trixie")
    assert done.returncode == EXIT_NO_ENGINE, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(
        "[engine] ERROR: no engine of sid trixie installs and runs here (sid's dockerd died of signal"
    ), last
    assert "; trixie's docker built for another machine (ELF machine 0x" in last, last
    assert last.endswith(
        f"nothing was installed into {tmp_path / 'prefix'}:"
        " set IMAGEKIT_ENGINE_SUITE to a suite whose engine runs here"
    ), last
    assert (old / ".complete").read_text().startswith("suites=trixie packages=docker.io\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prefix", "suites"]  # no .new, no .old


def test_a_suite_that_cannot_be_had_is_named_too(tmp_path: Path) -> None:
    done = install(tmp_path, "imagekit-no-such-suite")
    assert done.returncode == EXIT_NO_ENGINE
    assert done.stderr.splitlines()[-1].startswith(
        "[engine] ERROR: no engine of imagekit-no-such-suite installs and runs here"
        " (apt-get update of imagekit-no-such-suite failed); nothing was installed"
    ), done.stderr
    assert not (tmp_path / "prefix").exists() and not (tmp_path / "prefix.new").exists()


def test_the_next_suite_is_installed_whole_without_what_does_not_run(tmp_path: Path) -> None:
    newer_glibc(engine_tree(tmp_path / "suites/sid") / "usr/bin/containerd")
    trixie = engine_tree(tmp_path / "suites/trixie")
    missing_library(trixie / "usr/sbin/runc")  # not needed: left out, as sid's runc is on Debian 12
    done = install(tmp_path, "sid trixie")
    assert done.returncode == 0, done.stderr
    assert "sid's containerd needs a newer glibc than this system's (" in done.stderr
    assert "not using sid's engine; trying the next suite" in done.stderr
    assert "not using trixie's runc: exit 127 on --version: " in done.stderr
    prefix = tmp_path / "prefix"
    assert (prefix / ".complete").read_text().splitlines()[1].startswith("suite=trixie ")
    assert not (prefix / "usr/sbin/runc").exists()
    assert (prefix / "usr/bin/docker-init").readlink() == Path("tini-static")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prefix", "suites"]
