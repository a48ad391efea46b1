"""Shared helpers: write a matrix, run the CLI as a user would, read what it printed."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagekit.cli import app

REPO = Path(__file__).resolve().parent.parent
# Wheel closures are cached per user; the tests keep theirs apart (and their children inherit it),
# and remove it when the run ends.
if "IMAGEKIT_CACHE_DIR" not in os.environ:
    os.environ["IMAGEKIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="imagekit-test-cache-")
    atexit.register(shutil.rmtree, os.environ["IMAGEKIT_CACHE_DIR"], ignore_errors=True)
# A shell without job control starts background commands with SIGINT ignored, and an ignored signal
# stays ignored across exec: the Ctrl-C tests would then interrupt nothing. Tests stand for a user
# at a terminal, so the suite and the processes it starts get Ctrl-C's default behaviour back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# A minimal valid matrix on an nvidia/cuda pattern base, for tests to extend.
CUDA_BASE = """
bases:
  cuda:
    image: "nvidia/cuda:{cuda_full}-{cudnn_tag}{flavour}-ubuntu22.04"
    os: ubuntu22.04
"""


@dataclass(frozen=True)
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(*args: str) -> CliResult:
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return CliResult(result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def write_matrix(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str, name: str = "matrix.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


def imagekit(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """imagekit in a process of its own, as a user starts it (a hang, a payload or a signal is
    then the real thing); never raises on its exit status."""
    return subprocess.run(
        [sys.executable, "-m", "imagekit", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
