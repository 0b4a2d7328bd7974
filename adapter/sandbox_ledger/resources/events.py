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
_PUT_EVENTS_MAX = 10


@dataclass(frozen=True)
class Expiry:
    """One expired record and why: the detail of a ``ResourceExpired`` event."""

    record: ResourceActivityRecord
    reason: str
    trigger: Literal["sweeper", "ttl"]
    revision: int | None
    expired_at: str

    def detail(self) -> dict[str, Any]:
        """The event detail: the full final record (wire shape) and the reason."""
        return {
            "record": self.record.wire(),
            "reason": self.reason,
            "trigger": self.trigger,
            "revision": self.revision,
            "expiredAt": self.expired_at,
        }


class EventPublisher:
    """Puts ResourceExpired events, retrying entries EventBridge reports as failed."""

    def __init__(self, client: Any, event_bus_name: str = "default", *, attempts: int = 4) -> None:
        self.client = client
        self.event_bus_name = event_bus_name
        self.attempts = attempts

    def publish(self, expiries: Sequence[Expiry]) -> set[str]:
        """Publish every expiry; returns the ids of records whose event could not be put."""
        failed: set[str] = set()
        for start in range(0, len(expiries), _PUT_EVENTS_MAX):
            failed |= self._put_batch(list(expiries[start : start + _PUT_EVENTS_MAX]))
        return failed

    def _put_batch(self, batch: list[Expiry]) -> set[str]:
        pending = batch
        for attempt in range(self.attempts):
            entries = [
                {
                    "Source": SOURCE,
                    "DetailType": DETAIL_TYPE,
                    "Detail": json.dumps(e.detail(), ensure_ascii=False),
                    "Resources": [],
                    "EventBusName": self.event_bus_name,
                }
                for e in pending
            ]
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
        return {e.record.id for e in pending}
