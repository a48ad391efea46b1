"""The key of a build run (imagekit.builds.run_key): every option of the command, the environment
that steers a build, and nothing else."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest

from imagekit.builds.command_line import BuildCommand
from imagekit.builds.run_key import options_key, run_key
from imagekit.cli.build import build


def test_the_key_follows_the_command_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    key = run_key({"matrix": "/m.yaml", "only": None})
    assert run_key({"matrix": "/m.yaml", "only": None}) == key
    assert run_key({"matrix": "/m.yaml", "only": ["x"]}) != key
    monkeypatch.setenv("DOCKER_HOST", "unix:///elsewhere.sock")
    assert run_key({"matrix": "/m.yaml", "only": None}) != key
    monkeypatch.delenv("DOCKER_HOST")
    monkeypatch.setenv("SOME_UNRELATED_VARIABLE", "1")
    assert run_key({"matrix": "/m.yaml", "only": None}) == key


def _build_defaults() -> BuildCommand:
    """The build command's options as it parses an empty command line."""
    parameters = inspect.signature(build).parameters
    return BuildCommand(**{name: p.default for name, p in parameters.items()})


def _other(value: Any) -> Any:
    """Another value of an option's kind (None: an option given)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, Path):
        return value / "other"
    if isinstance(value, list):
        return [*value, "other"]
    return f"{value}-other"


def test_the_build_options_record_is_every_option_of_the_command() -> None:
    assert {f.name for f in dataclasses.fields(BuildCommand)} == set(inspect.signature(build).parameters)


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(BuildCommand)])
def test_every_build_option_is_in_the_key(name: str) -> None:
    command = _build_defaults()
    changed = dataclasses.replace(command, **{name: _other(getattr(command, name))})
    assert options_key(changed) != options_key(command)


def test_an_option_added_later_is_in_the_key_unlisted() -> None:
    @dataclasses.dataclass(frozen=True)
    class Later(BuildCommand):
        sign: bool = False

    fields = dataclasses.asdict(_build_defaults())
    assert options_key(Later(**fields, sign=True)) != options_key(Later(**fields))
