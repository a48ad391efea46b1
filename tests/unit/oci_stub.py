"""A small OCI registry over HTTP on 127.0.0.1 for unit tests of what imagekit attaches and reads
back: manifests (with their media types) and blobs per repository, uploads in one PUT, no referrers
API (it answers 404, as Debian's docker-registry 2.8 does), no auth. What it stores can be replaced
by hand (``manifests``, ``blobs``) and any request can get a scripted answer (``answers``): a
hostile registry is an honest one with a few answers changed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

from imagekit.registry.client import Backoff, Registry
from imagekit.registry.manifest import OCI_MANIFEST, Manifest
from testbed.quiet_http import QuietHandler, QuietServer, serve

Answer = tuple[int, dict[str, str], bytes]


class OciStub:
    def __init__(self) -> None:
        self.manifests: dict[tuple[str, str], tuple[str, bytes]] = {}  # (repo, tag or digest) -> (type, body)
        self.blobs: dict[tuple[str, str], bytes] = {}
        self.answers: dict[tuple[str, str], Answer] = {}  # (method, path) -> a scripted answer
        stub = self

        class Handler(QuietHandler):
            def reply(self, answer: Answer) -> None:
                code, headers, body = answer
                self.send_response(code)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def handle_any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                url = urlsplit(self.path)
                scripted = stub.answers.get((self.command, url.path))
                if scripted is not None:
                    return self.reply(scripted)
                return self.reply(stub.answer(self.command, url.path, url.query, body, self.headers))

            do_GET = do_PUT = do_HEAD = do_POST = handle_any

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        serve(self.server)

    def answer(self, method: str, path: str, query: str, body: bytes, headers: Any) -> Answer:
        if path == "/v2/":
            return 200, {}, b"{}"
        repository, kind, reference = _split(path)
        if kind == "referrers":
            return 404, {}, b'{"errors":[{"code":"NOT FOUND"}]}'
        if kind == "manifests":
            return self._manifest(method, repository, reference, body, headers.get("Content-Type", ""))
        if kind == "blobs":
            return self._blob(method, repository, reference, query, body)
        return 404, {}, b"{}"

    def _manifest(self, method: str, repository: str, reference: str, body: bytes, media_type: str) -> Answer:
        if method == "PUT":
            digest = digest_of(body)
            self.manifests[(repository, reference)] = self.manifests[(repository, digest)] = (
                media_type,
                body,
            )
            return 201, {"Docker-Content-Digest": digest}, b""
        found = self.manifests.get((repository, reference))
        if found is None:
            return 404, {}, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}'
        kind, data = found
        return 200, {"Content-Type": kind, "Docker-Content-Digest": digest_of(data)}, data

    def _blob(self, method: str, repository: str, reference: str, query: str, body: bytes) -> Answer:
        if method == "POST":
            return 202, {"Location": f"/v2/{repository}/blobs/uploads/u1"}, b""
        if method == "PUT":
            digest = parse_qs(query)["digest"][0]
            if digest_of(body) != digest:
                return 400, {}, b'{"errors":[{"code":"DIGEST_INVALID"}]}'
            self.blobs[(repository, digest)] = body
            return 201, {}, b""
        data = self.blobs.get((repository, reference))
        if data is None:
            return 404, {}, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}'
        return 200, {"Content-Length": str(len(data))}, data

    def client(self) -> Registry:
        return Registry(self.host, None, Backoff(1, 0.01, 1), sleep=lambda _: None)

    def json(self, repository: str, reference: str) -> Any:
        return json.loads(self.manifests[(repository, reference)][1])

    def replace_manifest(self, repository: str, reference: str, document: Any, media_type: str) -> str:
        """Store ``document`` under ``reference`` (a tag) and its own digest; that digest."""
        body = json.dumps(document).encode() if not isinstance(document, bytes) else document
        self.manifests[(repository, reference)] = self.manifests[(repository, digest_of(body))] = (
            media_type,
            body,
        )
        return digest_of(body)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _split(path: str) -> tuple[str, str, str]:
    """/v2/<repository>/<manifests|blobs|referrers>/<reference> -> its three parts."""
    rest = path.removeprefix("/v2/")
    for kind in ("manifests", "blobs/uploads", "blobs", "referrers"):
        marker = f"/{kind}/"
        if marker in rest:
            repository, _, reference = rest.partition(marker)
            return repository, kind.split("/")[0], reference
    return rest, "", ""


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


@contextmanager
def oci_stub() -> Iterator[OciStub]:
    server = OciStub()
    try:
        yield server
    finally:
        server.close()


def image_manifest(
    stub: OciStub, repository: str, arch: str = "amd64", labels: dict[str, str] | None = None
) -> Manifest:
    """An image for ``linux/<arch>`` (its config, no layers) stored in ``repository`` under the
    tag ``v-<arch>``; its manifest."""
    document = {"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
    if labels:
        document["config"] = {"Labels": labels}
    config = json.dumps(document).encode()
    stub.blobs[(repository, digest_of(config))] = config
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": digest_of(config),
                "size": len(config),
            },
            "layers": [],
        }
    ).encode()
    stub.replace_manifest(repository, f"v-{arch}", body, OCI_MANIFEST)
    return Manifest(digest_of(body), OCI_MANIFEST, body)
