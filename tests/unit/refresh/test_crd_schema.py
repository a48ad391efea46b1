"""imagekit.refresh.crd_schema (`python -m`): the CRD schema fixtures of tests/fixtures/crds/ come out
byte for byte from a CRD that holds them with their descriptions, and a CRD it cannot use is one line."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagekit.refresh.crd_schema import main

REPO = Path(__file__).resolve().parents[3]
FIXTURES = sorted((REPO / "tests" / "fixtures" / "crds" / "kyverno").glob("*/*.json"))


def described(node: Any) -> Any:
    """``node`` with a description on every schema object, as a CRD publishes it."""
    if isinstance(node, dict):
        return {"description": "said at length\nover lines", **{k: described(v) for k, v in node.items()}}
    if isinstance(node, list):
        return [described(v) for v in node]
    return node


def crd(schema: Any, version: str = "v1") -> str:
    versions = [{"name": "v1beta1", "served": False, "schema": {"openAPIV3Schema": {}}}]
    versions.append({"name": version, "served": True, "schema": {"openAPIV3Schema": described(schema)}})
    # JSON is YAML, and dumped in a moment where PyYAML's emitter takes seconds for ClusterPolicy's
    return json.dumps({"kind": "CustomResourceDefinition", "spec": {"versions": versions}}, indent=1)


def run(*argv: str, stdin: str = "") -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        sys.stdin, saved = io.StringIO(stdin), sys.stdin
        try:
            code = main(list(argv))
        finally:
            sys.stdin = saved
    return code, err.getvalue()


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.relative_to(p.parents[1]).as_posix())
def test_each_fixture_comes_out_byte_for_byte(tmp_path: Path, fixture: Path) -> None:
    source = tmp_path / "crd.yaml"
    source.write_text(crd(json.loads(fixture.read_text(encoding="utf-8"))), encoding="utf-8")
    out = tmp_path / "out.json"
    assert run(str(source), "v1", str(out)) == (0, "")
    assert out.read_bytes() == fixture.read_bytes()


def test_it_runs_as_a_module_from_standard_input(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    schema = {"type": "object", "properties": {"description": {"type": "string"}}}
    done = subprocess.run(
        [sys.executable, "-m", "imagekit.refresh.crd_schema", "-", "v1", str(out)],
        input=crd(schema), capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # a property named description stays; only the annotations go
    assert json.loads(out.read_text(encoding="utf-8")) == schema


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("spec: [", "not a CustomResourceDefinition with spec.versions (ParserError"),
        ("kind: Namespace\n", "not a CustomResourceDefinition with spec.versions (KeyError"),
        ("[" * 5_000, "not a CustomResourceDefinition with spec.versions"),
        (crd({"type": "object"}, "v2"), "no version v1 (it has v1beta1, v2)"),
    ],
)
def test_a_crd_it_cannot_use_is_one_line_exit_2_nothing_written(
    tmp_path: Path, text: str, problem: str
) -> None:
    out = tmp_path / "out.json"
    code, err = run("-", "v1", str(out), stdin=text)
    assert code == 2 and err.startswith("crd-schema: -: ") and problem in err, err
    assert err.count("\n") == 1 and not out.exists()


def test_a_link_as_the_output_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text("kept\n", encoding="utf-8")
    out = tmp_path / "out.json"
    out.symlink_to(target)
    code, err = run("-", "v1", str(out), stdin=crd({"type": "object"}))
    assert code == 2 and "symbolic link" in err, err
    assert target.read_text(encoding="utf-8") == "kept\n" and out.is_symlink()
