"""Every matrix file the project ships (matrix.yaml, examples/**/matrix.yaml) is valid twice over:
against `imagekit schema` as an editor would see it (YAML loaded with yaml.safe_load, validated
with jsonschema), and for imagekit itself (`imagekit plan` exits 0)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import REPO, run_cli

SHIPPED = sorted([REPO / "matrix.yaml", *(REPO / "examples").glob("**/matrix.yaml")])


def shipped_ids() -> list[str]:
    return [str(path.relative_to(REPO)) for path in SHIPPED]


@pytest.fixture(scope="module")
def validator() -> Any:
    result = run_cli("schema")
    assert result.exit_code == 0, result.stderr
    schema = json.loads(result.stdout)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_the_shipped_matrices_are_found() -> None:
    assert REPO / "matrix.yaml" in SHIPPED
    assert REPO / "examples" / "offline" / "matrix.yaml" in SHIPPED


@pytest.mark.parametrize("path", SHIPPED, ids=shipped_ids())
def test_shipped_matrix_matches_the_json_schema(path: Path, validator: Any) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    messages = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]
    assert not messages, "\n".join(messages)


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
