"""The slow tier's fixture: the real torch CPU wheel in a venv of its own, made once for all workers."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.probe_runs import TORCH_VENV, TORCH_VERSION, WHEEL_DIRS, torch_wheel


@pytest.fixture(scope="session")
def torch_python() -> str:
    """A venv under /tmp with the real torch CPU wheel (created once, reused across sessions)."""
    python = TORCH_VENV / "bin" / "python"
    # Each pytest worker asks: one makes the venv while the others wait on the lock.
    with TORCH_VENV.with_name(TORCH_VENV.name + ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _torch_venv(python)


def _torch_venv(python: Path) -> str:
    probe = [str(python), "-c", f"import torch; assert torch.__version__.startswith({TORCH_VERSION!r})"]
    if python.exists() and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return str(python)
    wheel = torch_wheel()
    if wheel is None:
        where = ", ".join(f"{d}/torch-{TORCH_VERSION}+cpu*.whl" for d in WHEEL_DIRS)
        message = f"no torch CPU wheel here ({where}); examples/offline/setup.sh downloads one"
        if os.environ.get("IMAGEKIT_REQUIRE_DOCKER") == "1":  # CI promised the real runs
            pytest.fail(f"IMAGEKIT_REQUIRE_DOCKER=1 but {message}")
        pytest.skip(message)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(TORCH_VENV)], check=True)
    install = [str(python), "-m", "pip", "install", "-q", "--find-links", str(wheel.parent), str(wheel)]
    subprocess.run(install, check=True, timeout=900)
    return str(python)
