"""The tests' HTTP servers answer a TLS handshake the way dockerd's containerd image store needs."""

from __future__ import annotations

import socket
from http.server import ThreadingHTTPServer

from testbed.quiet_http import QuietHandler, serve


class Ok(QuietHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def _reply(server: ThreadingHTTPServer, sent: bytes) -> bytes:
    with socket.create_connection(server.server_address[:2], timeout=5) as conn:  # type: ignore[arg-type]
        conn.sendall(sent)
        return conn.recv(64)


def test_a_tls_hello_gets_an_http_status_line_and_plain_http_still_works() -> None:
    """dockerd 26 (containerd store) retries an insecure registry over plain HTTP only when its
    TLS attempt is answered with bytes starting "HTTP/"; http.server's own answer to a hello (an
    HTML page, no status line) made every push through a test relay fail. A hello has no newline,
    so http.server would not even answer it before the client gave up."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    server.daemon_threads = True
    serve(server)
    try:
        hello = b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(32)
        assert _reply(server, hello).startswith(b"HTTP/1.0 400 ")
        assert _reply(server, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 200 ")
    finally:
        server.shutdown()
        server.server_close()
