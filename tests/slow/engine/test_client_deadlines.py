"""DOCKER_HOST naming a server whose answer never ends: the raw socket client (the no-change
record's) and docker-py (every other verb) end at one deadline, exit 3, one line.

The servers listen on a unix socket in a tmp dir or on 127.0.0.1; each loop is bounded (at most
400 pieces 0.05 s apart, or 80 MiB)."""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.engine.raw_socket import EngineSocket, EngineSocketError
from testbed.quiet_http import serve

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nApi-Version: 1.43\r\n"


def _drip(conn: socket.socket) -> None:
    conn.sendall(HEAD + b"Content-Length: 1000\r\n\r\n")
    for _ in range(400):  # 20 s of one byte every 0.05 s: each read is quick, the whole is not
        conn.sendall(b" ")
        time.sleep(0.05)


def _endless(conn: socket.socket) -> None:
    conn.sendall(HEAD + b"Connection: close\r\n\r\n")
    for _ in range((80 << 20) // 65536):
        conn.sendall(b"[" * 65536)


ANSWERS = {"drip-fed": _drip, "endless": _endless}


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.recv(65536)  # the request (small, sent at once)
        with contextlib.suppress(OSError):  # the client hung up: what we wanted
            ANSWERS[self.server.kind](self.request)  # type: ignore[attr-defined]


@pytest.fixture(params=["unix drip-fed", "tcp drip-fed", "unix endless", "tcp endless"])
def hostile_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    family, kind = request.param.split(" ")
    server: socketserver.BaseServer
    if family == "unix":
        path = tmp_path / "engine.sock"
        server = socketserver.ThreadingUnixStreamServer(str(path), _Handler)
        address = f"unix://{path}"
    else:
        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
        address = f"tcp://127.0.0.1:{server.server_address[1]}"  # type: ignore[index]
    server.daemon_threads = True  # type: ignore[attr-defined]
    server.kind = kind  # type: ignore[attr-defined]
    serve(server)
    yield address
    server.shutdown()
    server.server_close()


def test_the_raw_socket_client_ends_at_its_deadline(
    hostile_engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("imagekit.engine.raw_socket.ENGINE_CALL_DEADLINE_S", 1.0, raising=False)
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    started = time.monotonic()
    with pytest.raises(EngineSocketError):
        EngineSocket(hostile_engine).image("sha256:" + "c" * 64)
    assert time.monotonic() - started < 5


# The real CLI in a real process, its engine deadline shortened to 2 s before imagekit loads it.
CLI = (
    "import imagekit.core.limits as l; l.ENGINE_CALL_DEADLINE_S = 2.0; from imagekit.cli import main; main()"
)


def test_docker_py_verbs_end_at_the_deadline_with_exit_3(hostile_engine: str, tmp_path: Path) -> None:
    """`imagekit verify IMAGE` connects through docker-py (engine.connect: its version and ping
    calls); before, a drip held it past the 60 s timeout and an endless answer read without bound."""
    verb = ["verify", "busybox:latest", "--gpus", "none"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env["DOCKER_HOST"] = hostile_engine
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", CLI, *verb],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    took = time.monotonic() - started
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 3, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("imagekit: error:"), done.stderr[-2000:]
    assert "Traceback" not in done.stderr and took < 15, took  # the drip lasts 20 s
