"""Ending a read that is still going at its deadline, whatever the server does meanwhile.

A socket timeout bounds each read, not the whole answer: a server that sends one byte every
half second never trips it, and one read of http.client (a chunk-size line, a chunked answer's
trailer lines) is many socket reads. Shutting the socket down from another thread is what wakes
such a reader at once: its next (or current) read ends, and the caller sees an error it turns
into its deadline's one line. Used by the registry client (every answer's body, token answers
included) and by the Docker engine paths (a build cut off, every non-streaming call).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import requests


def response_socket(response: Any) -> socket.socket | None:
    """The socket under a requests response (``response.raw`` is urllib3's, over http.client's):
    the one docker-py itself reaches for in attach (APIClient._get_raw_response_socket)."""
    try:
        raw: Any = response.raw._fp.fp.raw
    except AttributeError:
        return None
    sock = getattr(raw, "_sock", raw)
    return sock if isinstance(sock, socket.socket) else None


def shut_down(response: Any) -> None:
    """Cut ``response``'s connection (from any thread): a blocked or later read of it ends."""
    sock = response_socket(response)
    try:
        if sock is None:
            response.close()
        else:
            # socket.socket's own shutdown: ssl.SSLSocket's drops its SSL object, which the
            # reading thread may be inside of.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: nothing left to cut


@contextmanager
def cut_at(response: Any, deadline: float) -> Iterator[None]:
    """Within the block, ``response`` is read; at ``deadline`` (time.monotonic) its connection is
    cut, so the block's read ends however the server drips. The caller checks the deadline."""
    timer = threading.Timer(max(deadline - time.monotonic(), 0.0), shut_down, (response,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def before(seconds: float, request: Callable[[], requests.Response]) -> requests.Response:
    """``request`` (up to its status line and headers) if it answers within ``seconds``.

    The per-read timeout bounds each read, not the whole: a server that drips its status line or
    headers a byte at a time (up to http.client's 100 lines of 64 KiB) would hold an operation for
    hours. The request runs in a thread of its own and is abandoned at the deadline; it then ends
    on its own read timeout, and a response that still comes is closed, never used.
    """
    outcome: dict[str, Any] = {}
    finished = threading.Event()
    abandoned = threading.Event()

    def run() -> None:
        try:
            outcome["response"] = request()
        except BaseException as exc:  # handed to the caller's thread, which raises it
            outcome["error"] = exc
        finally:
            finished.set()
            if abandoned.is_set() and "response" in outcome:
                outcome["response"].close()

    threading.Thread(target=run, name="imagekit-request", daemon=True).start()
    if not finished.wait(max(seconds, 0.0)):
        abandoned.set()
        if finished.is_set() and "response" in outcome:  # it came in between: still too late
            outcome["response"].close()
        raise requests.Timeout("the status line and headers did not come before the deadline")
    if "error" in outcome:
        raise outcome["error"]
    response: requests.Response = outcome["response"]
    return response
