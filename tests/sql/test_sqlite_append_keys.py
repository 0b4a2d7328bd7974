"""SQLite's append keys stored behind their session's id (schema version 8), and an import
batch's statement journals kept in memory.

Version 8 stores each append key as ``<session id, 16 hex digits>:<key>`` so the unique
index grows at its end for new sessions (an import's batch no longer writes a random page of
it per entry). What must hold: every path that writes or looks up a key uses the same form
(an entry an import batch wrote is present to a single ``append_once`` and the other way
round, ``append_at`` stays idempotent), a version 7 database's keys are rewritten on
``connect()`` so what it holds is still found, and the lookups go through the indexes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sandbox_ledger import LedgerEvent, StorageError
from sandbox_ledger.sql import bulk, rows
from sandbox_ledger.sqlite import SQLiteAdapter
from sandbox_ledger.sqlite import adapter as sqlite_module
from sandbox_ledger.sqlite.queries import stored_key
from sql.sql_store import entry as _entry

SESSION_A = [
    _entry(LedgerEvent.SandboxCreated, 1, sandbox_id="a"),
    _entry(LedgerEvent.ExecComplete, 2, sandbox_id="a", payload={"exitCode": 0}),
    _entry(LedgerEvent.ExecComplete, 2, sandbox_id="a", payload={"exitCode": 0}),
]
SESSION_B = [_entry(LedgerEvent.SandboxCreated, 5, sandbox_id="b")]


def _items(entries: list[Any]) -> list[tuple[Any, int]]:
    """Each entry with its occurrence among identical entries before it (as an import)."""
    seen: dict[str, int] = {}
    out = []
    for e in entries:
        key = e.model_dump_json()
        seen[key] = seen.get(key, 0) + 1
        out.append((e, seen[key]))
    return out


def _stored(path: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(path) as db:
        return list(
            db.execute(
                "SELECT session_id, append_key FROM ledger_events "
                "WHERE append_key IS NOT NULL ORDER BY seq"
            )
        )


async def test_every_write_path_stores_the_key_behind_its_session_id(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    async with SQLiteAdapter(path) as adapter:
        assert await adapter.append_once_many(_items(SESSION_A)) == [True, True, True]
        assert await adapter.append_once(SESSION_B[0], 1) is True
        await adapter.append_at(_entry(LedgerEvent.ExecStarted, 9, sandbox_id="b"), 7)
        await adapter.append(_entry(LedgerEvent.SandboxClosed, 10, sandbox_id="b"))
    expected_a = [rows.claim_key(e, n) for e, n in _items(SESSION_A)]
    expected_b = [
        rows.claim_key(SESSION_B[0], 1),
        rows.append_key(_entry(LedgerEvent.ExecStarted, 9, sandbox_id="b"), 7),
    ]
    stored = _stored(path)
    assert [key for _, key in stored] == [
        *(stored_key(stored[0][0], k) for k in expected_a),
        *(stored_key(stored[3][0], k) for k in expected_b),
    ]
    assert stored[0][0] != stored[3][0]
    assert stored_key(1, "i000001-x") == "0000000000000001:i000001-x"
    with sqlite3.connect(path) as db:  # a live append carries no key
        assert db.execute("SELECT count(*) FROM ledger_events").fetchone() == (6,)


async def test_the_batch_and_the_single_path_see_each_others_keys(tmp_path: Path) -> None:
    async with SQLiteAdapter(tmp_path / "l.db") as adapter:
        assert await adapter.append_once_many(_items(SESSION_A)) == [True, True, True]
        # What the batch wrote is present to the single path, each occurrence apart.
        assert await adapter.append_once(SESSION_A[1], 2) is False
        assert await adapter.append_once(SESSION_A[1], 3) is True
        # What the single path wrote is present to a batch, in a session the batch did not
        # create and in one it did.
        assert await adapter.append_once(SESSION_B[0], 1) is True
        batch = [*_items(SESSION_A), (SESSION_A[1], 3), (SESSION_B[0], 1)]
        assert await adapter.append_once_many(batch) == [False] * 5
        position = _entry(LedgerEvent.ExecStarted, 9, sandbox_id="b")
        await adapter.append_at(position, 7)
        await adapter.append_at(position, 7)
        assert [e.ts for e in await adapter.read_all("n", "a")] == [1, 2, 2, 2]
        assert [e.ts for e in await adapter.read_all("n", "b")] == [5, 9]
        details = await adapter.get_sandbox_details("n", "a")
        assert details is not None and details.exec_count == 3


async def test_a_version_7_database_keeps_what_it_holds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A database written by version 7 (keys without the prefix) is migrated on connect():
    its keys are rewritten, so an import run again finds every entry it wrote before, and
    an append_at at a position already used stores nothing."""
    path = tmp_path / "l.db"
    position = _entry(LedgerEvent.ExecStarted, 9, sandbox_id="b")
    async with SQLiteAdapter(path) as adapter:
        await adapter.append_once_many(_items(SESSION_A + SESSION_B))
        await adapter.append_at(position, 7)
        await adapter.append(_entry(LedgerEvent.SandboxClosed, 10, sandbox_id="b"))
    migrated = _stored(path)
    with sqlite3.connect(path) as db:  # what version 7 held: the keys alone, no trigger
        db.execute("DROP TRIGGER ledger_events_keys_by_session")
        db.execute("UPDATE ledger_events SET append_key = substr(append_key, 18)")
        db.execute("UPDATE ledger_schema SET version = 7")
    assert [key for _, key in _stored(path)] == [key[17:] for _, key in migrated]
    async with SQLiteAdapter(path) as adapter:
        assert await adapter.append_once_many(_items(SESSION_A + SESSION_B)) == [False] * 4
        assert await adapter.append_once(SESSION_A[2], 2) is False
        await adapter.append_at(position, 7)
        assert len(await adapter.read_all("n", "a")) == 3
        assert len(await adapter.read_all("n", "b")) == 3
    assert "from version 7 to 9 (0008_append_keys_by_session, 0009_" in caplog.text
    with sqlite3.connect(path) as db:
        assert db.execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'ledger_events_keys_by_session'"
        ).fetchone() == (1,)
    assert _stored(path) == migrated
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM ledger_schema").fetchone() == (
            sqlite_module.SCHEMA_VERSION,
        )
        assert db.execute("SELECT count(*) FROM ledger_events").fetchone() == (6,)


async def test_an_older_library_s_keyed_insert_is_refused(tmp_path: Path) -> None:
    """A process of version 7 that connected before the migration would write a key without
    the prefix (found by no lookup of this version: an entry stored twice): the schema
    refuses it, and still takes a live append's row (no key) and this version's keys."""
    path = tmp_path / "l.db"
    async with SQLiteAdapter(path) as adapter:
        await adapter.append_once_many(_items(SESSION_A))
    insert = (
        "INSERT INTO ledger_events (session_id, ts, step_index, event, append_key) "
        "VALUES (1, 9, 0, 'exec.started', ?)"
    )
    with sqlite3.connect(path) as db:
        with pytest.raises(sqlite3.IntegrityError, match="older than schema version 8"):
            db.execute(insert, (rows.claim_key(SESSION_A[0], 9),))
        db.execute(insert, (None,))
        db.execute(insert, (stored_key(1, rows.claim_key(SESSION_A[0], 9)),))
        assert db.execute("SELECT count(*) FROM ledger_events").fetchone() == (5,)


def _plan(path: Path, sql: str, params: Any) -> list[str]:
    with sqlite3.connect(path) as db:
        return [row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", params)]


async def test_the_key_lookups_go_through_the_indexes(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    async with SQLiteAdapter(path) as adapter:
        await adapter.append_once_many(_items(SESSION_A))
        q = adapter.queries
    row = rows.encode_entry(SESSION_A[0], key=rows.claim_key(SESSION_A[0], 1))
    params = rows.append_params(row)
    sql, listed = q.claims_among([row, row])
    for plan in (
        _plan(path, sql, listed),
        _plan(path, q.claimed, params),
        _plan(path, q.insert_keyed_event, params),
    ):
        # Only the list of keys itself (VALUES, alias k) is scanned; every table is searched.
        for step in plan:
            if step.startswith("SCAN"):
                assert step == "SCAN k" or step.endswith("CONSTANT ROWS"), plan
            if step.startswith("SEARCH"):
                assert "USING" in step and ("INDEX" in step or "PRIMARY KEY" in step), plan
        assert any(s.startswith("SEARCH") for s in plan), plan
    assert any("ledger_events_1 (append_key=?)" in s for s in _plan(path, sql, listed))


async def test_an_import_batch_keeps_its_statement_journals_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a batch temp_store is MEMORY; after it, successful or not, the connection is
    back at its default (a large sort spills to disk again)."""
    seen: list[Any] = []
    write = bulk._write

    async def spying(adapter: Any, conn: Any, batch: Any) -> Any:
        seen.append(await conn.rows("PRAGMA temp_store"))
        if len(seen) == 2:
            raise StorageError("refused mid-batch")
        return await write(adapter, conn, batch)

    monkeypatch.setattr(bulk, "_write", spying)
    async with SQLiteAdapter(tmp_path / "l.db") as adapter:
        assert await adapter.append_once_many(_items(SESSION_A)) == [True] * 3
        assert await adapter._fetchall("PRAGMA temp_store", []) == [(0,)]
        with pytest.raises(StorageError, match="refused mid-batch"):
            await adapter.append_once_many(_items(SESSION_B))
        assert await adapter._fetchall("PRAGMA temp_store", []) == [(0,)]
        assert await adapter.read_all("n", "b") == []
    assert seen == [[(2,)], [(2,)]]


async def test_a_negative_session_id_set_by_hand_keys_alike_in_python_and_sql(
    tmp_path: Path,
) -> None:
    # SQL's printf('%016x', -5) is 'fffffffffffffffb'; Python's f"{-5:016x}" was
    # '-000000000000005': append_once stored a key its own lookup (and the batch's) missed.
    path = tmp_path / "l.db"
    async with SQLiteAdapter(path) as adapter:
        await adapter.append(SESSION_B[0])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE ledger_events SET session_id = -5")
        db.execute("UPDATE ledger_sessions SET id = -5")
    entry = _entry(LedgerEvent.ExecComplete, 2, sandbox_id="b", payload={"exitCode": 0})
    async with SQLiteAdapter(path) as adapter:
        assert await adapter.append_once(entry, 1) is True
        assert await adapter.append_once(entry, 1) is False
        assert await adapter.append_once_many([(entry, 1)]) == [False]
    assert [key for _, key in _stored(path)] == ["fffffffffffffffb:" + rows.claim_key(entry, 1)]
