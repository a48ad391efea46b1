"""The engine layer without an engine: transient errors and pull retries against a fake API."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from docker.errors import APIError

from imagekit.engine import client
from imagekit.engine.client import RetryPolicy, is_transient, pull
from testbed.quiet_http import QuietHandler, QuietServer, serve

# -- is_transient ----------------------------------------------------------------------------------------


def api_error(
    status: int | None, explanation: str = "refused", url: str = "http+docker://x/images"
) -> APIError:
    if status is None:
        return APIError(explanation)
    response = requests.Response()
    response.status_code = status
    response.url = url
    return APIError("error", response=response, explanation=explanation)


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_transient(status: int) -> None:
    assert is_transient(api_error(status))


def test_too_many_requests_is_transient() -> None:
    assert is_transient(api_error(429))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409])
def test_client_errors_are_not_transient(status: int) -> None:
    assert not is_transient(api_error(status, "manifest unknown"))


@pytest.mark.parametrize(
    "exc",
    [
        requests.ConnectionError("refused"),
        requests.ReadTimeout("slow"),
        requests.Timeout("slow"),
        ConnectionResetError("reset"),
        ConnectionRefusedError("refused"),
        api_error(None, "read tcp: connection reset by peer"),
        api_error(None, "net/http: TLS handshake timeout"),
        api_error(None, "unexpected EOF"),
        api_error(404, "Get https://registry/v2/: net/http: request canceled (Client.Timeout exceeded)"),
    ],
    ids=repr,
)
def test_connection_problems_are_transient(exc: BaseException) -> None:
    assert is_transient(exc)


@pytest.mark.parametrize(
    "exc",
    [
        api_error(None, "manifest for nvidia/cuda:99 not found: manifest unknown"),
        api_error(None, "pull access denied for private/app"),
        ValueError("bad"),
        OSError("disk"),
        RuntimeError("timeout"),  # not a connection or API error at all
    ],
    ids=repr,
)
def test_other_errors_are_not_transient(exc: BaseException) -> None:
    assert not is_transient(exc)


def test_a_404_for_an_image_whose_name_contains_eof_is_not_transient() -> None:
    url = "http+docker://localhost/v1.43/images/create?tag=latest&fromImage=geoffrey%2Fapp"
    assert not is_transient(api_error(404, "pull access denied for geoffrey/app", url=url))


# -- pull ------------------------------------------------------------------------------------------------


class FakeApi:
    """An APIClient stand-in: each call to ``pull`` takes the next outcome (an exception to raise
    at once, or the stream lines to yield)."""

    def __init__(self, *outcomes: BaseException | list[dict[str, Any]]) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, str | None, bool, bool]] = []

    def pull(
        self,
        repository: str,
        tag: str | None = None,
        stream: bool = False,
        decode: bool = False,
        auth_config: dict[str, str] | None = None,
    ) -> Iterator[dict[str, Any]]:
        self.calls.append((repository, tag, stream, decode))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return iter(outcome)


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


OK = [{"status": "Pulling from nvidia/cuda"}, {"status": "Download complete"}]


def test_pull_retries_transient_errors_with_exponential_backoff() -> None:
    api = FakeApi(requests.ConnectionError("reset"), api_error(503, "unavailable"), OK)
    sleep = Sleeps()
    pull(api, "nvidia/cuda:12.1", sleep=sleep)  # type: ignore[arg-type]
    assert sleep.delays == [1.0, 3.0]
    assert api.calls == [("nvidia/cuda", "12.1", True, True)] * 3
    assert api.outcomes == []


def test_pull_gives_up_after_the_policys_attempts() -> None:
    failures = [api_error(500, f"attempt {n}") for n in range(1, 4)]
    api = FakeApi(*failures, OK)
    sleep = Sleeps()
    with pytest.raises(APIError) as caught:
        pull(api, "app:1", RetryPolicy(attempts=3, first_delay_s=0.5, factor=2.0), sleep)  # type: ignore[arg-type]
    assert caught.value is failures[-1]
    assert sleep.delays == [0.5, 1.0]
    assert len(api.calls) == 3


def test_pull_raises_a_non_transient_error_at_once() -> None:
    denied = api_error(404, "pull access denied for private/app")
    api = FakeApi(denied, OK)
    sleep = Sleeps()
    with pytest.raises(APIError) as caught:
        pull(api, "private/app:1", sleep=sleep)  # type: ignore[arg-type]
    assert caught.value is denied
    assert sleep.delays == []
    assert len(api.calls) == 1


def test_pull_raises_an_error_line_of_the_stream() -> None:
    api = FakeApi([{"status": "Pulling"}, {"error": "manifest unknown"}], OK)
    sleep = Sleeps()
    with pytest.raises(APIError, match="manifest unknown"):
        pull(api, "nvidia/cuda:99", sleep=sleep)  # type: ignore[arg-type]
    assert sleep.delays == []
    assert len(api.calls) == 1


def test_pull_retries_a_transient_error_line_of_the_stream() -> None:
    api = FakeApi([{"error": "unexpected EOF"}], [{"errorDetail": {}, "error": "connection reset"}], OK)
    sleep = Sleeps()
    pull(api, "nvidia/cuda:12.1", sleep=sleep)  # type: ignore[arg-type]
    assert sleep.delays == [1.0, 3.0]
    assert len(api.calls) == 3


def test_pull_asks_for_latest_or_the_digest() -> None:
    api = FakeApi(OK, OK)
    pull(api, "localhost:5000/team/app", sleep=Sleeps())  # type: ignore[arg-type]
    pull(api, "app@sha256:" + "e" * 64, sleep=Sleeps())  # type: ignore[arg-type]
    assert [c[:2] for c in api.calls] == [
        ("localhost:5000/team/app", "latest"),
        ("app", "sha256:" + "e" * 64),
    ]


class FakePush:
    def __init__(self, lines: list[dict[str, Any]]) -> None:
        self.lines = lines

    def push(self, name: str, **_: Any) -> Iterator[dict[str, Any]]:
        return iter(self.lines)


PUSHED = "sha256:" + "d" * 64


@pytest.mark.parametrize(
    "last",
    [
        [{"status": f"t: digest: {PUSHED} size: 856"}, {"aux": {"Tag": "t", "Digest": PUSHED, "Size": 856}}],
        [{"status": f"t: digest: {PUSHED} size: 856"}],  # the containerd image store sends no aux
    ],
    ids=["overlay2", "containerd"],
)
def test_a_push_returns_the_manifest_digest_either_image_store_reports(last: list[dict[str, Any]]) -> None:
    api = FakePush(
        [{"status": "The push refers to repository [r/x]"}, {"status": "Pushed", "id": "1"}, *last]
    )
    assert client.push_once(api, "r/x", "t") == PUSHED  # type: ignore[arg-type]


def test_a_push_reporting_no_digest_fails() -> None:
    api = FakePush([{"status": "Pushed", "id": "1"}, {"status": "t: digest: sha256:short size: 1"}])
    with pytest.raises(client.PushFailed, match="no manifest digest"):
        client.push_once(api, "r/x", "t")  # type: ignore[arg-type]


def test_a_wait_longer_than_the_call_deadline_is_bounded_by_its_own_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A check container's `wait` answers when the check ends (minutes under QEMU, or a GPU's GEMM
    run): the engine call deadline must not cut it, only the caller's --verify-timeout bounds it."""
    monkeypatch.setattr(client, "ENGINE_CALL_DEADLINE_S", 0.3)

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            time.sleep(1.0)  # the check runs: past the (shortened) call deadline
            body = b'{"StatusCode": 0}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = QuietServer(("127.0.0.1", 0), Handler)
    serve(server)
    api = client._Client(base_url=f"tcp://127.0.0.1:{server.server_address[1]}", version="1.41", timeout=60)
    try:
        assert api.wait("c", timeout=120)["StatusCode"] == 0
        # an answer with no longer timeout of its own still ends at the call deadline
        with pytest.raises(requests.ConnectionError, match=r"no whole answer within 0\.3s"):
            api._result(api._post(api._url("/containers/c/stop")), json=False)
    finally:
        api.close()
        server.shutdown()
        server.server_close()


def test_a_load_outlasts_the_clients_read_timeout_and_reads_the_engines_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine answers `POST /images/load` once every layer is unpacked (over a minute for a CUDA
    cell): the client's per-read timeout must not cut it, ENGINE_LOAD_SILENCE_S bounds it. docker-py's
    load_image with this client's timeout fails here (the first assertion's twin, below)."""
    monkeypatch.setattr(client, "ENGINE_LOAD_SILENCE_S", 5.0)
    received: list[int] = []

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            received.append(len(self.rfile.read(int(self.headers["Content-Length"]))))
            time.sleep(1.0)  # unpacking: silent past the client's (shortened) read timeout
            body = b'{"stream": "Loaded image ID: sha256:ab"}\r\n{"error": "no space left"}\r\n'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = QuietServer(("127.0.0.1", 0), Handler)
    serve(server)
    api = client._Client(base_url=f"tcp://127.0.0.1:{server.server_address[1]}", version="1.41", timeout=0.3)
    try:
        lines = list(client.load(api, io.BytesIO(b"x" * 1000)))
        assert received == [1000]
        assert lines == [{"stream": "Loaded image ID: sha256:ab"}, {"error": "no space left"}]
        with pytest.raises(requests.Timeout):  # what the build's load did before
            list(api.load_image(io.BytesIO(b"x" * 1000)))
    finally:
        api.close()
        server.shutdown()
        server.server_close()
