"""What a no-change record must cover, read from the matrix itself (imagekit.builds.named_inputs):
the schema's every relative path, the walk below each, and the matrices it cannot read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagekit.builds import named_inputs
from imagekit.builds.read_recorder import ignored_dirs
from imagekit.plan.matrix import load_plan
from imagekit.plan.schema import Matrix
from imagekit.render.template_dirs import default_templates_dir
from tests.conftest import REPO

# RelativePath's pattern, as the JSON schema writes it: how a path relative to the matrix is typed
RELATIVE_PATH = "^[A-Za-z0-9._/-]+$"
# The relative paths of the schema a build does not read through the matrix's directory: where
# `render` writes, and a local base's Dockerfile, which lies inside its context.
NOT_NAMED = {("output",), ("bases", "*", "build", "dockerfile")}


def _relative_paths(
    schema: dict[str, Any], node: dict[str, Any], at: tuple[str, ...]
) -> Iterator[tuple[str, ...]]:
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    if node.get("pattern") == RELATIVE_PATH:
        yield at
    for option in node.get("anyOf", ()):
        yield from _relative_paths(schema, option, at)
    for key, value in node.get("properties", {}).items():
        yield from _relative_paths(schema, value, (*at, key))
    values = [*node.get("patternProperties", {}).values(), node.get("additionalProperties")]
    for value in values:  # a mapping's values, whatever their keys
        if isinstance(value, dict):
            yield from _relative_paths(schema, value, (*at, "*"))
    if isinstance(node.get("items"), dict):
        yield from _relative_paths(schema, node["items"], (*at, "[]"))


def test_every_relative_path_of_the_schema_is_named_or_said_why_not() -> None:
    """A path added to the schema later is an input the record must cover: this fails until it is
    in ``NAMED`` (or here, with the reason a build does not read it)."""
    schema = Matrix.model_json_schema()
    found = set(_relative_paths(schema, schema, ()))
    assert found >= NOT_NAMED
    assert found - NOT_NAMED == set(named_inputs.NAMED)


def test_the_paths_are_read_as_the_plan_reads_them(tmp_path: Path) -> None:
    """Anchors and merge keys resolved, every list item, every base: the plan's own reader."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        "build_defaults: &local {context: ctx-a}\n"
        "bases:\n  a: {build: *local}\n  b: {build: {<<: *local, context: ctx-b}}\n  c: {image: x}\n"
        "sources: {pip: {find_links: [w1, w2]}}\ntemplates: tpl\n"
    )
    found = named_inputs.matrix_inputs(matrix, ())
    assert found is not None
    for name in ("ctx-a", "ctx-b", "w1", "w2", "tpl", "matrix.yaml"):
        assert str(tmp_path / name) in found, name  # absent, and listed: its absence is an answer
    assert str(default_templates_dir()) in found


@pytest.mark.parametrize(
    "text",
    [
        "templates: [a]\n",
        "templates: /etc\n",
        "templates: ../elsewhere\n",
        "bases: [a]\n",
        "bases: {a: {build: ctx}}\n",
        "bases: {a: {build: {context: [x]}}}\n",
        "bases: {a: {build: {context: ../..}}}\n",
        "sources: {pip: {find_links: w}}\n",
        "sources: {pip: {find_links: [/]}}\n",
        "sources: [pip]\n",
        "- a list\n",
        "key: [unclosed\n",
        "x: !!python/object:os.system {}\n",
    ],
)
def test_a_matrix_of_another_shape_names_nothing(tmp_path: Path, text: str) -> None:
    """A value the schema would refuse, a path leaving the matrix directory, YAML that is none:
    no answer from a record (the full run's plan says what is wrong), and no walk of `/`."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(text)
    assert named_inputs.matrix_inputs(matrix, ()) is None


def test_a_matrix_that_is_no_regular_file_names_nothing(tmp_path: Path) -> None:
    assert named_inputs.matrix_inputs(tmp_path / "missing.yaml", ()) is None
    os.mkfifo(tmp_path / "fifo.yaml")  # never opened: it would block
    assert named_inputs.matrix_inputs(tmp_path / "fifo.yaml", ()) is None


def test_the_walk_lists_every_entry_below_follows_no_link_and_leaves_the_state_out(tmp_path: Path) -> None:
    top = tmp_path / "ctx"
    (top / "sub" / "deeper").mkdir(parents=True)
    (top / "a.txt").write_text("a")
    (top / "sub" / "deeper" / "b.txt").write_text("b")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.bin").write_text("x")
    (top / "link").symlink_to(outside)
    state = top / ".imagekit"
    state.mkdir()
    (state / "report.json").write_text("{}")
    found = named_inputs.walk([str(top)], ignored_dirs(state))
    assert found == {
        str(top),
        str(top / "a.txt"),
        str(top / "sub"),
        str(top / "sub" / "deeper"),
        str(top / "sub" / "deeper" / "b.txt"),
        str(top / "link"),  # the link itself (its stat follows it), never what is below it
    }
    assert named_inputs.walk([str(state)], ignored_dirs(state)) == set()


def test_a_walk_past_its_bound_is_not_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        (tmp_path / f"f{i}").write_text("x")
    monkeypatch.setattr(named_inputs, "MAX_ENTRIES", 4)
    assert named_inputs.walk([str(tmp_path)], ()) is None
    monkeypatch.setattr(named_inputs, "MAX_ENTRIES", 6)
    assert named_inputs.walk([str(tmp_path)], ()) is not None


@pytest.mark.parametrize(
    "matrix", [REPO / "matrix.yaml", *sorted((REPO / "examples").glob("**/matrix.yaml"))]
)
def test_every_shipped_matrix_names_what_its_plan_reads(matrix: Path) -> None:
    """A shipped matrix's named inputs are found (a no-change run of it can be answered), and they
    are its plan's: the template directory, each local base's context, each wheelhouse."""
    found = named_inputs.matrix_inputs(matrix, ())
    assert found is not None
    plan = load_plan(matrix)
    wanted = [plan.root / link for link in plan.matrix.sources.pip.find_links]
    wanted += [plan.root / base.build.context for base in plan.matrix.bases.values() if base.build]
    wanted.append(plan.root / plan.matrix.templates if plan.matrix.templates else default_templates_dir())
    assert {os.path.abspath(p) for p in wanted} <= found  # noqa: PTH100 (the record's form of a path)


def test_reading_what_a_matrix_names_loads_no_validation_nor_rendering() -> None:
    """The no-change answer reads the matrix before typer is imported: PyYAML only, never pydantic,
    Jinja or an engine client (each costs more than the whole answer)."""
    script = (
        "import json, sys\nfrom imagekit.builds import no_change\n"
        "from imagekit.builds.named_inputs import matrix_inputs\n"
        "assert matrix_inputs('matrix.yaml', ()) is not None\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    loaded = set(json.loads(done.stdout))
    assert "yaml" in loaded
    assert loaded.isdisjoint({"pydantic", "pydantic_core", "jinja2", "typer", "docker", "requests", "rich"})
