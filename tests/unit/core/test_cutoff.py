"""Ending a read at its deadline whatever the server does: a body dripped a byte at a time is cut
at the deadline (the socket shut down from another thread), a status line that never comes is
given up on at the deadline, and what the request raised is raised in the caller's thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import requests

from imagekit.core.cutoff import before, cut_at, response_socket, shut_down


@contextmanager
def dripping_server(headers: bool) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that sends its headers (or not) and then one byte of its body
    every 50 ms, for 8 seconds (far longer than a test waits, yet a test that fails ends)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            try:
                if headers:
                    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                ends = time.monotonic() + 8
                while not stop.wait(0.05) and time.monotonic() < ends:
                    if headers:
                        connection.sendall(b"x")
            except OSError:
                pass  # the client cut the connection

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_dripped_body_is_cut_at_the_deadline() -> None:
    with dripping_server(headers=True) as url, requests.Session() as session:
        response = session.get(url, stream=True, timeout=5)  # each read well within its timeout
        assert response_socket(response) is not None
        started = time.monotonic()
        with pytest.raises(requests.RequestException), cut_at(response, started + 0.5):
            response.content  # noqa: B018  (100,000 bytes at 20 a second: hours without the cut)
        assert time.monotonic() - started < 3


def test_a_read_done_before_the_deadline_is_not_cut() -> None:
    class Answer:
        raw = None
        closed = False

        def close(self) -> None:
            self.closed = True

    answer = Answer()
    with cut_at(answer, time.monotonic() + 0.2):
        pass
    time.sleep(0.4)
    assert not answer.closed  # the timer went with the block
    shut_down(answer)  # no socket under it: it is closed instead
    assert answer.closed


def test_a_status_line_that_never_comes_is_given_up_at_the_deadline() -> None:
    with dripping_server(headers=False) as url, requests.Session() as session:
        started = time.monotonic()
        with pytest.raises(requests.Timeout, match="did not come before the deadline"):
            before(0.5, lambda: session.get(url, timeout=30))
        assert time.monotonic() - started < 3


def test_an_answer_in_time_is_returned_and_an_error_raised_in_the_callers_thread() -> None:
    sentinel: Any = object()
    assert before(5, lambda: sentinel) is sentinel

    def refused() -> Any:
        raise requests.ConnectionError("refused")

    with pytest.raises(requests.ConnectionError, match="refused"):
        before(5, refused)


def test_an_answer_that_comes_too_late_is_closed_never_used() -> None:
    closed = threading.Event()

    class Late:
        def close(self) -> None:
            closed.set()

    def slow() -> Any:
        time.sleep(0.5)
        return Late()

    with pytest.raises(requests.Timeout):
        before(0.1, slow)
    assert closed.wait(5)
