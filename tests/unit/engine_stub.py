"""A Docker engine's HTTP API on a unix socket, for the CLI run in a process of its own: enough of it
(ping, version, info of a containerd image store, image inspect, list, load and tag) for `imagekit
build` and `imagekit verify` to run to their end. ``failing`` scripts the answer to any path (a 500,
a body that is not JSON): an engine gone wrong is an honest one with a few answers changed."""

from __future__ import annotations

import io
import json
import re
import socketserver
import tarfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.quiet_http import QuietHandler, serve
from testbed.waivers import WAIVE_OLD_TORCH

# One cell on a local base, the project both builders' CLI tests through this stub build.
ONE_CELL_MATRIX = (
    """\
version: "1"
templates: templates
publish:
  repository: example/it
  tags: {readable: "{base}-{torch}"}
axes:
  torch: ["2.1"]
  base: [deb]
bases:
  deb:
    image: example/deb:dev
    os: debian12
    python: "3.11"
    cuda: false
"""
    + WAIVE_OLD_TORCH
)


API = "1.43"
INFO = {
    "Driver": "overlayfs",
    "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]],
    "Architecture": "x86_64",
    "OSType": "linux",
}


@dataclass
class EngineStub:
    images: dict[str, dict[str, Any]] = field(default_factory=dict)  # by id
    calls: list[str] = field(default_factory=list)  # "METHOD /path" without the API version
    failing: dict[str, tuple[int, str, bytes]] = field(default_factory=dict)  # path regex -> answer
    address: str = ""

    def add(self, image_id: str, tags: list[str], labels: dict[str, str] | None = None) -> None:
        self.images[image_id] = {
            "Id": image_id,
            "RepoTags": tags,
            "Config": {"Labels": labels},
            "Architecture": "amd64",
            "Os": "linux",
            "Size": 1,
        }

    def find(self, ref: str) -> dict[str, Any] | None:
        if ref in self.images:
            return self.images[ref]
        full = ref if ":" in ref.rsplit("/", 1)[-1] else ref + ":latest"
        return next((i for i in self.images.values() if full in i["RepoTags"]), None)

    def answer(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes
    ) -> tuple[int, str, bytes]:
        self.calls.append(f"{method} {path}")
        for pattern, scripted in self.failing.items():
            if re.fullmatch(pattern, path):
                return scripted
        if path == "/_ping":
            return 200, "text/plain", b"OK"
        if path == "/version":
            return 200, "application/json", json.dumps({"ApiVersion": API, "Version": "26.1.5"}).encode()
        if path == "/info":
            return 200, "application/json", json.dumps(INFO).encode()
        if path in ("/images/json", "/containers/json"):
            return 200, "application/json", b"[]"
        if path == "/images/load":
            return self._load(body)
        asked = re.fullmatch(r"/images/(.+)/(json|tag)", path)
        if asked is not None:
            image = self.find(urllib.parse.unquote(asked[1]))
            if image is None:
                return 404, "application/json", b'{"message": "No such image"}'
            if asked[2] == "json":
                return 200, "application/json", json.dumps(image).encode()
            if method == "POST":
                image["RepoTags"].append(f"{query['repo'][0]}:{query['tag'][0]}")
                return 201, "text/plain", b""
        return 404, "application/json", b'{"message": "page not found"}'

    def _load(self, body: bytes) -> tuple[int, str, bytes]:
        """An OCI tar's image, named as its index says (what the containerd store does)."""
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            read = lambda name: json.loads(tar.extractfile(name).read())  # type: ignore[union-attr]  # noqa: E731
            entry = read("index.json")["manifests"][0]
            manifest = read(f"blobs/sha256/{entry['digest'].removeprefix('sha256:')}")
            config = read(f"blobs/sha256/{manifest['config']['digest'].removeprefix('sha256:')}")
        name = entry["annotations"]["io.containerd.image.name"]
        self.add(entry["digest"], [name], config["config"]["Labels"])
        return 200, "application/json", json.dumps({"stream": f"Loaded image: {name}\n"}).encode()


@contextmanager
def engine_stub(directory: Path) -> Iterator[EngineStub]:
    """An engine listening at ``directory/engine.sock``; its DOCKER_HOST is ``stub.address``."""
    stub = EngineStub()

    class Handler(QuietHandler):
        disable_nagle_algorithm = False  # a TCP option: a unix socket has none

        def handle_any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                body = self.rfile.read(length)
            elif self.headers.get("Transfer-Encoding") == "chunked":
                body = self._chunked()
            else:
                body = b""
            url = urllib.parse.urlsplit(self.path)
            path = re.sub(r"^/v[0-9.]+", "", url.path)
            status, kind, data = stub.answer(self.command, path, urllib.parse.parse_qs(url.query), body)
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Api-Version", API)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _chunked(self) -> bytes:
            data = bytearray()
            while size := int(self.rfile.readline().strip() or b"0", 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return bytes(data)

        def address_string(self) -> str:
            return "engine.sock"  # a unix socket's peer has no host to name

        do_GET = do_POST = do_DELETE = do_HEAD = do_PUT = handle_any

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

        def get_request(self) -> tuple[Any, Any]:
            request, _ = super().get_request()
            return request, ("engine.sock", 0)  # http.server wants (host, port)

        def handle_error(self, request: Any, client_address: Any) -> None:
            """A client that hangs up mid-answer is no test failure (see QuietServer)."""

    path = directory / "engine.sock"
    server = Server(str(path), Handler)
    stub.address = f"unix://{path}"
    serve(server)
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        path.unlink(missing_ok=True)
