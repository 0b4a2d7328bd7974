"""An import batch (``append_once_many``) leaves the database exactly as appending its entries
one by one would, on both dialects: the summaries (first created and closed, execs counted,
expiries that never move back) and the entries (in the batch's order, with their expiries).
PostgreSQL writes a batch as two statements over column arrays, SQLite its summaries row by
row and its entries from an in-memory stage in one statement: both are held to the one-by-one
append."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sandbox_ledger import LedgerEntry, LedgerEvent
from sql.sql_store import Store, entry

E = LedgerEvent


def batches(name: str, now_ms: int) -> list[list[tuple[LedgerEntry, int]]]:
    """Three batches of three sessions, entries out of ts order, a second created, the same
    content twice, a session that never changes its summary."""

    def e(sid: str, event: str, dt: int, **kw: Any) -> LedgerEntry:
        return entry(event, now_ms + dt, name=name, sandbox_id=sid, **kw)

    return [
        [
            (e("x", E.SandboxCreated, 5_000), 1),
            (e("x", E.ExecComplete, 6_000), 1),
            (e("y", E.ExecStarted, 2_000), 1),
        ],
        [
            (e("x", E.ExecStarted, 9_000), 1),
            (e("x", E.ExecComplete, 1_000), 1),
            (e("x", E.SandboxClosed, 8_000), 1),
            (e("y", E.CheckpointCreated, 3_000, payload={"snapshotId": "s1"}), 1),
            (e("z", E.SandboxCreated, 100), 1),
            (e("z", E.SandboxClosed, 200), 1),
        ],
        [
            (e("x", E.SandboxCreated, 50), 1),
            (e("x", E.ExecComplete, 6_000), 2),  # the same content as batch 1's, again
            (e("y", E.ExecFailed, 4_000, error="boom"), 1),
        ],
    ]


def state(store: Store, name: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    sessions = store.query(
        "SELECT sandbox_id, started_at, completed_at, status, exec_count, summary_expires_at, "
        "expires_at FROM ledger_sessions WHERE name = ? ORDER BY sandbox_id",
        name,
    )
    events = store.query(
        "SELECT s.sandbox_id, e.ts, e.event, e.error, e.payload, e.expires_at "
        "FROM ledger_events AS e JOIN ledger_sessions AS s ON s.id = e.session_id "
        "WHERE s.name = ? ORDER BY e.seq",
        name,
    )
    return sessions, events


@pytest.mark.parametrize("retention", [None, timedelta(days=30)], ids=["forever", "30d"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_an_import_batch_stores_what_appending_each_entry_stores(
    kind: str, retention: timedelta | None, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = Store(kind, tmp_path, request)
    now_ms = time.time_ns() // 1_000_000
    async with store.opened(retention) as ledger:
        for batch in batches("one-by-one", now_ms):
            for item, _ in batch:
                await ledger.append(item)
        for batch in batches("batched", now_ms):
            assert await ledger.append_once_many(batch) == [True] * len(batch)
    sessions, events = state(store, "batched")
    assert (sessions, events) == state(store, "one-by-one")
    # What the two agree on is what the contract says, not a shared mistake:
    x = next(s for s in sessions if s[0] == "x")
    assert x[1:5] == (now_ms + 5_000, now_ms + 8_000, "completed", 3)
    assert [(sid, ts - now_ms) for sid, ts, *_ in events][:3] == [
        ("x", 5_000),
        ("x", 6_000),
        ("y", 2_000),
    ]
    if retention is None:
        assert {s[5] for s in sessions} | {s[6] for s in sessions} == {None}
    else:
        seconds = int(retention.total_seconds())
        assert x[5] == (now_ms + 8_000) // 1000 + seconds  # the latest that summarizes
        assert x[6] == (now_ms + 9_000) // 1000 + seconds  # the latest entry
        y = next(s for s in sessions if s[0] == "y")
        assert y[1:6] == (None, None, "running", 0, None)  # nothing that summarizes


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_batch_of_large_entries_is_inserted_in_several_statements_in_order(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL takes a batch's entries as arrays in one statement, SQLite from its
    in-memory stage in one statement, cut where their text grows past a bound (here 3
    characters instead of 16 Mi): the statements, in order, store what one would, and what
    appending each entry stores."""
    from sandbox_ledger.postgres import adapter as pg
    from sandbox_ledger.sql import bulk
    from sandbox_ledger.sqlite.connection import SQLiteConnection

    monkeypatch.setattr(bulk, "_ARRAY_CHARACTERS", 3)
    store = Store(kind, tmp_path, request)
    inserts: list[int] = []
    count, many = pg._Connection.count, SQLiteConnection.many

    async def counted(self: Any, sql: str, params: Any = None) -> int:
        if "unnest" in sql and "ledger_events" in sql.split("SELECT")[0]:
            inserts.append(len(params["ts"]))
        return int(await count(self, sql, params))

    async def staged(self: Any, sql: str, params: Any) -> int:
        if "staged_events" in sql:
            inserts.append(len(params))
        return int(await many(self, sql, params))

    monkeypatch.setattr(pg._Connection, "count", counted)
    monkeypatch.setattr(SQLiteConnection, "many", staged)
    now_ms = time.time_ns() // 1_000_000
    async with store.opened(timedelta(days=30)) as ledger:
        for batch in batches("one-by-one", now_ms):
            for item, _ in batch:
                await ledger.append(item)
        for batch in batches("batched", now_ms):
            assert await ledger.append_once_many(batch) == [True] * len(batch)
    assert state(store, "batched") == state(store, "one-by-one")
    # batch 1: no text; batch 2: cut before and after the checkpoint's payload; batch 3:
    # before the error
    assert inserts == [3, 3, 1, 2, 2, 1], inserts


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_an_executemany_says_how_many_rows_it_changed(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The dialects' ``many`` sums the rows its statements changed (what the batch's check
    of its inserts counts on)."""
    store = Store(kind, tmp_path, request)
    async with store.opened() as ledger:
        ph, table = ledger.queries.param, ledger.queries.table("ledger_environments")
        insert = (
            f"INSERT INTO {table} (name, built_at, record) "
            f"VALUES ({ph('name')}, {ph('built_at')}, '{{}}')"
        )
        rename = f"UPDATE {table} SET built_at = 0 WHERE name <> {ph('name')}"
        names = [{"name": n, "built_at": 1} for n in ("a", "b", "c")]
        assert (
            await ledger._writing(lambda conn: conn.many(insert, names), one_statement=False) == 3
        )
        changed = await ledger._writing(
            lambda conn: conn.many(rename, [{"name": "a"}, {"name": "zz"}]), one_statement=False
        )
        assert changed == 2 + 3


async def test_a_batch_whose_entries_find_no_session_stores_nothing(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite inserts each entry from its session's row, upserted by the batch just before:
    if that row were missing, the batch would report entries stored that it did not write.
    It fails instead, and its transaction leaves nothing."""
    from sandbox_ledger.errors import StorageError

    store = Store("sqlite", tmp_path, request)
    now_ms = time.time_ns() // 1_000_000
    async with store.opened() as ledger:
        monkeypatch.setattr(
            ledger.queries,
            "fold_session",
            "UPDATE ledger_sessions SET exec_count = exec_count WHERE name = :name AND 0",
        )
        with pytest.raises(StorageError, match="inserted 0 of its 3 entries"):
            await ledger.append_once_many(batches("lost", now_ms)[0])
        assert await ledger.read_all("lost", "x") == []
    assert store.query("SELECT count(*) FROM ledger_events") == [(0,)]


def _stage(ledger: Any) -> Any:
    """What the adapter's connection holds in its import stage: (rows, pages)."""

    async def read(conn: Any) -> tuple[int, int]:
        [(rows,)] = await conn.rows("SELECT count(*) FROM ledger_import.staged_events")
        [(pages,)] = await conn.rows("PRAGMA ledger_import.page_count")
        return rows, pages

    return ledger._read(read)


async def test_sqlite_stages_a_batch_in_memory_and_leaves_nothing_staged(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite stages a batch's entries in an in-memory database of its connection, then
    inserts them with one statement: nothing of the stage is in the file, the stage is empty
    after a batch that stored, after one that failed, and after one of large entries (whose
    pages are given back), and a batch that failed leaves nothing in the file."""
    from sandbox_ledger.errors import StorageError
    from sandbox_ledger.sqlite.connection import SQLiteConnection

    store = Store("sqlite", tmp_path, request)
    staged: list[int] = []
    many = SQLiteConnection.many

    async def counted(self: Any, sql: str, params: Any) -> int:
        if "staged_events" in sql:
            staged.append(len(params))
        return int(await many(self, sql, params))

    monkeypatch.setattr(SQLiteConnection, "many", counted)
    now_ms = time.time_ns() // 1_000_000
    async with store.opened() as ledger:
        for batch in batches("staged", now_ms):
            assert await ledger.append_once_many(batch) == [True] * len(batch)
        assert staged == [3, 6, 3]  # each batch staged whole (no text anywhere near 16 Mi)
        empty = await _stage(ledger)
        assert empty[0] == 0 and empty[1] <= 3  # the schema, the table's root, a pointer map
        large = [
            (entry(E.ExecComplete, now_ms + i, name="large", payload={"out": "x" * 2**20}), 1)
            for i in range(12)
        ]
        assert await ledger.append_once_many(large) == [True] * 12
        assert await _stage(ledger) == empty  # 12 MiB staged, given back at the commit
        with monkeypatch.context() as m:
            # The statement fails at the batch's second entry, the first already inserted.
            failing = ledger.queries.insert_staged_events.replace(
                "k.event,", "CASE k.n WHEN 1 THEN NULL ELSE k.event END,", 1
            )
            assert failing != ledger.queries.insert_staged_events
            m.setattr(ledger.queries, "insert_staged_events", failing)
            with pytest.raises(StorageError, match="NOT NULL"):
                await ledger.append_once_many(batches("failed", now_ms)[1])
        assert await _stage(ledger) == empty
        assert await ledger.read_all("failed", "x") == []
        assert await ledger.list_sandbox_details("failed") == []
        assert len(await ledger.read_all("large", "s")) == 12
    assert store.query(
        "SELECT count(*) FROM ledger_events AS e JOIN ledger_sessions AS s "
        "ON s.id = e.session_id WHERE s.name = 'failed'"
    ) == [(0,)]
    assert store.query("SELECT name FROM sqlite_master WHERE name LIKE '%staged%'") == []


async def test_sqlite_attaches_its_stage_once_however_often_the_connection_is_set_up(
    tmp_path: Path,
) -> None:
    """``_set_up`` is retried whole while another writer holds the file: the stage is
    attached once and kept (an ATTACH of a name in use would fail the retry)."""
    import aiosqlite

    from sandbox_ledger.sqlite.connection import attach_stage

    async with aiosqlite.connect(tmp_path / "twice.db") as db:
        await attach_stage(db)
        await db.execute("INSERT INTO ledger_import.staged_events (n) VALUES (1)")
        await attach_stage(db)
        async with db.execute("SELECT count(*) FROM ledger_import.staged_events") as cursor:
            assert await cursor.fetchone() == (1,)
        async with db.execute("PRAGMA database_list") as cursor:
            assert [row[1] for row in await cursor.fetchall()].count("ledger_import") == 1


async def test_a_sqlite_batch_lands_with_the_connections_temporary_database_open(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A batch keeps SQLite's statement journals in memory (``temp_store``) and switches
    back after it, outside its transaction: inside one, SQLite refuses the switch once the
    connection has a temporary database (here a TEMP table), and the import would fail."""
    store = Store("sqlite", tmp_path, request)
    now_ms = time.time_ns() // 1_000_000
    async with store.opened() as ledger:

        async def temporary(conn: Any) -> None:
            await conn.count("CREATE TEMP TABLE scratch (x)")

        await ledger._read(temporary)
        for batch in batches("temp", now_ms):
            assert await ledger.append_once_many(batch) == [True] * len(batch)

        async def setting(conn: Any) -> Any:
            return await conn.rows("PRAGMA temp_store")

        assert await ledger._read(setting) == [(0,)]  # back to the default
    assert len(store.query("SELECT 1 FROM ledger_events")) == 12


async def test_sqlite_asks_for_claims_only_in_the_sessions_it_holds(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A claim exists only in a session the store holds: a batch first asks which of its
    sessions the store holds (under the write lock) and asks for claims in those alone. A
    batch of new sessions (a move) asks for none; one that repeats a held session's entries
    finds each of their claims, and stores them once."""
    from sandbox_ledger.sqlite.connection import SQLiteConnection

    asked: list[int] = []
    rows = SQLiteConnection.rows

    async def counting(self: Any, sql: str, params: Any = None) -> list[Any]:
        if "append_key" in sql.split("FROM")[0] and "VALUES" in sql:
            asked.append(len(params) // 3)
        return list(await rows(self, sql, params))

    def items(session: str) -> list[tuple[LedgerEntry, int]]:
        events = [LedgerEvent.SandboxCreated, LedgerEvent.ExecStarted, LedgerEvent.SandboxClosed]
        return [(entry(e, 1_000 + i, sandbox_id=session), 1) for i, e in enumerate(events)]

    store = Store("sqlite", tmp_path, request)
    async with store.opened() as ledger:
        with pytest.MonkeyPatch.context() as m:
            m.setattr(SQLiteConnection, "rows", counting)
            fresh = items("a") + items("b")
            assert await ledger.append_once_many(fresh) == [True] * 6
            assert asked == []
            again = items("b") + items("c")  # b's three held, c new
            assert await ledger.append_once_many(again) == [False] * 3 + [True] * 3
            assert asked == [3]
        assert len(await ledger.read_all("n", "b")) == 3
