"""The embedded server's HTTP layer: moto's werkzeug request handler serving many requests
per connection (HTTP/1.1 keep-alive), each body read in full, each response sent in one write
with ``TCP_NODELAY``."""

from __future__ import annotations

import contextlib
import io
import socket
import threading
from typing import Any

MAX_REQUEST_BODY = 100 * 1024 * 1024
"""The largest request body the embedded server reads (413 above it): far above DynamoDB's
own request limits, and what the CDK tests upload to the local S3."""

# The connections each server has open, so that stop() can end the idle keep-alive ones.
_open_connections: dict[Any, set[socket.socket]] = {}
_open_lock = threading.Lock()


class _Refused(Exception):
    def __init__(self, status: str, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why.encode()


def _keep_alive(handler: type[Any]) -> type[Any]:
    """``handler`` (moto's werkzeug request handler) serving many requests per connection.

    werkzeug's development server closes every connection after one response, and then
    waits for and discards whatever the client sends next. So every SDK call opened a TCP
    connection and the server started a thread for it. This handler keeps moto's request
    parsing (werkzeug's environ, moto's header handling) and replaces only the response
    loop: it reads each request's body in full before the application runs (so the stream
    is always at the next request), buffers the response, sends it with its length in one
    write without delay (``TCP_NODELAY``), and keeps the connection open unless the client
    asked to close it (HTTP/1.1 keep-alive).
    """
    from werkzeug.serving import DechunkedInput

    class KeepAliveHandler(handler):  # type: ignore[misc]
        def run_wsgi(self) -> None:
            if self.headers.get("Expect", "").lower().strip() == "100-continue":
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.environ = environ = self.make_environ()
            try:
                body = self._body(environ)
            except _Refused as refused:  # answered, then the connection is closed
                self.close_connection = True
                self._respond(refused.status, [("Content-Type", "text/plain")], refused.why)
                return
            except (OSError, ValueError):  # the client went away mid-body
                self.close_connection = True
                return
            environ["wsgi.input"] = io.BytesIO(body)
            environ["wsgi.input_terminated"] = True
            started: list[Any] = []
            written: list[bytes] = []

            def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> Any:
                started[:] = [status, headers]
                return written.append

            try:
                chunks = self.server.app(environ, start_response)
                try:
                    written.extend(chunks)
                finally:
                    if hasattr(chunks, "close"):
                        chunks.close()
                status, headers = started
            except Exception as exc:
                self.server.log("error", f"Error on request: {exc!r}")
                status, headers, written[:] = "500 INTERNAL SERVER ERROR", [], [b""]
                self.close_connection = True
            self._respond(status, headers, b"".join(written))

        def _body(self, environ: dict[str, Any]) -> bytes:
            """The request's whole body, or _Refused: a length that is not a plain count
            (the bytes after the headers could not be framed), a body over the limit, a
            malformed chunked body. OSError/ValueError: the client left before sending it."""
            source = environ["wsgi.input"]
            if isinstance(source, DechunkedInput):
                try:
                    body: bytes = source.read(MAX_REQUEST_BODY + 1)
                except (OSError, ValueError) as exc:
                    raise _Refused("400 Bad Request", f"malformed chunked body: {exc}") from exc
                if len(body) > MAX_REQUEST_BODY:
                    raise _Refused("413 Content Too Large", "request body over the limit")
                return body
            length = str(environ.get("CONTENT_LENGTH") or "0")
            if not (length.isascii() and length.isdigit()):
                raise _Refused("400 Bad Request", f"Content-Length {length!r} is not a count")
            if int(length) > MAX_REQUEST_BODY:
                raise _Refused("413 Content Too Large", "request body over the limit")
            body = self.rfile.read(int(length))
            if len(body) < int(length):
                raise ConnectionResetError("the client closed the connection mid-body")
            return body

        def _respond(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
            code, _, reason = status.partition(" ")
            self.log_request(int(code))
            head = [
                f"{self.protocol_version} {code} {reason}",
                f"Server: {self.version_string()}",
                f"Date: {self.date_time_string()}",
            ]
            lengths = [v for k, v in headers if k.lower() == "content-length"]
            head += [
                f"{key}: {value}"
                for key, value in headers
                if key.lower() not in ("content-length", "connection", "transfer-encoding")
            ]
            # A HEAD response states the length of the body it does not send.
            is_head = self.command == "HEAD"
            no_body = is_head or int(code) in (204, 304) or 100 <= int(code) < 200
            if not (no_body and not lengths):
                head.append(f"Content-Length: {lengths[0] if is_head and lengths else len(body)}")
            if self.close_connection:  # the client asked for it, or the request failed
                head.append("Connection: close")
            # Status line, headers and body in one write: written apart, the body would wait
            # for the client's delayed acknowledgement of the headers (Nagle's algorithm).
            encoded = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1", "strict")
            self.wfile.write(encoded + (b"" if no_body else body))

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with _open_lock:
                _open_connections.setdefault(self.server, set()).add(self.connection)

        def finish(self) -> None:
            with _open_lock:
                _open_connections.get(self.server, set()).discard(self.connection)
            super().finish()

    return KeepAliveHandler


def _end_connections(server: Any) -> None:
    """End the connections ``server`` still holds open: their threads wait for a next request."""
    with _open_lock:
        connections = _open_connections.pop(server, set())
    for connection in connections:
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)
