"""Entries, summaries and environment records as SQL rows, and back (no I/O).

Payloads are stored as the JSON text :func:`sandbox_ledger._json.dumps` writes (compact, UTF-8,
unicode kept), so a payload reads back equal, of the same type and with the same JSON text,
big integers and tiny floats included. An absent payload is SQL NULL.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sandbox_ledger import _json
from sandbox_ledger.cursor import decode_cursor, encode_cursor
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.keys import (
    check_environment_name,
    check_occurrence,
    check_segments,
    check_session_key,
)
from sandbox_ledger.models import (
    CheckpointInfo,
    EnvironmentRecord,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    SandboxDetails,
    SandboxPage,
    SandboxStatus,
    require_storable,
)
from sandbox_ledger.sql.retention import SUMMARY_EVENTS, live
from sandbox_ledger.summary import (
    checkpoint_info,
    keyset_position,
    session_listing,
    validate_list_options,
)

__all__ = [
    "ENTRY_COLUMNS",
    "STAGED",
    "EventRow",
    "ListQuery",
    "append_key",
    "append_params",
    "check_entry",
    "check_record",
    "check_text",
    "claim_key",
    "decode_details",
    "decode_entry",
    "decode_environment",
    "encode_entry",
    "encode_environment",
    "entry_columns",
    "holds_nul",
    "list_query",
    "list_sql",
    "row_checkpoint",
]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_KEY_BYTES = 2048
"""Longest (name, sandboxId) pair in UTF-8 bytes: what a PostgreSQL btree index row holds with
room to spare, and about what a DynamoDB key holds, so a ledger moves between the stores
(environment names follow :func:`sandbox_ledger.keys.check_environment_name`, every store's)."""


def _key_size(field: str, *parts: str) -> None:
    size = sum(len(p.encode("utf-8")) for p in parts)
    if size > MAX_KEY_BYTES:
        raise InvalidInputError(
            field, f"too long for a key ({size} bytes as UTF-8, the limit is {MAX_KEY_BYTES})"
        )


def check_text(value: object, field: str) -> str:
    """A non-empty string the database can store as text (valid UTF-8; NUL, which PostgreSQL
    text cannot hold, is refused for every store by ``models.require_storable``).

    Raises:
        InvalidInputError: naming ``field``.
    """
    if not isinstance(value, str) or not value:
        raise InvalidInputError(field, "must be a non-empty string")
    _encodable(value, field)
    return value


def _encodable(value: str, field: str) -> None:
    if value.isascii():  # a flag of the string, no scan: valid UTF-8
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(field, f"not valid UTF-8 text ({exc.reason})") from exc


def holds_nul(params: Mapping[str, Any] | Sequence[Any]) -> bool:
    """Whether a statement's text parameter holds NUL (what PostgreSQL text cannot)."""
    values = params.values() if isinstance(params, Mapping) else params
    return any(isinstance(v, str) and "\x00" in v for v in values)


def _suspect(e: LedgerEntry) -> bool:
    """What the row's own checks do not cover of ``require_storable``: NUL in a text column,
    a ts past 64 bits (written, it is not encoded as text)."""
    # One joined text, not a generator over four: this runs for every entry of an import.
    texts = e.name + e.sandbox_id + e.event + (e.error or "")
    return "\x00" in texts or not INT64_MIN <= e.ts <= INT64_MAX


def _int64(value: int, field: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise InvalidInputError(field, "must fit in a signed 64-bit integer")
    return value


def check_entry(entry: object) -> LedgerEntry:
    """The entry, if it is a LedgerEntry; refuses anything else with InvalidInputError."""
    if not isinstance(entry, LedgerEntry):
        raise InvalidInputError("entry", f"expected a LedgerEntry, got {type(entry).__name__}")
    return entry


def check_record(record: object) -> EnvironmentRecord:
    """The record, if it is an EnvironmentRecord; refuses anything else."""
    if not isinstance(record, EnvironmentRecord):
        raise InvalidInputError(
            "record", f"expected an EnvironmentRecord, got {type(record).__name__}"
        )
    return record


def _json_text(value: Any, field: str) -> str:
    try:
        text = _json.text(value)
        if not text.isascii():  # ASCII (a flag of the string, no scan) is valid UTF-8
            text.encode("utf-8")
        return text
    except UnicodeEncodeError as exc:
        raise InvalidInputError(field, f"not valid UTF-8 text ({exc.reason})") from exc


ENTRY_COLUMNS = ("ts", "step_index", "branch", "event", "payload", "error", "extra")
"""An entry's columns of the events table, in :func:`decode_entry`'s order."""


def entry_columns(alias: str) -> str:
    """:data:`ENTRY_COLUMNS` as a SELECT list over the events table named ``alias``."""
    return ", ".join(f"{alias}.{column}" for column in ENTRY_COLUMNS)


class EventRow(NamedTuple):
    """One entry as the columns of the events table, plus its summary deltas. A named tuple:
    immutable, and built in a third of a frozen dataclass's time (an import builds one per
    entry). Its first :data:`STAGED` fields are what SQLite's import stage holds of it."""

    name: str
    sandbox_id: str
    ts: int
    step_index: int
    branch: int | None
    event: str
    payload: str | None
    error: str | None
    extra: str | None
    """The fields of a newer client (a ``traceId``), as a JSON object in their given order."""
    append_key: str
    ts_s: int
    """``ts`` in whole seconds, rounded down: what the entry's expiry counts from."""
    started_at: int | None
    """The entry's ts if it is a ``sandbox.created`` (kept only if the session has none)."""
    completed_at: int | None
    """The entry's ts if it is a ``sandbox.closed`` (kept only if the session has none)."""
    exec_delta: int
    """1 for ``exec.complete``, else 0."""
    checkpoint: bool


STAGED = 11
""":class:`EventRow`'s first fields, ``name`` to ``ts_s``: an entry's values in SQLite's
import stage (``row[:STAGED]``, a plain tuple, which sqlite3 binds in two thirds of the time
it takes for the row itself)."""


def append_params(row: EventRow) -> dict[str, Any]:
    """The named parameters of an append: the columns, the summary deltas, and what the
    statement needs to compute the expiries (``ts_s``: ts in whole seconds, rounded down;
    ``summarizes``: whether the entry changes the summary, and so sets its expiry from
    ``summary_ts_s``, its ts_s, None otherwise)."""
    return {
        "name": row.name,
        "sandbox_id": row.sandbox_id,
        "started_at": row.started_at,
        "completed_at": row.completed_at,
        "exec_delta": row.exec_delta,
        "ts": row.ts,
        "ts_s": row.ts_s,
        "summarizes": row.event in SUMMARY_EVENTS,
        "summary_ts_s": row.ts_s if row.event in SUMMARY_EVENTS else None,
        "step_index": row.step_index,
        "branch": row.branch,
        "event": row.event,
        "payload": row.payload,
        "error": row.error,
        "extra": row.extra,
        "append_key": row.append_key,
    }


EVENT_ARRAYS: tuple[tuple[str, str], ...] = (
    ("name", "text"),
    ("sandbox_id", "text"),
    ("ts", "bigint"),
    ("ts_s", "bigint"),
    ("step_index", "bigint"),
    ("branch", "bigint"),
    ("event", "text"),
    ("payload", "text"),
    ("error", "text"),
    ("extra", "text"),
    ("append_key", "text"),
)
"""The parameters of a dialect's ``insert_keyed_events`` (name, SQL type of its elements):
what :func:`event_arrays` gives."""

SUMMARY_ARRAYS: tuple[tuple[str, str], ...] = (
    ("name", "text"),
    ("sandbox_id", "text"),
    ("started_at", "bigint"),
    ("completed_at", "bigint"),
    ("exec_delta", "bigint"),
    ("summary_ts_s", "bigint"),
    ("ts_s", "bigint"),
)
"""The parameters of a dialect's ``fold_sessions``: each of ``summary_params``' values of
these names, a session each."""


def event_arrays(batch: Sequence[EventRow]) -> dict[str, list[Any]]:
    """The entries of ``batch`` as :data:`EVENT_ARRAYS`, one array per column, in order:
    :func:`append_params` of each, transposed (the columns an insert needs, no summary)."""
    return {
        "name": [r.name for r in batch],
        "sandbox_id": [r.sandbox_id for r in batch],
        "ts": [r.ts for r in batch],
        "ts_s": [r.ts_s for r in batch],
        "step_index": [r.step_index for r in batch],
        "branch": [r.branch for r in batch],
        "event": [r.event for r in batch],
        "payload": [r.payload for r in batch],
        "error": [r.error for r in batch],
        "extra": [r.extra for r in batch],
        "append_key": [r.append_key for r in batch],
    }


def append_key(entry: LedgerEntry, position: int | None = None) -> str:
    """The unique key that makes an append idempotent.

    Random for a live append (fixed before the first attempt, so a retried write is seen as
    done); ``position`` plus a digest of the entry for :meth:`append_at` (an import line), so
    the same entry at the same position is stored once however often it is appended.
    """
    if position is None:
        return uuid.uuid4().hex
    if not isinstance(position, int) or isinstance(position, bool) or not 0 <= position < 10**20:
        raise InvalidInputError("position", "must be an integer from 0 to 10**20 - 1")
    digest = hashlib.sha256(_json.dumps(entry.wire())).hexdigest()[:16]
    return f"p{position:020d}-{digest}"


def claim_key(entry: LedgerEntry, occurrence: int, digest: str | None = None) -> str:
    """The unique key of an imported entry: occurrence ``occurrence`` (1-based) of its content
    in its session (:func:`sandbox_ledger.transfer.content_digest`, or ``digest`` if the
    caller has it), as DynamoDB's import claim, so imports running at once store each copy
    once."""
    if digest is None:
        from sandbox_ledger.transfer import content_digest

        digest = content_digest(entry)
    return f"i{check_occurrence(occurrence):06d}-{digest}"


def check_scan(name: str | None, segments: int | None) -> None:
    """Check ``scan_sessions``' arguments as every store does (``segments`` is a hint the SQL
    stores ignore)."""
    if name is not None:
        check_text(name, "name")
    check_segments(segments)


def encode_entry(entry: object, *, key: str, session_checked: bool = False) -> EventRow:
    """Validate an entry for SQL storage and give its row. ``session_checked``: its name and
    sandboxId passed these checks already (the previous entry of a batch had them).

    Raises:
        InvalidInputError: not a LedgerEntry, text the database cannot hold, or an integer
            beyond 64 bits (``stepIndex``, ``branch``).
    """
    e = check_entry(entry)
    try:
        row = _columns(e, key, session_checked)
    except Exception:
        # First: what no store takes is refused alike everywhere (with its path), before
        # this store's own refusals.
        require_storable(e)
        raise
    return row


def _columns(e: LedgerEntry, key: str, session_checked: bool) -> EventRow:
    """:func:`encode_entry`'s row, its checks doing ``require_storable``'s work as they go
    (every text field is encoded, so a lone surrogate fails; the payload and the unknown
    fields become UTF-8 JSON text, so a surrogate in a string or key, or an integer past the
    digit limit, fails): the full walk runs only for an entry these cannot judge."""
    if not _json.encoder_checks_digits() or _suspect(e):
        require_storable(e)
    if not session_checked:
        check_text(e.name, "name")
        check_text(e.sandbox_id, "sandboxId")
        check_session_key(e.name, e.sandbox_id)
        _key_size("name/sandboxId", e.name, e.sandbox_id)
    check_text(e.event, "event")
    if e.error is not None:
        _encodable(e.error, "error")
    ts = e.ts
    event = e.event
    # By position: keywords cost a third of the row's building (an import builds one per entry).
    return EventRow(
        e.name,
        e.sandbox_id,
        ts,
        _int64(e.step_index, "stepIndex"),
        None if e.branch is None else _int64(e.branch, "branch"),
        event,
        None if e.payload is None else _json_text(e.payload, "payload"),
        e.error,
        _json_text(e.model_extra, "entry") if e.model_extra else None,
        key,
        ts // 1000,
        ts if event == LedgerEvent.SandboxCreated else None,
        ts if event == LedgerEvent.SandboxClosed else None,
        1 if event == LedgerEvent.ExecComplete else 0,
        event == LedgerEvent.CheckpointCreated,
    )


def decode_entry(
    name: str,
    sandbox_id: str,
    ts: int,
    step_index: int,
    branch: int | None,
    event: str,
    payload: str | None,
    error: str | None,
    extra: str | None,
) -> LedgerEntry:
    """An entry from its stored columns (:data:`ENTRY_COLUMNS`; the payload and the fields of
    a newer client parsed from their JSON text)."""
    if extra is not None:
        # By the wire names, as the entry was given: a newer client's field may be spelt
        # like one of ours in snake_case (``sandbox_id``), and stays its own field.
        wire = {"ts": ts, "name": name, "sandboxId": sandbox_id, "stepIndex": step_index}
        wire.update(branch=branch, event=event, error=error)
        wire["payload"] = None if payload is None else json.loads(payload)
        return LedgerEntry.model_validate({**json.loads(extra), **wire})
    return LedgerEntry(
        ts=ts,
        name=name,
        sandbox_id=sandbox_id,
        step_index=step_index,
        branch=branch,
        event=event,
        payload=None if payload is None else json.loads(payload),
        error=error,
    )


def row_checkpoint(ts: int, payload: str | None) -> CheckpointInfo:
    """The checkpoint view of a stored ``sandbox.checkpoint_created`` row."""
    entry = LedgerEntry(
        ts=ts,
        name="-",
        sandbox_id="-",
        step_index=-1,
        event=LedgerEvent.CheckpointCreated,
        payload=None if payload is None else json.loads(payload),
    )
    return checkpoint_info(entry)


def decode_details(
    name: str, sandbox_id: str, started_at: int, completed_at: int | None, exec_count: int
) -> SandboxDetails:
    """A listed session from its summary row."""
    return SandboxDetails(
        name=name,
        sandbox_id=sandbox_id,
        status=SandboxStatus.Completed if completed_at is not None else SandboxStatus.Running,
        started_at=started_at,
        completed_at=completed_at,
        exec_count=exec_count,
    )


def encode_environment(record: object) -> tuple[str, int, str]:
    """(name, builtAt, the record's wire JSON text) of an environment record."""
    r = check_record(record)
    require_storable(r)
    check_text(r.name, "name")
    check_environment_name(r.name)
    return r.name, r.built_at, _json_text(r.wire(), "record")


def decode_environment(record: str) -> EnvironmentRecord:
    """An environment record from its stored wire JSON text."""
    return EnvironmentRecord.model_validate(json.loads(record))


@dataclass(frozen=True)
class ListQuery:
    """The filters of a listing, as the SQL adapters apply them (falsy options filter nothing)."""

    name: str | None
    status: SandboxStatus | None
    before: int | None
    limit: int | None
    after: tuple[int, int] | None = None
    """The cursor's position: (startedAt, session id) of the previous page's last session."""
    listing: tuple[Any, ...] = ()
    """What the listing's cursors are bound to (:func:`sandbox_ledger.summary.session_listing`)."""


CURSOR_KIND = "sql-sessions"


def list_query(name: str | None, opts: ListSandboxOptions | None, store: str) -> ListQuery:
    """Validate a listing's name and options (the cursor included); ``store`` names the
    database in the listing's cursors, so another database refuses them."""
    if name is not None:
        check_text(name, "name")
    o = validate_list_options(opts)
    listing = tuple(session_listing(store, name, o))
    if o is None:
        return ListQuery(name, None, None, None, listing=listing)
    after = None
    if o.cursor is not None:
        after = keyset_position(decode_cursor(CURSOR_KIND, o.cursor, listing), o.before)
    # A limit beyond any table is no limit, but still one page: kept within what the
    # databases bind (SQLite refuses an integer past 64 bits; list_sql asks for limit + 1).
    limit = min(o.limit, INT64_MAX - 1) if o.limit else None
    return ListQuery(name, o.status or None, o.before or None, limit, after, listing)


def page_of(found: list[Any], query: ListQuery) -> SandboxPage:
    """A page from the listing's rows (name, sandbox_id, started_at, completed_at, exec_count,
    id); :func:`list_sql` asks for one row beyond ``limit`` to know whether more follow."""
    sessions = [decode_details(*r[:5]) for r in found[: query.limit or len(found)]]
    if query.limit is None or len(found) <= query.limit:
        return SandboxPage(sessions=sessions)
    last = found[query.limit - 1]
    return SandboxPage(
        sessions=sessions,
        cursor=encode_cursor(CURSOR_KIND, {"t": last[2], "q": last[5]}, query.listing),
    )


def list_sql(
    query: ListQuery, now: int, *, table: str = "ledger_sessions", param: str = "?"
) -> tuple[str, list[Any]]:
    """The one SELECT a listing runs and its parameters (``param``: the driver's placeholder;
    ``now``: Unix seconds, summaries expired by then are left out).

    Served by the session indexes on ([name,] [status,] started_at DESC, id): newest first,
    ties in session creation order.
    """
    where = ["started_at IS NOT NULL", live("summary_expires_at", param)]
    params: list[Any] = [now]
    if query.name is not None:
        where.append(f"name = {param}")
        params.append(query.name)
    if query.status is not None:
        where.append(f"status = {param}")
        params.append(query.status.value)
    if query.before is not None:
        where.append(f"started_at < {param}")
        params.append(query.before)
    if query.after is not None:
        # The cursor: strictly after (startedAt, id) in the listing's order. The bound
        # started_at <= t is a range on the index, read in its order from the cursor on; a
        # bare OR makes SQLite read every later session and sort them for each page.
        where.append(f"started_at <= {param} AND (started_at < {param} OR id > {param})")
        params += [query.after[0], query.after[0], query.after[1]]
    sql = (
        f"SELECT name, sandbox_id, started_at, completed_at, exec_count, id FROM {table} "
        f"WHERE {' AND '.join(where)} ORDER BY started_at DESC, id"
    )
    if query.limit is not None:
        sql += f" LIMIT {param}"
        params.append(query.limit + 1)  # one more: does a next page exist?
    return sql, params
