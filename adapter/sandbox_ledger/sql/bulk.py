"""The SQL stores' batched import and export reads (``read_stored_sessions``,
``append_once_many`` and ``read_sessions_in_append_order`` of
:class:`~sandbox_ledger.protocol.TransferAdapter`), written once over the dialect's hooks.

A batch is one write transaction. Inside it the claims already stored are read through the
unique index on ``append_key`` (a few hundred keys per query), every other item is inserted
with one ``executemany`` (each finding its session's id through the session key's index),
after each session's summary was upserted once, in one ``executemany``, with the batch's
deltas folded together (first ``sandbox.created`` and ``sandbox.closed`` in the batch's
order, ``exec.complete`` counted, the latest expiries), which is what appending the items
one by one computes. Exactly once under concurrent importers: SQLite's ``BEGIN IMMEDIATE``
holds the file's write lock from the claim read to the commit; on PostgreSQL an importer
that stored a claim between the read and the insert makes the unique index refuse the
insert, the whole transaction rolls back and the batch runs again (it then reads that
claim), falling back to one transaction per item if it keeps colliding.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sandbox_ledger._bulk import append_each_once
from sandbox_ledger.errors import InvalidInputError, StorageError
from sandbox_ledger.sql import rows
from sandbox_ledger.sql.retention import SUMMARY_EVENTS, live

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sandbox_ledger.models import LedgerEntry
    from sandbox_ledger.sql.adapter import SQLAdapter
    from sandbox_ledger.sql.connection import Connection

__all__ = ["append_once_many", "read_sessions", "summary_params"]

_SESSIONS_PER_READ = 300
"""Sessions per reconciliation query (two parameters each: within every SQLite's limit)."""
_KEYS_PER_READ = 300
"""Claim keys per query of the claims already stored (up to three parameters each: within
every SQLite's limit)."""
_ARRAY_CHARACTERS = 16 * 2**20
"""About the most text (payloads, errors, extras: characters, at most 4 bytes each in UTF-8)
one statement over column arrays carries: a batch of large entries is inserted in several
statements, each far below PostgreSQL's 1 GB limit on a message."""
_ATTEMPTS = 8
"""Batches refused by a concurrent importer's claim before the batch goes item by item."""
_UNIQUE_VIOLATION = "23505"


def _chunks(values: list[Any], size: int) -> list[list[Any]]:
    return [values[i : i + size] for i in range(0, len(values), size)]


async def read_sessions(
    adapter: SQLAdapter, sessions: Sequence[tuple[str, str]], *, append_order: bool
) -> list[list[LedgerEntry]]:
    """Each session's entries, in the order given: one query per few hundred sessions
    through the session key's unique index. ``append_order``: ``read_in_append_order`` of
    each (the visible entries in append order, an export's read); otherwise ``read_stored``
    of each (expired entries included, ascending ts, an import's reconciliation read)."""
    keys = [(rows.check_text(n, "name"), rows.check_text(s, "sandboxId")) for n, s in sessions]
    q = adapter.queries
    ph = q.placeholder
    events = q.table("ledger_events")
    now = int(time.time()) if append_order else None  # what reads compare expiries with
    visible = f" AND {live('e.expires_at', ph)}" if append_order else ""
    order = "e.seq" if append_order else "e.ts, e.seq"
    found: dict[tuple[str, str], list[LedgerEntry]] = {}
    wanted = [key for key in dict.fromkeys(keys) if not adapter._never_stored(key)]
    whole = q.visible_entries_of if append_order else q.stored_entries_of
    if whole is not None and wanted:  # the dialect reads them all in one statement
        named = {"name": [n for n, _ in wanted], "sandbox_id": [s for _, s in wanted], "now": now}
        reads = [await adapter._fetchall(whole, named)]
    else:
        reads = []
        for chunk in _chunks(wanted, _SESSIONS_PER_READ):
            values = ", ".join(f"({ph}, {ph})" for _ in chunk)
            sql = (
                f"SELECT s.name, s.sandbox_id, {rows.entry_columns('e')} "
                f"FROM (VALUES {values}) AS k JOIN {q.sessions} AS s "
                "ON s.name = k.column1 AND s.sandbox_id = k.column2 "
                f"JOIN {events} AS e ON e.session_id = s.id{visible} ORDER BY s.id, {order}"
            )
            params = [part for key in chunk for part in key] + ([now] if append_order else [])
            reads.append(await adapter._fetchall(sql, params))
    for found_rows in reads:
        for row in found_rows:
            found.setdefault((row[0], row[1]), []).append(rows.decode_entry(*row))
    return [list(found.get(key, ())) for key in keys]


def summary_params(group: Sequence[rows.EventRow]) -> dict[str, Any]:
    """The summary upsert's parameters for a session's new entries folded into one: what
    appending them one by one, in this order, leaves in the summary."""
    started = completed = summary = None
    latest = group[0].ts_s
    delta = 0
    for r in group:  # one pass: an import folds every session it writes
        if started is None:
            started = r.started_at
        if completed is None:
            completed = r.completed_at
        delta += r.exec_delta
        latest = max(latest, r.ts_s)
        if r.event in SUMMARY_EVENTS:
            summary = r.ts_s if summary is None else max(summary, r.ts_s)
    return {
        "name": group[0].name,
        "sandbox_id": group[0].sandbox_id,
        "started_at": started,
        "completed_at": completed,
        "exec_delta": delta,
        "ts_s": latest,
        "summarizes": summary is not None,
        "summary_ts_s": summary,
    }


async def append_once_many(
    adapter: SQLAdapter,
    items: Sequence[tuple[LedgerEntry, int]],
    digests: Sequence[str] | None = None,
) -> list[bool | InvalidInputError]:
    """``append_once`` of each item, the batch in one transaction (see the module);
    ``digests``: the items' content digests, if the caller has them."""
    outcomes: list[bool | InvalidInputError] = []
    prepared: list[tuple[int, rows.EventRow]] = []
    checked: tuple[str, str] | None = None  # a batch holds each session's entries together
    for n, (entry, occurrence) in enumerate(items):
        try:
            digest = None if digests is None else digests[n]
            key = rows.claim_key(rows.check_entry(entry), occurrence, digest)
            session = (entry.name, entry.sandbox_id)
            row = adapter._encode(entry, key, session_checked=session == checked)
            checked = session
            prepared.append((len(outcomes), row))
            outcomes.append(False)
        except InvalidInputError as exc:
            outcomes.append(exc)
    if not prepared:
        return outcomes
    batch = [row for _, row in prepared]
    for _ in range(_ATTEMPTS):
        try:
            stored = await adapter._writing_batch(lambda conn: _write(adapter, conn, batch))
        except StorageError as exc:
            if exc.code != _UNIQUE_VIOLATION:
                raise
            continue  # a concurrent importer stored a claim meanwhile: read the claims again
        for (index, _), done in zip(prepared, stored, strict=True):
            outcomes[index] = done
        return outcomes
    items_left = [items[index] for index, _ in prepared]
    for (index, _), outcome in zip(
        prepared, await append_each_once(adapter.append_once, items_left), strict=True
    ):
        outcomes[index] = outcome
    return outcomes


async def _write(adapter: SQLAdapter, conn: Connection, batch: list[rows.EventRow]) -> list[bool]:
    """Inside the batch's transaction: which rows it stores (their claims not yet stored),
    each session's summary once, then the entries."""
    q = adapter.queries
    claimed: set[str] = set()
    if q.stored_claims is not None:  # the dialect takes them all as one array
        keys = [row.append_key for row in batch]
        claimed.update(key for (key,) in await conn.rows(q.stored_claims, {"keys": keys}))
    else:
        # Claims only in the sessions the store holds (none, for a session a move brings):
        # the write lock is held, so none is created meanwhile.
        held: set[tuple[str, str]] = set()
        batch_sessions = list(dict.fromkeys((row.name, row.sandbox_id) for row in batch))
        for part in _chunks(batch_sessions, _SESSIONS_PER_READ):
            held.update((name, sid) for name, sid in await conn.rows(*q.sessions_among(part)))
        suspects = [row for row in batch if (row.name, row.sandbox_id) in held]
        for chunk in _chunks(suspects, _KEYS_PER_READ):
            claimed.update(key for (key,) in await conn.rows(*q.claims_among(chunk)))
    stored: list[bool] = []
    sessions: dict[tuple[str, str], list[rows.EventRow]] = {}
    for row in batch:
        fresh = row.append_key not in claimed
        stored.append(fresh)
        if fresh:
            claimed.add(row.append_key)  # the same identity twice in one batch: stored once
            sessions.setdefault((row.name, row.sandbox_id), []).append(row)
    # Sessions in key order: two batches lock their session rows in the same order.
    folded = [summary_params(sessions[key]) for key in sorted(sessions)]
    if not folded:
        return stored
    ordered = [r for key in sorted(sessions) for r in sessions[key]]
    if q.fold_sessions is None or q.insert_keyed_events is None:
        await conn.many(q.fold_session, folded)
        if q.stage_event is None or q.insert_staged_events is None or q.clear_stage is None:
            params = [rows.append_params(r) for r in ordered]
            inserted = await conn.many(q.insert_keyed_event, params)
        else:  # staged, then one statement per part (in order; large entries: more parts)
            inserted = 0
            await conn.count(q.clear_stage)  # empty unless a failed batch's rollback missed it
            for part in _by_size(ordered, _ARRAY_CHARACTERS):
                await conn.many(q.stage_event, [r[: rows.STAGED] for r in part])
                inserted += await conn.count(q.insert_staged_events)
                await conn.count(q.clear_stage)
        _check_inserted(inserted, ordered)
        return stored
    # The dialect takes the batch as column arrays: a statement for the summaries and one
    # for the entries (more for large entries), however many rows.
    summaries = {name: [f[name] for f in folded] for name, _ in rows.SUMMARY_ARRAYS}
    await conn.count(q.fold_sessions, summaries)
    inserted = 0
    for part in _by_size(ordered, _ARRAY_CHARACTERS):
        inserted += await conn.count(q.insert_keyed_events, rows.event_arrays(part))
    _check_inserted(inserted, ordered)
    return stored


def _check_inserted(inserted: int, ordered: list[rows.EventRow]) -> None:
    """Each entry's insert finds its session's row, which the batch upserted just before: a
    count short of the batch would be entries reported stored and not written (the batch's
    transaction is rolled back instead)."""
    if inserted != len(ordered):
        raise StorageError(f"an import batch inserted {inserted} of its {len(ordered)} entries")


def _by_size(batch: list[rows.EventRow], characters: int) -> list[list[rows.EventRow]]:
    """``batch`` in order, cut where its text (payload, error, extra) passes ``characters``
    (a row larger than that alone)."""
    parts: list[list[rows.EventRow]] = [[]]
    size = 0
    for row in batch:
        length = len(row.payload or "") + len(row.error or "") + len(row.extra or "")
        if parts[-1] and size + length > characters:
            parts.append([])
            size = 0
        parts[-1].append(row)
        size += length
    return parts
