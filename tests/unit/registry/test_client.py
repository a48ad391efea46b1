"""The registry client against a tiny local HTTP server: auth, credentials, retries."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from imagekit.core.errors import EnvironmentProblem, ImagekitError, RegistryError
from imagekit.registry.client import Backoff, Registry
from imagekit.registry.credentials import Credentials
from imagekit.registry.transport import is_local
from testbed.quiet_http import QuietHandler, QuietServer, serve


def test_local_registries_speak_http() -> None:
    assert is_local("127.0.0.1:5000") and is_local("localhost:5000") and is_local("127.1.2.3")
    assert is_local("[::1]:5000") and is_local("[::1]") and is_local("::1")
    assert not is_local("[2001:db8::1]:5000")
    assert not is_local("ghcr.io") and not is_local("10.0.0.1:5000")
    assert Backoff(4, 0.5, 2).delays() == [0.5, 1.0, 2.0]


class Stub:
    """A registry-shaped HTTP server on 127.0.0.1: bearer auth, a token endpoint, N failures."""

    def __init__(self, fail: int = 0, status: int = 503) -> None:
        self.fail, self.status = fail, status
        self.manifests: dict[str, bytes] = {}
        self.blobs: dict[tuple[str, str], bytes] = {}  # (repository, digest) -> bytes
        self.mount = True  # False: answer a mount with an upload session (202), as some registries do
        self.requests: list[tuple[str, str, str | None]] = []
        stub = self

        class Handler(QuietHandler):
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

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        serve(self.server)

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
    from imagekit.registry.manifest import Manifest

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
        assert slept == [0.1, 0.2, 0.4]  # one backoff per retry
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


def test_credentials_never_go_to_a_plain_http_realm_on_another_origin() -> None:
    """Origin is scheme, host AND port; a local registry gets no exception (another port on the
    same machine is another server)."""
    registry = Registry("registry.example.org:5000", Credentials("u", "p"))
    try:
        with pytest.raises(EnvironmentProblem, match="refusing to send the credentials"):
            registry._bearer({"realm": "http://tokens.example.com/token", "service": "s"}, "", 1e9)
        registry._check_realm("https://tokens.example.com/token")  # https: fine
        registry._check_realm("https://registry.example.org:5000/token")  # the registry's own origin
        with pytest.raises(EnvironmentProblem, match="another origin over plain http"):
            registry._check_realm("http://registry.example.org:5001/token")  # same host, other port
    finally:
        registry.close()
    local = Registry("[::1]:5000", Credentials("u", "p"))
    try:
        local._check_realm("http://[::1]:5000/token")  # its own origin
        with pytest.raises(EnvironmentProblem, match="another origin over plain http"):
            local._check_realm("http://127.0.0.2:9000/token")
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


# -- the registry as an untrusted server ------------------------------------------------------------

STUB_LOGIN = Credentials("u", "p")
BIG = 80 << 20  # what an "endless" answer writes at most: far past every bound, yet a bounded loop
MiB = 1 << 20


class Scripted:
    """A server on 127.0.0.1 whose every answer is ``respond(handler)``; it records what it was
    asked (method, path, Authorization) and how many body bytes it managed to write."""

    def __init__(self, respond: Callable[[Any], None]) -> None:
        self.requests: list[tuple[str, str, str | None]] = []
        self.written = 0
        scripted = self

        class Handler(QuietHandler):
            def handle_any(self) -> None:
                scripted.requests.append((self.command, self.path, self.headers.get("Authorization")))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    respond(self)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client hung up: what we wanted

            do_GET = do_PUT = do_HEAD = do_POST = do_PATCH = handle_any

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        serve(self.server)

    def send(self, h: Any, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        h.send_response(code)
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)
            self.written += len(body)

    def stream(
        self,
        h: Any,
        code: int,
        piece: bytes,
        count: int,
        delay: float = 0.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        """``count`` pieces (a bounded loop), ``delay`` seconds apart; no length unless given."""
        h.send_response(code)
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        if "Content-Length" not in (headers or {}):
            h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        for _ in range(count):
            h.wfile.write(piece)
            h.wfile.flush()
            self.written += len(piece)
            if delay:
                time.sleep(delay)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def outcome(call: Callable[[], object], seconds: float = 60.0) -> BaseException | None:
    """What ``call`` raised (None if nothing), failing the test if it is still running after
    ``seconds``: a hang is a failure here, not a stuck test run."""
    box: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            box.append(None)
        except BaseException as exc:  # handed to the test to judge
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert box, f"still running after {seconds}s: a hang"
    return box[0]


def hostile(host: str, credentials: Credentials | None = STUB_LOGIN, deadline_s: float = 60.0) -> Registry:
    return Registry(
        host,
        credentials,
        Backoff(2, 0.01, 1),
        sleep=lambda _: None,
        deadline_s=deadline_s,
        copy_deadline_s=deadline_s,
    )


def one_line_naming(exc: BaseException | None, host: str) -> ImagekitError:
    assert isinstance(exc, (RegistryError, EnvironmentProblem)), repr(exc)
    assert int(exc.exit_code) in (1, 3)
    message = exc.message
    assert host in message and "\n" not in message and "\r" not in message and len(message) <= 2000
    return exc


DOCKER_V2 = {"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"}
JSON = {"Content-Type": "application/json"}


def _bearer_then(token_answer: Callable[[Scripted, Any], None]) -> Callable[[Scripted, Any], None]:
    """A registry whose /v2/ asks for a bearer token at its own /token, answered by ``token_answer``."""

    def respond(server: Scripted, h: Any) -> None:
        if h.path.startswith("/token"):
            token_answer(server, h)
        else:
            challenge = f'Bearer realm="http://{server.host}/token",service="s"'
            server.send(h, 401, b"{}", {"WWW-Authenticate": challenge})

    return respond


def _upload_then(blob_answer: Callable[[Scripted, Any], None]) -> Callable[[Scripted, Any], None]:
    """A registry that declines a mount (202 and an upload session); GET of the blob: ``blob_answer``."""

    def respond(server: Scripted, h: Any) -> None:
        if h.command == "HEAD":
            return server.send(h, 404)
        if h.command == "POST":
            return server.send(h, 202, b"", {"Location": "/v2/r/blobs/uploads/u1"})
        return blob_answer(server, h)

    return respond


def _drip_headers(server: Scripted, h: Any) -> None:
    """A status line, then 90 header lines 0.3 s apart (27 s): each read is quick, the whole is not."""
    h.wfile.write(b"HTTP/1.1 200 OK\r\n")
    h.wfile.flush()
    for n in range(90):
        time.sleep(0.3)
        h.wfile.write(f"X-Drip-{n}: x\r\n".encode())
        h.wfile.flush()
    h.wfile.write(b"Content-Length: 0\r\n\r\n")


BLOB = "sha256:" + "e" * 64
BOUNDED: dict[str, tuple[Callable[[Scripted, Any], None], Callable[[Registry], object], str]] = {
    "an endless manifest": (
        lambda s, h: s.stream(h, 200, b"{" * 65536, BIG // 65536, headers=DOCKER_V2),
        lambda r: r.get_manifest("r", "t"),
        "more than 4,194,304 bytes",
    ),
    "a manifest one byte past 4 MiB": (
        lambda s, h: s.send(h, 200, b" " * (4 * MiB + 1), DOCKER_V2),
        lambda r: r.get_manifest("r", "t"),
        "more than 4,194,304 bytes",
    ),
    "a drip-fed manifest": (
        lambda s, h: s.stream(h, 200, b" ", 1000, 0.05, {**DOCKER_V2, "Content-Length": "1000"}),
        lambda r: r.get_manifest("r", "t"),
        "no whole answer within 1s",
    ),
    "drip-fed headers": (
        _drip_headers,
        lambda r: r.get_manifest("r", "t"),
        "within 1s",
    ),
    "an answer that never comes": (
        lambda s, h: time.sleep(10),
        lambda r: r.get_manifest("r", "t"),
        "within 1s",
    ),
    "an endless error body": (
        lambda s, h: s.stream(h, 404, b"x" * 65536, BIG // 65536),
        lambda r: r.get_manifest("r", "t"),
        "HTTP 404 xxxx",
    ),
    "an endless token answer": (
        _bearer_then(lambda s, h: s.stream(h, 200, b" " * 65536, BIG // 65536)),
        lambda r: r.ping(),
        "more than 1,048,576 bytes",
    ),
    "a drip-fed token answer": (
        _bearer_then(lambda s, h: s.stream(h, 200, b" ", 1000, 0.05, {"Content-Length": "1000"})),
        lambda r: r.ping(),
        "no whole answer within 1s",
    ),
    "an endless blob being copied": (
        _upload_then(lambda s, h: s.stream(h, 200, b"b" * 65536, BIG // 65536)),
        lambda r: r.mount_blob("r", BLOB, "staging", size=1000),
        "more than 1,000 bytes",
    ),
    "a drip-fed blob being copied": (
        _upload_then(lambda s, h: s.stream(h, 200, b"b", 1000, 0.05, {"Content-Length": "1000"})),
        lambda r: r.mount_blob("r", BLOB, "staging"),
        "no whole answer within 1s",
    ),
}


def _redirect_to(location: str) -> Callable[[Scripted, Any], None]:
    return lambda s, h: s.send(h, 302, b"", {"Location": location})


def _raw_headers(lines: bytes) -> Callable[[Scripted, Any], None]:
    def respond(server: Scripted, h: Any) -> None:
        h.wfile.write(b"HTTP/1.1 302 Found\r\n" + lines + b"Content-Length: 0\r\n\r\n")

    return respond


def _thousands_of_realms(server: Scripted, h: Any) -> None:
    if h.path.startswith("/token") or h.headers.get("Authorization") == "Bearer T0K":
        server.send(h, 200, b'{"token": "T0K"}')
        return
    realms = ",".join(f'realm="http://127.0.0.1:{n}/token"' for n in range(1, 1000))
    challenge = f'Bearer {realms},realm="http://{server.host}/token",service="s"'
    server.send(h, 401, b"{}", {"WWW-Authenticate": challenge})


def _redirect_chain(server: Scripted, h: Any) -> None:
    hop = int(h.path.rsplit("=", 1)[1]) if "hop=" in h.path else 0
    server.send(h, 302, b"", {"Location": f"/v2/r/manifests/t?hop={hop + 1}"})


SHAPES: dict[str, tuple[Callable[[Scripted, Any], None], Callable[[Registry], object]]] = {
    "a manifest that is HTML": (
        lambda s, h: s.send(h, 200, b"<html>oops</html>", {"Content-Type": "text/html"}),
        lambda r: r.get_manifest("r", "t"),
    ),
    "a manifest that is a JSON list": (
        lambda s, h: s.send(h, 200, b"[1, 2]", JSON),
        lambda r: r.get_manifest("r", "t"),
    ),
    "a manifest in bad UTF-8": (
        lambda s, h: s.send(h, 200, b'{"mediaType": "\xff\xfe"}', JSON),
        lambda r: r.get_manifest("r", "t"),
    ),
    "a manifest nested 100,000 deep": (
        lambda s, h: s.send(h, 200, b"[" * 100_000, JSON),
        lambda r: r.get_manifest("r", "t"),
    ),
    "a manifest whose mediaType is a list": (
        lambda s, h: s.send(h, 200, b'{"mediaType": ["a"]}', JSON),
        lambda r: r.get_manifest("r", "t"),
    ),
    "a tag list that is not JSON": (
        lambda s, h: s.send(h, 200, b"tags: [a, b]", JSON),
        lambda r: r.tags("r"),
    ),
    "a tag list of numbers": (
        lambda s, h: s.send(h, 200, b'{"tags": [1, 2]}', JSON),
        lambda r: r.tags("r"),
    ),
    "a digest header that is a command": (
        lambda s, h: s.send(h, 200, b"", {"Docker-Content-Digest": "$(reboot)"}),
        lambda r: r.head_manifest("r", "t"),
    ),
    "a Location header folded over two lines": (
        _raw_headers(b"Location: /v2/r/manifests/u\r\n X-Evil: 1\r\n"),
        lambda r: r.get_manifest("r", "t"),
    ),
    "a redirect to a file URL": (_redirect_to("file:///etc/passwd"), lambda r: r.get_manifest("r", "t")),
    "a redirect to ftp": (_redirect_to("ftp://127.0.0.1/x"), lambda r: r.get_manifest("r", "t")),
    "a redirect to itself": (_redirect_to("/v2/r/manifests/t"), lambda r: r.get_manifest("r", "t")),
    "a redirect chain without end": (_redirect_chain, lambda r: r.get_manifest("r", "t")),
    "a token answer that is a list": (
        _bearer_then(lambda s, h: s.send(h, 200, b'["T0K"]')),
        lambda r: r.ping(),
    ),
    "a token answer that is not JSON": (
        _bearer_then(lambda s, h: s.send(h, 200, b"T0K")),
        lambda r: r.ping(),
    ),
    "a token holding CR/LF": (
        _bearer_then(lambda s, h: s.send(h, 200, b'{"token": "T0K\\r\\nX-Evil: 1"}')),
        lambda r: r.ping(),
    ),
    "a token service that redirects": (
        _bearer_then(_redirect_to("http://127.0.0.1:9/token")),
        lambda r: r.ping(),
    ),
    "a realm that is a file URL": (
        lambda s, h: s.send(h, 401, b"{}", {"WWW-Authenticate": 'Bearer realm="file:///etc/passwd"'}),
        lambda r: r.ping(),
    ),
    "a relative realm": (
        lambda s, h: s.send(h, 401, b"{}", {"WWW-Authenticate": 'Bearer realm="/token",service="s"'}),
        lambda r: r.ping(),
    ),
    "a realm that is one of a thousand": (_thousands_of_realms, lambda r: r.ping()),
}


@pytest.mark.parametrize("case", list(SHAPES))
def test_every_answer_shape_ends_in_one_line_naming_the_registry(case: str) -> None:
    """Class 2: whatever the registry answers, the outcome is a RegistryError (exit 1) or an
    EnvironmentProblem (exit 3) naming the registry, never another exception (a traceback)."""
    respond, operation = SHAPES[case]
    server = Scripted(lambda h: respond(server, h))
    registry = hostile(server.host, deadline_s=20.0)
    try:
        one_line_naming(outcome(lambda: operation(registry)), server.host)
    finally:
        registry.close()
        server.close()


LOGIN = Credentials("robot", "hunter2")
BASIC = LOGIN.basic()


def _basic_registry(then: Callable[[Scripted, Any], None]) -> Callable[[Scripted, Any], None]:
    """A registry asking for Basic credentials on every request; with them, ``then`` answers."""

    def respond(server: Scripted, h: Any) -> None:
        if h.headers.get("Authorization") != BASIC:
            server.send(h, 401, b"{}", {"WWW-Authenticate": 'Basic realm="r"'})
        else:
            then(server, h)

    return respond


MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "digest": "sha256:" + "c" * 64,
            "size": 3,
        },
        "layers": [],
    }
).encode()


def _other_origin_cases(
    other: Scripted,
) -> dict[str, tuple[Callable[[Scripted, Any], None], Callable[[Registry], object]]]:
    elsewhere = f"http://{other.host}"
    return {
        "a token realm on another port of a local registry": (
            lambda s, h: s.send(h, 401, b"{}", {"WWW-Authenticate": f'Bearer realm="{elsewhere}/token"'}),
            lambda r: r.ping(),
        ),
        "an upload Location on another port": (
            _basic_registry(
                lambda s, h: (
                    s.send(h, 202, b"", {"Location": f"{elsewhere}/upload"})
                    if h.command == "POST"
                    else s.send(h, 404 if h.command == "HEAD" else 200, b"b")
                )
            ),
            lambda r: r.mount_blob("r", "sha256:" + hashlib.sha256(b"b").hexdigest(), "staging"),
        ),
        "a manifest PUT redirected to another port": (
            _basic_registry(lambda s, h: s.send(h, 307, b"", {"Location": f"{elsewhere}/v2/r/manifests/t"})),
            lambda r: r.put_manifest("r", "t", _manifest(MANIFEST)),
        ),
    }


def _manifest(body: bytes, media_type: str = "application/vnd.docker.distribution.manifest.v2+json") -> Any:
    from imagekit.registry.manifest import Manifest

    return Manifest("sha256:" + hashlib.sha256(body).hexdigest(), media_type, body)


@pytest.mark.parametrize(
    "case",
    [
        "a token realm on another port of a local registry",
        "an upload Location on another port",
        "a manifest PUT redirected to another port",
    ],
)
def test_credentials_go_only_to_the_registrys_own_origin(case: str) -> None:
    """Class 3: another port on the same host is another origin: it never gets the password or
    a token, and a write it is sent to is a failure, not a success. The other server answers
    everything with success, so only the client's refusal keeps the password and the failure."""
    other = Scripted(
        lambda h: other.send(h, 201, b'{"token": "T0K"}', {"Docker-Content-Digest": digest_of(MANIFEST)})
    )
    respond, operation = _other_origin_cases(other)[case]
    server = Scripted(lambda h: respond(server, h))
    registry = hostile(server.host, LOGIN, deadline_s=20.0)
    try:
        one_line_naming(outcome(lambda: operation(registry)), server.host)
        assert [auth for _, _, auth in other.requests if auth] == []
        assert other.requests == [], "nothing is sent to another origin here"
    finally:
        registry.close()
        server.close()
        other.close()


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def test_a_get_redirected_to_blob_storage_goes_there_without_authorization() -> None:
    """Class 3: a GET may be redirected to storage on another origin (as registries do for blobs):
    followed, but without the Authorization header the registry's own origin got."""
    storage = Scripted(lambda h: storage.send(h, 200, MANIFEST, DOCKER_V2))
    respond = _basic_registry(lambda s, h: s.send(h, 307, b"", {"Location": f"http://{storage.host}/m"}))
    server = Scripted(lambda h: respond(server, h))
    registry = hostile(server.host, LOGIN)
    try:
        assert registry.get_manifest("r", digest_of(MANIFEST)).body == MANIFEST
        assert storage.requests == [("GET", "/m", None)]
        assert BASIC in [auth for _, _, auth in server.requests]
    finally:
        registry.close()
        server.close()
        storage.close()


def test_a_registry_error_echoing_the_login_is_masked() -> None:
    """Class 3: an error body that repeats the login (as a pair, alone, base64, in a URL) is shown
    with each of them masked."""
    echo = f"bad login robot:hunter2 password=hunter2 header {BASIC} url https://robot:hunter2@x/".encode()
    respond = _basic_registry(lambda s, h: s.send(h, 400, echo))
    server = Scripted(lambda h: respond(server, h))
    registry = hostile(server.host, LOGIN)
    try:
        caught = one_line_naming(outcome(lambda: registry.get_manifest("r", "t")), server.host)
        assert "HTTP 400 bad login" in caught.message
        assert "hunter2" not in caught.message and BASIC.split()[1] not in caught.message
    finally:
        registry.close()
        server.close()


def _index(*entries: object, **more: object) -> bytes:
    return json.dumps({"schemaVersion": 2, "manifests": list(entries), **more}).encode()


OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_IMAGE = "application/vnd.oci.image.manifest.v1+json"
CHILD = {"mediaType": OCI_IMAGE, "digest": "sha256:" + "a" * 64, "size": 10}
CONFIG = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + "c" * 64, "size": 3}
LAYER = {
    "mediaType": "application/vnd.oci.image.layer.v1.tar+zstd",
    "digest": "sha256:" + "d" * 64,
    "size": 9,
}
EMPTY = "application/vnd.oci.empty.v1+json"


def _image(**changed: object) -> bytes:
    return json.dumps({"schemaVersion": 2, "config": CONFIG, "layers": [LAYER], **changed}).encode()


UNPROMOTABLE: dict[str, tuple[bytes, str]] = {
    "a single image naming no config": (json.dumps({"schemaVersion": 2, "layers": []}).encode(), OCI_IMAGE),
    "a config without a digest": (json.dumps({"config": {"size": 3}}).encode(), OCI_IMAGE),
    "an empty index": (_index(), OCI_INDEX),
    "an index of an index": (_index({**CHILD, "mediaType": OCI_INDEX}), OCI_INDEX),
    "an index entry of no type": (_index({"digest": CHILD["digest"]}), OCI_INDEX),
    "a mediaType that is a number": (json.dumps({"mediaType": 2, "config": CHILD}).encode(), OCI_IMAGE),
    "a JSON list": (b"[]", OCI_IMAGE),
    "not JSON": (b"\xff", OCI_IMAGE),
    "an image that says it is an index": (
        json.dumps({"mediaType": OCI_INDEX, "config": CHILD}).encode(),
        OCI_IMAGE,
    ),
    # what the image record every reader takes refuses (issue 45): promotion refuses it too
    "a layer of size -1": (_image(layers=[{**LAYER, "size": -1}]), OCI_IMAGE),
    "a layer of size 2**63": (_image(layers=[{**LAYER, "size": 2**63}]), OCI_IMAGE),
    "a layer of no image's type": (
        _image(layers=[{**LAYER, "mediaType": "application/x-anything"}]),
        OCI_IMAGE,
    ),
    "a config of no image's type": (_image(config={**CONFIG, "mediaType": EMPTY}), OCI_IMAGE),
    "schema 1": (_image(schemaVersion=1), OCI_IMAGE),
    "an index entry of size -1": (_index({**CHILD, "size": -1}), OCI_INDEX),
}


@pytest.mark.parametrize("case", list(UNPROMOTABLE))
def test_only_a_promotable_manifest_passes_the_check(case: str) -> None:
    """Class 4, the check itself; publish runs it before any tag moves (test_publish.py)."""
    body, media_type = UNPROMOTABLE[case]
    with pytest.raises(RegistryError, match=r"^reg:5000/r@sha256:.*; nothing promoted from it$"):
        _manifest(body, media_type).check_promotable(f"reg:5000/r@{digest_of(body)}")
    _manifest(MANIFEST).check_promotable("fine")
    _manifest(_image(), OCI_IMAGE).check_promotable("fine")
    _manifest(_index(CHILD), OCI_INDEX).check_promotable("fine")
    # an attestation manifest BuildKit puts beside the image (bake's provenance) is an artifact
    attestation = _image(config=CONFIG, layers=[{**LAYER, "mediaType": "application/vnd.in-toto+json"}])
    _manifest(attestation, OCI_IMAGE).check_promotable("fine", image_only=True, artifact=True)
    with pytest.raises(RegistryError, match="which no image holds there"):
        _manifest(attestation, OCI_IMAGE).check_promotable("child", image_only=True)
    with pytest.raises(RegistryError, match="an index inside an index"):
        _manifest(_index(CHILD), OCI_INDEX).check_promotable("child", image_only=True)


def test_the_digest_a_tag_names_never_reads_a_missing_header_as_a_free_tag() -> None:
    """What publish asks before an immutable tag is written: None only for a tag the registry
    does not have (404); a HEAD answer without Docker-Content-Digest falls back to the digest of
    the bytes GET returns, so a registry that omits the header cannot make a taken tag look free."""
    from imagekit.registry.manifest import OCI_MANIFEST
    from tests.unit.oci_stub import oci_stub

    with oci_stub() as stub:
        registry = stub.client()
        digest = stub.replace_manifest("r", "v1", {"schemaVersion": 2, "layers": []}, OCI_MANIFEST)
        assert registry.tag_digest("r", "v1") == digest
        assert registry.tag_digest("r", "v2") is None
        stub.answers[("HEAD", "/v2/r/manifests/v1")] = (200, {"Content-Type": OCI_MANIFEST}, b"")
        assert registry.tag_digest("r", "v1") == digest
        stub.answers[("HEAD", "/v2/r/manifests/v1")] = (400, {}, b"")
        with pytest.raises(RegistryError, match="HEAD manifest r:v1: HTTP 400"):
            registry.tag_digest("r", "v1")


def test_a_blobs_length_is_the_content_length_its_head_answers(stub: Stub) -> None:
    """This stub answers a HEAD with Content-Length 0 whatever the blob holds: a registry saying
    another size than the manifest's, which the pull cost's check then refuses."""
    from imagekit.core.errors import RegistryError

    registry, _ = client(stub.host)
    stub.blobs[("r", "sha256:" + "1" * 64)] = b"12345"
    assert registry.blob_length("r", "sha256:" + "1" * 64) == 0
    with pytest.raises(RegistryError, match=r"HEAD blob r@sha256:2222.*HTTP 404"):
        registry.blob_length("r", "sha256:" + "2" * 64)
