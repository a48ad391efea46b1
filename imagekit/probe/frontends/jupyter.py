"""Front-end checks of jupyter images: auth, listen address, unsafe settings, token file, kernel."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sys
from collections.abc import Callable
from typing import Any

from ..results import CheckResult, failed, passed, skipped
from .common import run_healthcheck
from .env import (
    JUPYTER_PORT,
    REFUSED_EXIT,
    RUN_AS_USER_FIX,
    Context,
    cmdline,
    first_status,
    free_port,
    http_get,
    listeners,
    port_free,
    process_uid,
    run,
    tail,
    verdict,
)


def jupyter_default(ctx: Context) -> dict[str, Any]:
    """Start JupyterLab as the image does by default (no token given), on 0.0.0.0:8888 when free."""
    result: dict[str, Any] = {}
    if os.path.exists("/run/secrets/jupyter_token"):
        result["error"] = "/run/secrets/jupyter_token exists: the no-token start cannot be tested"
        return result
    port = JUPYTER_PORT
    extra: dict[str, str] = {}
    if not port_free("0.0.0.0", port):
        port = free_port()
        extra = {"JUPYTER_IP": "127.0.0.1", "JUPYTER_PORT": str(port)}
        result["defaults"] = False
    else:
        result["defaults"] = True
    env = ctx.server_env(**extra)
    result["port"] = port
    server = ctx.start(["start-jupyter"], env)
    up = server.wait_listening(port)
    log = server.output()
    match = re.search(r"printed only here: open \S+\?token=([0-9a-f]+)", log)
    token = match.group(1) if match else None
    # The report never carries the token, not even this throwaway server's.
    redact: Callable[[str], str] = (
        (lambda text: text.replace(token, "<token>")) if token else (lambda text: text)
    )
    result["log"] = redact(tail(log))
    if not up:
        result["error"] = f"nothing listened on {port} (server {'running' if server.alive() else 'exited'})"
        server.stop()
        return result
    result["server_pid"] = server.proc.pid
    result["server_uid"] = process_uid(server.proc.pid)
    result["cmd"] = " ".join(cmdline(server.proc.pid)[:4])
    result["listeners"] = listeners(port)
    base = f"http://127.0.0.1:{port}/api/status"
    result["token_length"] = len(token) if token else 0
    result["token_printed"] = log.count(token) if token else 0
    result["status_without_token"] = first_status(base)
    result["status_wrong_token"] = http_get(base, secrets.token_hex(24))[0]
    result["status_with_token"], body = http_get(base, token) if token else (0, "")
    result["status_query_token"] = http_get(f"{base}?token={token}")[0] if token else 0
    result["body"] = body[:200]
    health_env = dict(env)
    result["healthcheck"] = {"up": run_healthcheck(ctx, health_env)}
    server.stop()
    result["log"] = redact(tail(server.output()))
    result["healthcheck"]["down"] = run_healthcheck(ctx, health_env)
    return result


def check_jupyter_auth(ctx: Context) -> CheckResult:
    s = ctx.cached("jupyter_default", lambda: jupyter_default(ctx))
    if "server_pid" not in s:
        return failed(
            "jupyter_auth", f"JupyterLab did not start: {s.get('error')}",
            "run `docker run IMAGE` and read its log; " + RUN_AS_USER_FIX, detail=s.get("log"),
        )  # fmt: skip
    actual = {k: s.get(k) for k in (
        "status_without_token", "status_wrong_token", "status_with_token", "status_query_token",
        "token_length", "token_printed",
    )}  # fmt: skip
    expected = {
        "status_without_token": 403, "status_wrong_token": 403, "status_with_token": 200,
        "status_query_token": 200, "token_length": ">= 32", "token_printed": 1,
    }  # fmt: skip
    problems = []
    if not s.get("token_length"):
        problems.append("no generated token was printed at start")
    elif s["token_length"] < 32:
        problems.append(f"the generated token has {s['token_length']} characters")
    if s.get("token_printed", 0) > 1:
        problems.append(f"the token was printed {s['token_printed']} times")
    for key in ("status_without_token", "status_wrong_token"):
        if s.get(key) != 403:
            problems.append(f"{key.replace('_', ' ')}: {s.get(key)}, expected 403")
    for key in ("status_with_token", "status_query_token"):
        if s.get(key) != 200:
            problems.append(f"{key.replace('_', ' ')}: {s.get(key)}, expected 200")
    return verdict(
        "jupyter_auth",
        problems,
        "the entrypoint must always pass a non-empty token (JUPYTER_TOKEN) to jupyter-lab",
        expected,
        actual,
        {"log": s.get("log"), "body": s.get("body")},
    )


def check_jupyter_listen(ctx: Context) -> CheckResult:
    s = ctx.cached("jupyter_default", lambda: jupyter_default(ctx))
    if "server_pid" not in s:
        return failed("jupyter_listen", f"JupyterLab did not start: {s.get('error')}", RUN_AS_USER_FIX)
    if not s.get("defaults"):
        return skipped("jupyter_listen", f"port {JUPYTER_PORT} is taken in this container (a server runs)")
    got = s.get("listeners") or []
    if "0.0.0.0" in got or "::" in got:
        return passed("jupyter_listen", expected=f"0.0.0.0:{JUPYTER_PORT}", actual=got)
    return failed(
        "jupyter_listen", f"JupyterLab listens on {got}, not on all addresses",
        "the entrypoint's default is --ServerApp.ip=0.0.0.0 --ServerApp.port=8888",
        expected=f"0.0.0.0:{JUPYTER_PORT}", actual=got,
    )  # fmt: skip


def check_jupyter_refuses_unsafe(ctx: Context) -> CheckResult:
    cases = {
        "JUPYTER_TOKEN=''": ([], {"JUPYTER_TOKEN": ""}),
        "--IdentityProvider.token=": (["--IdentityProvider.token="], {}),
        "--ServerApp.token=": (["--ServerApp.token="], {}),
        "--PasswordIdentityProvider.hashed_password=x": (
            ["--PasswordIdentityProvider.hashed_password=x"],
            {},
        ),
        "--ServerApp.disable_check_xsrf=True": (["--ServerApp.disable_check_xsrf=True"], {}),
    }
    actual = {}
    problems = []
    for label, (args, extra) in cases.items():
        port = free_port()
        env = ctx.server_env(JUPYTER_IP="127.0.0.1", JUPYTER_PORT=str(port), **extra)
        rc, out = run([ctx.expect.entrypoint, "start-jupyter", *args], env, timeout=60)
        actual[label] = rc
        if rc != REFUSED_EXIT:
            problems.append(f"{label}: exit {rc}, expected the refusal ({REFUSED_EXIT}): {tail(out, 3)}")
    return verdict(
        "jupyter_refuses_unsafe",
        problems,
        "the entrypoint must refuse an empty token and token/password/XSRF arguments before starting",
        dict.fromkeys(cases, REFUSED_EXIT),
        actual,
        None,
    )


def check_jupyter_token_file(ctx: Context) -> CheckResult:
    token = secrets.token_hex(24)
    path = ctx.path("jupyter_token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")  # a secret file usually ends with a newline
    port = free_port()
    env = ctx.server_env(JUPYTER_IP="127.0.0.1", JUPYTER_PORT=str(port), JUPYTER_TOKEN_FILE=path)
    server = ctx.start(["start-jupyter"], env)
    try:
        if not server.wait_listening(port):
            return failed(
                "jupyter_token_file", "JupyterLab did not start with JUPYTER_TOKEN_FILE",
                "see detail", detail=tail(server.output()),
            )  # fmt: skip
        base = f"http://127.0.0.1:{port}/api/status"
        without = first_status(base)
        with_token = http_get(base, token)[0]
        log = server.output()
    finally:
        server.stop()
    actual = {"status_without_token": without, "status_with_token": with_token, "token_in_log": token in log}
    problems = []
    if without != 403:
        problems.append(f"without the token: {without}, expected 403")
    if with_token != 200:
        problems.append(f"with the file's token: {with_token}, expected 200")
    if token in log:
        problems.append("a token from a file was printed")
    return verdict(
        "jupyter_token_file",
        problems,
        "the entrypoint reads JUPYTER_TOKEN_FILE (trailing newline stripped) and passes it on",
        {"status_without_token": 403, "status_with_token": 200, "token_in_log": False},
        actual,
        tail(log, 5),
    )


def check_jupyter_kernel(ctx: Context) -> CheckResult:
    rc, out = run(["jupyter", "kernelspec", "list", "--json"], ctx.server_env())
    try:
        specs = json.loads(out[out.index("{") :])["kernelspecs"]
        argv = specs["python3"]["spec"]["argv"]
    except (ValueError, KeyError, TypeError):
        return failed(
            "jupyter_kernel", f"no python3 kernel (jupyter kernelspec list exit {rc})",
            "ipykernel comes with JupyterLab: install JupyterLab into the image's venv",
            detail=tail(out),
        )  # fmt: skip
    python = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0], path=ctx.env.get("PATH"))
    probe = "import importlib.util, sys; print(sys.prefix, importlib.util.find_spec('torch') is not None)"
    rc2, out2 = run([python or argv[0], "-c", probe], ctx.server_env())
    words = out2.split()
    ok = rc2 == 0 and len(words) == 2 and words[1] == "True"
    actual = {"argv0": argv[0], "python": python, "prefix_and_torch": out2.strip()}
    if ok and os.path.realpath(words[0]) == os.path.realpath(sys.prefix):
        return passed("jupyter_kernel", expected={"prefix": sys.prefix, "torch": True}, actual=actual)
    return failed(
        "jupyter_kernel", "the python3 kernel does not run the Python that holds torch",
        "install JupyterLab (ipykernel) into the cell's venv, not into another Python",
        expected={"prefix": sys.prefix, "torch": True}, actual=actual,
    )  # fmt: skip
