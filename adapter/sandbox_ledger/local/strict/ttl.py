"""Time to Live as DynamoDB applies it: expired items deleted late, by the TTL service.

DynamoDB's rules, quoted (API Reference, UpdateTimeToLive; Streams API Reference, Record):

- "If the epoch time value stored in the attribute is less than the current time, the item
  is marked as expired and subsequently deleted."
- "DynamoDB typically deletes expired items within two days of expiration. [...] Items that
  have expired and not been deleted will still show up in reads, queries, and scans."
- "Items that are deleted by the Time to Live process after expiration have the following
  fields: Records[].userIdentity.type "Service", Records[].userIdentity.principalId
  "dynamodb.amazonaws.com"."
- Developer Guide, "Time to Live": items whose TTL attribute is not a Number, or whose value
  is more than five years in the past, are not deleted by TTL.

moto never deletes an expired item. :class:`TtlDeleter` deletes, from the tables whose TTL is
enabled, every item expired at least :attr:`StrictProfile.ttl_delay` seconds ago, checking at
most every :attr:`StrictProfile.ttl_every` seconds (when a request arrives: nothing can see
the table between requests), each deletion a ``REMOVE`` stream record with the TTL service's
``userIdentity``. Until then the expired item is served as any other.

A look reads every item of those tables, under the server's lock: on a table of a hundred
thousand items it takes most of a second, which looked for every second made the server
spend most of its time on TTL (an import into such a table went at tens of entries a
second). So the next look comes no sooner than :data:`BUSY_SHARE` of the time between looks
would be spent on them: after a look that took ``t`` seconds, not before ``t /
BUSY_SHARE`` seconds (or ``ttl_every``, if later). A large table's expired items are deleted
that much later, still within what DynamoDB allows (days).
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from .indexes import _tables

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["BUSY_SHARE", "TTL_IDENTITY", "TtlDeleter"]

BUSY_SHARE = 0.05
"""The share of the server's time TTL's looks take at most (see the module)."""

TTL_IDENTITY = {"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"}
"""The ``userIdentity`` of a stream record of an item the TTL service deleted, as the Streams
API spells it (its ``Identity``: ``PrincipalId``, ``Type``); a Lambda event spells it
``{"type", "principalId"}``."""

_FIVE_YEARS_S = 5 * 365 * 86_400


def _expiry(item: Any, attribute: str) -> float | None:
    """The TTL of a moto item, seconds since the epoch, or None when it has no Number there."""
    value = item.attrs.get(attribute)
    if value is None or value.type != "N":
        return None
    try:
        return float(Decimal(value.value))
    except (InvalidOperation, ValueError):
        return None


class TtlDeleter:
    """Deletes expired items as DynamoDB's TTL service does (called under the server's lock).

    Args:
        delay: seconds after its TTL an item is deleted, at the earliest.
        every: seconds between two looks at the tables.
        clock: seconds since the epoch (tests move it).
        removed: told of each deletion (table name, the deleted item's attributes), after
            its stream record is written.
        around: a context for each deletion, given the moto table and the item's key (the
            front's lagging indexes watch it as they watch a DeleteItem: "As items are
            deleted, they are removed from any local secondary index and global secondary
            index immediately in the same eventually consistent way as a standard delete
            operation").
        timer: what a look's time is measured with (seconds; tests move it).
    """

    def __init__(
        self,
        delay: float,
        every: float,
        clock: Callable[[], float] = time.time,
        removed: Callable[[str, dict[str, Any]], None] | None = None,
        around: Callable[[Any, dict[str, Any]], AbstractContextManager[Any]] | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.delay, self.every, self.clock, self.removed = delay, every, clock, removed
        self.around, self.timer = around, timer
        self._next = 0.0

    def tick(self) -> int:
        """Delete what is due if a look is due; how many items were deleted. The next look
        is due ``every`` seconds on, or later after a long look (see the module)."""
        now = self.clock()
        if now < self._next:
            return 0
        began = self.timer()
        deleted = self.sweep(now)
        self._next = now + max(self.every, (self.timer() - began) / BUSY_SHARE)
        return deleted

    def sweep(self, now: float) -> int:
        deleted = 0
        for table in _tables():
            ttl = getattr(table, "ttl", None) or {}
            attribute = ttl.get("AttributeName")
            if ttl.get("TimeToLiveStatus") != "ENABLED" or not attribute:
                continue
            for hash_key, range_key, item in list(_items(table)):
                expires = _expiry(item, attribute)
                if expires is None or expires + self.delay > now:
                    continue
                if expires < now - _FIVE_YEARS_S:
                    continue
                key = {table.hash_key_attr: hash_key.to_json()}
                if range_key is not None:
                    key[table.range_key_attr] = range_key.to_json()
                with self.around(table, key) if self.around else nullcontext():
                    table.delete_item(hash_key, range_key)
                shard = getattr(table, "stream_shard", None)
                if shard is not None and shard.items:
                    shard.items[-1].record["userIdentity"] = dict(TTL_IDENTITY)
                if self.removed is not None:
                    self.removed(table.name, item.to_json()["Attributes"])
                deleted += 1
        return deleted


def _items(table: Any) -> Iterator[tuple[Any, Any, Any]]:
    """(hash key, range key or None, item) of every item of a moto table."""
    if table.range_key_attr:
        for hash_key, ranges in table.items.items():
            for range_key, item in ranges.items():
                yield hash_key, range_key, item
    else:
        for hash_key, item in table.items.items():
            yield hash_key, None, item
