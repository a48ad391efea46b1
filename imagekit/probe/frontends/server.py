"""Front-end checks of the started server: it runs as the user; the image's HEALTHCHECK answers."""

from __future__ import annotations

from ..results import CheckResult, failed, passed
from .env import RUN_AS_USER_FIX, Context, verdict
from .ssh import SCENARIOS


def check_server_user(ctx: Context) -> CheckResult:
    key = "jupyter_default" if ctx.expect.frontend == "jupyter" else "ssh_login"
    scenario = ctx.cached(key, lambda: SCENARIOS[key](ctx))
    pid, uid = scenario.get("server_pid"), scenario.get("server_uid")
    if pid is None:
        return failed(
            "server_user", f"the server did not start: {scenario.get('error')}", RUN_AS_USER_FIX,
            expected="non-root", actual=None, detail=scenario.get("log"),
        )  # fmt: skip
    if uid in (None, 0):
        return failed(
            "server_user", f"the server (pid {pid}) runs as uid {uid}", RUN_AS_USER_FIX,
            expected="non-root", actual=uid,
        )  # fmt: skip
    return passed(
        "server_user", expected="non-root", actual={"pid": pid, "uid": uid, "cmd": scenario.get("cmd")}
    )


def check_healthcheck(ctx: Context) -> CheckResult:
    key = "jupyter_default" if ctx.expect.frontend == "jupyter" else "ssh_login"
    scenario = ctx.cached(key, lambda: SCENARIOS[key](ctx))
    health = scenario.get("healthcheck")
    if health is None:
        return failed(
            "healthcheck", f"no server to check: {scenario.get('error')}", "see the server check",
            detail=scenario.get("log"),
        )  # fmt: skip
    rc_up, out_up = health["up"]
    rc_down, out_down = health["down"]
    problems = []
    if rc_up != 0:
        problems.append(
            f"the HEALTHCHECK command failed against a running server (exit {rc_up}): {out_up.strip()}"
        )
    if rc_down == 0:
        problems.append("the HEALTHCHECK command passed with no server running")
    return verdict(
        "healthcheck",
        problems,
        "see imagekit/frontends/healthcheck.py",
        {"running": 0, "stopped": "non-zero"},
        {"running": rc_up, "stopped": rc_down},
        {"running": out_up.strip(), "stopped": out_down.strip()},
    )
