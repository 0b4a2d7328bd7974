"""Global secondary indexes that lag behind their table, as DynamoDB's do (moto makes every
write visible in every index at once).

The rules, quoted from DynamoDB's documentation:

- Developer Guide, "DynamoDB read consistency": "All reads from GSIs and streams are eventually
  consistent." [...] "When issuing eventually consistent reads to a DynamoDB table or an
  index, the responses may not reflect the results of a recently completed write operation.
  If you repeat your read request after a short time, the response should eventually return
  the more recent item."
- Developer Guide, "Using Global Secondary Indexes": "Changes to the table data are propagated
  to the global secondary indexes within a fraction of a second, under normal conditions."
  AWS Knowledge Center, "Why aren't my items showing up in my GSI?": "Write operations
  propagate to a GSI within 1 second." Hence a delay drawn per write and per index from
  :attr:`StrictProfile.index_delay <sandbox_ledger.local.strict.StrictProfile.index_delay>`.
- Developer Guide, "Take advantage of sparse indexes": "For any item in a table, DynamoDB
  writes a corresponding index entry only if the index sort key value is present in the
  item." [...] "Global secondary indexes are sparse by default. When you create a global
  secondary index, you specify a partition key and optionally a sort key. Only items in the
  base table that contain those attributes appear in the index." An item without the index's
  key attributes has no entry, and a write that leaves an item's entry as it was (an
  attribute the index does not project) writes nothing to the index.
- API Reference, Query: "Strongly consistent reads are not supported on global secondary
  indexes. If you query a global secondary index with ``ConsistentRead`` set to ``true``,
  you will receive a ``ValidationException``." Scan: "The ``ConsistentRead`` parameter is not
  supported on global secondary indexes. If you scan a global secondary index with
  ``ConsistentRead`` set to ``true``, you will receive a ``ValidationException``."
  (:func:`consistent_read_refused`.)

How, with moto still evaluating every request: moto keeps no index of its own; it answers a
Query or Scan naming an index from the table's items. So :class:`IndexLag` keeps, per table
and global secondary index, only the items whose index entry is behind: the entry the index
shows (as of the last write that reached it, or none) and the writes still on their way, each
with the time it becomes visible, in the order they were made (a later write of an item never
overtakes an earlier one). A Query or Scan naming the index puts those entries in the items'
place for as long as moto serves it, under the server's lock (no other request sees them),
then puts the items back. Memory: the entries of the items written within the last delay,
nothing per item at rest; no hidden table exists for ListTables, DescribeTable, a stream or
``local --data`` to show. Time (the server's, measured with the ledger's table of four
KEYS_ONLY indexes): about 25 us per item written, 3 us per entry behind for a Query or Scan of
the index (moto's own index Query reads the whole table: 12 ms at 2,000 items).

Not lagging: a PartiQL ``SELECT`` on an index (moto reads it from the table's items, as the
table); an index created by UpdateTable is complete at once (no backfill); the in-process calls
of ``local --data`` (loads and saves, outside the front) are seen by the index at once.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import heapq
import itertools
import random
import time
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

__all__ = ["CONSISTENT_READ_REFUSED", "ITEM_WRITES", "IndexLag", "consistent_read_refused"]

CONSISTENT_READ_REFUSED = "Consistent reads are not supported on global secondary indexes"
"""DynamoDB's message for a Query or Scan of a global secondary index with ConsistentRead."""

ITEM_WRITES = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
)
"""The writes whose items the request names (every other write is PartiQL's, or a table's)."""
_PARTIQL = frozenset({"ExecuteStatement", "BatchExecuteStatement", "ExecuteTransaction"})
_INDEX_READS = frozenset({"Query", "Scan"})
_TABLE_CHANGES = frozenset({"DeleteTable", "UpdateTable"})

Key = tuple[Any, Any]
"""An item's primary key as moto stores it: (hash DynamoType, range DynamoType or None)."""
Entry = Any
"""An item's entry in one index (a moto ``Item`` of the projected attributes), or None."""


def _tables() -> Iterator[Any]:
    from moto.dynamodb.models import dynamodb_backends

    for account in list(dynamodb_backends.keys()):
        regions = dynamodb_backends[account]
        for region in list(regions.keys()):
            yield from list(regions[region].tables.values())


def consistent_read_refused(
    operation: str, request: dict[str, Any], table_of: Callable[[str], Any]
) -> bool:
    """Whether ``request`` is a Query or Scan of a global secondary index with ConsistentRead
    set: refused with ``ValidationException`` (:data:`CONSISTENT_READ_REFUSED`)."""
    if operation not in _INDEX_READS or request.get("ConsistentRead") is not True:
        return False
    index = request.get("IndexName")
    table = table_of(str(request.get("TableName", ""))) if index else None
    return table is not None and any(gsi.name == index for gsi in table.global_indexes)


@functools.cache
def _key_value() -> type[Any]:
    """moto's ``DynamoType`` for a key value looked up again and again (each Query of a
    lagging index puts every entry behind in place and back): its hash is computed once, and
    equal text is equal without moto's conversion of both values (a number: both Decimals)."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    class KeyValue(DynamoType):
        def __init__(self, value: dict[str, Any]) -> None:
            super().__init__(value)
            self.hashed: int = DynamoType.__hash__(self)

        def __hash__(self) -> int:
            return self.hashed

        def __eq__(self, other: object) -> bool:
            if not isinstance(other, DynamoType) or self.type != other.type:
                return False
            return bool(self.value == other.value or self.cast_value == other.cast_value)

    return KeyValue


def _key(table: Any, attributes: Any) -> Key | None:
    """The primary key in ``attributes`` (a request's item or key), or None if it lacks one."""
    if not isinstance(attributes, dict):
        return None
    hash_value = attributes.get(table.hash_key_attr)
    range_value = attributes.get(table.range_key_attr) if table.range_key_attr else None
    if not isinstance(hash_value, dict) or (table.range_key_attr and range_value is None):
        return None
    value = _key_value()
    try:
        return value(hash_value), (value(range_value) if range_value is not None else None)
    except Exception:  # a malformed value: moto refuses the request itself
        return None


def _stored(table: Any, key: Key) -> Any:
    """The item stored under ``key`` now, or None (never adds to moto's defaultdict)."""
    hash_key, range_key = key
    partition = table.items.get(hash_key)
    if partition is None or not table.range_key_attr:
        return partition
    return partition.get(range_key)


_SCALARS = frozenset({"S", "N", "B", "BOOL", "NULL"})
"""Types whose moto values are never changed in place (an update replaces them): an entry
shares them with the item. Sets, lists and maps can be changed in place: copied."""


def _entry(table: Any, index: Any, item: Any) -> Entry:
    """``item``'s entry in ``index`` as it stands (moto changes items in place: an entry
    shares only what is never changed in place), or None when the item lacks one of the
    index's key attributes (a sparse index)."""
    if item is None:
        return None
    attributes = item.attrs
    for name in index.schema_key_attrs:
        if name not in attributes:
            return None
    projection = index.projection or {}
    kind = projection.get("ProjectionType", "ALL")
    if kind == "ALL":
        names: Iterable[str] = list(attributes)
    else:
        names = [*table.table_key_attrs, *index.schema_key_attrs]
        if kind == "INCLUDE":
            names += projection.get("NonKeyAttributes", [])
    kept: dict[str, Any] = attributes.__class__.__new__(attributes.__class__)
    for name in names:
        value = attributes.get(name)
        if value is not None:
            # dict's own setter: moto's re-measures the whole item on every attribute.
            dict.__setitem__(kept, name, value if value.type in _SCALARS else copy.deepcopy(value))
    # Not through moto's model constructor, which would list the entry for its dashboard.
    entry = object.__new__(item.__class__)
    entry.hash_key, entry.range_key, entry.attrs = item.hash_key, item.range_key, kept
    return entry


def _same(one: Entry, other: Entry) -> bool:
    """Whether two entries of one item are alike (a number written otherwise, "1" and "1.0",
    counts as a change: the index then takes an entry alike, never a wrong one)."""
    if one is None or other is None:
        return one is other
    mine, theirs = one.attrs, other.attrs
    if mine.keys() != theirs.keys():
        return False
    for name, value in mine.items():
        twin = theirs[name]
        if value is twin:
            continue
        if value.type != twin.type:
            return False
        if value.type in _SCALARS:
            if value.value != twin.value:
                return False
        elif value != twin:
            return False
    return True


class _Lag:
    """One item's entry in one index while writes to it are on their way."""

    __slots__ = ("pending", "seen")

    def __init__(self, seen: Entry) -> None:
        self.seen = seen
        self.pending: deque[tuple[float, Entry]] = deque()


class _Index:
    """The items of one table whose entry in one of its global secondary indexes is behind."""

    __slots__ = ("lags", "name", "table")

    def __init__(self, table: Any, name: str) -> None:
        self.table, self.name = table, name
        self.lags: dict[Key, _Lag] = {}


class _Watched:
    """An item a write names, and its entry in each of its table's global secondary indexes
    before the write."""

    __slots__ = ("before", "key", "table")

    def __init__(self, table: Any, key: Key, before: list[Entry]) -> None:
        self.table, self.key, self.before = table, key, before


class IndexLag:
    """The global secondary indexes of one server's tables, each behind its table by a delay
    drawn per write from ``delay`` (seconds, low and high). Every method is called under the
    server's lock."""

    def __init__(
        self,
        delay: tuple[float, float],
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.low, self.high = delay
        self._rng = rng or random.Random()
        self._clock = clock
        self._indexes: dict[tuple[int, str], _Index] = {}
        self._due: list[tuple[float, int, tuple[int, str], Key]] = []
        self._order = itertools.count()

    @property
    def on(self) -> bool:
        """Whether any write is delayed (a delay of 0: the indexes are as fresh as moto's)."""
        return self.high > 0

    def behind(self, table: str | None = None) -> int:
        """How many (item, index) entries are behind their table now (of the table of that
        name only, if given)."""
        return sum(
            len(index.lags)
            for index in self._indexes.values()
            if table is None or index.table.name == table
        )

    @contextlib.contextmanager
    def around(
        self,
        operation: str,
        request: dict[str, Any],
        named: Iterable[tuple[str, Any]],
        table_of: Callable[[str], Any],
    ) -> Iterator[None]:
        """Serve one request in the block: a Query or Scan of a global secondary index sees
        the index as it lags; a write's changes to index entries are scheduled after it (the
        items ``named``: (table name, key or item) of each item the request names)."""
        if not self.on:
            yield
            return
        self.catch_up()
        if operation in _INDEX_READS and request.get("IndexName"):
            with self._as_seen(request, table_of):
                yield
        elif operation in ITEM_WRITES:
            watched = self._watch(named, table_of)
            try:
                yield
            finally:
                self._schedule(watched)
        elif operation in _PARTIQL and not _partiql_reads_only(operation, request):
            with self._watch_all():
                yield
        else:
            yield
            if operation in _TABLE_CHANGES:
                self._forget_gone()

    def catch_up(self) -> None:
        """Let every index take the writes whose delay has passed."""
        now = self._clock()
        due = self._due
        while due and due[0][0] <= now:
            _, _, where, key = heapq.heappop(due)
            index = self._indexes.get(where)
            lag = index.lags.get(key) if index is not None else None
            if index is None or lag is None:
                continue
            while lag.pending and lag.pending[0][0] <= now:
                lag.seen = lag.pending.popleft()[1]
            if not lag.pending:
                del index.lags[key]
                if not index.lags:
                    del self._indexes[where]

    # -- reads -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _as_seen(self, request: dict[str, Any], table_of: Callable[[str], Any]) -> Iterator[None]:
        table = table_of(str(request.get("TableName", "")))
        index = self._indexes.get((id(table), str(request.get("IndexName"))))
        if table is None or index is None or index.table is not table:
            yield
            return
        swapped: list[tuple[Key, Any, bool]] = []
        try:
            for key, lag in index.lags.items():
                swapped.append(_swap(table, key, lag.seen))
            yield
        finally:
            for key, item, made in reversed(swapped):
                _swap(table, key, item, drop_partition=made)

    # -- writes ------------------------------------------------------------------------

    def _watch(
        self, named: Iterable[tuple[str, Any]], table_of: Callable[[str], Any]
    ) -> list[_Watched]:
        watched: dict[tuple[int, Key], _Watched] = {}
        for name, attributes in named:
            table = table_of(name)
            if table is None or not table.global_indexes:
                continue
            key = _key(table, attributes)
            if key is None or (id(table), key) in watched:
                continue
            item = _stored(table, key)
            before = [_entry(table, index, item) for index in table.global_indexes]
            watched[(id(table), key)] = _Watched(table, key, before)
        return list(watched.values())

    @contextlib.contextmanager
    def _watch_all(self) -> Iterator[None]:
        """A PartiQL write, whose items only moto's parser knows: every item of the tables
        with global secondary indexes, by identity (PartiQL's writes replace or remove items,
        never change one in place), then the entries of those replaced or removed."""
        before: dict[int, tuple[Any, dict[Key, Any]]] = {
            id(table): (table, _items(table)) for table in _tables() if table.global_indexes
        }
        try:
            yield
        finally:
            watched = []
            for table, old in before.values():
                new = _items(table)
                for key in old.keys() | new.keys():
                    if old.get(key) is not new.get(key):
                        item = old.get(key)
                        entries = [_entry(table, index, item) for index in table.global_indexes]
                        watched.append(_Watched(table, key, entries))
            self._schedule(watched)

    def _schedule(self, watched: list[_Watched]) -> None:
        now = self._clock()
        for one in watched:
            table, key = one.table, one.key
            item = _stored(table, key)
            for index, before in zip(table.global_indexes, one.before, strict=False):
                after = _entry(table, index, item)
                if _same(before, after):
                    continue  # no change to this index's entry: nothing written to it
                where = (id(table), index.name)
                lagging = self._indexes.get(where)
                if lagging is None or lagging.table is not table:
                    lagging = self._indexes[where] = _Index(table, index.name)
                lag = lagging.lags.get(key)
                if lag is None:
                    lag = lagging.lags[key] = _Lag(before)
                at = now + self._rng.uniform(self.low, self.high)
                if lag.pending:
                    at = max(at, lag.pending[-1][0])  # after the item's earlier writes
                lag.pending.append((at, after))
                heapq.heappush(self._due, (at, next(self._order), where, key))

    def _forget_gone(self) -> None:
        """Drop the lag of tables deleted and of indexes removed (or replaced)."""
        current = {id(table): table for table in _tables()}
        for where, index in list(self._indexes.items()):
            table = current.get(where[0])
            if table is not index.table or not any(
                gsi.name == index.name for gsi in table.global_indexes
            ):
                del self._indexes[where]


def _partiql_reads_only(operation: str, request: dict[str, Any]) -> bool:
    if operation == "ExecuteStatement":
        statements = [request.get("Statement")]
    else:
        field = "Statements" if operation == "BatchExecuteStatement" else "TransactStatements"
        statements = [s.get("Statement") for s in request.get(field) or [] if isinstance(s, dict)]
    return all(isinstance(s, str) and s.lstrip()[:6].upper() == "SELECT" for s in statements)


def _items(table: Any) -> dict[Key, Any]:
    if not table.range_key_attr:
        return {(hash_key, None): item for hash_key, item in table.items.items()}
    return {
        (hash_key, range_key): item
        for hash_key, partition in table.items.items()
        for range_key, item in partition.items()
    }


def _swap(
    table: Any, key: Key, item: Any, *, drop_partition: bool = False
) -> tuple[Key, Any, bool]:
    """Put ``item`` under ``key`` in ``table`` (None: remove it); return what was there, and
    whether a partition was made for it (to drop when that is put back). What goes into
    moto's dicts is keyed by the item's own key values, as moto keys them."""
    hash_key, range_key = key
    items = table.items
    if not table.range_key_attr:
        was = items.get(hash_key)
        if item is None:
            items.pop(hash_key, None)
        else:
            items[hash_key if was is not None else item.hash_key] = item
        return key, was, False
    partition = items.get(hash_key)
    made = partition is None
    if partition is None:
        if item is None:
            return key, None, False
        partition = items[item.hash_key] = {}
    was = partition.get(range_key)
    if item is None:
        partition.pop(range_key, None)
        if drop_partition and not partition:
            del items[hash_key]
    else:
        # A key already there stays as moto made it; only a new one is the item's own.
        partition[range_key if was is not None else item.range_key] = item
    return key, was, made
