"""A data file's ledger put straight into the embedded server's moto table (a restart's load).

``import`` writes each entry through moto's request path: every item parsed from its typed
JSON, every condition checked, every transaction staged and rolled back on failure, every
stream record built. A restart loads a file that a save wrote (each line read already by
:func:`~sandbox_ledger.local.persist.read_data`) into a table this server has just created:
nothing there to check a condition against. :func:`load_entries` builds the very items the
import would store, with the DynamoDB adapter's own builders (an entry's head and parts, its
claim under its content digest and occurrence, a checkpoint's marker, the session's sequence
marks from 0 in a new incarnation, the summary folded from every entry), and puts them into
moto's table under the server's lock: no request, no condition, no stream record.

It applies only where the import would store every line as it is: a table without ledger
retention (an entry past it would be skipped), every line an entry of its session that the
store accepts, no session of the file already in the table. Otherwise (or when moto's
internals are not the ones this module is written against: a warning says so) it returns
None before writing anything, and the caller imports the lines as before.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from sandbox_ledger import keys as k
from sandbox_ledger.errors import InvalidInputError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sandbox_ledger.dynamodb.adapter import SyncDynamoDBAdapter
    from sandbox_ledger.local.dynamodb import LocalDynamoDB
    from sandbox_ledger.sdk.attributes import Item

__all__ = ["BulkLoadWarning", "build_items", "load_entries"]


class BulkLoadWarning(UserWarning):
    """The bulk load could not reach moto's table: the data file is imported instead."""


def build_items(
    sessions: Iterable[tuple[tuple[str, str], list[str]]], shard_count: int
) -> list[Item] | None:
    """Every item the import stores for ``sessions`` (each session's entry lines, in file
    order) into an empty table without retention, in low-level form; None if a line is one
    the import would refuse or report (the import then says which)."""
    from sandbox_ledger.dynamodb import _items as it
    from sandbox_ledger.dynamodb import _sequence as seq
    from sandbox_ledger.dynamodb._packing import new_unit
    from sandbox_ledger.dynamodb.adapter import _entry
    from sandbox_ledger.models import LedgerEntry
    from sandbox_ledger.transfer import parse_line, plan_session

    items: list[Item] = []
    index = 0
    for session, lines in sessions:
        try:
            k.check_session_key(*session)
            entries: list[tuple[int, LedgerEntry]] = []
            for number, line in enumerate(lines):
                entry = parse_line(line.encode("utf-8"))
                if not isinstance(entry, LedgerEntry) or (entry.name, entry.sandbox_id) != session:
                    return None
                entries.append((number, _entry(entry)))
            planned, _ = plan_session((), entries)
            units = []
            for _, entry, occurrence, digest in planned:
                claim = k.claim_sk(digest, k.check_occurrence(occurrence))
                units.append(new_unit(index, entry, claim, None))
                index += 1
        except (ValueError, InvalidInputError):  # InvalidInputError is a ValueError too
            return None
        if not units:
            continue
        pk = units[0].head[k.PARTITION_KEY]["S"]
        incarnation = seq.new_incarnation()
        for number, unit in enumerate(units):
            items.extend(unit.parts)
            items.append(unit.head)
            items.append(unit.claim)
            if unit.marker is not None:
                items.append(unit.marker)
            items.append(seq.mark_item(pk, seq.Mark(incarnation, number), unit.head))
        update = it.summary_fold([u.entry for u in units], shard_count, None)
        if update is not None:
            items.append(it.summary_item(update))
    return items


def load_entries(
    server: LocalDynamoDB,
    ledger: SyncDynamoDBAdapter,
    sessions: list[tuple[tuple[str, str], list[str]]],
    progress: Callable[[int], None] | None = None,
) -> int | None:
    """Put ``sessions`` (each one's entry lines) into ``ledger``'s table on ``server`` (see
    the module), :data:`CHUNK` sessions at a time, each chunk built and then put in under
    the server's lock (``progress`` is called with its number of entries: it may raise to
    stop the load, the table then partly loaded). Returns the number of entries stored, or
    None: the caller imports every session (the import finds those put in already present,
    as it finds any stored session)."""
    if ledger.retention is not None:
        return None
    shard_count = ledger.run(ledger._resolve_shards())
    table = _moto_table(server, ledger)
    if table is None:
        return None
    try:
        from moto.dynamodb.models.dynamo_type import DynamoType

        with server.exclusive():
            if table.hash_key_attr != k.PARTITION_KEY or table.range_key_attr != k.SORT_KEY:
                raise AttributeError("the table's keys")
            held = any(DynamoType({"S": k.session_pk(*key)}) in table.items for key, _ in sessions)
        if held:
            return None  # not an empty table: the import reconciles
        make = _item_maker()
        done = 0
        for start in range(0, len(sessions), CHUNK):
            chunk = sessions[start : start + CHUNK]
            items = build_items(chunk, shard_count)
            if items is None:
                return None
            with server.exclusive():
                stored = table.items
                hash_value = DynamoType({"S": ""})
                for item in items:  # as the in-process client hands a request's items
                    if item[k.PARTITION_KEY] != hash_value.to_json():
                        hash_value = DynamoType(item[k.PARTITION_KEY])
                    range_value = DynamoType(item[k.SORT_KEY])
                    stored[hash_value][range_value] = make(hash_value, range_value, item)
            count = sum(len(lines) for _, lines in chunk)
            done += count
            if progress is not None:
                progress(count)
    except (ImportError, AttributeError, TypeError) as exc:  # moto's internals moved
        warnings.warn(
            f"local: moto's table cannot be loaded directly ({exc!r}); importing instead",
            BulkLoadWarning,
            stacklevel=2,
        )
        return None
    return done


CHUNK = 256
"""Sessions built and put in at once (the server's lock is held for one chunk's items)."""


def _item_maker() -> Callable[[Any, Any, Item], Any]:
    """How an item is made: moto's ``Item(hash, range, attrs)`` without its size check per
    attribute (the adapter's builders checked each item's size: an item DynamoDB cannot hold
    is the line's error in ``new_unit``), if the shortcut makes what moto's constructor
    makes (checked on a sample: else moto's constructor)."""
    from moto.dynamodb.models.dynamo_type import DynamoType, LimitedSizeDict
    from moto.dynamodb.models.dynamo_type import Item as MotoItem

    def fast(hash_value: Any, range_value: Any, item: Item) -> Any:
        made: Any = MotoItem.__new__(MotoItem)
        made.hash_key, made.range_key = hash_value, range_value
        attrs = LimitedSizeDict()
        dict.update(attrs, {name: DynamoType(value) for name, value in item.items()})
        made.attrs = attrs
        return made

    sample: Item = {k.PARTITION_KEY: {"S": "p"}, k.SORT_KEY: {"S": "s"}, "n": {"N": "1"}}
    sample["b"], sample["m"] = {"B": b"\x00"}, {"M": {"l": {"L": [{"S": "x"}]}}}
    keys = DynamoType(sample[k.PARTITION_KEY]), DynamoType(sample[k.SORT_KEY])
    shortcut, stock = fast(*keys, sample), MotoItem(*keys, sample)
    if vars(shortcut).keys() == vars(stock).keys() and shortcut == stock:
        return fast
    return MotoItem  # pragma: no cover - another moto's Item


def _moto_table(server: LocalDynamoDB, ledger: SyncDynamoDBAdapter) -> Any:
    """moto's table object of ``ledger``'s table, None (with a warning) if not reachable."""
    from sandbox_ledger.local import inprocess

    try:
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        client = getattr(ledger, "_in_process", None)
        if not isinstance(client, inprocess.InProcessClient):
            return None  # a ledger over HTTP: the import's path
        backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][client.meta.region_name]
        with server.exclusive():
            table = backend.tables[ledger.table_name]
        table.items  # noqa: B018 - fails here, not half way, if moto moved it
        return table
    except (ImportError, AttributeError, KeyError, RuntimeError) as exc:
        warnings.warn(
            f"local: moto's table cannot be reached ({exc!r}); importing instead",
            BulkLoadWarning,
            stacklevel=3,
        )
        return None
