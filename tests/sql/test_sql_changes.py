"""The SQL change feed (schema version 6): the pruning rule and its trimmed positions on both
dialects, and PostgreSQL's order: a change is handed out only once every older transaction
has ended, so a transaction that commits late is never passed by."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sandbox_ledger.changes import Change, ChangesTrimmedError
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.sqlite import SQLiteAdapter
from sandbox_ledger.testing._build import entry


async def take(adapter: Any, count: int, after: str | None = None) -> list[Change]:
    out: list[Change] = []
    feed = adapter.changes(after=after)
    try:
        async for change in feed:
            out.append(change)
            if len(out) == count:
                break
    finally:
        await feed.aclose()
    return out


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Any, Any]]:
    """An adapter and a way to run SQL on its database directly (as a DBA would)."""
    if request.param == "sqlite":
        path = tmp_path / "ledger.db"
        adapter: Any = SQLiteAdapter(path)

        def run(sql: str) -> None:
            with sqlite3.connect(path) as conn:
                conn.execute(sql)

    else:
        dsn, schema = request.getfixturevalue("postgres_dsn"), request.getfixturevalue("pg_schema")
        adapter = PostgresAdapter(dsn, schema=schema, max_size=2)

        def run(sql: str) -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'SET search_path TO "{schema}"')
                conn.execute(sql)  # type: ignore[arg-type]

    async with adapter:
        yield adapter, run


async def test_a_change_older_than_a_day_is_pruned_and_its_position_says_so(
    store: tuple[Any, Any],
) -> None:
    adapter, run = store
    await adapter.append(entry("w", "old", LedgerEvent.SandboxCreated, 1))
    await adapter.append(entry("w", "old", LedgerEvent.SandboxClosed, 2))
    first, _ = await take(adapter, 2)
    run("UPDATE ledger_changes SET written_at = written_at - 86401")  # written a day ago
    await adapter.append(entry("w", "new", LedgerEvent.SandboxCreated, 3))  # prunes them
    with pytest.raises(ChangesTrimmedError, match="pruned"):
        await take(adapter, 1, after=first.position)
    [kept] = await take(adapter, 1)  # a new reader starts at the oldest change kept
    assert (kept.kind.value, kept.sandbox_id) == ("session.created", "new")


async def test_a_position_at_the_last_pruned_change_loses_nothing(
    store: tuple[Any, Any],
) -> None:
    adapter, run = store
    await adapter.append(entry("w", "old", LedgerEvent.SandboxCreated, 1))
    [last] = await take(adapter, 1)
    run("UPDATE ledger_changes SET written_at = written_at - 86401")
    await adapter.append(entry("w", "new", LedgerEvent.SandboxCreated, 2))
    [after] = await take(adapter, 1, after=last.position)
    assert after.sandbox_id == "new"


async def test_postgres_hands_out_nothing_past_a_transaction_still_running(
    postgres_dsn: str, pg_schema: str
) -> None:
    async with PostgresAdapter(postgres_dsn, schema=pg_schema, max_size=2) as adapter:
        await adapter.append(entry("w", "first", LedgerEvent.SandboxCreated, 1))
        [first] = await take(adapter, 1)
        with psycopg.connect(postgres_dsn) as slow:  # a transaction that commits late
            slow.execute(f'SET search_path TO "{pg_schema}"')
            slow.execute(
                "INSERT INTO ledger_changes (kind, name, sandbox_id, at) "
                "VALUES ('session.created', 'w', 'slow', 2)"
            )  # takes its seq (and its transaction id) first
            await adapter.append(entry("w", "quick", LedgerEvent.SandboxCreated, 3))
            reader = asyncio.create_task(take(adapter, 2, after=first.position))
            await asyncio.sleep(0.5)
            assert not reader.done()  # quick committed, but slow is older and still running
            slow.commit()
        seen = await asyncio.wait_for(reader, 30)
    assert [c.sandbox_id for c in seen] == ["slow", "quick"]


async def test_ids_name_the_database_not_the_path_it_was_opened_by(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    async with SQLiteAdapter(tmp_path / "ledger.db") as adapter:
        await adapter.append(entry("w", "s", LedgerEvent.SandboxCreated, 1))
        [one] = await take(adapter, 1)
    async with SQLiteAdapter(tmp_path / "sub" / ".." / "ledger.db") as same:
        [again] = await take(same, 1)
    assert one.id == again.id and one.id.startswith("sql:")
