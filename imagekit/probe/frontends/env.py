"""The front-end check's arguments, process and network helpers, the servers it starts, and its
context."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..protocol import FRONTEND_EXPECT_OPTIONS, FRONTEND_OPTION
from ..results import CheckResult, failed, passed

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


def verdict(name: str, problems: list[str], fix: str, expected: Any, actual: Any, detail: Any) -> CheckResult:
    if problems:
        return failed(name, "; ".join(problems), fix, expected=expected, actual=actual, detail=detail)
    return passed(name, expected=expected, actual=actual, detail=detail)


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
    parser.add_argument(FRONTEND_OPTION, dest="frontend", default=env.get("IMAGEKIT_FRONTEND"))
    parser.add_argument(
        FRONTEND_EXPECT_OPTIONS["frontend-user"], dest="expect_user", default=env.get("IMAGEKIT_EXPECT_USER")
    )
    parser.add_argument(
        FRONTEND_EXPECT_OPTIONS["frontend-uid"], dest="expect_uid", default=env.get("IMAGEKIT_EXPECT_UID")
    )
    parser.add_argument(
        FRONTEND_EXPECT_OPTIONS["jupyterlab"],
        dest="expect_jupyterlab",
        default=env.get("IMAGEKIT_EXPECT_JUPYTERLAB"),
    )
    parser.add_argument("--entrypoint", default=ENTRYPOINT)
    parser.add_argument("--healthcheck", default=HEALTHCHECK)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        raise ArgumentError("see usage above") from exc
    if args.frontend not in ("jupyter", "ssh"):
        raise ArgumentError(
            f"{FRONTEND_OPTION} (or IMAGEKIT_FRONTEND) must be jupyter or ssh, not {args.frontend!r}"
        )
    uid = None
    if args.expect_uid not in (None, ""):
        if not str(args.expect_uid).isdigit():
            raise ArgumentError(
                f"{FRONTEND_EXPECT_OPTIONS['frontend-uid']} {args.expect_uid!r}: not a number"
            )
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
