"""Every matrix file the project ships (matrix.yaml, examples/**/matrix.yaml) is valid twice over:
against `imagekit schema` as an editor would see it (YAML loaded with yaml.safe_load, validated
with jsonschema), and for imagekit itself (`imagekit plan` exits 0)."""

from __future__ import annotations

import json
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
