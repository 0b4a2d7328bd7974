"""An embedded local DynamoDB: a moto server on 127.0.0.1, for the demo, tests and local use.

moto's backends are not thread-safe: two concurrent ``UpdateItem ... ADD`` on one item can
lose an update (seen here: 19 of 20 increments under concurrent transactions), where DynamoDB
serializes writes to an item. The server below therefore handles one request at a time while
still accepting many connections, so that what passes here does not pass by luck.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable


class LocalDynamoDB:
    """A moto server on a loopback port. ``start()`` returns its endpoint URL."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host, self._port = host, port
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.endpoint_url = ""

    def start(self) -> str:
        """Start serving in a daemon thread; idempotent."""
        if self._server is not None:
            return self.endpoint_url
        try:
            from moto.moto_server.werkzeug_app import (
                DomainDispatcherApplication,
                MotoRequestHandler,
                create_backend_app,
            )
            from werkzeug.serving import make_server
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError(
                "the embedded DynamoDB needs moto: pip install 'sandbox-ledger-dynamodb[cli]'"
            ) from exc
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        # moto needs credentials and a region to sign against; they never leave this machine.
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        app = _serialized(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            self._host, self._port, app, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        self.endpoint_url = f"http://{host}:{port}"
        return self.endpoint_url

    def stop(self) -> None:
        """Stop serving; the data is gone."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join()
            self._server, self._thread = None, None


def _serialized(app: Callable[..., Any]) -> Callable[..., Iterable[bytes]]:
    lock = threading.Lock()

    def handle(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with lock:
            # Drain the response inside the lock: werkzeug may produce it lazily.
            return list(app(environ, start_response))

    return handle
