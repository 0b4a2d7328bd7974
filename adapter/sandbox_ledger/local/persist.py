"""A local server's data in one file, across restarts (``sandbox-ledger local --data FILE``).

The file is JSON lines: the ledger exactly as ``sandbox-ledger export`` writes it (entries,
then environment records), then one line per resource record,
``{"kind": "resourceRecord", "record": {...}}`` with the record in its file shape; a record
this version cannot read (a newer writer's field, another phase) is kept as stored:
``{"kind": "resourceRecord", "unreadable": "why", "item": {...}}``, its whole item in
DynamoDB's JSON (binary values in base64), which a load writes back as it is; then, last,
one line naming each session's sequence (its marks' incarnations and numbering), which a
load stores the session's entries in (see :data:`SEQUENCES_KIND`). The
caller writes the lines atomically (a temporary file renamed over the last one), so a crash
loses at most what changed since the last save and never the file.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from sandbox_ledger._json import DuplicateKeyError, loads_unique
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.transfer import ENVIRONMENT_KIND, LOCAL_ITEMS_KIND, LOCAL_SEQUENCES_KIND

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from pathlib import Path

    from sandbox_ledger.models import LedgerEntry
    from sandbox_ledger.protocol import SyncTransferAdapter
    from sandbox_ledger.resources import (
        ResourceActivityRecord,
        SyncResourceRecordStore,
        Unreadable,
        VersionedRecord,
    )
    from sandbox_ledger.sdk.attributes import Item

    Runs = tuple[tuple[str, int, int], ...]
    """A session's sequence (see ``SEQUENCES_KIND``)."""
    Bulk = Callable[
        [
            list[tuple[tuple[str, str], list[str]]],
            Callable[[int], None] | None,
            dict[tuple[str, str], Runs],
            dict[tuple[str, str], list[str]],
        ],
        int | None,
    ]
    """Puts each session's entry lines into the table (see ``load_state``)."""

__all__ = [
    "ENVIRONMENTS_KIND",
    "RESOURCE_KIND",
    "SEQUENCES_KIND",
    "SESSION_KIND",
    "DataState",
    "Loaded",
    "Snapshot",
    "load",
    "load_state",
    "read_data",
    "read_lines",
    "record_line",
    "sequences_line",
    "snapshot",
]

RESOURCE_KIND = "resourceRecord"


@dataclass(frozen=True)
class Snapshot:
    """What a save writes: the lines, their digest (unchanged data: no write) and counts."""

    lines: tuple[str, ...]
    digest: str
    entries: int
    environments: int
    records: int


@dataclass(frozen=True)
class Loaded:
    """What a load restored."""

    entries: int
    environments: int
    records: int


def snapshot(ledger: SyncTransferAdapter, store: SyncResourceRecordStore) -> Snapshot:
    """Every ledger entry, environment record and resource record, as the file's lines; a
    session a running delete holds as it stands (an export leaves it out: the table holds
    it until the delete ends, and a restart must not end the delete without its stream
    records)."""
    from sandbox_ledger.transfer import export_lines

    environments = ledger.list_environments()
    ledger_lines = list(export_lines(_AsItStands(ledger), ledger.scan_sessions(None), environments))
    # As stored: a record past its TTL is in the table until TTL deletes it (its removal, in
    # the stream, is what the TTL reporter reports); a restart must not drop it in silence.
    records = [record_line(found) for page in store.scan(as_stored=True) for found in page]
    lines = (*ledger_lines, *records)
    digest = hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()
    return Snapshot(
        lines, digest, len(ledger_lines) - len(environments), len(environments), len(records)
    )


class _AsItStands:
    """A ledger whose reads in append order read sessions a delete holds as they stand
    (``read_sessions_marked``, when the ledger has it: DynamoDB's)."""

    def __init__(self, ledger: SyncTransferAdapter) -> None:
        self._ledger = ledger

    def read_sessions_in_append_order(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]:
        marked = getattr(self._ledger, "read_sessions_marked", None)
        if marked is None:
            return self._ledger.read_sessions_in_append_order(sessions)
        return [[entry for entry, _, _ in one] for one in marked(sessions)]


def record_line(found: VersionedRecord | Unreadable) -> str:
    """A resource record's line (with its newline): its file shape and its whole stored item
    (its revision, incarnation, TTL, a sweeper's claim and observation: loaded back as they
    were, so its owner's and a sweeper's next conditional writes find what they wrote), or,
    for one this version cannot read, its whole stored item only."""
    from sandbox_ledger.resources import Unreadable

    value: dict[str, Any] = (
        {"kind": RESOURCE_KIND, "unreadable": found.reason, "item": _json_item(found.item)}
        if isinstance(found, Unreadable)
        else {"kind": RESOURCE_KIND, "record": found.record.wire()}
    )
    if not isinstance(found, Unreadable) and found.item is not None:
        value["item"] = _json_item(found.item)
    return json.dumps(value, ensure_ascii=False) + "\n"


def deleted_record_line(record_id: str) -> str:
    """The line that says a saved resource record is gone."""
    return json.dumps({"kind": RESOURCE_KIND, "deleted": record_id}) + "\n"


def load(path: Path, ledger: SyncTransferAdapter, store: SyncResourceRecordStore) -> Loaded:
    """Restore a file a save wrote (:func:`snapshot`'s lines, and what saves appended to them
    since: see :func:`read_data`) into an empty table.

    Raises:
        InvalidInputError: a line that is neither (field: the file and line number); nothing
            of a bad file is loaded.
    """
    return load_state(read_data(path), ledger, store)


@dataclass
class DataState:
    """What a data file holds once every save's lines are applied: each session's entry
    lines (with their newlines) and line numbers, the environment lines by name, the resource
    record lines by id. The local server keeps it as its mirror of the tables."""

    path: str = ""
    sessions: dict[tuple[str, str], list[tuple[int, str]]] = field(default_factory=dict)
    environments: dict[str, tuple[int, str]] = field(default_factory=dict)
    records: dict[str, tuple[int, str]] = field(default_factory=dict)
    sequences: dict[tuple[str, str], Runs] = field(default_factory=dict)
    """Each session's sequence, where the file names it (see :data:`SEQUENCES_KIND`)."""
    orders: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """The order ids of each session's first entries, where the file names them (see
    :data:`SEQUENCES_KIND`)."""
    store_id: str | None = None
    """The identity of the store the file holds, where it names one (see
    :data:`SEQUENCES_KIND`)."""
    loose: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    """Each session's ``localItems`` line, where it has loose items (see
    :mod:`sandbox_ledger.local.loose`)."""
    appended: bool = False
    """The file holds more than one save's lines (a journal to fold), or a torn last line."""

    @property
    def entries(self) -> int:
        return sum(map(len, self.sessions.values()))

    def lines(self) -> Iterator[str]:
        """The file a save writes whole: the sessions' loose items, then the entries of each
        session in (name, sandboxId) order, as ``export`` writes them, then the environment
        lines, then the records, then the lines naming the sessions' sequences and their
        entries' order ids."""
        # The loose items first: an import of FILE leaves out the entries of a session whose
        # summary a delete's lease holds (as an export does), told by its line before them.
        for key in sorted(self.loose):
            yield self.loose[key][1]
        for key in sorted(self.sessions):
            for _, line in self.sessions[key]:
                yield line
        for _, line in self.environments.values():
            yield line
        for record_id in sorted(self.records):
            yield self.records[record_id][1]
        named: dict[tuple[str, str], Runs] = {}
        ordered: dict[tuple[str, str], tuple[int, Sequence[str]]] = {}
        size = 0
        store = self.store_id  # named by the first line
        for key in sorted(self.sessions):
            if key in self.sequences:
                named[key] = self.sequences[key]
            orders, start = self.orders.get(key, []), 0
            while True:
                ids = orders[start : start + _ORDERS_PER_LINE - size]
                if ids:
                    ordered[key] = (start, ids)
                size, start = size + len(ids), start + len(ids)
                if size < _ORDERS_PER_LINE and len(named) < _SEQUENCES_PER_LINE:
                    break
                yield sequences_line(named, ordered, store)  # further ids on the next
                named, ordered, size, store = {}, {}, 0, None
                if start >= len(orders):
                    break
        if named or ordered or store is not None:
            yield sequences_line(named, ordered, store)


SESSION_KIND = "localSession"
"""A saved session's entries replaced: ``{"kind": "localSession", "name": ..., "sandboxId":
..., "entries": N}``, then its N entry lines (0: the session is gone)."""
SEQUENCES_KIND = LOCAL_SEQUENCES_KIND
"""Sessions' sequences: ``{"kind": "localSequences", "sessions": [[name, sandboxId, [[
incarnation, number, index], ...]], ...]}``, each run of a session's marks: the ``index``-th
entry (of the session's entries in order) has mark ``number`` in ``incarnation``, and each
entry after it the next number, up to the next run's. A load stores each session's entries
with these marks, so that a follower's position and a writer's guess of the next mark from
before a restart hold after it; a session that no line names gets a new incarnation, its
marks numbered from 0. A later line replaces what an earlier one said of a session.

The line may also name entries' order ids, ``"orders": [[name, sandboxId, start, [id,
...]], ...]``: the ids of the session's entries from the ``start``-th on (replacing what an
earlier line named from there), each the one its writer chose, which its head's key holds. A
load stores each entry under its id (new ids for the entries after the last one named), so
that an append whose answer a restart cut, sent again, finds its entry and is not stored
twice. A line may also name the store, ``"store": id``: the identity of the table that the
file holds (:attr:`~sandbox_ledger.deployment.TableDescriptor.store_id`, which paging cursors
and change positions are bound to), kept in the file so that it moves with the data and other
data put in its place is another store. ``import`` skips these lines (as blank ones): FILE
stays an export of the ledger."""
MAX_STORE_ID_CHARS = 64
"""The longest store identity a data file may name (the library's are 32 characters)."""
_SEQUENCES_PER_LINE = 1_000
"""Sessions a :data:`SEQUENCES_KIND` line of a file written whole names at most."""
_ORDERS_PER_LINE = 10_000
"""Order ids a :data:`SEQUENCES_KIND` line of a file written whole names at most."""
ENVIRONMENTS_KIND = "localEnvironments"
"""Every environment record replaced: ``{"kind": "localEnvironments", "records": N}``, then N
environment lines."""


def read_data(path: Path) -> DataState:
    """The content of a data file: its lines in order, each save's later lines replacing what
    they name (see the module). A last line without its newline (a save cut short by ``kill
    -9``) and a replacement block cut short are left out: that save is lost, not the file.

    Raises:
        InvalidInputError: a line that is not one of the file's (field: the file and line).
    """
    with path.open("rb") as source:
        return _read(DataState(str(path)), enumerate(source, start=1))


def read_lines(lines: Iterable[str], path: str = "") -> DataState:
    """:func:`read_data` of lines (with their newlines) instead of a file's."""
    return _read(DataState(path), enumerate((line.encode("utf-8") for line in lines), start=1))


def _read(state: DataState, lines: Iterator[tuple[int, bytes]]) -> DataState:
    path = state.path
    for number, raw in lines:
        where = f"{path}:{number}"
        if not raw.endswith(b"\n"):
            state.appended = True  # torn: the save that wrote it never finished
            break
        if number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        value = _line_value(raw, where)
        if value is None:
            continue
        if "event" in value:
            state.sessions.setdefault(_session_of(value, raw, where), []).append(
                (number, raw.decode("utf-8"))
            )
            continue
        kind = value.get("kind")
        if kind == ENVIRONMENT_KIND:
            state.environments[_environment_name(value, raw, where)] = (
                number,
                raw.decode("utf-8"),
            )
        elif kind == RESOURCE_KIND:
            _apply_record(state, value, number, raw, where)
        elif kind == SEQUENCES_KIND:
            _apply_sequences(state, value, where)
        elif kind == LOCAL_ITEMS_KIND:
            _apply_loose(state, value, number, raw, where)
        elif kind in (SESSION_KIND, ENVIRONMENTS_KIND):
            state.appended = True
            if not _apply_block(state, value, lines, where):
                break
        else:
            _refuse(raw, where)
    return state


def load_state(
    state: DataState,
    ledger: SyncTransferAdapter,
    store: SyncResourceRecordStore,
    *,
    progress: Callable[[int], None] | None = None,
    bulk: Bulk | None = None,
) -> Loaded:
    """Write ``state`` into an empty table: the ledger as ``import`` writes it (every derived
    item built by the store), then the resource records. ``progress`` is called with the
    number of entries and records done. ``bulk``, if given, is tried first for the entries
    (:func:`sandbox_ledger.local.bulk.load_entries`: the items the import would store, put in
    directly); where it returns None, the entries are imported.

    Raises:
        InvalidInputError: a line the store refuses (field: the file and line number).
    """
    from sandbox_ledger.errors import StorageError
    from sandbox_ledger.resources import ResourceActivityRecord
    from sandbox_ledger.transfer import import_lines

    numbers: list[int] = []
    bulk_done = None
    if bulk is not None and state.sessions:
        sessions = [
            (key, [line for _, line in state.sessions[key]]) for key in sorted(state.sessions)
        ]
        bulk_done = bulk(sessions, progress, state.sequences, state.orders)

    def ordered() -> Iterator[bytes]:
        for key in sorted(state.sessions) if bulk_done is None else ():
            for number, line in state.sessions[key]:
                numbers.append(number)
                yield line.encode("utf-8")
        for number, line in state.environments.values():
            numbers.append(number)
            yield line.encode("utf-8")

    report = import_lines(ledger, ordered(), progress=progress)
    if report.failed:
        first = report.failed[0]
        raise InvalidInputError(f"{state.path}:{numbers[first.number - 1]}", first.reason)
    for number, line in state.records.values():
        where = f"{state.path}:{number}"
        record = _resource_line(line.encode("utf-8"), where)
        try:
            if isinstance(record, ResourceActivityRecord):
                store.put(record)
            elif record is not None:
                store.put_stored(record)
        except StorageError as exc:  # an item the table will not take: the line's error
            raise InvalidInputError(
                where, f"the table refuses this resource record ({exc})"
            ) from exc
        if progress is not None:
            progress(1)
    if state.loose:  # after the entries: over the summaries their load rebuilt
        from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
        from sandbox_ledger.local.loose import read_loose_line, restore

        assert isinstance(ledger, SyncDynamoDBAdapter)  # a local server's table

        lines = {
            f"{state.path}:{number}": read_loose_line(loads_unique(line), f"{state.path}:{number}")
            for number, line in state.loose.values()
        }
        # The import (no bulk load) numbers each session's marks anew, from 0.
        renumbered = bulk_done is None
        try:
            restore(
                ledger, dict(lines.values()), loaded=state.sessions.keys(), renumbered=renumbered
            )
        except StorageError as exc:  # an item the table will not take: name its line
            for where, (key, items) in sorted(lines.items(), key=lambda pair: _line_no(pair[0])):
                try:
                    restore(
                        ledger, {key: items}, loaded=state.sessions.keys(), renumbered=renumbered
                    )
                except StorageError as one:
                    raise InvalidInputError(
                        where, f"the table refuses these loose items ({one})"
                    ) from one
            raise InvalidInputError(state.path, f"the table refuses loose items ({exc})") from exc
    entries = report.new + report.present + (bulk_done or 0)
    return Loaded(entries, len(state.environments), len(state.records))


def _line_no(where: str) -> int:
    """The line number ``where`` (``path:number``) names."""
    return int(where.rsplit(":", 1)[1])


_BOM = b"\xef\xbb\xbf"


def _line_value(raw: bytes, where: str) -> dict[str, Any] | None:
    """A line's JSON object, None for a blank line; InvalidInputError for anything else."""
    if not raw.strip():
        return None
    try:
        value = loads_unique(raw)  # a key named twice is that line's error (issue 41, item 8)
    except (ValueError, RecursionError):
        _refuse(raw, where)
    if not isinstance(value, dict):
        _refuse(raw, where)
    return value


def _refuse(raw: bytes, where: str) -> NoReturn:
    """InvalidInputError naming ``where``, with the reason ``import`` gives for the line."""
    from sandbox_ledger.transfer import parse_line

    try:
        parse_line(raw)
    except ValueError as exc:
        raise InvalidInputError(where, str(exc)) from exc
    raise InvalidInputError(where, "not a line of a data file")


def _session_of(value: dict[str, Any], raw: bytes, where: str) -> tuple[str, str]:
    name, sandbox_id = value.get("name"), value.get("sandboxId")
    if not isinstance(name, str) or not isinstance(sandbox_id, str):
        _refuse(raw, where)
    return name, sandbox_id


def _apply_loose(
    state: DataState, value: dict[str, Any], number: int, raw: bytes, where: str
) -> None:
    from sandbox_ledger.local.loose import read_loose_line

    key, items = read_loose_line(value, where)
    if key in state.loose:
        state.appended = True
    if items:
        state.loose[key] = (number, raw.decode("utf-8"))
    else:
        state.loose.pop(key, None)
        state.appended = True


def _environment_name(value: dict[str, Any], raw: bytes, where: str) -> str:
    record = value.get("record")
    name = record.get("name") if isinstance(record, dict) else None
    if not isinstance(name, str):
        _refuse(raw, where)
    return name


def _apply_record(
    state: DataState, value: dict[str, Any], number: int, raw: bytes, where: str
) -> None:
    from sandbox_ledger import keys as k

    deleted = value.get("deleted")
    if isinstance(deleted, str):
        state.records.pop(deleted, None)
        state.appended = True
        return
    record = _resource_line(raw, where)
    if record is None:  # pragma: no cover - a resourceRecord line is always read as one
        _refuse(raw, where)
    if isinstance(record, dict):
        record_id = k.resource_id(record[k.PARTITION_KEY]["S"])
    else:
        record_id = record.id
    if record_id in state.records:
        state.appended = True
    state.records[record_id] = (number, raw.decode("utf-8"))


def _apply_block(
    state: DataState,
    head: dict[str, Any],
    lines: Iterator[tuple[int, bytes]],
    where: str,
) -> bool:
    """Apply a replacement block whose head line is ``head``; False if the file ends (or a
    line is torn) before its last line."""
    count = head.get("entries" if head["kind"] == SESSION_KIND else "records")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise InvalidInputError(where, f"{head['kind']}: no count of the lines that follow")
    block: list[tuple[int, str, dict[str, Any]]] = []
    for _ in range(count):
        number, raw = next(lines, (0, b""))
        if not raw.endswith(b"\n"):
            return False
        value = _line_value(raw, f"{state.path}:{number}")
        if value is None:
            raise InvalidInputError(f"{state.path}:{number}", "a blank line inside a block")
        block.append((number, raw.decode("utf-8"), value))
    if head["kind"] == SESSION_KIND:
        key = _session_of(head, json.dumps(head).encode(), where)
        for number, line, value in block:
            if "event" not in value or _session_of(value, line.encode(), where) != key:
                raise InvalidInputError(
                    f"{state.path}:{number}", f"not an entry of the session {key!r}"
                )
        state.sequences.pop(key, None)  # a sequences line after the block names the new one
        state.orders.pop(key, None)  # (and its order ids)
        if block:
            state.sessions[key] = [(number, line) for number, line, _ in block]
        else:
            state.sessions.pop(key, None)
    else:
        environments: dict[str, tuple[int, str]] = {}
        for number, line, value in block:
            if value.get("kind") != ENVIRONMENT_KIND:
                raise InvalidInputError(f"{state.path}:{number}", "not an environment line")
            name = _environment_name(value, line.encode(), f"{state.path}:{number}")
            environments[name] = (number, line)
        state.environments = environments
    return True


def sequences_line(
    sequences: dict[tuple[str, str], Runs],
    orders: Mapping[tuple[str, str], tuple[int, Sequence[str]]] | None = None,
    store: str | None = None,
) -> str:
    """The line of :data:`SEQUENCES_KIND` naming ``sequences`` and, if given, ``orders`` (for
    each session, the order ids of its entries from an index on) and the ``store``'s
    identity, with its newline."""
    sessions = [
        [name, sandbox_id, [list(run) for run in runs]]
        for (name, sandbox_id), runs in sequences.items()
    ]
    value: dict[str, Any] = {"kind": SEQUENCES_KIND, "sessions": sessions}
    if orders:
        value["orders"] = [
            [name, sandbox_id, start, list(ids)]
            for (name, sandbox_id), (start, ids) in orders.items()
        ]
    if store is not None:
        value["store"] = store
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


def _apply_sequences(state: DataState, value: dict[str, Any], where: str) -> None:
    """Take the sessions' sequences of a :data:`SEQUENCES_KIND` line.

    Raises:
        InvalidInputError: not one such line writes (field: ``where``).
    """
    from sandbox_ledger.dynamodb.import_items import check_runs

    sessions = value.get("sessions")
    if not {"kind", "sessions"} <= set(value) <= {"kind", "sessions", "orders", "store"} or not (
        isinstance(sessions, list)
    ):
        raise InvalidInputError(where, f"{SEQUENCES_KIND}: no list of sessions")
    if "store" in value:
        store = value["store"]
        if not isinstance(store, str) or not 0 < len(store) <= MAX_STORE_ID_CHARS:
            raise InvalidInputError(where, f"{SEQUENCES_KIND}: store is not a store id")
        state.store_id = store
    found: dict[tuple[str, str], Runs] = {}
    for session in sessions:
        if (
            not isinstance(session, list)
            or len(session) != 3
            or not all(isinstance(part, str) for part in session[:2])
        ):
            raise InvalidInputError(where, f"{SEQUENCES_KIND}: not [name, sandboxId, runs]")
        try:
            runs = check_runs(session[2])
        except ValueError as exc:
            raise InvalidInputError(
                where, f"{SEQUENCES_KIND}: {exc} for {tuple(session[:2])!r}"
            ) from exc
        found[(session[0], session[1])] = runs
    if any(key in state.sequences for key in found):
        state.appended = True
    state.sequences.update(found)
    if "orders" in value:
        _apply_orders(state, value["orders"], where)


def _apply_orders(state: DataState, named: object, where: str) -> None:
    """Take the sessions' order ids of a :data:`SEQUENCES_KIND` line's ``orders``.

    Raises:
        InvalidInputError: not what a save writes (field: ``where``).
    """
    from sandbox_ledger.dynamodb.import_items import check_orders

    if not isinstance(named, list):
        raise InvalidInputError(where, f"{SEQUENCES_KIND}: orders is not a list")
    for session in named:
        if (
            not isinstance(session, list)
            or len(session) != 4
            or not all(isinstance(part, str) for part in session[:2])
            or type(session[2]) is not int
            or session[2] < 0
        ):
            raise InvalidInputError(
                where, f"{SEQUENCES_KIND}: orders: not [name, sandboxId, start, ids]"
            )
        key, start = (session[0], session[1]), session[2]
        known = state.orders.get(key, [])
        if start > len(known):
            raise InvalidInputError(
                where,
                f"{SEQUENCES_KIND}: order ids of {key!r} from entry {start}, "
                f"but {len(known)} named before",
            )
        try:
            ids = list(check_orders([*known[:start], *check_orders(session[3])]))
        except ValueError as exc:
            raise InvalidInputError(where, f"{SEQUENCES_KIND}: {exc} for {key!r}") from exc
        if start < len(known):
            state.appended = True
        state.orders[key] = ids


def _resource_line(raw: bytes, where: str) -> ResourceActivityRecord | Item | None:
    """The resource record of a ``resourceRecord`` line (the stored item of an unreadable
    one), None for any other line."""
    from pydantic import ValidationError

    from sandbox_ledger.resources import ResourceActivityRecord

    if b'"kind"' not in raw or RESOURCE_KIND.encode() not in raw:
        return None
    try:
        value = loads_unique(raw)
    except DuplicateKeyError as exc:
        raise InvalidInputError(where, str(exc)) from exc
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("kind") != RESOURCE_KIND or "event" in value:
        return None
    if "unreadable" in value or "item" in value:  # the item as stored: loaded as it was
        item = _stored_item(value.get("item"), where)
        if "unreadable" not in value:
            _check_agrees(item, value.get("record"), where)
        return item
    try:
        # Read as the store reads what it holds: a heartbeat from an owner whose clock runs
        # behind the creator's is stored on purpose, so the file that saved it loads it.
        return ResourceActivityRecord.model_validate(value.get("record"), context={"stored": True})
    except ValidationError as exc:
        raise InvalidInputError(where, f"not a resource record ({exc.errors()[0]['msg']})") from exc


def _check_agrees(item: Item, record: object, where: str) -> None:
    """A line's record (its readable half) is the one its item holds: a hand edit of one
    half only would otherwise load the item and drop the edit in silence. An item this
    version cannot read (a newer writer's) is loaded as stored, as an unreadable line is."""
    from sandbox_ledger.resources import Unreadable
    from sandbox_ledger.resources.files import stored_record

    found = stored_record(item)
    if not isinstance(found, Unreadable) and found.record.wire() != record:
        raise InvalidInputError(
            where,
            "its record and its item disagree (edit both, or drop the item to load the "
            "record anew)",
        )


def _json_item(item: Item | None) -> dict[str, Any]:
    """A low-level item as DynamoDB's JSON writes it: binary values in base64."""
    return {name: _json_value(value) for name, value in (item or {}).items()}


def _json_value(value: dict[str, Any]) -> dict[str, Any]:
    [(kind, inner)] = value.items()
    if kind == "B":
        return {kind: base64.b64encode(inner).decode("ascii")}
    if kind == "BS":
        return {kind: [base64.b64encode(b).decode("ascii") for b in inner]}
    if kind == "M":
        return {kind: {key: _json_value(v) for key, v in inner.items()}}
    if kind == "L":
        return {kind: [_json_value(v) for v in inner]}
    return {kind: inner}


def _stored_item(value: object, where: str) -> Item:
    """:func:`_json_item` read back; InvalidInputError naming ``where`` for anything else."""
    from sandbox_ledger import keys as k

    try:
        if not isinstance(value, dict):
            raise ValueError("no item")
        item = {str(name): _item_value(v) for name, v in value.items()}
        pk = item.get(k.PARTITION_KEY, {}).get("S")
        if not isinstance(pk, str) or not pk.startswith(k.RESOURCE_PREFIX):
            raise ValueError("not a resource record's key")
        if item.get(k.SORT_KEY) != {"S": k.RESOURCE_SK}:
            raise ValueError("not a resource record's key")
    except (ValueError, TypeError, binascii.Error) as exc:
        raise InvalidInputError(where, f"not a stored resource record ({exc})") from exc
    return item


_SCALAR_KINDS = {"S": str, "N": str, "BOOL": bool}


def _item_value(value: object) -> dict[str, Any]:
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"not an attribute value: {value!r}"[:200])
    [(kind, inner)] = value.items()
    if kind in _SCALAR_KINDS and isinstance(inner, _SCALAR_KINDS[kind]):
        return {kind: inner}
    if kind == "NULL" and inner is True:
        return {kind: inner}
    if kind == "B" and isinstance(inner, str):
        return {kind: base64.b64decode(inner, validate=True)}
    if kind in ("SS", "NS") and isinstance(inner, list) and all(isinstance(v, str) for v in inner):
        return {kind: inner}
    if kind == "BS" and isinstance(inner, list) and all(isinstance(v, str) for v in inner):
        return {kind: [base64.b64decode(v, validate=True) for v in inner]}
    if kind == "M" and isinstance(inner, dict):
        return {kind: {str(key): _item_value(v) for key, v in inner.items()}}
    if kind == "L" and isinstance(inner, list):
        return {kind: [_item_value(v) for v in inner]}
    raise ValueError(f"not an attribute value: {value!r}"[:200])
