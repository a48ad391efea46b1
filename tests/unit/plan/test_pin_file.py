"""Where a matrix's lock of base digests lives: beside the matrix, named after it."""

from __future__ import annotations

from pathlib import Path

from imagekit.plan.pin_file import SUFFIX, pins_path


def test_the_lock_is_beside_its_matrix_and_named_after_it() -> None:
    assert pins_path(Path("matrix.yaml")) == Path("matrix.bases.lock.json")
    assert pins_path(Path("/srv/ci/gpu.matrix.yml")) == Path("/srv/ci/gpu.matrix.bases.lock.json")
    assert pins_path(Path("examples/offline/matrix")) == Path("examples/offline/matrix" + SUFFIX)
    # two matrices in one directory keep two locks
    assert pins_path(Path("a.yaml")) != pins_path(Path("b.yaml"))
