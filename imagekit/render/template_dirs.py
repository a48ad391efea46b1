"""Where imagekit's own templates are: no Jinja here, so that a no-change run
(``imagekit.builds.named_inputs``) can name the directory without importing the renderer."""

from __future__ import annotations

from pathlib import Path

FRONTEND_TEMPLATES = "frontend"  # the front ends' templates, below the templates directory


def default_templates_dir() -> Path:
    """The templates: inside an installed wheel, or the checkout's dockerfiles/templates."""
    packaged = Path(__file__).parent.parent / "_templates"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent.parent / "dockerfiles" / "templates"
