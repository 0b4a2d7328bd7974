"""Counting the SDK requests an adapter makes, through botocore's event hooks."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any


class RequestCounter:
    """Counts API calls (``before-call``) and HTTP attempts including retries (``before-send``).

    Attach it to a botocore or aiobotocore client::

        counter = RequestCounter().attach(adapter.client())     # sync twin
        counter = RequestCounter().attach(await adapter.client())  # async twin
    """

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.sends: Counter[str] = Counter()
        self._lock = threading.Lock()

    def attach(self, client: Any) -> RequestCounter:
        """Register on ``client``'s event system; returns self."""
        client.meta.events.register("before-call.dynamodb", self._on_call)
        client.meta.events.register("before-send.dynamodb", self._on_send)
        return self

    def _on_call(self, model: Any, **_: Any) -> None:
        with self._lock:
            self.calls[model.name] += 1

    def _on_send(self, request: Any, **_: Any) -> None:
        target = request.headers.get("X-Amz-Target", b"")
        if isinstance(target, bytes):
            target = target.decode()
        with self._lock:
            self.sends[str(target).rsplit(".", 1)[-1] or "unknown"] += 1

    @property
    def total(self) -> int:
        """API calls made so far."""
        return sum(self.calls.values())

    def reset(self) -> None:
        """Start counting from zero."""
        with self._lock:
            self.calls.clear()
            self.sends.clear()
