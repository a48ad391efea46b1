"""A registry's login: from the environment, else the Docker config (a bounded read of a regular file),
and a password once read masked in everything printed from then on."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from imagekit.core.errors import EnvironmentProblem
from imagekit.core.text import redact
from imagekit.registry.credentials import Credentials, find_credentials
from tests.unit.registry.test_client import MiB, outcome


def test_credentials_from_env_then_docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    auth = base64.b64encode(b"robot:hunter2").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"https://ghcr.io": {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    found = find_credentials("ghcr.io", environ={})
    assert found == Credentials("robot", "hunter2")
    assert "hunter2" not in repr(found)
    assert find_credentials("quay.io", environ={}) is None
    env = {"IMAGEKIT_REGISTRY_USER": "u", "IMAGEKIT_REGISTRY_PASSWORD": "p"}
    assert find_credentials("ghcr.io", environ=env) == Credentials("u", "p")


def test_a_password_read_is_masked_in_everything_printed_from_then_on() -> None:
    """Issue 45: an engine's push error, a registry's answer: whatever repeats it prints it masked."""
    env = {"IMAGEKIT_REGISTRY_USER": "robot", "IMAGEKIT_REGISTRY_PASSWORD": "s3cret-Registry-Pw"}
    basic = base64.b64encode(b"robot:s3cret-Registry-Pw").decode()
    said = f"denied: s3cret-Registry-Pw is wrong (Basic {basic}"
    assert redact(said) == said
    find_credentials("ghcr.io", environ=env)
    assert redact(said) == "denied: *** is wrong (Basic ***"


@pytest.mark.parametrize("kind", ["a FIFO", "a directory", "2 MiB"])
def test_the_docker_config_is_read_like_every_other_input(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Class 1: $DOCKER_CONFIG/config.json is a bounded read of a regular file (a FIFO blocked)."""
    config = tmp_path / "config.json"
    if kind == "a FIFO":
        os.mkfifo(config)
    elif kind == "a directory":
        config.mkdir()
    else:
        with config.open("wb") as sparse:
            sparse.truncate(2 * MiB)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    caught = outcome(lambda: find_credentials("ghcr.io", environ={}), seconds=20)
    assert isinstance(caught, EnvironmentProblem), repr(caught)
    assert str(config) in caught.message and "\n" not in caught.message
