"""The formats `imagekit matrix --format` writes (kept apart so the CLI imports no exporter early)."""

from __future__ import annotations

from enum import Enum


class ExportFormat(str, Enum):
    GITHUB = "github"
    JSON = "json"
    BAKE = "bake"
