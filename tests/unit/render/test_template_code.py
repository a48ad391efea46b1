"""imagekit's own templates compiled ahead: the shipped code is current, renders exactly what Jinja
compiling the template renders, and is never used for a matrix's own templates."""

from __future__ import annotations

import shutil
from pathlib import Path

import jinja2
import pytest

from imagekit.plan.matrix import load_plan
from imagekit.render import template_code
from imagekit.render.dockerfile import Renderer
from imagekit.render.environment import UserTemplates, make_environment
from imagekit.render.template_dirs import default_templates_dir
from tests.conftest import REPO

SHIPPED = REPO / "imagekit" / "data" / template_code.COMPILED


def test_the_shipped_code_is_that_of_the_templates_as_they_are(tmp_path: Path) -> None:
    written = template_code.generate(template_code.own_environments(), tmp_path)
    shipped = {p.name: p.read_text() for p in SHIPPED.glob("*" + template_code.SUFFIX)}
    fresh = {p.name: p.read_text() for p in written}
    assert shipped == fresh, (
        "a template changed: run `python -m imagekit.render.template_code` and commit the result"
    )


@pytest.mark.parametrize("matrix", ["matrix.yaml", "examples/offline/matrix.yaml"])
def test_the_shipped_code_renders_what_compiling_renders(
    matrix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = load_plan(REPO / matrix)
    shipped = Renderer(plan)
    assert shipped.template.filename is not None
    ahead = [shipped.dockerfile(cell) for cell in plan.cells]
    used: list[str] = []
    monkeypatch.setattr(template_code, "_compiled", used.append)  # none found
    compiled = Renderer(plan)
    assert [compiled.dockerfile(cell) for cell in plan.cells] == ahead
    assert used, "the shipped code was looked for"


def test_a_matrixs_own_templates_never_run_shipped_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(default_templates_dir(), tmp_path / "templates")  # the very same source
    env = make_environment(tmp_path / "templates")
    assert isinstance(env, UserTemplates)

    def refuse(digest: str) -> str:
        raise AssertionError("a user's template must be compiled in the sandbox")

    monkeypatch.setattr(template_code, "_compiled", refuse)
    template = template_code.load_template(env, "Dockerfile.j2")
    assert template.environment is env


def test_code_made_from_another_source_is_not_used() -> None:
    env = make_environment(default_templates_dir())
    assert env.loader is not None
    source, _, _ = env.loader.get_source(env, "Dockerfile.j2")
    shipped = template_code.key(env, "Dockerfile.j2", source)
    assert template_code._compiled(shipped) is not None
    assert template_code.key(env, "Dockerfile.j2", source + " ") != shipped
    other = jinja2.Environment(trim_blocks=False, lstrip_blocks=True, keep_trailing_newline=True)
    assert template_code.key(other, "Dockerfile.j2", source) != shipped
