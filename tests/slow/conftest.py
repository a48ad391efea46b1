"""Fixtures the unit tests share (helpers that are no fixtures live in plain modules beside it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.unit.probe_runs import TORCH_VENV, TORCH_VERSION, WHEEL_DIRS, torch_wheel


@pytest.fixture(scope="session")
def torch_python() -> str:
    """A venv under /tmp with the real torch CPU wheel (created once, reused across sessions)."""
    python = TORCH_VENV / "bin" / "python"
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
