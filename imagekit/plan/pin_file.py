"""Where a matrix's lock of base digests lives (``imagekit.plan.pins`` reads and applies it).

A module of its own, importing nothing: the no-change answer (``imagekit.builds.named_inputs``)
lists the lock among a matrix's inputs before anything heavier than PyYAML is loaded.
"""

from __future__ import annotations

from pathlib import Path

SUFFIX = ".bases.lock.json"


def pins_path(matrix: Path) -> Path:
    """The lock of ``matrix``: beside it, named after it (``matrix.yaml`` -> ``matrix.bases.lock.json``)."""
    return matrix.with_name(matrix.stem + SUFFIX)
