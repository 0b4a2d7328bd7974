"""A data file's ledger put straight into the embedded server's moto table (a restart's load).

``import`` writes each entry through moto's request path: every item parsed from its typed
JSON, every condition checked, every transaction staged and rolled back on failure, every
stream record built. A restart loads a file that a save wrote (each line read already by
:func:`~sandbox_ledger.local.persist.read_data`) into a table this server has just created:
nothing there to check a condition against. :func:`load_entries` builds the very items the
import would store, with the DynamoDB adapter's own builders (an entry's head and parts, its
claim under its content digest and occurrence, a checkpoint's marker, the session's sequence
marks as the data file names them (their incarnations and numbers as the store held them
before the restart; from 0 in a new incarnation where it names none), the summary folded
from every entry), and puts them into
moto's table under the server's lock: no request, no condition, no stream record. A session
whose lines the data file's image holds (:mod:`sandbox_ledger.local.image`: what an earlier
load built from the same lines) is not built again: its items are taken from the image.
Either way moto's objects are made directly, checked once per load against what moto's own
constructors make.

It applies only where the import would store every line as it is: a table without ledger
retention (an entry past it would be skipped), every line an entry of its session that the
store accepts, no session of the file already in the table. Otherwise it returns None before
writing anything, and the caller imports the lines as before. Where moto's internals are
not the ones this module is written against (a warning says so), the same items are put
through requests (BatchWriteItem): slower, and each entry still under its writer's order id
and mark, which an import would not keep.
"""

from __future__ import annotations

import collections
import warnings
from typing import TYPE_CHECKING, Any

from sandbox_ledger import keys as k
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.local.image import Flat, Stored, fingerprint, lines_digest, no_collection

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox_ledger.dynamodb.adapter import SyncDynamoDBAdapter
    from sandbox_ledger.local.dynamodb import LocalDynamoDB
    from sandbox_ledger.local.image import Image
    from sandbox_ledger.local.persist import Runs
    from sandbox_ledger.sdk.attributes import Item
    from sandbox_ledger.sdk.steps import Op

__all__ = ["BulkLoadWarning", "load_entries", "session_items"]


class BulkLoadWarning(UserWarning):
    """The bulk load could not reach moto's table: the data file is imported instead."""


def session_items(
    session: tuple[str, str],
    lines: list[str],
    shard_count: int,
    runs: Runs | None = None,
    orders: list[str] | None = None,
) -> Stored | None:
    """Every item the import stores for ``session`` (its entry lines, in file order) into
    an empty table without retention, in low-level form, its marks as ``runs`` says (the
    session's sequence, from the data file: else from 0 in a new incarnation), its first
    entries' heads under the order ids ``orders`` names (the rest under new ones); None if a
    line is one the import would refuse or report (the import then says which)."""
    from sandbox_ledger.dynamodb import import_items
    from sandbox_ledger.models import LedgerEntry
    from sandbox_ledger.transfer import parse_line, plan_session

    try:
        k.check_session_key(*session)
        entries: list[tuple[int, LedgerEntry]] = []
        for number, line in enumerate(lines):
            entry = parse_line(line.encode("utf-8"))
            if not isinstance(entry, LedgerEntry) or (entry.name, entry.sandbox_id) != session:
                return None
            entries.append((number, import_items.checked(entry)))
        planned, _ = plan_session((), entries)
        items, last = import_items.session_items(
            [(entry, occurrence, digest) for _, entry, occurrence, digest in planned],
            shard_count,
            runs,
            orders,
        )
    except (ValueError, InvalidInputError):  # InvalidInputError is a ValueError too
        return None
    try:
        flats = [flat(item) for item in items]
        return Stored(_digest(lines, flats), last, flats)
    except (KeyError, ValueError):  # pragma: no cover - the builders' keys are strings
        return None


def flat(item: Item) -> Flat:
    """``item`` as an image keeps it: its partition and sort keys' strings, then each
    attribute's name, type and value in the item's order (a map's or list's value as
    low-level JSON)."""
    values: list[Any] = [item[k.PARTITION_KEY]["S"], item[k.SORT_KEY]["S"]]
    for name, value in item.items():
        [(kind, inner)] = value.items()
        values += (name, kind, inner)
    return tuple(values)


def unflat(values: Flat) -> Item:
    """The item of :func:`flat`'s ``values``."""
    return {values[i]: {values[i + 1]: values[i + 2]} for i in range(2, len(values), 3)}


def load_entries(
    server: LocalDynamoDB,
    ledger: SyncDynamoDBAdapter,
    sessions: list[tuple[tuple[str, str], list[str]]],
    progress: Callable[[int], None] | None = None,
    sequences: dict[tuple[str, str], Runs] | None = None,
    orders: dict[tuple[str, str], list[str]] | None = None,
    image: Image | None = None,
) -> int | None:
    """Put ``sessions`` (each one's entry lines) into ``ledger``'s table on ``server`` (see
    the module), each with its marks as ``sequences`` says and its entries' order ids as
    ``orders`` does (where they name the session; a session they do not name is added to
    them with the marks and order ids it was stored with, for the file to name them from
    then on),
    :data:`CHUNK` sessions at a time, each chunk built (or taken from ``image``, read
    already, for a session whose lines and sequence it holds) and then put in under the
    server's lock (``progress`` is called with its number of entries: it may raise to stop
    the load, the table then partly loaded). Each session's items are kept in
    ``image.kept``, for the image to be written. Returns the number of entries stored, or
    None: the caller imports every session (the import finds those put in already present,
    as it finds any stored session)."""
    if ledger.retention is not None:
        return None
    shard_count = ledger.run(ledger._resolve_shards())
    table = _moto_table(server, ledger)
    if table is None:
        return _by_requests(ledger, sessions, shard_count, progress, sequences, orders)
    known: dict[tuple[str, str], Stored] = {}
    if image is not None:
        image.fingerprint, image.shard_count = fingerprint(shard_count), shard_count
        image.kept, image.used = {}, 0
        found = image.found
        if found.ignored is None and found.sessions:
            if found.fingerprint == image.fingerprint:
                known = found.sessions
            else:
                found.ignored = "written by another version (sandbox-ledger, Python, pydantic)"
    try:
        from moto.dynamodb.models.dynamo_type import DynamoType

        with server.exclusive():
            if table.hash_key_attr != k.PARTITION_KEY or table.range_key_attr != k.SORT_KEY:
                raise AttributeError("the table's keys")
            held = any(DynamoType({"S": k.session_pk(*key)}) in table.items for key, _ in sessions)
        if held:
            return None  # not an empty table: the import reconciles
        put = _putter(server)
        done = 0
        last_order = ""
        with no_collection():  # the caller may keep it off (and freeze what is made)
            for start in range(0, len(sessions), CHUNK):
                chunk = sessions[start : start + CHUNK]
                built: list[Stored] = []
                for key, lines in chunk:
                    runs = None if sequences is None else sequences.get(key)
                    ids = None if orders is None else orders.get(key)
                    stored = known.get(key)
                    if stored is None or not _holds(stored, key, lines, runs, ids):
                        stored = session_items(key, lines, shard_count, runs, ids)
                        if stored is None:
                            return None
                    elif image is not None:
                        image.used += 1
                    _name(key, lines, stored, sequences, orders)
                    built.append(stored)
                    last_order = max(last_order, stored.last_order)
                with server.exclusive():
                    for stored in built:
                        put(table.items, stored.items)
                if image is not None:
                    image.kept.update(zip((key for key, _ in chunk), built, strict=True))
                count = sum(len(lines) for _, lines in chunk)
                done += count
                if progress is not None:
                    progress(count)
    except (ImportError, AttributeError, TypeError) as exc:  # moto's internals moved
        warnings.warn(
            f"local: moto's table cannot be loaded directly ({exc!r}); loading through "
            "requests instead",
            BulkLoadWarning,
            stacklevel=2,
        )
        if done:  # the sessions put in already are not put again
            return None
        return _by_requests(ledger, sessions, shard_count, progress, sequences, orders)
    _order_after(last_order)
    return done


def _name(
    key: tuple[str, str],
    lines: list[str],
    stored: Stored,
    sequences: dict[tuple[str, str], Runs] | None,
    orders: dict[tuple[str, str], list[str]] | None,
) -> None:
    """Name the session's marks and order ids where FILE did not (or named other ids)."""
    if sequences is not None and sequences.get(key) is None:
        drawn = _runs_of(stored.items)
        if drawn is not None:  # kept under the lines and marks from now on
            sequences[key] = drawn
    if orders is not None and len(orders.get(key) or ()) != len(lines):
        # and its order ids: FILE named fewer (new ones for the rest) or more (a hand edit:
        # the ids of no entry left out)
        orders[key] = _orders_of(stored.items)


def _by_requests(
    ledger: SyncDynamoDBAdapter,
    sessions: list[tuple[tuple[str, str], list[str]]],
    shard_count: int,
    progress: Callable[[int], None] | None,
    sequences: dict[tuple[str, str], Runs] | None,
    orders: dict[tuple[str, str], list[str]] | None,
) -> int | None:
    """The same items put through requests (BatchWriteItem), where moto's table cannot be
    reached (its internals moved, or a ledger over HTTP): each entry keeps its writer's
    order id and its mark, as the direct load keeps them (an import would give new ones, and
    an append resent across the restart would be stored twice). None, having written
    nothing, where a session of the file is in the table already or a line is refused (the
    caller imports); a session put in before a line of a later one is refused is found
    there by that import, as any stored session is."""
    from sandbox_ledger.sdk.batching import batch_write

    if any(ledger.run(_holds_items(ledger.table_name, key)) for key, _ in sessions):
        return None
    done, last_order = 0, ""
    for key, lines in sessions:
        runs = None if sequences is None else sequences.get(key)
        ids = None if orders is None else orders.get(key)
        stored = session_items(key, lines, shard_count, runs, ids)
        if stored is None:
            return None
        _name(key, lines, stored, sequences, orders)
        puts = [{"PutRequest": {"Item": unflat(values)}} for values in stored.items]
        ledger.run(batch_write(ledger.table_name, puts))
        last_order = max(last_order, stored.last_order)
        done += len(lines)
        if progress is not None:
            progress(len(lines))
    _order_after(last_order)
    return done


def _holds_items(table: str, key: tuple[str, str]) -> Op[bool]:
    """Whether the session's partition holds an item (one Query of one key)."""
    from sandbox_ledger.sdk.steps import Call

    page = yield Call(
        "query",
        {
            "TableName": table,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY},
            "ExpressionAttributeValues": {":pk": {"S": k.session_pk(*key)}},
            "ConsistentRead": True,
            "Limit": 1,
        },
    )
    return bool(page.get("Items"))


CHUNK = 256
"""Sessions built and put in at once (the server's lock is held for one chunk's items)."""


def _digest(lines: list[str], items: list[Flat]) -> bytes:
    """What :attr:`Stored.digest` holds for ``items`` built from ``lines``: the digest of the
    lines, the sequence the items' marks make and their entries' order ids."""
    return lines_digest(lines, _runs_of(items), _orders_of(items))


def _runs_of(items: list[Flat]) -> Runs | None:
    """The sequence ``items``' marks make (see :func:`import_items.mark_runs`)."""
    from sandbox_ledger.dynamodb import import_items
    from sandbox_ledger.keys import LedgerAttr as A

    marks: list[tuple[int, str]] = []
    for values in items:
        number = k.sequence_number(values[1])
        if number is not None:
            item = unflat(values)
            if A.REF in item and A.INCARNATION in item:
                marks.append((number, item[A.INCARNATION]["S"]))
    runs = import_items.mark_runs([mark for mark in sorted(marks)])
    return None if not runs else tuple(runs)


def _orders_of(items: list[Flat]) -> list[str]:
    """The order ids of ``items``' entries (their heads' keys), in the session's order."""
    return [
        k.event_order(values[1])
        for values in items
        if values[1].startswith(k.EVENT_PREFIX) and k.part_head(values[1]) is None
    ]


def _holds(
    stored: Stored,
    session: tuple[str, str],
    lines: list[str],
    runs: Runs | None,
    orders: list[str] | None = None,
) -> bool:
    """Whether ``stored`` is the items of ``session`` built from ``lines``, ``runs`` and
    ``orders``: the digest of the lines with the items' own sequence and order ids, that
    sequence ``runs`` (any, without it: a file that names no sequence for the session),
    the order ids beginning with ``orders``, and every item in the session's partition."""
    held_runs, held_orders = _runs_of(stored.items), _orders_of(stored.items)
    if runs is not None and held_runs != runs:
        return False
    if held_orders[: len(orders or ())] != (orders or []):
        return False
    if stored.digest != lines_digest(lines, held_runs, held_orders):
        return False
    pk = k.session_pk(*session)
    return all(values[0] == pk for values in stored.items)


def _order_after(last_order: str) -> None:
    """This process's order ids go on after ``last_order`` (as they would after an import
    in this process, whatever the clock says)."""
    from sandbox_ledger.dynamodb import import_items

    import_items.order_ids_after(last_order)


def _putter(server: LocalDynamoDB) -> Callable[[Any, list[Flat]], None]:
    """How a session's items (:func:`flat`) are put into moto's table: each made as moto's
    ``Item(hash, range, attrs)`` makes it, without its per-value dispatch and per-attribute
    size check (the adapter's builders checked each item's size: an item DynamoDB cannot
    hold is the line's error in ``new_unit``), if the shortcut makes what moto's
    constructors make (checked on a sample of every kind of value: else moto's
    constructors). Run under the server's lock."""
    from moto.dynamodb.models.dynamo_type import DynamoType, LimitedSizeDict
    from moto.dynamodb.models.dynamo_type import Item as MotoItem

    from sandbox_ledger.local.adjustments import active

    new = object.__new__
    new_dict = dict.__new__
    fill = dict.update
    with server.exclusive():  # moto's model objects as a request makes them
        plain = active("instances") is not None
    make_item: Callable[[], Any] = (
        (lambda: new(MotoItem)) if plain else (lambda: MotoItem.__new__(MotoItem))
    )

    def typed(kind: str, inner: Any) -> Any:
        made = new(DynamoType)
        made.type = kind
        if kind == "L":
            made.value = [typed(*_only(value)) for value in inner]
        elif kind == "M":
            made.value = {name: typed(*_only(value)) for name, value in inner.items()}
        else:
            made.value = inner
        return made

    def fast(table_items: Any, items: list[Flat]) -> None:
        last_pk = None
        hash_value: Any = None
        partition: Any = None
        for values in items:
            pk = values[0]
            if pk != last_pk:
                hash_value = new(DynamoType)
                hash_value.type, hash_value.value = "S", pk
                partition = table_items[hash_value]
                last_pk = pk
            range_value = new(DynamoType)
            range_value.type, range_value.value = "S", values[1]
            attrs = {}
            for i in range(2, len(values), 3):
                kind = values[i + 1]
                if kind == "M" or kind == "L":
                    attrs[values[i]] = typed(kind, values[i + 2])
                else:
                    value = new(DynamoType)
                    value.type, value.value = kind, values[i + 2]
                    attrs[values[i]] = value
            made = make_item()
            made.hash_key, made.range_key = hash_value, range_value
            made.attrs = new_dict(LimitedSizeDict)
            fill(made.attrs, attrs)
            partition[range_value] = made

    def stock(table_items: Any, items: list[Flat]) -> None:  # pragma: no cover - other moto
        for values in items:
            item = unflat(values)
            hash_value = DynamoType(item[k.PARTITION_KEY])
            range_value = DynamoType(item[k.SORT_KEY])
            table_items[hash_value][range_value] = MotoItem(hash_value, range_value, item)

    sample: Item = {k.PARTITION_KEY: {"S": "p"}, k.SORT_KEY: {"S": "s"}, "n": {"N": "1"}}
    sample["b"], sample["m"] = {"B": b"\x00"}, {"M": {"l": {"L": [{"S": "x"}, {"N": "2"}]}}}
    sample["ss"], sample["ns"], sample["bs"] = {"SS": ["a"]}, {"NS": ["1"]}, {"BS": [b"\x01"]}
    sample["t"], sample["z"] = {"BOOL": True}, {"NULL": True}
    shortcut: dict[Any, Any] = collections.defaultdict(dict)
    stocked: dict[Any, Any] = collections.defaultdict(dict)
    fast(shortcut, [flat(sample)])
    stock(stocked, [flat(sample)])
    if _same(shortcut, stocked):
        return fast
    return stock  # pragma: no cover - another moto's classes


def _only(value: dict[str, Any]) -> tuple[str, Any]:
    """The type and value of a low-level attribute value."""
    [(kind, inner)] = value.items()
    return kind, inner


def _same(made: Any, stock: Any) -> bool:
    """The same object graph: classes, attribute names and values, at every level."""
    if type(made) is not type(stock):
        return False
    if isinstance(stock, dict):
        return made.keys() == stock.keys() and all(_same(made[n], stock[n]) for n in stock)
    if isinstance(stock, list):
        return len(made) == len(stock) and all(map(_same, made, stock))
    if hasattr(stock, "__dict__"):
        return _same(vars(made), vars(stock))
    return bool(made == stock)


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
