"""PostgreSQL's statements: the shared SQL text over psycopg's named placeholders in the
adapter's schema (for DBAs and EXPLAIN as much as for the adapter)."""

from __future__ import annotations

from sandbox_ledger.sql import retention as ret
from sandbox_ledger.sql import rows
from sandbox_ledger.sql.statements import Statements


def _unnest(columns: tuple[tuple[str, str], ...]) -> str:
    """The rows of column arrays, numbered (``n``): ``unnest(...) WITH ORDINALITY AS r``.
    The arrays travel in binary (``%(name)b``): psycopg dumps a list several times faster
    so than as text."""
    arrays = ", ".join(f"%({name})b::{sql_type}[]" for name, sql_type in columns)
    names = ", ".join(name for name, _ in columns)
    return f"unnest({arrays}) WITH ORDINALITY AS r({names}, n)"


class Queries(Statements):
    """The SQL text the adapter runs, with the schema filled in (for DBAs and EXPLAIN): the
    shared statements, an append as one statement, and PostgreSQL's purge."""

    placeholder = "%s"

    def table(self, name: str) -> str:
        """The table ``name`` in the adapter's schema."""
        return f"{self.schema}.{name}"

    def param(self, name: str, sql_type: str | None = None) -> str:
        """The named parameter ``name``, cast to ``sql_type`` where a bare NULL needs one."""
        return f"%({name})s" + (f"::{sql_type}" if sql_type else "")

    def __init__(self, schema: str) -> None:
        s = self.schema = f'"{schema}"'
        super().__init__()
        # The schema's name is a checked identifier (_SCHEMA_NAME), safe to quote in.
        self.schema_exists = f"SELECT 1 WHERE to_regclass('{s}.ledger_schema') IS NOT NULL"
        # The summary upsert and the entry's insert in one statement: the unique append key
        # rolls both back together.
        self.append = f"""
WITH session AS ({self.upsert_session.strip()})
INSERT INTO {self.event_columns}
SELECT id, {self.event_values}
FROM session
"""
        # An import batch in two statements whatever its size (instead of a statement per
        # session and per entry): each row of the arrays in their order, so the sessions'
        # rows are locked in the batch's key order and the entries' seq follows the batch.
        # A row that does not change the summary has no summary expiry (NULL), which the
        # later of the two keeps as stored, as fold_session's `summarizes` does.
        retention = self.retention_seconds
        later = ret.later_summary_expiry("cur.summary_expires_at", "excluded.summary_expires_at")
        self.fold_sessions = f"""
INSERT INTO {self.sessions} AS cur {self.session_columns}
SELECT r.name, r.sandbox_id, r.started_at, r.completed_at,
       CASE WHEN r.completed_at IS NULL THEN 'running' ELSE 'completed' END,
       r.exec_delta, r.summary_ts_s + {retention}, r.ts_s + {retention}
FROM {_unnest(rows.SUMMARY_ARRAYS)}
ORDER BY r.n
{self.folded_into(later)}"""
        self.insert_keyed_events = f"""
INSERT INTO {self.event_columns}
SELECT s.id, r.ts, r.step_index, r.branch, r.event, r.payload, r.error, r.extra,
       r.append_key, r.ts_s + {retention}
FROM {_unnest(rows.EVENT_ARRAYS)}
JOIN {self.sessions} AS s ON s.name = r.name AND s.sandbox_id = r.sandbox_id
ORDER BY r.n
"""
        # An import's and an export's reads of many sessions, and the claims of a batch, as
        # one statement over arrays (psycopg parses a long IN or VALUES list anew per call).
        self.stored_claims = (
            f"SELECT append_key FROM {s}.ledger_events WHERE append_key = ANY (%(keys)b::text[])"
        )
        of_sessions = (
            f"SELECT s.name, s.sandbox_id, {rows.entry_columns('e')} "
            f"FROM unnest(%(name)b::text[], %(sandbox_id)b::text[]) AS k(name, sandbox_id) "
            f"JOIN {self.sessions} AS s ON s.name = k.name AND s.sandbox_id = k.sandbox_id "
            f"JOIN {s}.ledger_events AS e ON e.session_id = s.id"
        )
        self.stored_entries_of = f"{of_sessions} ORDER BY s.id, e.ts, e.seq"
        visible = ret.live("e.expires_at", "%(now)s")
        self.visible_entries_of = f"{of_sessions} AND {visible} ORDER BY s.id, e.seq"
        # Feed order is (writing transaction, seq); only transactions older than every one
        # still running are handed out (see schema/0006_changes.sql).
        self.changes_after = f"""
SELECT c.txid::text, c.seq, c.kind, c.name, c.sandbox_id, c.at FROM {s}.ledger_changes AS c
WHERE (c.txid, c.seq) > (%(x)s::text::xid8, %(q)s)
  AND c.txid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY c.txid, c.seq LIMIT %(limit)s
"""
        self.changes_pruned = f"SELECT txid::text, seq FROM {s}.ledger_changes_pruned"
        # The events go with their session (ON DELETE CASCADE), in this one statement.
        self.delete_sandbox = (
            f"DELETE FROM {s}.ledger_sessions WHERE name = %(name)s "
            "AND sandbox_id = %(sandbox_id)s",
        )
        # One bounded batch each, oldest expiry first, through the partial indexes on
        # expires_at; the batch's keys as an array, so the rows are then found by primary
        # key (an IN (subquery) may be planned as a hash join over the whole table). A
        # session goes only if it is still expired when its row is locked (PostgreSQL
        # re-checks the DELETE's own conditions on a row updated meanwhile): an append that
        # made it live again wins, and the cascade takes no live entry.
        self.purge_events = f"""
DELETE FROM {s}.ledger_events WHERE seq = ANY (ARRAY(
    SELECT seq FROM {s}.ledger_events WHERE expires_at <= %(now)s
    ORDER BY expires_at LIMIT %(limit)s))
"""
        self.purge_sessions = f"""
DELETE FROM {s}.ledger_sessions AS d
WHERE d.expires_at <= %(now)s AND d.id = ANY (ARRAY(
    SELECT s.id FROM {s}.ledger_sessions AS s
    WHERE s.expires_at <= %(now)s
      AND NOT EXISTS (SELECT 1 FROM {s}.ledger_events AS e WHERE e.session_id = s.id)
    ORDER BY s.expires_at LIMIT %(limit)s))
"""
