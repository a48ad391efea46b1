"""The checks both front ends run (imagekit/probe/frontends/common.py), here on the test host: it is
no front-end image, so each check fails and says why (as root, without /workspace, no dumb-init)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.probe import protocol
from imagekit.probe.frontends import common, env


@pytest.fixture
def ctx() -> Iterator[env.Context]:
    context = env.Context(env.parse_args(["--frontend", "jupyter", "--expect-uid", "10001"], {}), {})
    yield context
    context.close()


def test_the_user_must_be_the_image_s(ctx: env.Context) -> None:
    result = common.check_user(ctx)
    assert result.status == protocol.FAIL and f"uid {os.getuid()}, the image says 10001" in (
        result.cause or ""
    )
    assert result.expected == {"uid": 10001, "name": None, "home": env.WORKSPACE, "root": False}


@pytest.mark.skipif(Path(env.WORKSPACE).exists(), reason="this host has a /workspace")
def test_a_missing_workspace_is_named(ctx: env.Context) -> None:
    result = common.check_workspace(ctx)
    assert result.status == protocol.FAIL and f"{env.WORKSPACE} missing" in (result.cause or "")
    assert result.expected["owner_uid"] == 10001


def test_pid_1_must_be_dumb_init(ctx: env.Context) -> None:
    result = common.check_init(ctx)
    if result.status == protocol.FAIL:
        assert "PID 1 is not dumb-init" in (result.cause or "")
    else:  # a host whose PID 1 is dumb-init (a container started the way the images are)
        assert result.actual and "dumb-init" in result.actual
