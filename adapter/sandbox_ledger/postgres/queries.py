"""PostgreSQL's statements: the shared SQL text over psycopg's named placeholders in the
adapter's schema (for DBAs and EXPLAIN as much as for the adapter)."""

from __future__ import annotations

from sandbox_ledger.sql.statements import Statements


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
