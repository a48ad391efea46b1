"""Whole-file writes: a reader sees the old file or the new one, never half of either."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def atomic_write(path: Path, text: str) -> None:
    """Write through a temporary file in the same directory, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # pid + thread id make the name unique among live writers; one a killed writer left behind
    # is ours to replace.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with temporary.open("w", encoding="utf-8") as handle:
            handle.write(text)
        temporary.replace(path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
