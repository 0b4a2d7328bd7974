"""SQLite's statements: the shared SQL text over SQLite's placeholders, an append as an upsert
and an insert in one transaction, and SQLite's purge (for DBAs and EXPLAIN as much as for the
adapter).

**Append keys are stored behind their session's id** (schema version 8): ``append_key`` holds
``<id>:<key>``, the session row's id as 16 hex digits, then the key an append computed
(:func:`sandbox_ledger.sql.rows.claim_key`, :func:`~sandbox_ledger.sql.rows.append_key`). The
key itself names its session already (its digest covers the name and sandboxId), so the
unique index refuses the same things as before; the prefix only orders the index by session,
so an import's new sessions append to its end instead of touching a random page of it per
entry (a random page per entry wrote most of a large ledger's index to the WAL on every
commit). :func:`stored_key` is the prefix in Python, ``STORED_KEY`` in SQL.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from sandbox_ledger.sql.rows import STAGED, EventRow
from sandbox_ledger.sql.statements import Statements

if TYPE_CHECKING:
    from collections.abc import Sequence


STORED_KEY = "printf('%016x:', {})"
"""The stored prefix of an append key, in SQL, over the session id's expression."""


def stored_key(session_id: int, key: str) -> str:
    """An append key as the events table stores it, behind its session's id (see the
    module). As SQL's printf('%016x') writes it: a negative id (set by hand) as its 64-bit
    two's complement, not with a minus sign."""
    return f"{session_id & 0xFFFFFFFFFFFFFFFF:016x}:{key}"


_PREFIX = len(stored_key(0, ""))

STAGE = "ledger_import"
"""The connection's private in-memory database an import batch stages its entries in
(attached by :func:`sandbox_ledger.sqlite.connection.attach_stage`)."""
STAGED_EVENTS = f"""
CREATE TABLE IF NOT EXISTS {STAGE}.staged_events (
    n INTEGER PRIMARY KEY, {", ".join(EventRow._fields[:STAGED])}
)"""
"""The stage's one table: a batch's entries in their order (``n``, given by SQLite as each
is inserted), each value as bound (no column type: nothing is converted before the events
table's own columns convert it); the columns after ``n`` are
:class:`~sandbox_ledger.sql.rows.EventRow`'s first ``STAGED`` fields, in its order."""


class Queries(Statements):
    """The SQL text the adapter runs (for DBAs and EXPLAIN): the shared statements, an append
    as an upsert and an insert in one transaction, and SQLite's purge."""

    placeholder = "?"
    schema_exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger_schema'"

    def param(self, name: str, sql_type: str | None = None) -> str:
        """The named parameter ``name`` (SQLite infers every type)."""
        return f":{name}"

    def __init__(self) -> None:
        super().__init__()
        # NULL when the session has no row yet: then nothing matches, as nothing is stored.
        self.claimed = f"""
SELECT 1 FROM ledger_events
WHERE append_key = (SELECT {STORED_KEY.format("id")} FROM ledger_sessions
                    WHERE name = :name AND sandbox_id = :sandbox_id) || :append_key
"""
        retention = self.retention_seconds
        self.insert_keyed_event = f"""
INSERT INTO ledger_events (session_id, ts, step_index, branch, event, payload, error, extra,
                           append_key, expires_at)
SELECT s.id, :ts, :step_index, :branch, :event, :payload, :error, :extra,
       {STORED_KEY.format("s.id")} || :append_key, :ts_s + {retention}
FROM ledger_sessions AS s WHERE s.name = :name AND s.sandbox_id = :sandbox_id
"""
        # An import batch's entries: staged (one cheap insert each into the in-memory stage,
        # its EventRow's first fields by position: rows.STAGED),
        # then inserted with one statement in the stage's order. A statement per entry costs
        # SQLite twice as much here: the change feed's trigger makes each its own statement
        # journal. CROSS JOIN keeps the stage the outer loop, so no sort is needed.
        self.stage_event = f"""
INSERT INTO {STAGE}.staged_events ({", ".join(EventRow._fields[:STAGED])})
VALUES ({", ".join("?" * STAGED)})
"""
        self.insert_staged_events = f"""
INSERT INTO ledger_events (session_id, ts, step_index, branch, event, payload, error, extra,
                           append_key, expires_at)
SELECT s.id, k.ts, k.step_index, k.branch, k.event, k.payload, k.error, k.extra,
       {STORED_KEY.format("s.id")} || k.append_key, k.ts_s + {retention}
FROM {STAGE}.staged_events AS k
CROSS JOIN ledger_sessions AS s ON s.name = k.name AND s.sandbox_id = k.sandbox_id
ORDER BY k.n
"""
        self.clear_stage = f"DELETE FROM {STAGE}.staged_events"
        # One writer at a time: seq is in commit order, the transaction part is always 0.
        self.changes_after = """
SELECT 0, seq, kind, name, sandbox_id, at FROM ledger_changes
WHERE seq > :q ORDER BY seq LIMIT :limit
"""
        self.changes_pruned = "SELECT 0, through FROM ledger_changes_pruned"
        # No cascade in this schema: the entries go first, then their session.
        self.delete_sandbox = (
            f"DELETE FROM ledger_events WHERE session_id = ({self.session_id})",
            "DELETE FROM ledger_sessions WHERE name = :name AND sandbox_id = :sandbox_id",
        )
        # One bounded batch each, oldest expiry first, through the partial indexes on expires_at.
        self.purge_events = """
DELETE FROM ledger_events WHERE seq IN (
    SELECT seq FROM ledger_events WHERE expires_at <= :now ORDER BY expires_at LIMIT :limit)
"""
        self.purge_sessions = """
DELETE FROM ledger_sessions WHERE id IN (
    SELECT s.id FROM ledger_sessions AS s
    WHERE s.expires_at <= :now
      AND NOT EXISTS (SELECT 1 FROM ledger_events AS e WHERE e.session_id = s.id)
    ORDER BY s.expires_at LIMIT :limit)
"""

    def claims_among(self, batch: Sequence[EventRow]) -> tuple[str, list[Any]]:
        """The claims stored among ``batch``'s append keys (as the rows hold them, without
        the prefix), in one query through the session key's and the append key's unique
        indexes."""
        values = ", ".join(["(?, ?, ?)"] * len(batch))
        sql = f"""
SELECT substr(e.append_key, {_PREFIX + 1})
FROM (VALUES {values}) AS k
JOIN ledger_sessions AS s ON s.name = k.column1 AND s.sandbox_id = k.column2
JOIN ledger_events AS e ON e.append_key = {STORED_KEY.format("s.id")} || k.column3
"""
        return sql, [part for r in batch for part in (r.name, r.sandbox_id, r.append_key)]


def split_statements(script: str) -> list[str]:
    """The statements of a DDL file, so they can run inside one transaction."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not all(
        part.strip().startswith("--") or not part.strip() for part in buffer.splitlines()
    ):
        raise ValueError(f"incomplete SQL statement at the end of a schema file: {buffer!r}")
    return statements
