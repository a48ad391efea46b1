"""What every HTTP server the tests start shares: keep-alive answers sent at once, and no log."""

from __future__ import annotations

import io
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle on, each keep-alive answer waits ~40 ms for
    # the client's delayed ACK (about a second per test, all told).
    disable_nagle_algorithm = True

    def log_message(self, *args: object) -> None:
        """Requests are the test's to assert, not stderr's to print."""

    def handle_one_request(self) -> None:
        """A TLS handshake is answered as Go's plain-HTTP servers answer it, with an HTTP status
        line: dockerd's containerd image store retries a registry on 127.0.0.1 over plain HTTP only
        when the TLS reply starts "HTTP/" (http.server's own reply to it has no status line)."""
        if isinstance(self.rfile, io.BufferedReader) and self.rfile.peek(1)[:1] == b"\x16":  # TLS handshake
            self.wfile.write(
                b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
            )
            self.close_connection = True
            return
        super().handle_one_request()


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-answer (a bounded read refusing the rest) is expected here;
        socketserver would print its traceback to stderr, which a test on the same worker may be
        reading (seen: a test of one-line errors failed on another test's BrokenPipeError)."""


def serve(server: socketserver.BaseServer) -> None:
    """Serve in a daemon thread that looks for shutdown every 50 ms (the default, 0.5 s, is what
    each test's close would wait)."""
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
