"""SQLite's statements: the shared SQL text over SQLite's placeholders, an append as an upsert
and an insert in one transaction, and SQLite's purge (for DBAs and EXPLAIN as much as for the
adapter)."""

from __future__ import annotations

import sqlite3

from sandbox_ledger.sql.statements import Statements


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
        self.claimed = "SELECT 1 FROM ledger_events WHERE append_key = :append_key"
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
