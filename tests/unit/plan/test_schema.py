"""`imagekit schema`: a JSON Schema that editors can use, and that agrees with the validator."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from tests.conftest import REPO, run_cli


def schema() -> dict[str, object]:
    result = run_cli("schema")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert isinstance(document, dict)
    return document


def test_schema_is_a_valid_json_schema() -> None:
    document = schema()
    jsonschema.Draft202012Validator.check_schema(document)
    assert document["title"] == "imagekit matrix"
    assert set(document["required"]) == {"axes", "bases"}
    assert document["additionalProperties"] is False


def test_shipped_matrix_validates_against_the_schema() -> None:
    validator = jsonschema.Draft202012Validator(schema())
    # what an editor sees: plain YAML 1.1 types (version is an int, unquoted versions floats)
    validator.validate(yaml.safe_load((REPO / "matrix.yaml").read_text(encoding="utf-8")))


@pytest.mark.parametrize(
    "document",
    [
        {"axes": {"torch": ["2.1.2"]}, "bases": {"b": {"image": "x", "os": "debian12"}}, "extra": 1},
        {"axes": {"torch": ["2.1 2"]}, "bases": {"b": {"image": "x", "os": "debian12"}}},
        {"axes": {"torch": ["2.1.2"]}, "bases": {"b": {"image": "x\nRUN id", "os": "debian12"}}},
    ],
)
def test_schema_rejects_what_the_validator_rejects(document: dict[str, object]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema()).validate(document)


def test_unquoted_versions_are_fine_for_editors_too() -> None:
    document = {
        "version": 1,
        "axes": {"torch": [2.1], "cuda": [12.1]},
        "bases": {"b": {"image": "x", "os": "u22"}},
    }
    jsonschema.Draft202012Validator(schema()).validate(document)
