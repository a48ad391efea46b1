"""Processes and files the checks share: commands bounded in time, result files a child writes
whole, the temporary directory, and the command that runs this probe again as a child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

SMI_TIMEOUT_S = 20.0


def run_command(cmd: list[str], timeout: float = SMI_TIMEOUT_S) -> tuple[int, str]:
    """Run a command; (returncode, stdout+stderr). 127 when missing, 124 on timeout."""
    try:
        proc = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        return 127, str(exc)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f}s"
    except OSError as exc:
        return 126, str(exc)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def self_command() -> list[str]:
    """The command that runs this probe again (a bounded task, a collective rank): the zipapp it was
    loaded from (/opt/imagekit/check.py in an image), else its package from the source tree."""
    package_dir = os.path.dirname(os.path.abspath(__file__))
    parts = (__package__ or "").split(".")
    root = package_dir
    for _ in parts:
        root = os.path.dirname(root)
    if os.path.isfile(root):  # a zipapp: python runs the archive itself
        return [sys.executable, root]
    code = f"import sys; sys.path.insert(0, {root!r}); from {__package__}.run import main"
    return [sys.executable, "-c", code + "; sys.exit(main())"]


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def temp_root(env: dict[str, str]) -> str:
    """$TMPDIR when it is a writable directory, else /tmp, else Python's own choice."""
    for candidate in (env.get("TMPDIR"), "/tmp"):
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    return tempfile.gettempdir()


def write_result(path: str, result: dict[str, Any]) -> None:
    """A child's result, written whole (temporary name, then rename): the parent reads this file and
    never the child's stdout, which libraries (NCCL_DEBUG, compilers, warnings) may fill."""
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(result, handle, default=str)
    os.replace(partial, path)


def read_result(path: str) -> dict[str, Any] | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
