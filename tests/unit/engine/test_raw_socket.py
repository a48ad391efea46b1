"""The engine calls a no-change run makes without docker-py (inspect, tag), against an engine stub on
a unix socket (tests/unit/engine_stub.py): what the engine holds, what it refuses, an answer that is
no image or over its bound, and a DOCKER_HOST this client does not speak. (The deadline on an answer
dripped a byte at a time: tests/slow/engine/test_client_deadlines.py.)"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from imagekit.engine import raw_socket
from imagekit.engine.raw_socket import EngineSocket, EngineSocketError, engine_address
from tests.unit.engine_stub import engine_stub

IMAGE_ID = "sha256:" + "c" * 64


def test_an_image_the_engine_holds_is_inspected_and_tagged(tmp_path: Path) -> None:
    with engine_stub(tmp_path) as stub:
        stub.add(IMAGE_ID, ["example/deb:dev"], {"imagekit.input-digest": "d" * 64})
        engine = EngineSocket(stub.address)
        found = engine.image("example/deb:dev")
        assert found is not None and found["Id"] == IMAGE_ID
        assert found["Config"]["Labels"] == {"imagekit.input-digest": "d" * 64}
        assert engine.image("example/none:dev") is None  # 404: the engine holds no such image
        engine.tag(IMAGE_ID, "example/deb", "cell-a")
        assert "example/deb:cell-a" in stub.images[IMAGE_ID]["RepoTags"]
        with pytest.raises(EngineSocketError, match=r"tagging .* the engine answered 404"):
            engine.tag("sha256:" + "0" * 64, "example/deb", "cell-a")
        # the reference travels as one path segment, never a path of its own
        assert stub.calls[0] == "GET /images/example%2Fdeb%3Adev/json"


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ((500, "application/json", b'{"message": "boom"}'), "the engine answered 500"),
        ((200, "text/html", b"<html>proxy</html>"), "not JSON"),
        ((200, "application/json", b"[]"), "not an image"),
    ],
)
def test_an_answer_that_is_no_image_is_an_engine_socket_error(
    tmp_path: Path, answer: tuple[int, str, bytes], problem: str
) -> None:
    with engine_stub(tmp_path) as stub:
        stub.failing[r"/images/.+/json"] = answer
        with pytest.raises(EngineSocketError, match=problem):
            EngineSocket(stub.address).image("example/deb:dev")


def test_an_answer_over_its_bound_is_not_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with engine_stub(tmp_path) as stub:
        stub.failing[r"/images/.+/json"] = (200, "application/json", b"[" + b" " * 200_000 + b"]")
        monkeypatch.setattr(raw_socket, "ANSWER_BYTES", 100_000)
        with pytest.raises(EngineSocketError, match="the answer is over 100000 bytes"):
            EngineSocket(stub.address).image("example/deb:dev")


@pytest.mark.parametrize(
    "garbage",
    [b"SSH-2.0-OpenSSH_9.6\r\n", b"HTTP/1.1 OK\r\n\r\n{}", b"\r\n\r\n{}"],  # no status code
)
def test_what_is_no_http_answer_is_refused(tmp_path: Path, garbage: bytes) -> None:
    path = tmp_path / "odd.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def answer_garbage() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(garbage)

    thread = threading.Thread(target=answer_garbage, daemon=True)
    thread.start()
    try:
        with pytest.raises(EngineSocketError, match="not an HTTP answer"):
            EngineSocket(f"unix://{path}").image("example/deb:dev")
    finally:
        thread.join(5)
        listener.close()
    with pytest.raises(EngineSocketError, match=r"GET /images/.*: "):  # nobody listens any more
        EngineSocket(f"unix://{path}").image("example/deb:dev")


@pytest.mark.parametrize(
    "address",
    [
        "ssh://user@gpu-box",
        "tcp://gpu-box",
        "unix://",
        "npipe:////./pipe/docker_engine",
        "https://gpu-box:2376",
    ],
)
def test_a_docker_host_this_client_does_not_speak_is_refused_at_once(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    with pytest.raises(EngineSocketError, match="is not a unix socket or plain TCP"):
        EngineSocket(address)


def test_plain_tcp_is_spoken_only_without_tls_and_the_default_is_dockers_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    assert EngineSocket("tcp://127.0.0.1:2375").address == "tcp://127.0.0.1:2375"
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    with pytest.raises(EngineSocketError):
        EngineSocket("tcp://127.0.0.1:2376")
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert engine_address() == "unix:///var/run/docker.sock"
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/user/1000/docker.sock")
    assert EngineSocket().address == "unix:///run/user/1000/docker.sock"
