#!/usr/bin/env python3
"""imagekit front-end check: prove a jupyter or ssh image works and is locked down; print ONE JSON document.

Copied into every front-end image at /opt/imagekit/frontend_check.py. Standard library only;
Python 3.8+. It runs inside the container as the image's user, as the container's command behind
the image's ENTRYPOINT (dumb-init -> entrypoint.sh, which runs any command it does not know), and
reaches nothing but loopback: it starts the image's own entrypoint (start-jupyter / start-sshd) on
127.0.0.1 or on the default port, with a private state directory under $TMPDIR, talks to it, and
stops it. No GPU, no network, no capability is needed:

    docker run --rm --network none --cap-drop ALL --security-opt no-new-privileges --read-only \\
      --tmpfs /tmp:rw,nosuid,nodev,size=1g -e HOME=/tmp IMAGE python3 /opt/imagekit/frontend_check.py

Expectations come from the image's labels, passed as arguments or environment (arguments win):

    --frontend jupyter|ssh    IMAGEKIT_FRONTEND (the image's ENV)   label imagekit.frontend
    --expect-user dev         IMAGEKIT_EXPECT_USER                  label imagekit.frontend-user
    --expect-uid 1000         IMAGEKIT_EXPECT_UID                   label imagekit.frontend-uid
    --expect-jupyterlab 4.6.6 IMAGEKIT_EXPECT_JUPYTERLAB            label imagekit.jupyterlab

Checks, both front ends: user (non-root, the expected name and uid, home /workspace), init (PID 1
is dumb-init), workspace (/workspace/{code,data,checkpoints} owned by the user), packages (every
pin of PIP_CONSTRAINT holds: torch was not replaced; dumb-init and JupyterLab at their versions),
no_baked_secrets (no token or authorized key in the environment, no SSH host key in /etc/ssh or in
the image's empty state directory, no token or password in Jupyter's config files, no Jupyter
runtime file), server_user (the started server runs as the user). jupyter: jupyter_refuses_unsafe
(an empty token and token/password arguments are refused), jupyter_auth (with no token given one is
generated, printed once and required: /api/status answers 200 with it, 403 without and with a wrong
one), jupyter_listen (0.0.0.0:8888 by default), jupyter_token_file (a mounted token file is used),
jupyter_kernel (the python3 kernel runs the Python that has torch), healthcheck. ssh:
sshd_refuses_no_keys, sshd_config (`sshd -T`: public key only, no password, no keyboard-interactive,
no root, no PAM, port 2222), ssh_login (a freshly generated ed25519 key logs in, host key pinned,
the session has the image's environment and /workspace), ssh_password_refused (a real password
attempt fails: the server offers publickey only), ssh_other_keys_refused (an unknown key and root
are refused), ssh_host_keys (generated at start, none in /etc/ssh, two starts make two different
keys), healthcheck.

Output: {"schema": 1, "kind": "frontend", "frontend", "checks": [...], "summary": {...},
"expected"}. Every check has name, status (pass|fail|skip), required, reason (skip), expected,
actual, detail, cause and fix (fail), duration_s, as /opt/imagekit/check.py's. Exit 0 when no
required check failed, 1 otherwise, 2 on bad arguments. An exception inside a check becomes that
check's failure. Servers it started are stopped on every path.
"""

# Python 3.8 compatibility: os.path on plain strings.
# ruff: noqa: PTH101, PTH103, PTH110, PTH111, PTH112, PTH113, PTH114, PTH117, PTH118, PTH119, PTH123, PTH207, PTH208

from __future__ import annotations

import argparse
import contextlib
import glob
import importlib.metadata
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

# The result records are check.py's, which lies beside this file in every front-end image
# (/opt/imagekit/); imagekit's own tests import both from the package.
if TYPE_CHECKING:
    from imagekit.incontainer.check import CheckResult, failed, passed, run_check, skipped, summarize
else:
    try:
        from check import CheckResult, failed, passed, run_check, skipped, summarize
    except ImportError:
        from imagekit.incontainer.check import CheckResult, failed, passed, run_check, skipped, summarize

SCHEMA = 1
ENTRYPOINT = "/opt/imagekit/frontend/entrypoint.sh"
HEALTHCHECK = "/opt/imagekit/frontend/healthcheck.py"
WORKSPACE = "/workspace"
WORKSPACE_DIRS = ("code", "data", "checkpoints")
IMAGE_STATE_DIR = "/var/lib/imagekit-frontend"
JUPYTER_PORT = 8888
SSH_PORT = 2222
START_TIMEOUT_S = 90.0
COMMAND_TIMEOUT_S = 30.0
REFUSED_EXIT = 64  # the entrypoint's status for a refused or missing setting
RUN_AS_USER_FIX = (
    "run the image as its own user (no --user 0 / runAsUser: 0) with its ENTRYPOINT; the front ends"
    " refuse root"
)


# -- results ------------------------------------------------------------------------------------


def verdict(name: str, problems: list[str], fix: str, expected: Any, actual: Any, detail: Any) -> CheckResult:
    if problems:
        return failed(name, "; ".join(problems), fix, expected=expected, actual=actual, detail=detail)
    return passed(name, expected=expected, actual=actual, detail=detail)


# -- helpers ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    frontend: str
    user: str | None
    uid: int | None
    jupyterlab: str | None
    entrypoint: str
    healthcheck: str


class ArgumentError(Exception):
    pass


def parse_args(argv: list[str], env: dict[str, str]) -> Expect:
    parser = argparse.ArgumentParser(prog="frontend_check.py", add_help=True)
    parser.add_argument("--frontend", default=env.get("IMAGEKIT_FRONTEND"))
    parser.add_argument("--expect-user", default=env.get("IMAGEKIT_EXPECT_USER"))
    parser.add_argument("--expect-uid", default=env.get("IMAGEKIT_EXPECT_UID"))
    parser.add_argument("--expect-jupyterlab", default=env.get("IMAGEKIT_EXPECT_JUPYTERLAB"))
    parser.add_argument("--entrypoint", default=ENTRYPOINT)
    parser.add_argument("--healthcheck", default=HEALTHCHECK)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        raise ArgumentError("see usage above") from exc
    if args.frontend not in ("jupyter", "ssh"):
        raise ArgumentError(
            f"--frontend (or IMAGEKIT_FRONTEND) must be jupyter or ssh, not {args.frontend!r}"
        )
    uid = None
    if args.expect_uid not in (None, ""):
        if not str(args.expect_uid).isdigit():
            raise ArgumentError(f"--expect-uid {args.expect_uid!r}: not a number")
        uid = int(args.expect_uid)
    return Expect(
        frontend=args.frontend,
        user=args.expect_user or None,
        uid=uid,
        jupyterlab=args.expect_jupyterlab or None,
        entrypoint=args.entrypoint,
        healthcheck=args.healthcheck,
    )


def run(cmd: list[str], env: dict[str, str], timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str]:
    """(exit status, stdout+stderr); 124 on timeout, 127 when the program is missing."""
    try:
        proc = subprocess.run(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        return 124, (out.decode("utf-8", "replace") if isinstance(out, bytes) else out) + "\n[timed out]"
    except OSError as exc:
        return 127, f"{cmd[0]}: {exc}"
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def port_free(host: str, port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, token: str | None = None, timeout: float = 10.0) -> tuple[int, str]:
    """(HTTP status, body); status 0 when nothing answered. Never through a proxy."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    headers = {"Authorization": f"token {token}"} if token is not None else {}
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
            return int(response.status), response.read(2000).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""
    except (OSError, urllib.error.URLError) as exc:
        return 0, str(exc)


def first_status(url: str, timeout: float = START_TIMEOUT_S) -> int:
    """The first HTTP status ``url`` answers without a token (0: none in time).

    Jupyter listens before its extensions are loaded and answers only then, so a started server
    is polled with the unauthenticated request until it answers at all."""
    deadline = time.monotonic() + timeout
    while True:
        status, _ = http_get(url)
        if status or time.monotonic() >= deadline:
            return status
        time.sleep(0.3)


def listeners(port: int) -> list[str]:
    """Local addresses listening on TCP `port`, from /proc/net/tcp{,6} ('0.0.0.0', '127.0.0.1', '::')."""
    found = []
    for path, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            with open(path) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 4 or fields[3] != "0A":  # 0A: LISTEN
                continue
            address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) != port or len(address) != width:
                continue
            raw = bytes.fromhex(address)
            if width == 8:
                found.append(socket.inet_ntop(socket.AF_INET, raw[::-1]))
            else:
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                found.append(socket.inet_ntop(socket.AF_INET6, words))
    return found


def process_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    return int(line.split()[2])  # effective
    except OSError:
        return None
    return None


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [p.decode("utf-8", "replace") for p in handle.read().split(b"\0") if p]
    except OSError:
        return []


def running_servers() -> list[str]:
    """Front-end servers already running in this container (not started by this script)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        args = cmdline(int(entry))
        text = " ".join(args[:3])
        if args and ("sshd" in os.path.basename(args[0]) or "jupyter" in text):
            found.append(f"{entry}: {text[:120]}")
    return found


class Server:
    """A front end started through the image's entrypoint, its output in a file."""

    def __init__(self, cmd: list[str], env: dict[str, str], log_path: str) -> None:
        self.log_path = log_path
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def output(self) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                return handle.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_listening(self, port: int, timeout: float = START_TIMEOUT_S) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive():
            with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
                sock.settimeout(1.0)
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return True
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        if self.alive():
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        self.log.close()


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


class Context:
    def __init__(self, expect: Expect, env: dict[str, str]) -> None:
        self.expect = expect
        self.env = env
        self.uid = os.getuid()
        self.tmp = tempfile.mkdtemp(prefix="imagekit-frontend-check-", dir=env.get("TMPDIR") or None)
        self.servers: list[Server] = []
        self.preexisting = running_servers()
        self._cache: dict[str, Any] = {}
        self._count = 0

    def path(self, name: str) -> str:
        self._count += 1
        return os.path.join(self.tmp, f"{self._count:02d}-{name}")

    def server_env(self, **extra: str) -> dict[str, str]:
        """The environment a container would give the entrypoint, minus any token or key."""
        env = {
            k: v
            for k, v in self.env.items()
            if not k.startswith(("JUPYTER_", "SSH_")) and k != "IMAGEKIT_STATE_DIR"
        }
        state = self.path("state")
        env["IMAGEKIT_STATE_DIR"] = state
        home = env.get("HOME") or ""
        if not (os.path.isdir(home) and os.access(home, os.W_OK)):
            # A read-only root without HOME=/tmp: Jupyter's tools need a writable home.
            env["HOME"] = self.home()
        env.update(extra)
        return env

    def home(self) -> str:
        path = os.path.join(self.tmp, "home")
        os.makedirs(path, mode=0o700, exist_ok=True)
        return path

    def start(self, args: list[str], env: dict[str, str]) -> Server:
        server = Server([self.expect.entrypoint, *args], env, self.path("server.log"))
        self.servers.append(server)
        return server

    def cached(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def close(self) -> None:
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


# -- checks: both front ends ----------------------------------------------------------------------


def check_user(ctx: Context) -> CheckResult:
    expect = ctx.expect
    problems = []
    try:
        entry: Any = pwd.getpwuid(ctx.uid)
        actual = {"uid": ctx.uid, "gid": os.getgid(), "name": entry.pw_name, "home": entry.pw_dir}
    except KeyError:
        entry = None
        actual = {"uid": ctx.uid, "gid": os.getgid(), "name": None, "home": None}
        problems.append(f"uid {ctx.uid} has no /etc/passwd entry")
    if ctx.uid == 0:
        problems.append("running as root")
    if expect.uid is not None and ctx.uid != expect.uid:
        problems.append(f"uid {ctx.uid}, the image says {expect.uid}")
    if entry is not None and expect.user is not None and entry.pw_name != expect.user:
        problems.append(f"user {entry.pw_name}, the image says {expect.user}")
    if entry is not None and entry.pw_dir != WORKSPACE:
        problems.append(f"home {entry.pw_dir}, not {WORKSPACE}")
    expected = {"uid": expect.uid, "name": expect.user, "home": WORKSPACE, "root": False}
    return verdict("user", problems, RUN_AS_USER_FIX, expected, actual, None)


def check_init(ctx: Context) -> CheckResult:
    args = cmdline(1)
    actual = " ".join(args)[:300]
    if args and os.path.basename(args[0]) == "dumb-init":
        return passed(
            "init", expected="dumb-init as PID 1", actual=actual, detail={"pid1_uid": process_uid(1)}
        )
    return failed(
        "init",
        "PID 1 is not dumb-init: the image's ENTRYPOINT was replaced (--entrypoint) or lost",
        "run the check as the container's command behind the image's own ENTRYPOINT"
        " (docker run IMAGE python3 /opt/imagekit/frontend_check.py), without --entrypoint or --init",
        expected="dumb-init as PID 1",
        actual=actual or None,
    )


def check_workspace(ctx: Context) -> CheckResult:
    owner = ctx.expect.uid if ctx.expect.uid is not None else ctx.uid
    actual: dict[str, Any] = {}
    problems = []
    for name in ("", *WORKSPACE_DIRS):
        path = os.path.join(WORKSPACE, name) if name else WORKSPACE
        try:
            st = os.lstat(path)
        except OSError as exc:
            actual[path] = f"missing ({exc.strerror})"
            problems.append(f"{path} missing")
            continue
        mode = st.st_mode & 0o7777
        actual[path] = {"uid": st.st_uid, "gid": st.st_gid, "mode": oct(mode)}
        if not os.path.isdir(path) or os.path.islink(path):
            problems.append(f"{path} is not a directory")
        if st.st_uid != owner:
            problems.append(f"{path} belongs to uid {st.st_uid}, not {owner}")
        if mode & 0o700 != 0o700 or mode & 0o002:
            problems.append(f"{path} has mode {oct(mode)} (want the owner's rwx, not world-writable)")
    return verdict(
        "workspace",
        problems,
        "the front-end Dockerfile must create /workspace/{code,data,checkpoints} owned by the user",
        {"owner_uid": owner, "dirs": [WORKSPACE] + [f"{WORKSPACE}/{d}" for d in WORKSPACE_DIRS]},
        actual,
        None,
    )


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_packages(ctx: Context) -> CheckResult:
    constraints = ctx.env.get("PIP_CONSTRAINT") or "/etc/imagekit/constraints.txt"
    problems = []
    pins: dict[str, Any] = {}
    try:
        with open(constraints) as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        lines = []
        problems.append(f"no constraints file {constraints} ({exc.strerror})")
    for raw in lines:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", raw.split("#", 1)[0].strip())
        if not match:
            continue
        name, want = match.groups()
        got = _distribution_version(name)
        pins[name] = {"pinned": want, "installed": got}
        if got != want:
            problems.append(f"{name} is {got}, pinned {want}: the front end replaced it")
    tools = {"dumb-init": shutil.which("dumb-init", path=os.path.join(sys.prefix, "bin"))}
    if tools["dumb-init"] is None:
        problems.append(f"no dumb-init in {sys.prefix}/bin")
    if ctx.expect.frontend == "jupyter":
        lab = _distribution_version("jupyterlab")
        tools["jupyterlab"] = lab
        if lab is None:
            problems.append("JupyterLab is not installed in the image's Python")
        elif ctx.expect.jupyterlab and lab != ctx.expect.jupyterlab:
            problems.append(f"JupyterLab {lab}, the image says {ctx.expect.jupyterlab}")
    return verdict(
        "packages",
        problems,
        "install the front end under the cell's constraints (the front-end template pins every"
        " installed package); rebuild the front-end image",
        {"constraints": constraints, "jupyterlab": ctx.expect.jupyterlab},
        {"pins": pins, **tools},
        {"python": sys.executable},
    )


SECRET_ENV = re.compile(r"JUPYTER_TOKEN(_FILE)?|SSH_AUTHORIZED_KEYS(_FILE)?|.*PASSWORD.*")
CONFIG_SECRET = re.compile(r"""(?i)\b(token|password|hashed_password)\b["']?\s*[:=]\s*["']?[^"'\s,}]+""")


def jupyter_config_dirs() -> list[str]:
    dirs = [os.path.join(sys.prefix, "etc", "jupyter"), "/usr/local/etc/jupyter", "/etc/jupyter"]
    dirs += [os.path.join(WORKSPACE, ".jupyter"), os.path.join(os.path.expanduser("~"), ".jupyter")]
    return list(dict.fromkeys(dirs))


def check_no_baked_secrets(ctx: Context) -> CheckResult:
    problems = []
    actual: dict[str, Any] = {}
    env_hits = sorted(k for k in ctx.env if SECRET_ENV.fullmatch(k))
    pid1_env: list[str] = []
    with contextlib.suppress(OSError):
        with open("/proc/1/environ", "rb") as handle:
            names = [e.split(b"=", 1)[0].decode("utf-8", "replace") for e in handle.read().split(b"\0") if e]
        pid1_env = sorted(k for k in names if SECRET_ENV.fullmatch(k))
    actual["environment"] = sorted(set(env_hits + pid1_env))
    if actual["environment"]:
        problems.append(
            f"the environment holds {', '.join(actual['environment'])}: from the image's ENV unless"
            " the check was started with -e"
        )
    host_keys = sorted(glob.glob("/etc/ssh/ssh_host_*"))
    actual["etc_ssh_host_keys"] = host_keys
    if host_keys:
        problems.append(f"SSH host keys in the image: {', '.join(host_keys)}")
    try:
        state = sorted(os.listdir(IMAGE_STATE_DIR))
    except OSError:
        state = []
    actual["image_state_dir"] = state
    if state and not ctx.preexisting:
        problems.append(f"{IMAGE_STATE_DIR} is not empty in the image: {', '.join(state[:5])}")
    config_hits = []
    for directory in jupyter_config_dirs():
        for path in glob.glob(os.path.join(directory, "**", "*"), recursive=True):
            if not os.path.isfile(path) or not path.endswith((".py", ".json")):
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    text = handle.read(200_000)
            except OSError:
                continue
            if CONFIG_SECRET.search(text):
                config_hits.append(path)
    actual["jupyter_config_with_token_or_password"] = config_hits
    if config_hits:
        problems.append(f"Jupyter config sets a token or password: {', '.join(config_hits)}")
    # Named places only: /workspace may hold mounted data sets, never walked.
    runtime = []
    for base in (WORKSPACE, os.path.expanduser("~")):
        runtime += glob.glob(os.path.join(base, ".local", "share", "jupyter", "runtime", "jpserver-*.json"))
    runtime += glob.glob(os.path.join(IMAGE_STATE_DIR, "jupyter", "jpserver-*.json"))
    actual["jupyter_runtime_files"] = sorted(set(runtime))
    if runtime and not ctx.preexisting:
        problems.append(f"Jupyter runtime files (they hold a token) in the image: {', '.join(runtime)}")
    keys = [
        path
        for base in (WORKSPACE, os.path.expanduser("~"), "/root")
        for path in (
            os.path.join(base, ".ssh", "authorized_keys"),
            os.path.join(base, ".ssh", "authorized_keys2"),
        )
        if os.path.exists(path)
    ]
    actual["authorized_keys_files"] = sorted(set(keys))
    if keys:
        problems.append(f"authorized_keys in the image: {', '.join(keys)}")
    return verdict(
        "no_baked_secrets",
        problems,
        "tokens, keys and host keys are given at start (JUPYTER_TOKEN[_FILE], SSH_AUTHORIZED_KEYS[_FILE])"
        " or generated there; delete /etc/ssh/ssh_host_* in the layer that installs openssh-server"
        " and never put a secret in ENV, ARG, LABEL or a file of the image",
        "none",
        actual,
        {"servers_already_running": ctx.preexisting},
    )


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


def run_healthcheck(ctx: Context, env: dict[str, str]) -> tuple[int, str]:
    return run([sys.executable, ctx.expect.healthcheck, ctx.expect.frontend], env)


# -- jupyter ------------------------------------------------------------------------------------------


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


# -- ssh ----------------------------------------------------------------------------------------------


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


# -- the report ---------------------------------------------------------------------------------------

COMMON = (
    ("user", check_user),
    ("init", check_init),
    ("workspace", check_workspace),
    ("packages", check_packages),
    ("no_baked_secrets", check_no_baked_secrets),
)
CHECKS: dict[str, tuple[tuple[str, Callable[[Context], CheckResult]], ...]] = {
    "jupyter": (
        *COMMON,
        ("jupyter_refuses_unsafe", check_jupyter_refuses_unsafe),
        ("jupyter_auth", check_jupyter_auth),
        ("jupyter_listen", check_jupyter_listen),
        ("server_user", check_server_user),
        ("healthcheck", check_healthcheck),
        ("jupyter_token_file", check_jupyter_token_file),
        ("jupyter_kernel", check_jupyter_kernel),
    ),
    "ssh": (
        *COMMON,
        ("sshd_refuses_no_keys", check_sshd_refuses_no_keys),
        ("sshd_config", check_sshd_config),
        ("ssh_login", check_ssh_login),
        ("ssh_password_refused", check_ssh_password_refused),
        ("ssh_other_keys_refused", check_ssh_other_keys_refused),
        ("ssh_host_keys", check_ssh_host_keys),
        ("server_user", check_server_user),
        ("healthcheck", check_healthcheck),
    ),
}  # fmt: skip


def build_report(ctx: Context) -> dict[str, Any]:
    checks = [run_check(name, fn, ctx) for name, fn in CHECKS[ctx.expect.frontend]]
    return {
        "schema": SCHEMA,
        "kind": "frontend",
        "frontend": ctx.expect.frontend,
        "checks": [asdict(c) for c in checks],
        "summary": summarize(checks),
        "expected": asdict(ctx.expect),
    }


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    environ = dict(os.environ if env is None else env)
    try:
        expect = parse_args(sys.argv[1:] if argv is None else argv, environ)
    except ArgumentError as exc:
        sys.stderr.write(f"frontend_check.py: bad arguments: {exc}\n")
        return 2
    ctx = Context(expect, environ)
    try:
        report = build_report(ctx)
    finally:
        ctx.close()
    sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
    sys.stdout.flush()
    return 0 if report["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
