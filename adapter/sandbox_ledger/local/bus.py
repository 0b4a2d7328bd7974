"""A local event bus: what the deployment's EventBridge bus hands a rule's target, on a
laptop (``sandbox-ledger local --deployment --events stdout|FILE|URL``).

:class:`LocalBus` is a boto3-shaped EventBridge client with the one call the sweeper and the
TTL reporter make, ``put_events(Entries=[...])``. It answers as EventBridge does: a request
of more than 10 entries or 256 KB is refused whole (``ValidationException``); an entry
without its ``Source``, ``DetailType`` or a JSON object as ``Detail`` fails alone (its
``ErrorCode`` in the answer, ``FailedEntryCount`` counting it: the publisher puts it again);
the others are accepted, each given an event id. An accepted event is delivered in the
background, as a rule delivers to its target, in the shape a target receives
(``version``, ``id``, ``detail-type``, ``source``, ``account``, ``time``, ``region``,
``resources``, ``detail``):

- ``stdout``: one JSON line on standard output;
- a file: one JSON line appended (flushed at once: ``tail -f`` it);
- an ``http://`` or ``https://`` URL: POSTed as ``application/json``; an answer other than
  2xx, or none, is tried again with a doubling wait (:data:`DELIVERY_ATTEMPTS` tries, as a
  rule's retry policy does), then the event is a dead letter: appended to ``dead_letters``
  (a file) and said on standard error.

:meth:`LocalBus.close` delivers what was accepted before it returns (a Ctrl-C loses no
accepted event), up to ``timeout`` seconds.
"""

from __future__ import annotations

import contextlib
import json
import queue
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from botocore.exceptions import ClientError

from sandbox_ledger._json import loads_unique
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.resources.events import (
    PUT_EVENTS_MAX_BYTES,
    PUT_EVENTS_MAX_ENTRIES,
    entry_size,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["DELIVERY_ATTEMPTS", "LocalBus"]

ACCOUNT = "000000000000"
"""The account the local bus's events name (the embedded server's)."""
DELIVERY_ATTEMPTS = 8
"""Tries of a delivery to a URL before the event is a dead letter."""
_FIRST_WAIT = 0.2
"""Seconds before the second try of a delivery (doubling after each)."""


class LocalBus:
    """EventBridge's ``put_events`` for one local bus, delivering to ``target``: ``"stdout"``,
    a file path, or an http(s) URL (see the module)."""

    def __init__(
        self,
        target: str,
        *,
        region: str = "us-east-1",
        dead_letters: Path | None = None,
        out: TextIO | None = None,
        err: TextIO | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        first_wait: float = _FIRST_WAIT,
    ) -> None:
        self.target, self.region, self.dead_letters = target, region, dead_letters
        self._out, self._err, self._clock = out, err, clock
        self._first_wait = first_wait
        self._url = target.startswith(("http://", "https://"))
        self._file = None if self._url or target == "stdout" else Path(target)
        if self._file is not None and self._file.is_dir():
            raise InvalidInputError("events", f"{target} is a directory, not a file")
        self.accepted = 0
        self.delivered = 0
        self.dead = 0
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._deliver_all, name="local-bus", daemon=True)
        self._thread.start()

    def describe(self) -> str:
        """Where the bus delivers, for the server's start line."""
        if self.target == "stdout":
            return "standard output, one JSON line an event"
        if self._url:
            return f"POST {self.target}"
        return f"{self.target}, one JSON line an event"

    # -- EventBridge's call ---------------------------------------------------------------

    def put_events(self, *, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        """Accept ``Entries`` as EventBridge does (see the module)."""
        if not 1 <= len(Entries) <= PUT_EVENTS_MAX_ENTRIES:
            raise _validation(
                f"1 validation error detected: Value at 'entries' failed to satisfy constraint: "
                f"Member must have length between 1 and {PUT_EVENTS_MAX_ENTRIES}"
            )
        if sum(entry_size(entry) for entry in Entries) > PUT_EVENTS_MAX_BYTES:
            raise _validation("Total size of the entries in the request is over the limit.")
        answers: list[dict[str, Any]] = []
        for entry in Entries:
            event, error = self._event(entry)
            if event is None:
                answers.append({"ErrorCode": "MalformedDetail", "ErrorMessage": error})
                continue
            self.accepted += 1
            self._queue.put(event)
            answers.append({"EventId": event["id"]})
        failed = sum("ErrorCode" in answer for answer in answers)
        return {"FailedEntryCount": failed, "Entries": answers}

    def _event(self, entry: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
        source, detail_type, detail = (
            entry.get("Source"),
            entry.get("DetailType"),
            entry.get("Detail"),
        )
        if not isinstance(source, str) or not source or not isinstance(detail_type, str):
            return None, "Source and DetailType are required"
        try:
            body = loads_unique(detail) if isinstance(detail, str) else None
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return None, "Detail is malformed: not a JSON object"
        when = entry.get("Time") or self._clock()
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": detail_type,
            "source": source,
            "account": ACCOUNT,
            "time": when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": self.region,
            "resources": list(entry.get("Resources") or []),
            "detail": body,
        }, ""

    # -- delivery -------------------------------------------------------------------------

    def close(self, timeout: float = 30.0) -> None:
        """Deliver what was accepted (up to ``timeout`` seconds), then stop."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _deliver_all(self) -> None:
        while (event := self._queue.get()) is not None:
            try:
                if self._deliver(event):
                    self.delivered += 1
                else:
                    self._dead(event)
            except OSError as exc:  # the file cannot be written: a dead letter, said
                self._dead(event, str(exc))

    def _deliver(self, event: dict[str, Any]) -> bool:
        line = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
        if self.target == "stdout":
            out = self._out or sys.stdout
            out.write(line + "\n")
            out.flush()
            return True
        if self._file is not None:
            with self._file.open("a", encoding="utf-8") as stream:
                stream.write(line + "\n")
            return True
        wait = self._first_wait
        for attempt in range(DELIVERY_ATTEMPTS):
            if self._post(line.encode("utf-8")):
                return True
            if attempt < DELIVERY_ATTEMPTS - 1:
                time.sleep(wait)
                wait *= 2
        return False

    def _post(self, body: bytes) -> bool:
        request = urllib.request.Request(
            self.target, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return 200 <= int(answer.status) < 300
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _dead(self, event: dict[str, Any], why: str = "") -> None:
        self.dead += 1
        reason = why or f"not delivered to {self.target} after {DELIVERY_ATTEMPTS} tries"
        err = self._err or sys.stderr
        err.write(f"event {event['id']}: {reason}; ")
        if self.dead_letters is None:
            err.write("dropped (no dead-letter file)\n")
            return
        with contextlib.suppress(OSError), self.dead_letters.open("a", encoding="utf-8") as kept:
            kept.write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
        err.write(f"kept in {self.dead_letters}\n")


def _validation(message: str) -> ClientError:
    return ClientError({"Error": {"Code": "ValidationException", "Message": message}}, "PutEvents")
