"""Extract one version's openAPIV3Schema from a CustomResourceDefinition into a JSON file: the
fixtures under tests/fixtures/crds/ that the admission policies are validated against.

    git -C $KYVERNO show v1.19.0:$CRD | python scripts/extract-crd-schema.py - v1 OUT.json

(tests/fixtures/crds/README.md lists each fixture's CRD path and release.)

The schema is kept as the CRD publishes it but for its ``description`` texts (a fifth of the size);
what Kubernetes does with it beyond JSON Schema (unknown fields refused, x-kubernetes-*) is the
test's to apply (tests/unit/k8s/crd_schema.py), so the fixture stays the publisher's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml


def without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        # a property *named* description (its schema an object) stays: only the annotation goes
        return {
            k: without_descriptions(v)
            for k, v in node.items()
            if not (k == "description" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: extract-crd-schema.py CRD.yaml|- VERSION OUT.json", file=sys.stderr)
        return 2
    source, version, out = argv
    text = sys.stdin.read() if source == "-" else Path(source).read_text()
    crd = yaml.safe_load(text)
    served = {v["name"]: v for v in crd["spec"]["versions"]}
    if version not in served:
        print(f"{source}: no version {version} (it has {', '.join(served)})", file=sys.stderr)
        return 2
    schema = without_descriptions(served[version]["schema"]["openAPIV3Schema"])
    Path(out).write_text(json.dumps(schema, indent=0, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
