"""Front-end checks of ssh images: sshd's configuration and refusals, key login, host keys."""

from __future__ import annotations

import glob
import os
import pwd
import re
import sys
from collections.abc import Callable
from typing import Any

from ..results import CheckResult, failed, passed, skipped
from .common import run_healthcheck
from .env import (
    REFUSED_EXIT,
    RUN_AS_USER_FIX,
    SSH_PORT,
    WORKSPACE,
    Context,
    cmdline,
    free_port,
    port_free,
    process_uid,
    run,
    tail,
    verdict,
)
from .jupyter import jupyter_default


def keygen(ctx: Context, name: str) -> tuple[str, str]:
    """A fresh ed25519 key pair: (private key path, public key text)."""
    path = ctx.path(name)
    rc, out = run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"frontend-check-{name}", "-f", path], ctx.env
    )
    if rc != 0:
        raise RuntimeError(f"ssh-keygen failed ({rc}): {out.strip()}")
    with open(path + ".pub") as handle:
        return path, handle.read().strip()


def fingerprint(ctx: Context, pub_path: str) -> str | None:
    rc, out = run(["ssh-keygen", "-l", "-f", pub_path], ctx.env)
    return out.split()[1] if rc == 0 and len(out.split()) > 1 else None


def ssh_cmd(port: int, known_hosts: str, user: str, extra: list[str], log_level: str = "ERROR") -> list[str]:
    return [
        "ssh", "-F", "/dev/null", "-p", str(port), "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "ConnectTimeout=15", "-o", f"LogLevel={log_level}", *extra, f"{user}@127.0.0.1",
    ]  # fmt: skip


def ssh_login(ctx: Context) -> dict[str, Any]:
    """Start sshd as the image does (0.0.0.0:2222 when free) with a fresh key authorized; log in."""
    result: dict[str, Any] = {}
    user = pwd.getpwuid(ctx.uid).pw_name
    key, pub = keygen(ctx, "client_key")
    other_key, _ = keygen(ctx, "other_key")
    port = SSH_PORT
    extra: dict[str, str] = {"SSH_AUTHORIZED_KEYS": pub}
    if not port_free("0.0.0.0", port):
        port = free_port()
        extra.update(SSH_PORT=str(port), SSH_LISTEN="127.0.0.1")
    result["port"] = port
    result["etc_ssh_before"] = sorted(glob.glob("/etc/ssh/ssh_host_*"))
    env = ctx.server_env(**extra)
    state = env["IMAGEKIT_STATE_DIR"]
    server = ctx.start(["start-sshd"], env)
    if not server.wait_listening(port, timeout=30):
        result["error"] = f"sshd did not listen on {port}"
        result["log"] = tail(server.output())
        server.stop()
        return result
    result["server_pid"] = server.proc.pid
    result["server_uid"] = process_uid(server.proc.pid)
    result["cmd"] = " ".join(cmdline(server.proc.pid)[:1])
    host_pub = os.path.join(state, "ssh", "ssh_host_ed25519_key.pub")
    known_hosts = ctx.path("known_hosts")
    with open(host_pub) as handle, open(known_hosts, "w") as out:
        host_line = handle.read().split()
        out.write(f"[127.0.0.1]:{port} {host_line[0]} {host_line[1]}\n")
    result["host_key"] = fingerprint(ctx, host_pub)
    key_opts = ["-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "PasswordAuthentication=no", "-i"]
    session = 'printf "%s|%s|%s|%s\\n" "$(id -u)" "$(command -v python3)" "$PIP_CONSTRAINT" "$(pwd)"'
    result["login"] = run([*ssh_cmd(port, known_hosts, user, [*key_opts, key]), session], ctx.env)
    result["other_key"] = run([*ssh_cmd(port, known_hosts, user, [*key_opts, other_key]), "true"], ctx.env)
    result["root"] = run([*ssh_cmd(port, known_hosts, "root", [*key_opts, key]), "true"], ctx.env)
    askpass = ctx.path("askpass.sh")
    with open(askpass, "w") as handle:
        handle.write("#!/bin/sh\necho not-the-password\n")
    os.chmod(askpass, 0o700)
    password_env = dict(ctx.env, SSH_ASKPASS=askpass, SSH_ASKPASS_REQUIRE="force", DISPLAY=":0")
    password_opts = [
        "-o", "BatchMode=no", "-o", "PubkeyAuthentication=no", "-o", "NumberOfPasswordPrompts=1",
        "-o", "PreferredAuthentications=password,keyboard-interactive",
    ]  # fmt: skip
    result["password"] = run(
        [*ssh_cmd(port, known_hosts, user, password_opts, "DEBUG1"), "true"], password_env
    )
    result["healthcheck"] = {"up": run_healthcheck(ctx, env)}
    server.stop()
    result["log"] = tail(server.output(), 25)
    result["healthcheck"]["down"] = run_healthcheck(ctx, env)
    result["etc_ssh_after"] = sorted(glob.glob("/etc/ssh/ssh_host_*"))
    return result


SCENARIOS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "jupyter_default": jupyter_default,
    "ssh_login": ssh_login,
}


def _ssh_scenario(ctx: Context, name: str) -> tuple[dict[str, Any], CheckResult | None]:
    s = ctx.cached("ssh_login", lambda: ssh_login(ctx))
    if "server_pid" not in s:
        return s, failed(
            name, f"sshd did not start: {s.get('error')}",
            "run `docker run -e SSH_AUTHORIZED_KEYS=... IMAGE` and read its log; " + RUN_AS_USER_FIX,
            detail=s.get("log"),
        )  # fmt: skip
    return s, None


def check_ssh_login(ctx: Context) -> CheckResult:
    s, bad = _ssh_scenario(ctx, "ssh_login")
    if bad:
        return bad
    rc, out = s["login"]
    lines = [line for line in out.strip().splitlines() if line.count("|") == 3]
    fields = lines[-1].split("|") if lines else []
    expected = {
        "exit": 0,
        "uid": ctx.uid,
        "python3": os.path.join(sys.prefix, "bin", "python3"),
        "PIP_CONSTRAINT": ctx.env.get("PIP_CONSTRAINT", ""),
        "cwd": WORKSPACE,
    }
    actual = {"exit": rc}
    if len(fields) == 4:
        actual.update(uid=fields[0], python3=fields[1], PIP_CONSTRAINT=fields[2], cwd=fields[3])
    problems = []
    if rc != 0:
        problems.append(f"key login failed (exit {rc}): {tail(out, 3)}")
    elif len(fields) != 4:
        problems.append(f"the session printed {out.strip()[:200]!r}")
    else:
        if fields[0] != str(ctx.uid) or fields[0] == "0":
            problems.append(f"the session runs as uid {fields[0]}")
        if fields[1] != expected["python3"]:
            problems.append(f"python3 in the session is {fields[1] or 'missing'}, not the image's venv")
        if fields[2] != expected["PIP_CONSTRAINT"]:
            problems.append("the session lost the container environment (PIP_CONSTRAINT)")
        if fields[3] != WORKSPACE:
            problems.append(f"the session starts in {fields[3]}")
    return verdict(
        "ssh_login",
        problems,
        "see the sshd log in detail; the entrypoint authorizes SSH_AUTHORIZED_KEYS[_FILE] and gives"
        " sessions the container environment",
        expected,
        actual,
        {"host_key": s.get("host_key"), "sshd_log": s.get("log")},
    )


def check_ssh_password_refused(ctx: Context) -> CheckResult:
    s, bad = _ssh_scenario(ctx, "ssh_password_refused")
    if bad:
        return bad
    rc, out = s["password"]
    offered = re.findall(r"Authentications that can continue: (\S+)", out)
    methods = sorted({m for line in offered for m in line.split(",")})
    actual = {"exit": rc, "methods_offered": methods, "denied": "Permission denied" in out}
    problems = []
    if rc == 0:
        problems.append("a password login succeeded")
    if not offered:
        problems.append("the server offered no authentication method (did it answer?)")
    elif methods != ["publickey"]:
        problems.append(f"the server offers {methods}, not publickey only")
    if "Permission denied" not in out:
        problems.append("no 'Permission denied' from the server")
    return verdict(
        "ssh_password_refused",
        problems,
        "sshd_config: PasswordAuthentication no, KbdInteractiveAuthentication no,"
        " AuthenticationMethods publickey",
        {"exit": 255, "methods_offered": ["publickey"], "denied": True},
        actual,
        tail(out, 6),
    )


def check_ssh_other_keys_refused(ctx: Context) -> CheckResult:
    s, bad = _ssh_scenario(ctx, "ssh_other_keys_refused")
    if bad:
        return bad
    other_rc, other_out = s["other_key"]
    root_rc, root_out = s["root"]
    problems = []
    if other_rc == 0:
        problems.append("a key that was never authorized logged in")
    if root_rc == 0:
        problems.append("root logged in")
    return verdict(
        "ssh_other_keys_refused",
        problems,
        "only SSH_AUTHORIZED_KEYS[_FILE] may be authorized (AuthorizedKeysFile none), AllowUsers the user",
        {"unknown_key": "refused", "root": "refused"},
        {"unknown_key_exit": other_rc, "root_exit": root_rc},
        {"unknown_key": tail(other_out, 2), "root": tail(root_out, 2)},
    )


def check_ssh_host_keys(ctx: Context) -> CheckResult:
    s, bad = _ssh_scenario(ctx, "ssh_host_keys")
    if bad:
        return bad
    # A second start in a fresh state directory stands for a second container of this image.
    _, pub = keygen(ctx, "second_start_key")
    env = ctx.server_env(SSH_AUTHORIZED_KEYS=pub, SSH_PORT=str(free_port()), SSH_LISTEN="127.0.0.1")
    rc, out = run([ctx.expect.entrypoint, "start-sshd", "-T"], env)
    second = fingerprint(ctx, os.path.join(env["IMAGEKIT_STATE_DIR"], "ssh", "ssh_host_ed25519_key.pub"))
    first = s.get("host_key")
    actual = {
        "etc_ssh_before": s.get("etc_ssh_before"),
        "etc_ssh_after": s.get("etc_ssh_after"),
        "first_start": first,
        "second_start": second,
    }
    problems = []
    if s.get("etc_ssh_before") or s.get("etc_ssh_after"):
        problems.append("host keys in /etc/ssh")
    if not first or not second:
        problems.append(f"no host key generated at start (second start exit {rc}: {tail(out, 2)})")
    elif first == second:
        problems.append("two starts share one host key")
    login_rc = s["login"][0]
    if login_rc != 0:
        problems.append("the host key generated at start was not the one presented (or login failed)")
    return verdict(
        "ssh_host_keys",
        problems,
        "delete /etc/ssh/ssh_host_* where openssh-server is installed; the entrypoint generates keys"
        " in the state directory at a container's first start",
        {"etc_ssh": [], "first_start != second_start": True},
        actual,
        None,
    )


SSHD_EXPECT = {
    "passwordauthentication": "no",
    "kbdinteractiveauthentication": "no",
    "permitrootlogin": "no",
    "pubkeyauthentication": "yes",
    "authenticationmethods": "publickey",
    "permitemptypasswords": "no",
    "hostbasedauthentication": "no",
    "usepam": "no",
    "authorizedkeysfile": "none",
    "x11forwarding": "no",
    "permituserenvironment": "no",
    "port": str(SSH_PORT),
}


def check_sshd_config(ctx: Context) -> CheckResult:
    _, pub = keygen(ctx, "config_key")
    env = ctx.server_env(SSH_AUTHORIZED_KEYS=pub)  # the image's defaults otherwise (port 2222)
    rc, out = run([ctx.expect.entrypoint, "start-sshd", "-T"], env)
    effective: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        if key in SSHD_EXPECT and key not in effective:
            effective[key] = value.strip()
    problems = [
        f"{k} is {effective.get(k)!r}, expected {v!r}"
        for k, v in SSHD_EXPECT.items()
        if effective.get(k) != v
    ]
    if rc != 0:
        problems.insert(0, f"sshd -T exited {rc}: {tail(out, 3)}")
    return verdict(
        "sshd_config",
        problems,
        "see imagekit/frontends/sshd_config and the entrypoint's sshd options",
        SSHD_EXPECT,
        effective,
        None,
    )


def check_sshd_refuses_no_keys(ctx: Context) -> CheckResult:
    if os.path.exists("/run/secrets/authorized_keys"):
        return skipped("sshd_refuses_no_keys", "/run/secrets/authorized_keys is mounted")
    env = ctx.server_env(SSH_PORT=str(free_port()), SSH_LISTEN="127.0.0.1")
    rc, out = run([ctx.expect.entrypoint, "start-sshd"], env, timeout=30)
    if rc == REFUSED_EXIT and "no authorized key" in out:
        return passed("sshd_refuses_no_keys", expected=REFUSED_EXIT, actual=rc, detail=tail(out, 1))
    return failed(
        "sshd_refuses_no_keys", f"with no key given the entrypoint exited {rc}",
        "the entrypoint must not start sshd without an authorized key",
        expected=REFUSED_EXIT, actual=rc, detail=tail(out, 3),
    )  # fmt: skip
