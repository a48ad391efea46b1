"""Extract one version's openAPIV3Schema from a CustomResourceDefinition into a JSON file: the
fixtures under tests/fixtures/crds/ that the admission policies are validated against.

    git -C $KYVERNO show v1.19.0:$CRD | python -m imagekit.refresh.crd_schema - v1 OUT.json

(tests/fixtures/crds/README.md lists each fixture's CRD path and release.)

The schema is kept as the CRD publishes it but for its ``description`` texts (a fifth of the size);
what Kubernetes does with it beyond JSON Schema (unknown fields refused, x-kubernetes-*) is the
test's to apply (tests/unit/k8s/crd_schema.py), so the fixture stays the publisher's. The CRD is
read as ``yaml.safe_load`` reads it, not imagekit's matrix reader, which keeps numbers as their text: the
fixture holds them as the CRD's YAML means them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from imagekit.core.atomic import atomic_write
from imagekit.core.errors import ImagekitError, InputError, one_line
from imagekit.core.paths import read_regular_text

PROG = "crd-schema"
# yaml.safe_load's reading, by libyaml where PyYAML has it (ClusterPolicy's CRD: seconds in Python).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Kyverno's largest CRD (ClusterPolicy, every version) is about 2.5 MB of YAML.
CRD_BYTES = 32 << 20


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


def crd_text(source: str) -> str:
    """The CRD's text: standard input for ``-``, else the regular file ``source``, bounded."""
    if source != "-":
        return read_regular_text(Path(source), CRD_BYTES, "a CustomResourceDefinition (YAML)")
    text = sys.stdin.read(CRD_BYTES + 1)
    if len(text) > CRD_BYTES:
        raise InputError(f"-: the CRD on standard input is larger than {CRD_BYTES:,} characters")
    return text


def schema(text: str, source: str, version: str) -> Any:
    """``version``'s openAPIV3Schema in the CRD ``text``, its descriptions left out."""
    try:
        crd = yaml.load(text, Loader=SAFE_LOADER)
        served = {v["name"]: v for v in crd["spec"]["versions"]}
    except (yaml.YAMLError, KeyError, TypeError, RecursionError) as exc:
        raise InputError(
            f"{source}: not a CustomResourceDefinition with spec.versions ({type(exc).__name__}:"
            f" {one_line(exc, 200)})"
        ) from None
    if version not in served:
        raise InputError(f"{source}: no version {version} (it has {', '.join(map(str, served))})")
    try:
        return without_descriptions(served[version]["schema"]["openAPIV3Schema"])
    except (KeyError, TypeError) as exc:
        raise InputError(f"{source}: version {version} has no schema.openAPIV3Schema ({exc})") from None


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m imagekit.refresh.crd_schema CRD.yaml|- VERSION OUT.json", file=sys.stderr)
        return 2
    source, version, out = argv
    try:
        found = schema(crd_text(source), source, version)
        atomic_write(Path(out), json.dumps(found, indent=0, sort_keys=True) + "\n")
    except ImagekitError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
