"""SQLite never hands a session's row id out again (schema version 9), so a follow position,
which holds it, never resumes inside another session (issue 41, item 2)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sandbox_ledger import LedgerEvent
from sandbox_ledger.sqlite import SQLiteAdapter
from sandbox_ledger.sqlite import adapter as sqlite_module
from sandbox_ledger.testing.follow import collect
from sql.sql_store import entry as _entry


def _version_8(path: Path) -> None:
    """A database as version 8 of the library left it: two sessions, the second holding the
    largest row id, their entries and their changes."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA foreign_keys = ON")
        for migration in sqlite_module.MIGRATIONS[:8]:
            db.executescript(migration.sql)
        db.execute(
            "CREATE TABLE ledger_schema (id INTEGER PRIMARY KEY CHECK (id = 1), "
            "version INTEGER NOT NULL)"
        )
        db.execute("INSERT INTO ledger_schema (id, version) VALUES (1, 8)")
        for sandbox_id in ("a", "b"):
            db.execute(
                "INSERT INTO ledger_sessions (name, sandbox_id, started_at, completed_at, "
                "status, exec_count) VALUES ('n', ?, 1, 3, 'completed', 1)",
                (sandbox_id,),
            )
            for ts, event in ((1, "sandbox.created"), (2, "exec.complete"), (3, "sandbox.closed")):
                db.execute(
                    "INSERT INTO ledger_events (session_id, ts, step_index, event) "
                    "SELECT id, ?, 0, ? FROM ledger_sessions WHERE sandbox_id = ?",
                    (ts, event, sandbox_id),
                )
        assert "AUTOINCREMENT" not in _sessions_ddl(db)


def _sessions_ddl(db: sqlite3.Connection) -> str:
    [(sql,)] = db.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'ledger_sessions'"
    ).fetchall()
    return str(sql)


def _schema(db: sqlite3.Connection) -> set[tuple[str, str, str]]:
    """Every index and trigger with the table it is on (not their text: the migration may
    spell them otherwise)."""
    return {
        (str(t), str(n), str(on))
        for t, n, on in db.execute(
            "SELECT type, name, tbl_name FROM sqlite_master WHERE type IN ('index', 'trigger')"
        )
    }


async def test_a_version_8_database_keeps_its_sessions_and_never_reuses_their_ids(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "l.db"
    _version_8(path)
    with sqlite3.connect(path) as db:
        before = db.execute("SELECT * FROM ledger_sessions ORDER BY id").fetchall()
        events = db.execute("SELECT * FROM ledger_events ORDER BY seq").fetchall()
        changes = db.execute("SELECT * FROM ledger_changes ORDER BY seq").fetchall()
        schema = _schema(db)
    async with SQLiteAdapter(path) as adapter:
        assert [e.ts for e in await adapter.read_all("n", "b")] == [1, 2, 3]
        assert [d.sandbox_id for d in await adapter.list_sandbox_details("n")] == ["a", "b"]
        [*_, last] = await collect(adapter, "n", "b")
        await adapter.delete_sandbox("n", "b")
        await adapter.append(_entry(LedgerEvent.SandboxCreated, 9, sandbox_id="b"))
        await adapter.append(_entry(LedgerEvent.SandboxClosed, 10, sandbox_id="b"))
        # A position of the deleted session ends at once (it was taken after the migration).
        assert await collect(adapter, "n", "b", after=last.position, until_closed=False) == []
    assert "from version 8 to 9 (0009_session_ids_never_reused)" in caplog.text
    with sqlite3.connect(path) as db:
        assert "AUTOINCREMENT" in _sessions_ddl(db)
        assert _schema(db) == schema  # every index and trigger back, on the same tables
        rows = db.execute("SELECT * FROM ledger_sessions ORDER BY id").fetchall()
        assert rows[0] == before[0]  # kept as it was, its id included
        assert [r[:3] for r in rows] == [(1, "n", "a"), (3, "n", "b")]  # 2 is never reused
        assert db.execute("SELECT * FROM ledger_events WHERE seq <= 3").fetchall() == events[:3]
        kinds = [r[1] for r in db.execute("SELECT * FROM ledger_changes ORDER BY seq")]
        assert db.execute("SELECT * FROM ledger_changes ORDER BY seq LIMIT 4").fetchall() == (
            changes
        )
        # The triggers work on the new table: the delete and the new session are changes.
        assert kinds[4:] == ["session.deleted", "session.created", "session.closed"]
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


async def test_the_largest_id_deleted_is_never_taken_again(tmp_path: Path) -> None:
    async with SQLiteAdapter(tmp_path / "l.db") as adapter:
        for sandbox_id in ("a", "b"):
            await adapter.append(_entry(LedgerEvent.SandboxCreated, 1, sandbox_id=sandbox_id))
        ids = set()
        for ts in range(2, 6):
            await adapter.delete_sandbox("n", "b")
            await adapter.append(_entry(LedgerEvent.SandboxCreated, ts, sandbox_id="b"))
            with sqlite3.connect(tmp_path / "l.db") as db:
                [(found,)] = db.execute("SELECT id FROM ledger_sessions WHERE sandbox_id = 'b'")
            ids.add(found)
        assert len(ids) == 4 and min(ids) > 2
