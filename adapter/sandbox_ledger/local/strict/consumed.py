"""Consumed capacity as DynamoDB computes it (moto answers 1.0 for a write whatever its size,
1.0 for a Query whatever it read, nothing for a transaction), and a meter of it.

DynamoDB's rules, quoted (Developer Guide, "DynamoDB read and write operations", unless
said otherwise):

- "A *strongly consistent* read request of an item up to 4 KB requires one read unit. An
  *eventually consistent* read request of an item up to 4 KB requires one-half read unit. A
  *transactional* read request of an item up to 4 KB requires two read units." "Item sizes
  for reads are rounded up to the next 4 KB multiple." (:func:`.capacity.read_units`.)
- "If you perform a read operation on an item that doesn't exist, DynamoDB will still consume
  read throughput as outlined above." "For any operation that returns items, you can request
  a subset of attributes to retrieve. However, doing so has no impact on the item size
  calculations." A GetItem is charged on the whole stored item (one unit, half eventually
  consistent, when there is none), whatever its ProjectionExpression.
- BatchGetItem: "each item in the batch is read separately, so DynamoDB first rounds up the
  size of each item to the next 4 KB boundary, and then calculates the total size." A
  Query: "All items returned are treated as a single read operation, whereby DynamoDB
  computes the total size of all items and then rounds up to the next 4 KB boundary"; a
  Scan likewise over the items it reads. And ("Filter expressions for the Query
  operation"): "A filter expression is applied after a Query finishes, but before the
  results are returned. Therefore, a Query consumes the same amount of read capacity,
  regardless of whether a filter expression is present." A Query of a global secondary
  index reads index entries: "The number of read capacity units is the sum of all projected
  attribute sizes across all of the items returned in the index query results" (whitepaper,
  "Global Secondary Index Considerations").
- Writes: "One write request unit represents one write for an item up to 1 KB in size"
  (rounded up per item). PutItem: "If an item with the same primary key exists in the
  table, the operation replaces the item. For calculating provisioned throughput
  consumption, the item size that matters is the larger of the two." UpdateItem: "the
  larger of the before and after images". DeleteItem: "the size of the deleted item" (one
  unit when there is none). BatchWriteItem: each put or delete counted as such. A
  conditional write: "If the condition expression evaluates to false, DynamoDB still
  consumes write capacity from the table", on the larger of the stored item and the item a
  PutItem sends. "Transactional read/write requests require 2 read/write request units"
  per item (a ConditionCheck: its stored item, as a write).
- Global secondary indexes (Developer Guide, "Using Global Secondary Indexes", writes):
  "If you write a new item to the table that defines an indexed attribute, or you update an
  existing item to define a previously undefined indexed attribute, one write operation is
  required to put the item into the index. If an update to the table changes the value of
  an indexed key attribute (from A to B), two writes are required, one to delete the
  previous item from the index and another write to put the new item into the index. If an
  item was present in the index, but a write to the table caused the indexed attribute to be
  deleted, one write is required to delete the old item projection from the index. If an
  item is not present in the index before or after the item is updated, there is no
  additional write cost for the index. If an update to the table only changes the value of
  projected attributes in the index key schema, but does not change the value of any
  indexed key attribute, one write is required to update the values of the projected
  attributes into the index." Each index write is charged on the size of the index entry
  (the table's key, the index's key and the projected attributes), to that index.
- ``ReturnConsumedCapacity`` (API Reference): ``TOTAL`` "The response includes only the
  aggregate ConsumedCapacity for the operation"; ``INDEXES`` "The response includes the
  aggregate ConsumedCapacity for the operation, together with ConsumedCapacity for each
  table and secondary index that was accessed"; ``NONE`` "No ConsumedCapacity details are
  included in the response." A batch or a transaction answers a list, one per table.

Our readings where DynamoDB says nothing: a global secondary index's writes in a
transaction are charged once (the index is updated after the transaction, as any write's),
and a cancelled transaction consumes nothing here. Local secondary indexes are read as the
table (their writes are not charged apart).

The :class:`Meter` adds up every request's :class:`Charge` per (table, index or ``""`` for
the table, partition key value as compact JSON of its wire form, e.g. ``{"S":"a"}``),
whether or not the client asked for ConsumedCapacity. A Scan's (or a Query's, of an index
whose entries span partition keys) units are shared among the partition keys it read in
proportion to their bytes.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .capacity import write_units
from .sizes import item_size

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "Charge",
    "Meter",
    "MeterKey",
    "Usage",
    "consumed_capacity",
    "entry",
    "index_writes",
    "partition_text",
]

Item = dict[str, Any]
"""An item's attributes in DynamoDB's wire form."""
MeterKey = tuple[str, str, str]
"""(table, index name or ``""`` for the table, partition key value as compact JSON)."""


def partition_text(value: Any) -> str:
    """A partition key value (its wire form) as the meter and the buckets name it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Charge:
    """Units one request consumed from one table or index, on one partition key value."""

    table: str
    index: str
    """The index's name, or ``""`` for the table."""
    partition: str
    read: float = 0.0
    write: float = 0.0
    local: bool = False
    """Whether ``index`` is a local secondary index."""


@dataclass(frozen=True)
class Usage:
    """Units consumed (read and write) on one :data:`MeterKey`."""

    read: float = 0.0
    write: float = 0.0


class Meter:
    """Consumed units per (table, index or ``""``, partition key value), added up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: dict[MeterKey, Usage] = {}

    def add(self, charges: Iterable[Charge]) -> None:
        """Add what a request consumed."""
        with self._lock:
            for c in charges:
                key = (c.table, c.index, c.partition)
                was = self._used.get(key, Usage())
                self._used[key] = Usage(was.read + c.read, was.write + c.write)

    def snapshot(self) -> dict[MeterKey, Usage]:
        """The units consumed so far (a copy)."""
        with self._lock:
            return dict(self._used)

    def reset(self) -> None:
        """Forget the units consumed so far."""
        with self._lock:
            self._used.clear()


def entry(table: Any, index: Any, item: Item | None) -> Item | None:
    """``item``'s entry in ``index`` (moto's index of moto's ``table``): the table's and the
    index's key attributes and the projected ones; None when the item lacks one of the index's
    key attributes (a sparse index) or is None."""
    if item is None:
        return None
    keys = [k["AttributeName"] for k in index.schema]
    if any(name not in item for name in keys):
        return None
    projection = index.projection or {}
    kind = projection.get("ProjectionType", "ALL")
    if kind == "ALL":
        return dict(item)
    names = [table.hash_key_attr, *([table.range_key_attr] if table.range_key_attr else []), *keys]
    if kind == "INCLUDE":
        names += projection.get("NonKeyAttributes", [])
    return {name: item[name] for name in names if name in item}


def index_writes(
    table: Any, before: Item | None, after: Item | None, table_name: str
) -> list[Charge]:
    """The writes each global secondary index of ``table`` takes when an item goes from
    ``before`` to ``after`` (None: absent), as the Developer Guide lists them."""
    charges = []
    for index in getattr(table, "global_indexes", None) or []:
        old, new = entry(table, index, before), entry(table, index, after)
        if old == new:  # both absent, or the same entry: nothing to write
            continue
        hash_attr = index.schema[0]["AttributeName"]
        keys = [k["AttributeName"] for k in index.schema]
        moved = old is not None and new is not None and any(old[k] != new[k] for k in keys)
        if old is not None and (new is None or moved):
            charges.append(
                Charge(
                    table_name,
                    index.name,
                    partition_text(old[hash_attr]),
                    write=write_units(item_size(old)),
                )
            )
        if new is not None:
            size = item_size(new) if old is None or moved else max(item_size(old), item_size(new))
            charges.append(
                Charge(
                    table_name, index.name, partition_text(new[hash_attr]), write=write_units(size)
                )
            )
    return charges


def _unit(value: float) -> float:
    # Sums of halves and whole units are exact in binary; a Scan's shares are not: rounded.
    return round(value, 9)


def consumed_capacity(
    operation: str, charges: list[Charge], mode: str, tables: list[str]
) -> dict[str, Any] | list[dict[str, Any]] | None:
    """The ``ConsumedCapacity`` of a response (a list for a batch or a transaction, one per
    table in ``tables``' order), or None for ``NONE``."""
    if mode not in ("TOTAL", "INDEXES"):
        return None
    per_table = []
    for name in tables:
        mine = [c for c in charges if c.table == name]
        total = sum(c.read + c.write for c in mine)
        one: dict[str, Any] = {"TableName": name, "CapacityUnits": _unit(total)}
        if mode == "INDEXES":
            one["Table"] = {
                "CapacityUnits": _unit(sum(c.read + c.write for c in mine if not c.index))
            }
            for field, local in (
                ("GlobalSecondaryIndexes", False),
                ("LocalSecondaryIndexes", True),
            ):
                named: dict[str, float] = {}
                for c in mine:
                    if c.index and c.local == local:
                        named[c.index] = named.get(c.index, 0.0) + c.read + c.write
                if named:
                    one[field] = {k: {"CapacityUnits": _unit(v)} for k, v in named.items()}
        per_table.append(one)
    if operation in ("BatchWriteItem", "BatchGetItem", "TransactWriteItems", "TransactGetItems"):
        return per_table
    return per_table[0] if per_table else None
