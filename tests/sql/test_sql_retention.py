"""Ledger retention on the SQL stores: recorded in the database (``ledger_settings``), agreed
by every adapter, applied to databases made before it existed, and reclaimed by a purge.

The shared behaviour (what reads hide) is tested on every store in test_ledger_retention.py.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sqlite3
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sandbox_ledger import InvalidInputError, LedgerEntry, LedgerEvent
from sandbox_ledger.deployment import DeploymentMismatchError
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.postgres import adapter as pg_module
from sandbox_ledger.sql import rows
from sandbox_ledger.sqlite import SQLiteAdapter
from sandbox_ledger.sqlite import adapter as sqlite_module
from sandbox_ledger.stores import open_store
from sql.sql_store import Store

DAY = timedelta(days=1)
DAY_MS = 86_400_000

Opener = Callable[..., Any]


def _e(sid: str, event: str, ts: int, name: str = "job") -> LedgerEntry:
    payload = {"snapshotId": f"snap-{ts}"} if event == LedgerEvent.CheckpointCreated else None
    return LedgerEntry(
        ts=ts, name=name, sandbox_id=sid, step_index=-1, event=event, payload=payload
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return Store(request.param, tmp_path, request)


async def test_the_first_retention_is_recorded_and_every_adapter_must_agree(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sandbox_ledger.schema")
    async with store.opened(DAY):
        pass
    assert store.stored_retention() == 86_400
    assert "recorded ledger retention of 86400 s" in caplog.text
    old = _now_ms() - 3 * DAY_MS

    longer = store.adapter(2 * DAY)
    with pytest.raises(
        DeploymentMismatchError,
        match=r"retention: '2 days \(172800 s\)' was given but table ledger_settings of "
        r"(sqlite .*ledger\.db|postgres schema t_\w+) describes its deployment with "
        r"'1 day \(86400 s\)'",
    ) as caught:
        await longer.connect()
    assert caught.value.explicit == "2 days (172800 s)"
    assert caught.value.described == "1 day (86400 s)"
    with pytest.raises(DeploymentMismatchError):  # refused on every use, nothing written
        await longer.append(_e("refused", LedgerEvent.SandboxCreated, old))
    await longer.close()
    assert store.query("SELECT count(*) FROM ledger_events") == [(0,)]
    assert store.stored_retention() == 86_400

    # None follows the database: its appends expire with the recorded retention.
    async with store.opened(None) as follower:
        await follower.append(_e("s", LedgerEvent.SandboxCreated, old))
        await follower.append(_e("s", LedgerEvent.ExecStarted, old + DAY_MS + 5_000))
        assert await follower.read_all("job", "s") == []
        assert await follower.get_sandbox_details("job", "s") is None
    assert store.query("SELECT ts, expires_at FROM ledger_events ORDER BY seq") == [
        (old, old // 1000 + 86_400),
        (old + DAY_MS + 5_000, (old + DAY_MS + 5_000) // 1000 + 86_400),
    ]
    assert store.query("SELECT summary_expires_at, expires_at FROM ledger_sessions") == [
        (old // 1000 + 86_400, (old + DAY_MS + 5_000) // 1000 + 86_400)
    ]
    async with store.opened(DAY) as agreeing:
        assert await agreeing.read_all("job", "s") == []


async def test_two_first_connects_with_different_retentions_one_wins(store: Store) -> None:
    adapters = [store.adapter(DAY), store.adapter(2 * DAY)]
    outcomes = await asyncio.gather(*(a.connect() for a in adapters), return_exceptions=True)
    for adapter in adapters:
        await adapter.close()
    refused = [o for o in outcomes if isinstance(o, DeploymentMismatchError)]
    assert len(refused) == 1 and outcomes.count(None) == 1, outcomes
    winner = adapters[outcomes.index(None)].retention
    assert store.stored_retention() == winner.total_seconds()


async def test_a_database_without_retention_keeps_forever_until_one_is_given(
    store: Store,
) -> None:
    old = _now_ms() - 3 * DAY_MS
    async with store.opened() as forever:
        await forever.append(_e("before", LedgerEvent.SandboxCreated, old))
    assert store.stored_retention() is None
    async with store.opened(DAY) as retained:
        # Entries appended before keep forever (like DynamoDB items written before a TTL).
        assert [e.ts for e in await retained.read_all("job", "before")] == [old]
        await retained.append(_e("after", LedgerEvent.SandboxCreated, old))
        assert await retained.read_all("job", "after") == []
        assert [d.sandbox_id for d in await retained.list_all_sandbox_details()] == ["before"]
        # The session "before" has an entry kept forever: its row is never purged, but its
        # summary expires with its last summary-changing entry.
        await retained.append(_e("before", LedgerEvent.ExecComplete, old + 1))
        assert await retained.get_sandbox_details("job", "before") is None
        assert await retained.purge_expired() == 3
        assert [e.ts for e in await retained.read_all("job", "before")] == [old]
    assert store.stored_retention() == 86_400
    assert store.query("SELECT ts FROM ledger_events") == [(old,)]


def _create_schema_1(store: Store, ts: int) -> None:
    """A database as the library made it before retention: schema 1, one session."""
    if store.kind == "sqlite":
        [first] = sqlite_module.MIGRATIONS[:1]
        with sqlite3.connect(store.path) as db:
            db.executescript(first.sql)
            db.execute("CREATE TABLE ledger_schema (id INTEGER PRIMARY KEY, version INTEGER)")
    else:
        [first] = pg_module.MIGRATIONS[:1]
        with psycopg.connect(store.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {store.schema}")
            conn.execute(f"SET search_path TO {store.schema}")
            conn.execute(first.sql.encode())
            conn.execute("CREATE TABLE ledger_schema (id integer PRIMARY KEY, version integer)")
    store.query("INSERT INTO ledger_schema (id, version) VALUES (1, 1)")
    store.query(
        "INSERT INTO ledger_sessions (name, sandbox_id, started_at, status, exec_count) "
        "VALUES ('job', 'old', ?, 'running', 1)",
        ts,
    )
    for offset, event in enumerate(["sandbox.created", "exec.complete"]):
        store.query(
            "INSERT INTO ledger_events (session_id, ts, step_index, event, append_key) "
            "SELECT id, ?, -1, ?, ? FROM ledger_sessions",
            ts + offset,
            event,
            f"k{offset}",
        )


async def test_a_schema_1_database_migrates_and_keeps_its_entries_forever(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    old = _now_ms() - 3 * DAY_MS
    _create_schema_1(store, old)
    caplog.set_level(logging.INFO, logger="sandbox_ledger.schema")
    async with store.opened(DAY) as adapter:
        assert [e.ts for e in await adapter.read_all("job", "old")] == [old, old + 1]
        details = await adapter.get_sandbox_details("job", "old")
        assert details is not None and details.exec_count == 1
        await adapter.append(_e("new", LedgerEvent.SandboxCreated, old))
        assert await adapter.get_sandbox_details("job", "new") is None
        assert await adapter.purge_expired() == 2  # the new session's entry and row only
        assert [d.sandbox_id for d in await adapter.list_sandbox_details("job")] == ["old"]
    names = {
        "sqlite": "0005_entry_extra, 0006_changes, 0007_changes_per_entry_cost, "
        "0008_append_keys_by_session, 0009_session_ids_never_reused",
        "postgres": "0005_entry_extra, 0006_changes, 0007_changes_per_entry_cost",
    }[store.kind]
    latest = store.module.SCHEMA_VERSION
    assert (
        f"from version 1 to {latest} (0002_ledger_retention, 0003_store_id, "
        f"0004_follow_index, {names})" in caplog.text
    )
    assert store.query("SELECT version FROM ledger_schema") == [(latest,)]
    assert store.stored_retention() == 86_400
    assert store.query("SELECT expires_at FROM ledger_events") == [(None,), (None,)]
    caplog.clear()
    async with store.opened() as again:  # current: nothing migrated, nothing said
        assert len(await again.read_all("job", "old")) == 2
    assert "migrated" not in caplog.text and "recorded" not in caplog.text


async def test_the_postgres_migration_can_run_twice(postgres_dsn: str, pg_schema: str) -> None:
    async with PostgresAdapter(postgres_dsn, schema=pg_schema, retention=DAY):
        pass
    second = pg_module.MIGRATIONS[1]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {pg_schema}")
        conn.execute(second.sql.encode())
        [(seconds,)] = conn.execute("SELECT retention_seconds FROM ledger_settings").fetchall()
    assert seconds == 86_400  # the recorded retention survives a second run


async def test_the_postgres_store_id_migration_can_run_twice(
    postgres_dsn: str, pg_schema: str
) -> None:
    async with PostgresAdapter(postgres_dsn, schema=pg_schema):
        pass
    third = pg_module.MIGRATIONS[2]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {pg_schema}")
        [(before,)] = conn.execute("SELECT store_id FROM ledger_settings").fetchall()
        conn.execute(third.sql.encode())
        [(after,)] = conn.execute("SELECT store_id FROM ledger_settings").fetchall()
    assert before and after == before  # the identity cursors are bound to never changes


async def test_purge_deletes_what_expired_in_bounded_batches(store: Store) -> None:
    now = _now_ms()
    old = now - 3 * DAY_MS
    async with store.opened(DAY) as adapter:
        for i in range(10):
            await adapter.append(_e(f"gone-{i}", LedgerEvent.SandboxCreated, old + i))
            await adapter.append(_e(f"gone-{i}", LedgerEvent.SandboxClosed, old + i + 1))
        await adapter.append(_e("live", LedgerEvent.SandboxCreated, old))
        await adapter.append(_e("live", LedgerEvent.ExecComplete, now))
        statements: list[str] = []
        if store.kind == "sqlite":
            db = await adapter._open()
            await db.set_trace_callback(statements.append)
        for bad in (0, 2**63):  # 2**63 overflowed SQLite's INTEGER: now refused by name
            with pytest.raises(InvalidInputError, match="batch_size"):
                await adapter.purge_expired(batch_size=bad)
        assert await adapter.purge_expired(batch_size=3) == 21 + 10
        if store.kind == "sqlite":
            # The trace repeats a statement's text for each trigger program it runs (a purged
            # session row writes its change, schema version 6): count each batch's first.
            deletes = [
                b
                for a, b in itertools.pairwise(statements)
                if a.startswith("BEGIN IMMEDIATE") and b.lstrip().startswith("DELETE")
            ]
            # 21 entries: 7 full batches and an empty one; 10 rows: 3 full and one of 1.
            assert len(deletes) == 8 + 4
            assert sum(1 for s in statements if s.startswith("BEGIN IMMEDIATE")) == 12
        assert await adapter.purge_expired() == 0
        assert [e.ts for e in await adapter.read_all("job", "live")] == [now]
        details = await adapter.get_sandbox_details("job", "live")
        assert details is not None and (details.started_at, details.exec_count) == (old, 1)
    assert store.query("SELECT count(*) FROM ledger_events") == [(1,)]
    assert store.query("SELECT sandbox_id FROM ledger_sessions") == [("live",)]


async def test_purges_may_run_at_once(store: Store) -> None:
    old = _now_ms() - 3 * DAY_MS
    async with store.opened(DAY) as writer:
        for i in range(30):
            await writer.append(_e(f"s{i}", LedgerEvent.SandboxCreated, old + i))
    purgers = [store.adapter(), store.adapter()]
    counts = await asyncio.gather(*(p.purge_expired(batch_size=4) for p in purgers))
    for purger in purgers:
        await purger.close()
    assert sum(counts) == 60  # each entry and each session row deleted once
    assert store.query("SELECT count(*) FROM ledger_sessions") == [(0,)]


async def test_postgres_purge_spares_a_session_an_append_is_reviving(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A session row whose entries have all expired is chosen for the purge while an append
    to it (uncommitted) holds its row: the purge waits, re-checks, and leaves it."""
    old = _now_ms() - 3 * DAY_MS
    async with PostgresAdapter(postgres_dsn, schema=pg_schema, retention=DAY) as adapter:
        await adapter.append(_e("s", LedgerEvent.SandboxCreated, old))
        now = _now_ms()
        fresh = _e("s", LedgerEvent.ExecComplete, now)
        params = rows.append_params(rows.encode_entry(fresh, key="fresh"))
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as appending:
            await appending.execute(adapter.queries.append, params)  # open transaction
            purge = asyncio.create_task(adapter.purge_expired())
            await asyncio.sleep(0.5)
            assert not purge.done()  # waiting for the session row
            await appending.commit()
        assert await purge == 1  # the expired entry; not the session
        assert [e.ts for e in await adapter.read_all("job", "s")] == [now]
        details = await adapter.get_sandbox_details("job", "s")
        assert details is not None and (details.started_at, details.exec_count) == (old, 1)


async def test_a_purged_session_appended_to_again_starts_a_new_summary(store: Store) -> None:
    old = _now_ms() - 3 * DAY_MS
    async with store.opened(DAY) as adapter:
        await adapter.append(_e("s", LedgerEvent.SandboxCreated, old))
        await adapter.append(_e("s", LedgerEvent.ExecComplete, old + 1))
        assert await adapter.purge_expired() == 3
        now = _now_ms()
        await adapter.append(_e("s", LedgerEvent.SandboxCreated, now))
        details = await adapter.get_sandbox_details("job", "s")
        assert details is not None and (details.started_at, details.exec_count) == (now, 0)


def test_a_reimport_writes_nothing_twice_when_entries_have_expired(store: Store) -> None:
    """An export taken during a session longer than the retention holds entries that have
    expired: importing it again must find them stored (until a purge), not append them
    again (each run added them once more, raised execCount and, with the summary's expiry
    taken from an older entry, hid the session)."""
    from sandbox_ledger.blocking import BlockingAdapter
    from sandbox_ledger.transfer import entry_line, import_entries, parse_lines

    now = _now_ms()
    old = now - 25 * 3_600_000  # older than the one-day retention
    lines = [
        entry_line(_e("sb1", LedgerEvent.SandboxCreated, old)).encode(),
        entry_line(_e("sb1", LedgerEvent.ExecComplete, old + 1)).encode(),
        entry_line(_e("sb1", LedgerEvent.ExecComplete, now - 3_600_000)).encode(),
    ]
    target = BlockingAdapter(store.adapter(DAY))
    try:
        # Appended live (an import no longer writes an entry already expired: it counts it).
        for line in parse_lines(lines).entries:
            target.append(line[1])
        details = target.get_sandbox_details("job", "sb1")
        assert details is not None and details.exec_count == 2
        for _ in range(2):
            again = import_entries(target, parse_lines(lines))
            assert (again.new, again.present, again.expired, again.failed) == (0, 3, 0, [])
        assert target.get_sandbox_details("job", "sb1") == details
        assert [e.ts for e in target.read_all("job", "sb1")] == [now - 3_600_000]
        [(stored,)] = store.query("SELECT count(*) FROM ledger_events")
        assert stored == 3
    finally:
        target.close()


def test_store_urls_take_a_retention() -> None:
    sqlite = open_store("sqlite:///ledger.db?retention_days=30")
    assert isinstance(sqlite, SQLiteAdapter) and sqlite.retention == timedelta(days=30)
    postgres = open_store("postgresql://db.internal/ledger?schema=l&retention_days=7")
    assert isinstance(postgres, PostgresAdapter) and postgres.retention == timedelta(days=7)
    assert postgres.dsn == "postgresql://db.internal/ledger" and postgres.schema == "l"
    assert open_store("sqlite:///ledger.db").retention is None  # type: ignore[attr-defined]
    for url in ("sqlite:///l.db?retention_days=0", "postgresql://h/db?retention_days=1.5"):
        with pytest.raises(InvalidInputError, match="retention_days must be a whole number"):
            open_store(url)
    for days in ("1000000000", "99999999999999999999"):  # past what a timedelta holds
        with pytest.raises(InvalidInputError, match="retention_days must be at most 999999999"):
            open_store(f"sqlite:///l.db?retention_days={days}")
