"""imagekit's own templates: those an installed wheel packs (imagekit/_templates), else the
checkout's dockerfiles/templates, the one the renderer reads and the front ends' below it."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.render import template_dirs
from imagekit.render.template_dirs import FRONTEND_TEMPLATES, default_templates_dir
from tests.conftest import REPO


def test_a_checkout_uses_its_dockerfiles_templates() -> None:
    found = default_templates_dir()
    assert found == REPO / "dockerfiles" / "templates"
    assert (found / "Dockerfile.j2").is_file() and (found / FRONTEND_TEMPLATES).is_dir()


def test_an_installed_wheels_packed_templates_come_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "imagekit"
    (package / "render").mkdir(parents=True)
    (package / "_templates").mkdir()
    monkeypatch.setattr(template_dirs, "__file__", str(package / "render" / "template_dirs.py"))
    assert default_templates_dir() == package / "_templates"
    (package / "_templates").rmdir()  # not packed: the checkout's, relative to the package
    assert default_templates_dir() == tmp_path / "dockerfiles" / "templates"
