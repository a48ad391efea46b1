"""bench/device_check.sh, the prepared run for a lent GPU machine, run here as it runs there: the
zipapp prepared by imagekit's own Python, then run by a python3 that holds torch but not imagekit's
dependencies (the real torch CPU wheel here, no GPU), with the expectations read from it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.unit.probe_runs import REPO, clean_env

DEVICE_CHECK = REPO / "bench" / "device_check.sh"


def _bash(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(DEVICE_CHECK), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=timeout,
        check=False,
    )


def test_the_script_parses() -> None:
    assert subprocess.run(["bash", "-n", str(DEVICE_CHECK)], check=False).returncode == 0


def test_without_a_probe_it_says_how_to_prepare_one(tmp_path: Path) -> None:
    # a python3 that can do nothing: it cannot build the probe, and none was prepared
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python3").write_text("#!/bin/sh\nexit 1\n")
    (stub / "python3").chmod(0o755)
    env = clean_env(
        PATH=f"{stub}:/usr/bin:/bin", OUT=str(tmp_path / "out"), DEVICE_CHECK_PROBE=str(tmp_path / "none.py")
    )
    done = _bash(env=env, timeout=60)
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "bench/device_check.sh prepare" in done.stderr
    assert not (tmp_path / "out" / "device-check.json").exists()


def _running(script: Path) -> list[str]:
    """The pids of the processes that run ``script`` (python3 SCRIPT ...)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1] == str(script).encode():
            found.append(proc.name)
    return found
