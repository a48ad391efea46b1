"""schema: the matrix file's JSON Schema, as the plan stage makes it."""

from __future__ import annotations

import json

from imagekit.plan.schema import json_schema
from tests.conftest import run_cli


def test_schema_prints_the_plan_stages_schema() -> None:
    result = run_cli("schema")
    assert result.exit_code == 0 and result.stderr == ""
    assert json.loads(result.stdout) == json_schema()
