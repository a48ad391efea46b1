"""A real registry for tests and benchmarks (Debian's docker-registry on 127.0.0.1, a free port,
a temporary storage directory) and a proxy in front of it that can answer 503 on purpose."""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import requests

from testbed.quiet_http import QuietHandler, QuietServer, serve

REGISTRY_BIN = "/usr/bin/docker-registry"

CONFIG = """\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: {no_access_log}
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: 127.0.0.1:{port}
health:
  storagedriver:
    enabled: false
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalRegistry:
    """``docker-registry serve`` on 127.0.0.1:<free port>; ``stop`` removes its data too.

    ``access_log``: one line per request in ``registry.log`` (method, path, status, bytes sent), for
    benchmarks that count what a client fetched."""

    def __init__(self, access_log: bool = False) -> None:
        self.access_log = access_log
        self.dir = Path(tempfile.mkdtemp(prefix="imagekit-registry-"))
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> LocalRegistry:
        (self.dir / "data").mkdir(exist_ok=True)
        config = self.dir / "config.yml"
        config.write_text(
            CONFIG.format(
                root=self.dir / "data", port=self.port, no_access_log=str(not self.access_log).lower()
            )
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
        log = (self.dir / "registry.log").open("ab")
        self.process = subprocess.Popen(
            [REGISTRY_BIN, "serve", str(config)], stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"docker-registry exited: {(self.dir / 'registry.log').read_text()[-2000:]}"
                )
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"http://{self.host}/v2/", timeout=1).status_code == 200:
                    return self
            time.sleep(0.1)
        raise RuntimeError(f"docker-registry did not answer on {self.host}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def tags(self, repository: str) -> list[str]:
        response = requests.get(f"http://{self.host}/v2/{repository}/tags/list", timeout=10)
        if response.status_code == 404:
            return []
        response.raise_for_status()
        return list(response.json().get("tags") or [])


_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
Rule = Callable[[str, str], bool]  # (method, path) -> answer 503?


class FlakyProxy:
    """HTTP relay on 127.0.0.1 that answers ``status`` (503) to the first ``fail_first`` requests,
    and to requests a rule picks, holds requests a ``slow`` rule picks, then forwards the rest to
    ``upstream`` unchanged."""

    def __init__(self, upstream: str, fail_first: int = 0, status: int = 503) -> None:
        self.upstream = upstream
        self.fail_first = fail_first
        self.status = status
        self.slow_rules: list[tuple[Rule, float]] = []
        self.rules: list[tuple[Rule, int | None]] = []  # (rule, how many more times; None: always)
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str, int]] = []
        proxy = self

        class Handler(QuietHandler):
            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                body = self._body()
                for rule, seconds in list(proxy.slow_rules):
                    if rule(self.command, self.path):
                        proxy._record(self.command, self.path, 0)  # 0: held, not answered yet
                        time.sleep(seconds)
                if proxy._should_fail(self.command, self.path):
                    proxy._record(self.command, self.path, proxy.status)
                    payload = b'{"errors":[{"code":"UNAVAILABLE","message":"flaky proxy"}]}'
                    self.send_response(proxy.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":  # a HEAD body would be read as the next response
                        self.wfile.write(payload)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                headers["Content-Length"] = str(len(body))
                connection = http.client.HTTPConnection(proxy.upstream, timeout=120)
                try:
                    connection.request(self.command, self.path, body=body, headers=headers)
                    response = connection.getresponse()
                    data = response.read()
                    proxy._record(self.command, self.path, response.status)
                    self.send_response(response.status)
                    for key, value in response.getheaders():
                        if key.lower() not in _HOP and key.lower() != "content-length":
                            self.send_header(key, value)
                    length = response.getheader("Content-Length") if self.command == "HEAD" else None
                    self.send_header("Content-Length", length or str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    connection.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _handle

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        serve(self.server)

    def fail(self, rule: Rule, times: int | None = None) -> None:
        with self.lock:
            self.rules.append((rule, times))

    def _should_fail(self, method: str, path: str) -> bool:
        with self.lock:
            if self.fail_first > 0:
                self.fail_first -= 1
                return True
            for index, (rule, times) in enumerate(self.rules):
                if rule(method, path) and (times is None or times > 0):
                    if times is not None:
                        self.rules[index] = (rule, times - 1)
                    return True
        return False

    def _record(self, method: str, path: str, status: int) -> None:
        with self.lock:
            self.seen.append((method, path, status))

    def slow(self, rule: Rule, seconds: float) -> None:
        """Hold every request ``rule`` picks for ``seconds`` before answering it."""
        with self.lock:
            self.slow_rules.append((rule, seconds))

    def failures(self) -> int:
        with self.lock:
            return sum(1 for *_, status in self.seen if status == self.status)

    def held(self) -> int:
        with self.lock:
            return sum(1 for *_, status in self.seen if status == 0)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
