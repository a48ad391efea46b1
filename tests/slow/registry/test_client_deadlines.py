"""A fourth round against the registry client: answers whose every read is quick but whose whole
never ends (chunked framing dripped, token answers), a ping sent to ``file:``, a challenge of a
thousand realms, an index of thousands of children, a mount answered with an endless body; and
the small answers' own deadline (IMAGEKIT_REGISTRY_DEADLINE_S) in a real process, and for a token
fetched on a blob copy's way.

Every server here is ``tests.unit.registry.test_client.Scripted`` on 127.0.0.1, each loop bounded
in count and time.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagekit.core.errors import EnvironmentProblem, RegistryError
from imagekit.registry.client import Backoff, Registry
from imagekit.registry.transport import DEADLINE_ENV
from testbed.imagekit_process import imagekit
from tests.unit.attest_samples import private_pem, public_pem_of
from tests.unit.registry.test_client import (
    BIG,
    BLOB,
    DOCKER_V2,
    STUB_LOGIN,
    MiB,
    Scripted,
    _bearer_then,
    _redirect_to,
    _thousands_of_realms,
    _upload_then,
    hostile,
    one_line_naming,
    outcome,
)


def _chunked(server: Scripted, h: Any, head: bytes, piece: bytes, count: int, delay: float) -> None:
    """A chunked answer: ``head`` at once, then ``piece`` ``count`` times, ``delay`` s apart."""
    h.send_response(200)
    h.send_header("Content-Type", DOCKER_V2["Content-Type"])
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    h.close_connection = True
    h.wfile.write(head)
    h.wfile.flush()
    for _ in range(count):
        h.wfile.write(piece)
        h.wfile.flush()
        server.written += len(piece)
        time.sleep(delay)


def _drip_chunk_size(server: Scripted, h: Any) -> None:
    """A chunk-size line that never ends: 400 "0" digits, 0.05 s apart (20 s), one read of
    http.client (readline) for all of them."""
    _chunked(server, h, b"1", b"0", 400, 0.05)


def _drip_trailer(server: Scripted, h: Any) -> None:
    """The last chunk, then trailer lines 0.05 s apart (20 s): no body byte is ever counted."""
    _chunked(server, h, b"2\r\n{}\r\n0\r\n", b"X-T: y\r\n", 400, 0.05)


DRIPPED: dict[str, tuple[Callable[[Scripted, Any], None], Callable[[Registry], object]]] = {
    "a manifest whose chunk-size line is drip-fed": (_drip_chunk_size, lambda r: r.get_manifest("r", "t")),
    "a manifest whose chunked trailer is drip-fed": (_drip_trailer, lambda r: r.get_manifest("r", "t")),
    "a token whose chunk-size line is drip-fed": (_bearer_then(_drip_chunk_size), lambda r: r.ping()),
    "a token whose chunked trailer is drip-fed": (_bearer_then(_drip_trailer), lambda r: r.ping()),
    "a token answer that never ends": (
        _bearer_then(lambda s, h: s.stream(h, 200, b" " * 65536, BIG // 65536)),
        lambda r: r.ping(),
    ),
}


@pytest.mark.parametrize("case", list(DRIPPED))
def test_an_answer_dripped_past_the_deadline_ends_at_the_deadline(case: str) -> None:
    """The deadline covers the whole answer, token fetches included: with a 1 s deadline each
    case ends in a few seconds (before: 20 s and more, or exit 1 for the endless token), as an
    EnvironmentProblem (exit 3), the server far from done."""
    respond, operation = DRIPPED[case]
    server = Scripted(lambda h: respond(server, h))
    registry = hostile(server.host, deadline_s=1.0)
    try:
        started = time.monotonic()
        caught = one_line_naming(outcome(lambda: operation(registry), seconds=15), server.host)
        assert isinstance(caught, EnvironmentProblem) and int(caught.exit_code) == 3, caught.message
        assert time.monotonic() - started < 6, "ended, but not at the deadline"
        assert server.written < 32 * MiB
    finally:
        registry.close()
        server.close()


PING: dict[str, Callable[[Scripted, Any], None]] = {
    "a ping redirected to a file URL": _redirect_to("file:///etc/passwd"),
    "a ping challenged with a thousand realms": _thousands_of_realms,
}


@pytest.mark.parametrize("case", list(PING))
def test_a_registry_that_cannot_be_spoken_to_is_an_environment_problem(case: str) -> None:
    """The ping is about the registry configured, not an image: exit 3 (before: exit 1)."""
    respond = PING[case]
    server = Scripted(lambda h: respond(server, h))
    registry = hostile(server.host, deadline_s=20.0)
    try:
        caught = one_line_naming(outcome(registry.ping), server.host)
        assert isinstance(caught, EnvironmentProblem) and int(caught.exit_code) == 3, caught.message
    finally:
        registry.close()
        server.close()


def test_an_index_of_thousands_of_children_is_refused_before_any_is_fetched(tmp_path: Path) -> None:
    """An index naming 5,000 images would be 5,000 manifest fetches and their blob mounts: refused
    from the index alone (``MAX_INDEX_MANIFESTS``), one request, nothing written."""
    from imagekit.core.limits import MAX_INDEX_MANIFESTS
    from imagekit.publish.promote import Publisher, PublishOptions
    from imagekit.registry.manifest import OCI_INDEX, Manifest
    from tests.unit.publish.test_promote import IMAGE, Candidate, FakeRegistry, staged_result

    children = [
        {"mediaType": DOCKER_V2["Content-Type"], "digest": f"sha256:{n:064x}", "size": 10}
        for n in range(5_000)
    ]
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": children}).encode()
    registry = FakeRegistry(IMAGE)
    index = Manifest("sha256:" + "4" * 64, OCI_INDEX, body)
    image = registry.manifest
    registry.get_manifest = lambda repository, reference: (  # type: ignore[method-assign]
        registry.calls.append(("get_manifest", repository, reference)),
        index if reference == index.digest else image,
    )[1]
    staged = staged_result("checked").staged
    from dataclasses import replace

    candidate = Candidate(
        "c", IMAGE, "f" * 64, "checked", ("t",), staged_result("checked").verification,
        replace(staged, digest=index.digest),  # type: ignore[type-var]
    )  # fmt: skip
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging"
    )
    started = time.monotonic()
    published, refused = Publisher(None, registry, options, "checked", lambda _: None).run([candidate])  # type: ignore[arg-type]
    assert time.monotonic() - started < 2
    assert published == [] and [r.cell for r in refused] == ["c"]
    assert f"5,000 manifests, more than the {MAX_INDEX_MANIFESTS:,}" in refused[0].reason
    assert [c[0] for c in registry.calls] == ["ping", "get_manifest"]
    assert not (tmp_path / "lock.json").exists()


def test_a_mount_answered_with_an_endless_body_puts_nothing_and_writes_no_lock(tmp_path: Path) -> None:
    """The mount's 201 streams without end: not a whole answer, so not a mount. The cell is
    refused before any manifest is PUT, and no lock is written (before: "mounted", every tag PUT,
    the lock written)."""
    from imagekit.publish.promote import Publisher, PublishOptions
    from tests.unit.publish.test_promote import IMAGE, Candidate, FakeRegistry, staged_result

    def respond(h: Any) -> None:
        if h.command == "HEAD":
            return server.send(h, 404)
        if h.command == "POST":
            return server.stream(h, 201, b"b" * 65536, BIG // 65536)
        return server.send(h, 500)

    server = Scripted(respond)
    client = hostile(server.host, credentials=None, deadline_s=10.0)
    registry = FakeRegistry(IMAGE)
    registry.mount_blob = client.mount_blob  # type: ignore[method-assign]
    staged = staged_result("checked").staged
    candidate = Candidate(
        "c", IMAGE, "f" * 64, "checked", ("t",), staged_result("checked").verification, staged
    )
    options = PublishOptions(
        "reg:5000", "acme/pytorch", tmp_path / "lock.json", staging_repository="acme/staging"
    )
    try:
        box: list[Any] = []
        caught = outcome(
            lambda: box.append(Publisher(None, registry, options, "checked", print).run([candidate])),  # type: ignore[arg-type]
            seconds=30,
        )
        assert caught is None, repr(caught)
        published, refused = box[0]
        assert published == [] and [r.cell for r in refused] == ["c"]
        assert "more than 65,536 bytes" in refused[0].reason, refused[0].reason
        assert not [c for c in registry.calls if c[0] == "put_manifest"]
        assert not [m for m, _, _ in server.requests if m == "PUT"]
        assert not (tmp_path / "lock.json").exists()
        assert server.written < 32 * MiB
    finally:
        client.close()
        server.close()


def test_every_success_answer_is_read_whole_or_refused() -> None:
    """The same rule at the transport: a 2xx answer past its bound is a RegistryError, never the
    first 64 KiB taken for the whole."""
    server = Scripted(lambda h: server.stream(h, 200, b"{" * 65536, BIG // 65536))
    registry = hostile(server.host, credentials=None, deadline_s=10.0)
    try:
        caught = outcome(lambda: registry._send("POST", "/v2/r/blobs/uploads/", ""))
        assert isinstance(caught, RegistryError) and "more than 65,536 bytes" in caught.message
    finally:
        registry.close()
        server.close()


# -- the small answers' deadline ----------------------------------------------------------------------

MANIFEST_DIGEST = "sha256:" + "a" * 64


def _drip(server: Scripted, h: Any, headers: dict[str, str] | None = None) -> None:
    """A whole answer of 1,000 bytes, one every 0.05 s (50 s): each read quick, the whole not."""
    server.stream(h, 200, b" ", 1000, 0.05, {**(headers or {}), "Content-Length": "1000"})


def _manifest_dripped(server: Scripted, h: Any) -> None:
    """The HEAD names the manifest; its GET drips."""
    if h.command == "HEAD":
        return server.send(h, 200, b"", {**DOCKER_V2, "Docker-Content-Digest": MANIFEST_DIGEST})
    return _drip(server, h, DOCKER_V2)


SMALL_DRIPPED: dict[str, Callable[[Scripted, Any], None]] = {
    "a manifest dripped a byte at a time": _manifest_dripped,
    "a token dripped a byte at a time": _bearer_then(_drip),
}


@pytest.mark.parametrize("case", list(SMALL_DRIPPED))
def test_a_dripped_small_answer_ends_at_the_deadline_the_environment_sets(case: str, tmp_path: Path) -> None:
    """``imagekit attest verify`` (a HEAD, then a GET of the manifest) against a registry that
    drips a manifest or a token: with IMAGEKIT_REGISTRY_DEADLINE_S=2 the command ends in a few
    seconds, exit 3, one line naming the deadline and the setting. Before: the setting did not
    exist and each such operation held the command 600 s (the drip here ends at 50 s)."""
    respond = SMALL_DRIPPED[case]
    server = Scripted(lambda h: respond(server, h))
    key = tmp_path / "key.pub"
    key.write_bytes(public_pem_of(private_pem()))
    reference = f"{server.host}/team/torch@{MANIFEST_DIGEST}"
    try:
        started = time.monotonic()
        try:
            done = imagekit(
                "attest", "verify", reference, "--key", str(key), "--retries", "1",
                env={DEADLINE_ENV: "2"}, timeout=25,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail("still running after 25 s: the small answer's deadline did not hold")
        took = time.monotonic() - started
        assert done.returncode == 3, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert "no whole answer within 2s" in done.stderr and DEADLINE_ENV in done.stderr, done.stderr
        assert took < 15, f"ended after {took:.1f}s, not at the 2 s deadline"
    finally:
        server.close()


def test_a_token_fetched_for_a_blob_copy_gets_the_small_answers_deadline() -> None:
    """The blob copy keeps its long deadline (here 60 s), but the token its GET is challenged
    for is a small answer: dripped, it ends at the 2 s one, naming the token service and the
    setting. Before: the token shared the copy's deadline and was retried within it (60 s)."""

    def respond(server: Scripted, h: Any) -> None:
        if h.path.startswith("/token"):
            return _drip(server, h)
        if h.command == "GET":  # the blob being copied: challenged
            challenge = f'Bearer realm="http://{server.host}/token",service="s"'
            return server.send(h, 401, b"{}", {"WWW-Authenticate": challenge})
        return _upload_then(lambda s, hh: None)(server, h)  # HEAD 404, POST 202: the mount declined

    server = Scripted(lambda h: respond(server, h))
    registry = Registry(
        server.host,
        STUB_LOGIN,
        Backoff(2, 0.01, 1),
        sleep=lambda _: None,
        deadline_s=2.0,
        copy_deadline_s=60.0,
    )
    try:
        started = time.monotonic()
        caught = one_line_naming(
            outcome(lambda: registry.mount_blob("r", BLOB, "staging", size=1000), seconds=15), server.host
        )
        assert isinstance(caught, EnvironmentProblem), caught.message
        assert f"token from http://{server.host}: no whole answer within 2s" in caught.message
        assert DEADLINE_ENV in caught.message
        assert time.monotonic() - started < 6, "ended, but not at the token's deadline"
    finally:
        registry.close()
        server.close()
