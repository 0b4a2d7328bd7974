"""ResourceExpired events on EventBridge, for provider-specific reclaimers."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from sandbox_ledger.errors import translate_client_error

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sandbox_ledger.resources.models import ResourceActivityRecord

SOURCE = "sandbox-ledger.resources"
DETAIL_TYPE = "ResourceExpired"
PUT_EVENTS_MAX_ENTRIES = 10
PUT_EVENTS_MAX_BYTES = 256 * 1024
"""EventBridge's limit on a PutEvents request, entries included."""
_ENTRY_OVERHEAD = 14  # the Time field EventBridge counts for every entry
# Free text a writer does not bound, as paths into the detail: shrunk first when an event
# would not fit, longest first.
_FREE_TEXT = (
    ("record", "lastFailure", "error"),
    ("record", "lastOperation", "error"),
    ("record", "workspace"),
    ("reason",),
)
TRUNCATION_MARKER = "…[truncated: {n} characters in all]"


def entry_size(entry: dict[str, Any]) -> int:
    """The size EventBridge counts for one PutEvents entry (UTF-8 bytes)."""
    size = _ENTRY_OVERHEAD
    for key in ("Source", "DetailType", "Detail", "EventBusName"):
        size += len(str(entry.get(key, "")).encode("utf-8"))
    return size + sum(len(r.encode("utf-8")) for r in entry.get("Resources", []))


def _shrink(detail: dict[str, Any], excess: int) -> bool:
    """Truncate free-text fields of ``detail`` (in place) by at least ``excess`` bytes, each
    with a visible marker and its original length. False if they are too short to."""
    fields = []
    for path in _FREE_TEXT:
        parent: Any = detail
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and isinstance(parent.get(path[-1]), str):
            fields.append((parent, path[-1]))
    fields.sort(key=lambda f: -len(f[0][f[1]].encode("utf-8")))
    for parent, key in fields:
        if excess <= 0:
            break
        text: str = parent[key]
        marker = TRUNCATION_MARKER.format(n=len(text))
        # Each character cut frees at least one byte of the encoded detail (more when JSON
        # escapes it); the bytes actually freed are counted below.
        keep = max(0, len(text) - excess - len(marker.encode("utf-8")) - 16)
        before = len(json.dumps(text, ensure_ascii=False).encode("utf-8"))
        parent[key] = text[:keep] + marker
        excess -= before - len(json.dumps(parent[key], ensure_ascii=False).encode("utf-8"))
    return excess <= 0


@dataclass(frozen=True)
class Expiry:
    """One expired record and why: the detail of a ``ResourceExpired`` event."""

    record: ResourceActivityRecord
    reason: str
    trigger: Literal["sweeper", "ttl"]
    revision: int | None
    expired_at: str

    @property
    def idempotency_key(self) -> str:
        """The same for every publication of this expiry (a sweeper's takeover of a dead
        one's claim, a replay of a kept TTL removal), different for any other: the record's
        id, its ``createdAt`` (a record made again under the same id is another) and the
        revision that expired."""
        revision = "-" if self.revision is None else str(self.revision)
        return f"{self.record.id}/{self.record.created_at}/{revision}"

    def detail(self) -> dict[str, Any]:
        """The event detail: the full final record (wire shape), the reason, and the key a
        consumer drops repeats by (delivery is at least once)."""
        return {
            "record": self.record.wire(),
            "reason": self.reason,
            "trigger": self.trigger,
            "revision": self.revision,
            "expiredAt": self.expired_at,
            "idempotencyKey": self.idempotency_key,
        }


class EventPublisher:
    """Puts ResourceExpired events, retrying entries EventBridge reports as failed."""

    def __init__(self, client: Any, event_bus_name: str = "default", *, attempts: int = 4) -> None:
        self.client = client
        self.event_bus_name = event_bus_name
        self.attempts = attempts

    def entry(self, expiry: Expiry) -> dict[str, Any] | None:
        """The PutEvents entry of one expiry, its free text truncated (with a marker) if the
        whole would not fit a request; None if even that cannot make it fit."""
        detail = expiry.detail()
        entry = {
            "Source": SOURCE,
            "DetailType": DETAIL_TYPE,
            "Detail": json.dumps(detail, ensure_ascii=False),
            "Resources": [],
            "EventBusName": self.event_bus_name,
        }
        excess = entry_size(entry) - PUT_EVENTS_MAX_BYTES
        if excess > 0:
            if not _shrink(detail, excess):
                return None
            entry["Detail"] = json.dumps(detail, ensure_ascii=False)
        return entry if entry_size(entry) <= PUT_EVENTS_MAX_BYTES else None

    def publish(self, expiries: Sequence[Expiry]) -> set[str]:
        """Publish every expiry in requests within EventBridge's limits (10 entries, 256 KB);
        returns the ids of records whose event could not be put."""
        failed: set[str] = set()
        batch: list[tuple[Expiry, dict[str, Any]]] = []
        size = 0
        for expiry in expiries:
            entry = self.entry(expiry)
            if entry is None:
                failed.add(expiry.record.id)
                continue
            cost = entry_size(entry)
            if batch and (
                len(batch) == PUT_EVENTS_MAX_ENTRIES or size + cost > PUT_EVENTS_MAX_BYTES
            ):
                failed |= self._put_batch(batch)
                batch, size = [], 0
            batch.append((expiry, entry))
            size += cost
        if batch:
            failed |= self._put_batch(batch)
        return failed

    def _put_batch(self, batch: list[tuple[Expiry, dict[str, Any]]]) -> set[str]:
        pending = batch
        for attempt in range(self.attempts):
            entries = [entry for _, entry in pending]
            try:
                response = self.client.put_events(Entries=entries)
            except (ClientError, BotoCoreError) as exc:
                if attempt == self.attempts - 1:
                    raise translate_client_error(exc, operation="PutEvents") from exc
                time.sleep(0.05 * 2**attempt)
                continue
            results = response.get("Entries", [])
            pending = [e for e, r in zip(pending, results, strict=True) if r.get("ErrorCode")]
            if not pending:
                return set()
            time.sleep(0.05 * 2**attempt)
        return {e.record.id for e, _ in pending}
