"""A CRD's openAPIV3Schema (a fixture under tests/fixtures/crds/) read the way the API server reads
a structural schema, as a JSON Schema check-jsonschema can hold a document to:

- an object schema that lists ``properties`` refuses any other field (``additionalProperties:
  false``), unless it says ``x-kubernetes-preserve-unknown-fields: true`` or already says what
  other fields may be: the server prunes unknown fields, and `kubectl apply` (strict field
  validation, the default since 1.27) refuses them;
- ``x-kubernetes-list-type: set``: the items are unique;
- ``x-kubernetes-map-type`` and ``list-type: map``/``atomic`` say how a list merges, not what it
  may hold; ``format`` (int32, int64, date-time) is left to check-jsonschema's format checks.

Anything else from Kubernetes' vocabulary the fixture holds (``x-kubernetes-int-or-string``,
``nullable``, ``x-kubernetes-embedded-resource``, CEL rules) makes the test fail rather than being
ignored: a refreshed fixture that uses one needs it taught here first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import REPO

CRDS = REPO / "tests" / "fixtures" / "crds"
UNHANDLED = (
    "x-kubernetes-int-or-string",
    "nullable",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-validations",  # CEL rules the server evaluates
)


def strict(node: Any) -> Any:
    if isinstance(node, list):
        return [strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    unhandled = [k for k in UNHANDLED if k in node]
    assert not unhandled, f"the schema uses {unhandled}: teach tests/unit/k8s/crd_schema.py what it means"
    # ``properties`` maps field names to schemas: the names are not schema keywords
    out = {
        k: {name: strict(s) for name, s in v.items()} if k == "properties" else strict(v)
        for k, v in node.items()
    }
    preserved = node.get("x-kubernetes-preserve-unknown-fields") is True
    if "properties" in node and not preserved and "additionalProperties" not in node:
        out["additionalProperties"] = False
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    return out


def strict_schema(fixture: str) -> dict[str, Any]:
    """The fixture ``fixture`` (relative to tests/fixtures/crds) as a strict JSON Schema."""
    schema: dict[str, Any] = json.loads((CRDS / fixture).read_text())
    return {"$schema": "http://json-schema.org/draft-07/schema#", **strict(schema)}


def write_strict_schema(fixture: str, where: Path) -> Path:
    path = where / (fixture.replace("/", "_"))
    path.write_text(json.dumps(strict_schema(fixture)))
    return path
