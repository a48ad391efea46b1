"""The started server's checks (imagekit/probe/frontends/server.py), judged from a scenario's record
as the jupyter or ssh scenario leaves it in the run's cache (the servers themselves start only in a
front-end image: tests/integration/test_frontends.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from imagekit.probe import protocol
from imagekit.probe.frontends import env, server


@pytest.fixture
def ctx() -> Iterator[env.Context]:
    context = env.Context(env.parse_args(["--frontend", "ssh"], {}), {})
    yield context
    context.close()


def seeded(ctx: env.Context, scenario: dict[str, Any]) -> env.Context:
    ctx.cached("ssh_login", lambda: scenario)
    return ctx


def test_a_server_running_as_root_or_not_started_fails(ctx: env.Context) -> None:
    root = server.check_server_user(seeded(ctx, {"server_pid": 42, "server_uid": 0}))
    assert root.status == protocol.FAIL and "runs as uid 0" in (root.cause or "")
    assert root.fix == env.RUN_AS_USER_FIX


def test_a_server_that_never_started_is_named(ctx: env.Context) -> None:
    missing = server.check_server_user(seeded(ctx, {"error": "sshd exited 255", "log": "tail"}))
    assert missing.status == protocol.FAIL and "did not start: sshd exited 255" in (missing.cause or "")
    assert missing.detail == "tail"


def test_the_user_s_server_passes(ctx: env.Context) -> None:
    ok = server.check_server_user(seeded(ctx, {"server_pid": 42, "server_uid": 10001, "cmd": "sshd"}))
    assert ok.status == protocol.PASS and ok.actual == {"pid": 42, "uid": 10001, "cmd": "sshd"}


def test_a_healthcheck_must_pass_with_the_server_and_fail_without(ctx: env.Context) -> None:
    always = server.check_healthcheck(seeded(ctx, {"healthcheck": {"up": (0, ""), "down": (0, "")}}))
    assert always.status == protocol.FAIL and "passed with no server running" in (always.cause or "")


def test_a_healthcheck_that_tells_up_from_down_passes(ctx: env.Context) -> None:
    good = server.check_healthcheck(seeded(ctx, {"healthcheck": {"up": (0, "ok"), "down": (1, "refused")}}))
    assert good.status == protocol.PASS
