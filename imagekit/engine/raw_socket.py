"""The engine calls a no-change run makes (inspect, tag), over the engine's socket without docker-py.

docker-py with requests and urllib3 costs more to import than a whole no-change run may take
(``imagekit.builds.no_change``), and http.client brings the email package and ssl along. These calls are
plain HTTP/1.0 (the engine then answers without chunking and closes the connection, so a response
is everything up to EOF), over DOCKER_HOST's unix socket or a plain-TCP DOCKER_HOST. Anything else
(TLS, ssh://) is not spoken here: the caller takes the full path through ``imagekit.engine.client``.
Every answer is bounded in bytes and time; a refusal or a malformed answer is ``EngineSocketError``.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.parse
from typing import Any

from imagekit.core.limits import ENGINE_ANSWER_BYTES as ANSWER_BYTES
from imagekit.core.limits import ENGINE_CALL_DEADLINE_S


def engine_address() -> str:
    """Where the engine listens: DOCKER_HOST, else Docker's default socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


class EngineSocketError(Exception):
    """The engine could not be asked, or its answer was not what the call expects."""


class EngineSocket:
    def __init__(self, address: str | None = None) -> None:
        self.address = address or engine_address()
        parsed = urllib.parse.urlsplit(self.address)
        if parsed.scheme == "unix" and parsed.path:
            self._family, self._target = socket.AF_UNIX, parsed.path
        elif (
            parsed.scheme == "tcp"
            and parsed.hostname
            and parsed.port
            and not os.environ.get("DOCKER_TLS_VERIFY")
        ):
            self._family, self._target = socket.AF_INET, (parsed.hostname, parsed.port)  # type: ignore[assignment]
        else:
            raise EngineSocketError(f"DOCKER_HOST {self.address} is not a unix socket or plain TCP (no TLS)")

    def image(self, reference: str) -> dict[str, Any] | None:
        """``docker image inspect``: None when the engine holds no such image."""
        path = f"/images/{urllib.parse.quote(reference, safe='')}/json"
        status, body = self._call("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise EngineSocketError(f"GET {path}: the engine answered {status}")
        try:
            found = json.loads(body)
        except ValueError as exc:
            raise EngineSocketError(f"GET {path}: not JSON ({exc})") from None
        if not isinstance(found, dict):
            raise EngineSocketError(f"GET {path}: not an image")
        return found

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        query = urllib.parse.urlencode({"repo": repository, "tag": tag, "force": "1"})
        path = f"/images/{urllib.parse.quote(image_id, safe='')}/tag?{query}"
        status, _ = self._call("POST", path)
        if status != 201:
            raise EngineSocketError(f"tagging {image_id} as {repository}:{tag}: the engine answered {status}")

    def _call(self, method: str, path: str) -> tuple[int, bytes]:
        request = f"{method} {path} HTTP/1.0\r\nHost: docker\r\nContent-Length: 0\r\n\r\n".encode()
        chunks: list[bytes] = []
        size = 0
        # One deadline over the whole call: a per-read timeout never ends an answer dripped a
        # byte at a time, so each read waits only for what is left of it.
        deadline = time.monotonic() + ENGINE_CALL_DEADLINE_S
        try:
            with socket.socket(self._family, socket.SOCK_STREAM) as conn:
                conn.settimeout(ENGINE_CALL_DEADLINE_S)
                conn.connect(self._target)
                conn.sendall(request)
                while chunk := conn.recv(1 << 16):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise EngineSocketError(
                            f"{method} {path}: no whole answer within {ENGINE_CALL_DEADLINE_S:g}s"
                        )
                    conn.settimeout(left)
                    size += len(chunk)
                    if size > ANSWER_BYTES:
                        raise EngineSocketError(f"{method} {path}: the answer is over {ANSWER_BYTES} bytes")
                    chunks.append(chunk)
        except OSError as exc:
            raise EngineSocketError(f"{method} {path}: {exc}") from None
        head, separator, body = b"".join(chunks).partition(b"\r\n\r\n")
        status_line = head.split(b"\r\n", 1)[0].split()
        if not separator or len(status_line) < 2 or not status_line[1].isdigit():
            raise EngineSocketError(f"{method} {path}: not an HTTP answer")
        return int(status_line[1]), body
