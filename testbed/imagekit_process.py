"""imagekit in a process of its own, as a user starts it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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
