"""The registry client against a tiny local HTTP server: auth, credentials, retries."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from imagekit.errors import EnvironmentProblem
from imagekit.registry import Backoff, Credentials, Registry, RegistryError, find_credentials, is_local


def test_local_registries_speak_http() -> None:
    assert is_local("127.0.0.1:5000") and is_local("localhost:5000") and is_local("127.1.2.3")
    assert is_local("[::1]:5000") and is_local("[::1]") and is_local("::1")
    assert not is_local("[2001:db8::1]:5000")
    assert not is_local("ghcr.io") and not is_local("10.0.0.1:5000")
    assert Backoff(4, 0.5, 2).delays() == [0.5, 1.0, 2.0]


def test_credentials_from_env_then_docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    auth = base64.b64encode(b"robot:hunter2").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"https://ghcr.io": {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    found = find_credentials("ghcr.io", environ={})
    assert found == Credentials("robot", "hunter2")
    assert "hunter2" not in repr(found)
    assert find_credentials("quay.io", environ={}) is None
    env = {"IMAGEKIT_REGISTRY_USER": "u", "IMAGEKIT_REGISTRY_PASSWORD": "p"}
    assert find_credentials("ghcr.io", environ=env) == Credentials("u", "p")


class Stub:
    """A registry-shaped HTTP server on 127.0.0.1: bearer auth, a token endpoint, N failures."""

    def __init__(self, fail: int = 0, status: int = 503) -> None:
        self.fail, self.status = fail, status
        self.manifests: dict[str, bytes] = {}
        self.blobs: dict[tuple[str, str], bytes] = {}  # (repository, digest) -> bytes
        self.mount = True  # False: answer a mount with an upload session (202), as some registries do
        self.requests: list[tuple[str, str, str | None]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def reply(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                # A HEAD answer has no body, whatever its length says: bytes written here would be
                # read as the start of the next response on the kept-alive connection.
                if self.command != "HEAD":
                    self.wfile.write(body)

            def handle_any(self) -> None:
                auth = self.headers.get("Authorization")
                stub.requests.append((self.command, self.path, auth))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if stub.fail > 0:
                    stub.fail -= 1
                    return self.reply(stub.status)
                if self.path.startswith("/token"):
                    ok = auth == "Basic " + base64.b64encode(b"u:p").decode()
                    return self.reply(200 if ok else 401, json.dumps({"token": "T0K"}).encode())
                if auth != "Bearer T0K":
                    realm = f"http://{stub.host}/token"
                    challenge = f'Bearer realm="{realm}",service="stub",scope="repository:r:pull"'
                    return self.reply(401, b"{}", {"WWW-Authenticate": challenge})
                if "/blobs/" in self.path:
                    return self.blob(body)
                if self.command == "PUT":
                    import hashlib

                    digest = "sha256:" + hashlib.sha256(body).hexdigest()
                    stub.manifests[self.path.rsplit("/", 1)[1]] = body
                    stub.manifests[digest] = body
                    return self.reply(201, b"", {"Docker-Content-Digest": digest})
                if "/tags/list" in self.path:
                    return self.reply(200, json.dumps({"tags": sorted(stub.manifests)}).encode())
                if "/manifests/" in self.path:
                    data = stub.manifests.get(self.path.rsplit("/", 1)[1])
                    if data is None:
                        return self.reply(404, b"{}")
                    ctype = "application/vnd.docker.distribution.manifest.v2+json"
                    return self.reply(200, data, {"Content-Type": ctype})
                return self.reply(200, b"{}")

            def blob(self, body: bytes) -> None:
                import hashlib
                from urllib.parse import parse_qs, urlsplit

                url = urlsplit(self.path)
                repository = url.path.removeprefix("/v2/").split("/blobs/")[0]
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if self.command == "POST":
                    source = (query.get("from", ""), query.get("mount", ""))
                    if stub.mount and source in stub.blobs:
                        stub.blobs[(repository, source[1])] = stub.blobs[source]
                        return self.reply(201)
                    return self.reply(202, b"", {"Location": f"/v2/{repository}/blobs/uploads/u1?state=x"})
                if self.command == "PUT":
                    digest = query["digest"]
                    if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
                        return self.reply(400, b'{"errors":[{"code":"DIGEST_INVALID"}]}')
                    stub.blobs[(repository, digest)] = body
                    return self.reply(201)
                data = stub.blobs.get((repository, url.path.rsplit("/", 1)[1]))
                if data is None:
                    return self.reply(404, b"{}")
                return self.reply(200, data if self.command == "GET" else b"")

            do_GET = do_PUT = do_HEAD = do_POST = handle_any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub()
    yield server
    server.close()


def client(host: str, attempts: int = 4) -> tuple[Registry, list[float]]:
    slept: list[float] = []
    registry = Registry(host, Credentials("u", "p"), Backoff(attempts, 0.1, 2), sleep=slept.append)
    return registry, slept


def test_bearer_flow_and_promotion_by_digest(stub: Stub) -> None:
    registry, _ = client(stub.host)
    from imagekit.registry import Manifest

    body = json.dumps({"schemaVersion": 2, "config": {"digest": "sha256:cfg"}}).encode()
    import hashlib

    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    manifest = Manifest(digest, "application/vnd.docker.distribution.manifest.v2+json", body)
    assert registry.put_manifest("r", "staging", manifest) == digest
    fetched = registry.get_manifest("r", digest)
    assert fetched.body == body and fetched.digest == digest
    registry.put_manifest("r", "2.1.2", fetched)
    assert stub.manifests["2.1.2"] == body
    assert "2.1.2" in registry.tags("r")
    assert registry.head_manifest("r", "nope") is None
    # The password only ever went to the token endpoint, as Basic auth.
    sent = [auth for _, path, auth in stub.requests if auth and auth.startswith("Basic")]
    assert sent and all(path.startswith("/token") for _, path, auth in stub.requests if auth in sent)


def test_transient_errors_are_retried_with_backoff() -> None:
    server = Stub(fail=3)
    try:
        registry, slept = client(server.host)
        registry.ping()
        assert slept == [0.1, 0.2, 0.4] and registry.retries == 3
    finally:
        server.close()


def test_a_registry_that_stays_down_is_an_environment_problem() -> None:
    server = Stub(fail=100)
    try:
        registry, slept = client(server.host, attempts=3)
        with pytest.raises(EnvironmentProblem, match="kept answering HTTP 503"):
            registry.ping()
        assert len(slept) == 2
    finally:
        server.close()
    registry, _ = client(server.host, attempts=2)  # now closed
    with pytest.raises(EnvironmentProblem, match="unreachable after 2 attempts"):
        registry.ping()


def test_credentials_never_go_to_a_plain_http_realm_on_another_host() -> None:
    registry = Registry("registry.example.org:5000", Credentials("u", "p"))
    try:
        with pytest.raises(EnvironmentProblem, match="refusing to send the credentials"):
            registry._bearer({"realm": "http://tokens.example.com/token", "service": "s"}, "")
        registry._check_realm("https://tokens.example.com/token")  # https: fine
        registry._check_realm("http://registry.example.org:5001/token")  # the registry's own host
    finally:
        registry.close()
    local = Registry("[::1]:5000", Credentials("u", "p"))
    try:
        local._check_realm("http://127.0.0.2:9000/token")  # a local registry's own set-up
    finally:
        local.close()


def test_blobs_are_mounted_across_repositories_or_copied_when_the_mount_is_declined(stub: Stub) -> None:
    import hashlib

    registry, _ = client(stub.host)
    layer = b"layer bytes" * 1000
    digest = "sha256:" + hashlib.sha256(layer).hexdigest()
    stub.blobs[("acme/staging", digest)] = layer
    assert registry.get_blob("acme/staging", digest) == layer
    assert registry.mount_blob("acme/pytorch", digest, "acme/staging") == "mounted"
    assert registry.mount_blob("acme/pytorch", digest, "acme/staging") == "present"
    stub.mount = False
    assert registry.mount_blob("acme/other", digest, "acme/staging") == "copied"
    assert stub.blobs[("acme/other", digest)] == layer
    from urllib.parse import unquote

    mounts = [unquote(path) for method, path, _ in stub.requests if method == "POST"]
    assert mounts and f"mount={digest}" in mounts[0] and "from=acme/staging" in mounts[0]
    # A blob that comes back with other content is never accepted.
    stub.blobs[("acme/staging", digest)] = b"tampered"
    with pytest.raises(RegistryError, match="other content"):
        registry.get_blob("acme/staging", digest)


def test_an_upload_location_on_another_host_is_not_followed(stub: Stub) -> None:
    registry, _ = client(stub.host)
    with pytest.raises(RegistryError, match="not following"):
        registry._send("PUT", "http://evil.example.org/upload", "")


def test_a_build_asks_the_registry_about_a_cells_staging_tag_once(
    stub: Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reuse (staged elsewhere?) and the cache source both look up the staging tag of the cell's
    input digest: one request answers both. Nothing is staged here, so no engine is asked."""
    from imagekit.build_registry import BuildRegistry
    from imagekit.naming import staging_tag
    from imagekit.render import Renderer
    from tests.unit.test_render import variants_plan

    monkeypatch.setenv("IMAGEKIT_REGISTRY_USER", "u")
    monkeypatch.setenv("IMAGEKIT_REGISTRY_PASSWORD", "p")
    plan = variants_plan(tmp_path)
    rendered = Renderer(plan).render_all()[0]
    remote = BuildRegistry(object(), stub.host, plan.matrix.publish, Backoff(1, 0.1, 1), None)  # type: ignore[arg-type]
    said: list[str] = []
    assert remote.staged_elsewhere(rendered, said.append) is None
    assert remote.cache_source(rendered, said.append) == ()
    remote.close()
    tag = staging_tag(rendered.input_digest)
    asked = [  # answered ones: the first, unauthenticated, only draws the auth challenge
        path for method, path, auth in stub.requests if method == "HEAD" and auth and path.endswith(tag)
    ]
    assert len(asked) == 1, stub.requests
    assert said[-1] == "cache: no staged or published image of this cell; building without one"
