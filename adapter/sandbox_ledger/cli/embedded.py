"""An embedded local DynamoDB (a moto server on 127.0.0.1) for the demo and local use."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator


@contextmanager
def embedded_dynamodb() -> Iterator[str]:
    """Start a moto server on a free loopback port; yield its endpoint URL; stop it after."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "the embedded DynamoDB needs moto: pip install 'sandbox-ledger-dynamodb[cli]'"
        ) from exc
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    # moto needs some credentials and a region; they never leave this machine.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "embedded")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "embedded")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
