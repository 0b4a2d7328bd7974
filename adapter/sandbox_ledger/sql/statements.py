"""The SQL text of the contract, written once over a dialect's table names and placeholders.

Every statement takes named parameters (``name``, ``sandbox_id``, ``now``, ...), so the
contract in :mod:`sandbox_ledger.sql.adapter` passes the same mapping to either dialect. A
dialect subclasses :class:`Statements`: it says how a table and a parameter are spelled and
adds the statements that differ in kind (the append, the purge, the deletion of a session).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.sql import retention as ret
from sandbox_ledger.sql import rows

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Statements"]

_CHECKPOINT = LedgerEvent.CheckpointCreated.value
_ENTRY_COLUMNS = rows.entry_columns("e")


class Statements:
    """The statements both dialects share, in one dialect's spelling (for DBAs and EXPLAIN)."""

    placeholder: ClassVar[str]
    """The driver's positional placeholder (``?``, ``%s``), for the listing's SELECT."""
    schema_exists: str
    """A SELECT that returns a row if and only if the table ``ledger_schema`` exists."""
    delete_sandbox: tuple[str, ...]
    """What deletes a session's entries and summary (``name``, ``sandbox_id``), in order."""
    purge_events: str
    """One batch (``limit`` rows) of the entries expired by ``now``, oldest expiry first."""
    purge_sessions: str
    """One batch of the session rows expired by ``now`` whose entries are all gone."""
    changes_after: str
    """The fleet's changes after the position (``x``, ``q``), at most ``limit``, in feed
    order: (transaction, seq, kind, name, sandbox_id, at) rows (see
    :mod:`sandbox_ledger.sql.changes`)."""
    changes_pruned: str
    """The (transaction, seq) of the last change pruned."""
    fold_sessions: str | None = None
    """An import batch's summary upserts as one statement over column arrays (each of
    :data:`sandbox_ledger.sql.rows.SUMMARY_ARRAYS` an array, a session each), or None: the
    dialect runs ``fold_session`` once per session instead."""
    stored_claims: str | None = None
    """The claims (``append_key``) stored among the array ``keys``, in one statement; None:
    the dialect asks a few hundred keys at a time (``IN``)."""
    stored_entries_of: str | None = None
    """The entries, expired ones included, of the sessions of the arrays ``name`` and
    ``sandbox_id`` (the session's name and id, then the entry's columns, by session and
    ascending ts), in one statement; None: a few hundred sessions at a time (``VALUES``)."""
    visible_entries_of: str | None = None
    """As ``stored_entries_of``, the entries still visible at ``now`` (Unix s), by session
    in append order: an export's read."""
    insert_keyed_events: str | None = None
    """An import batch's entries as one statement over column arrays (each of
    :data:`sandbox_ledger.sql.rows.EVENT_ARRAYS` an array, an entry each), inserted in the
    arrays' order, or None: ``insert_keyed_event`` once per entry."""
    stage_event: str | None = None
    """Where the dialect has no arrays: one entry of an import batch put in the
    connection's stage, its :class:`~sandbox_ledger.sql.rows.EventRow`'s first
    ``rows.STAGED`` fields bound by position (the stage numbers the entries in the order
    they are put); then
    ``insert_staged_events`` inserts the stage's entries in one statement, in that order,
    and ``clear_stage`` empties it. None: ``insert_keyed_event`` once per entry."""
    insert_staged_events: str | None = None
    """See ``stage_event``."""
    clear_stage: str | None = None
    """See ``stage_event``."""

    def table(self, name: str) -> str:
        """A ledger table's name as the statements write it (schema-qualified or bare)."""
        return name

    def param(self, name: str, sql_type: str | None = None) -> str:
        """The named parameter ``name``; ``sql_type`` where a bare NULL needs one."""
        raise NotImplementedError

    def __init__(self) -> None:
        p = self.param
        sessions, events = self.table("ledger_sessions"), self.table("ledger_events")
        environments, settings = self.table("ledger_environments"), self.table("ledger_settings")
        self.sessions = sessions
        self.retention_seconds = ret.retention_of(settings)
        """The database's retention as a scalar subquery, for the dialect's append."""
        self.session_id = (
            f"SELECT id FROM {sessions} WHERE name = {p('name')} AND sandbox_id = {p('sandbox_id')}"
        )
        live = ret.live("e.expires_at", p("now"))
        of_session = f"FROM {events} AS e WHERE e.session_id = ({self.session_id})"
        self.read_all = f"""
SELECT {_ENTRY_COLUMNS}
{of_session} AND {live}
ORDER BY e.ts, e.seq
"""
        self.read_in_append_order = f"""
SELECT {_ENTRY_COLUMNS}
{of_session} AND {live}
ORDER BY e.seq
"""
        self.sessions_with_entries = f"""
SELECT s.name, s.sandbox_id FROM {sessions} AS s
WHERE ({p("name", "text")} IS NULL OR s.name = {p("name")})
  AND EXISTS (SELECT 1 FROM {events} AS e WHERE e.session_id = s.id AND {live})
"""
        self.checkpoints = f"""
SELECT e.ts, e.payload
{of_session} AND e.event = '{_CHECKPOINT}' AND {live}
ORDER BY e.ts, e.seq
"""
        self.last_checkpoint = f"""
SELECT {_ENTRY_COLUMNS}
{of_session} AND e.event = '{_CHECKPOINT}' AND {live}
ORDER BY e.ts DESC, e.seq DESC
LIMIT 1
"""
        # An append's summary upsert, computed by the database under the session row's lock
        # (never read and rewritten from Python), and the values of its entry row.
        ts_s, retention = p("ts_s", "bigint"), self.retention_seconds
        later_summary = ret.later_summary_expiry(
            "cur.summary_expires_at", "excluded.summary_expires_at"
        )
        summary_expiry = (
            f"CASE WHEN {p('summarizes')} THEN {later_summary} ELSE cur.summary_expires_at END"
        )
        self.session_columns = (
            "(name, sandbox_id, started_at, completed_at, status, exec_count, "
            "summary_expires_at, expires_at)"
        )
        self.fold_session = f"""
INSERT INTO {sessions} AS cur {self.session_columns}
VALUES ({p("name")}, {p("sandbox_id")}, {p("started_at")}, {p("completed_at")},
        CASE WHEN {p("completed_at", "bigint")} IS NULL THEN 'running' ELSE 'completed' END,
        {p("exec_delta")},
        {p("summary_ts_s", "bigint")} + {retention}, {ts_s} + {retention})
{self.folded_into(summary_expiry)}"""
        """The summary upsert without a result (an import batch runs it once per session)."""
        self.upsert_session = f"{self.fold_session}RETURNING id\n"
        self.event_columns = (
            f"{events} (session_id, ts, step_index, branch, event, payload, error, extra, "
            "append_key, expires_at)"
        )
        self.event_values = (
            f"{p('ts')}, {p('step_index')}, {p('branch')}, {p('event')}, {p('payload')}, "
            f"{p('error')}, {p('extra')}, {p('append_key')}, {ts_s} + {retention}"
        )
        self.insert_event = (
            f"INSERT INTO {self.event_columns}\nVALUES ({p('session_id')}, {self.event_values})"
        )
        self.insert_keyed_event = (
            f"INSERT INTO {self.event_columns}\nVALUES (({self.session_id}), {self.event_values})"
        )
        """An entry's insert that finds its session's id by the session key's unique index."""
        self.details = f"""
SELECT name, sandbox_id, started_at, completed_at, exec_count FROM {sessions}
WHERE name = {p("name")} AND sandbox_id = {p("sandbox_id")} AND started_at IS NOT NULL
  AND {ret.live("summary_expires_at", p("now"))}
"""
        self.get_environment = f"SELECT record FROM {environments} WHERE name = {p('name')}"
        self.save_environment = f"""
INSERT INTO {environments} (name, built_at, record)
VALUES ({p("name")}, {p("built_at")}, {p("record")})
ON CONFLICT (name) DO UPDATE SET built_at = excluded.built_at, record = excluded.record
"""
        self.delete_environment = f"DELETE FROM {environments} WHERE name = {p('name')}"
        self.list_environments = f"SELECT record FROM {environments} ORDER BY built_at DESC, id"
        self.retention = f"SELECT retention_seconds FROM {settings} WHERE id = 1"
        self.store_id = f"SELECT store_id FROM {settings} WHERE id = 1"
        self.record_retention = (
            f"UPDATE {settings} SET retention_seconds = {p('seconds')} "
            "WHERE id = 1 AND retention_seconds IS NULL"
        )
        schema = self.table("ledger_schema")
        self.version_table = f"""
CREATE TABLE IF NOT EXISTS {schema} (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
)
"""
        self.version = f"SELECT version FROM {schema} WHERE id = 1"
        self.set_version = f"""
INSERT INTO {schema} (id, version) VALUES (1, {p("version")})
ON CONFLICT (id) DO UPDATE SET version = excluded.version
"""

    @staticmethod
    def folded_into(summary_expiry: str) -> str:
        """The summary upsert's conflict clause: a session's new entries folded into its
        stored summary (``cur``), its expiry set by ``summary_expiry``."""
        return f"""ON CONFLICT (name, sandbox_id) DO UPDATE SET
    started_at = coalesce(cur.started_at, excluded.started_at),
    completed_at = coalesce(cur.completed_at, excluded.completed_at),
    status = CASE WHEN coalesce(cur.completed_at, excluded.completed_at) IS NULL
                  THEN 'running' ELSE 'completed' END,
    exec_count = cur.exec_count + excluded.exec_count,
    summary_expires_at = {summary_expiry},
    expires_at = {ret.latest_expiry("cur.expires_at", "excluded.expires_at")}
"""

    def sessions_among(self, sessions: Sequence[tuple[str, str]]) -> tuple[str, list[Any]]:
        """The query of which of ``sessions`` (name, sandboxId; a few hundred) the store
        holds, and its parameters: an entry, and so a claim, exists only in a session that
        does, so a dialect without ``stored_claims`` asks for claims in those alone."""
        ph = self.placeholder
        values = ", ".join([f"({ph}, {ph})"] * len(sessions))
        sql = (
            f"SELECT s.name, s.sandbox_id FROM (VALUES {values}) AS k JOIN {self.sessions} AS s "
            "ON s.name = k.column1 AND s.sandbox_id = k.column2"
        )
        return sql, [part for key in sessions for part in key]

    def claims_among(self, batch: Sequence[rows.EventRow]) -> tuple[str, list[Any]]:
        """The query of the claims stored among ``batch``'s append keys (a few hundred), and
        its parameters: what a dialect without ``stored_claims`` runs (it returns each key
        stored, as the rows hold it)."""
        events, ph = self.table("ledger_events"), self.placeholder
        listed = ", ".join([ph] * len(batch))
        sql = f"SELECT append_key FROM {events} WHERE append_key IN ({listed})"
        return sql, [r.append_key for r in batch]

    def list_sessions(self, query: rows.ListQuery, now: int | None = None) -> tuple[str, list[Any]]:
        """The listing SELECT and its parameters (``now``: Unix s, default the clock's)."""
        now = int(time.time()) if now is None else now
        return rows.list_sql(query, now, table=self.sessions, param=self.placeholder)
