"""tests/unit/test_shipped_matrices.py's slow tests: `imagekit plan` on the examples resolves their wheels
with pip against the wheelhouses their setup.sh filled."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli
from tests.unit.test_shipped_matrices import SHIPPED, shipped_ids


@pytest.mark.parametrize("path", SHIPPED, ids=shipped_ids())
def test_shipped_matrix_plans(path: Path, tmp_path: Path) -> None:
    # A copy: the example's own wheelhouse where its setup.sh filled one (hard links), else an
    # empty one, with no_index off, so that what the wheelhouse cannot satisfy may come from an
    # index and the rest of the matrix is still planned.
    shutil.copytree(
        path.parent, tmp_path / "m", ignore=shutil.ignore_patterns("wheelhouse", "generated", ".*")
    )
    copy = tmp_path / "m" / path.name
    pip = (yaml.safe_load(path.read_text()).get("sources") or {}).get("pip") or {}
    for entry in pip.get("find_links") or []:
        (copy.parent / entry).mkdir(parents=True, exist_ok=True)
        for wheel in (path.parent / entry).glob("*.whl"):
            try:
                os.link(wheel, copy.parent / entry / wheel.name)
            except OSError:  # another file system
                shutil.copy(wheel, copy.parent / entry / wheel.name)
        if not any((copy.parent / entry).iterdir()):
            copy.write_text(copy.read_text().replace("no_index: true", "no_index: false"))
    result = run_cli("plan", "--matrix", str(copy))
    assert result.exit_code == 0, result.stderr
