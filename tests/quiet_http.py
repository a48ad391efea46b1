"""What every HTTP server the tests start shares: keep-alive answers sent at once, and no log."""

from __future__ import annotations

import socketserver
import threading
from http.server import BaseHTTPRequestHandler


class QuietHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle on, each keep-alive answer waits ~40 ms for
    # the client's delayed ACK (about a second per test, all told).
    disable_nagle_algorithm = True

    def log_message(self, *args: object) -> None:
        """Requests are the test's to assert, not stderr's to print."""


def serve(server: socketserver.BaseServer) -> None:
    """Serve in a daemon thread that looks for shutdown every 50 ms (the default, 0.5 s, is what
    each test's close would wait)."""
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
