"""PostgreSQL followers are woken by LISTEN/NOTIFY (postgres/listen.py): an idle follower,
whose fallback poll is 5 s away, gets a new entry at once; without notifications (an
adapter given a pool) it polls on the normal schedule."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.postgres.listen import FALLBACK_POLL
from sandbox_ledger.testing._build import entry


@pytest.fixture
async def adapter(postgres_dsn: str, pg_schema: str) -> AsyncIterator[PostgresAdapter]:
    adapter = PostgresAdapter(postgres_dsn, schema=pg_schema)
    yield adapter
    await adapter.close()


async def _idle_then_append(adapter: PostgresAdapter, idle: float) -> float:
    """Seconds from an append to its delivery to a follower idle for ``idle`` seconds."""
    await adapter.append(entry("f", "n", LedgerEvent.SandboxCreated, 1))
    stream = adapter.follow("f", "n")
    try:
        await anext(stream)
        waiting = asyncio.create_task(anext(stream))
        await asyncio.sleep(idle)
        assert not waiting.done()
        await adapter.append(entry("f", "n", LedgerEvent.ExecStarted, 2, step=0))
        stored = time.perf_counter()
        followed = await asyncio.wait_for(waiting, 30)
        assert followed.entry.ts == 2
        return time.perf_counter() - stored
    finally:
        await stream.aclose()


async def test_a_notification_wakes_an_idle_follower(adapter: PostgresAdapter) -> None:
    # Idle long enough that the next poll is seconds away (the backoff grows to 5 s).
    delay = await _idle_then_append(adapter, 4.0)
    assert FALLBACK_POLL >= 5.0
    assert delay < 0.5, f"delivered after {delay:.2f} s: not woken by the notification"


async def test_without_notifications_followers_poll(postgres_dsn: str, pg_schema: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    async with AsyncConnectionPool(postgres_dsn, kwargs={"autocommit": True}) as pool:
        polling = PostgresAdapter(pool=pool, schema=pg_schema)
        try:
            delay = await _idle_then_append(polling, 2.0)
        finally:
            await polling.close()
    assert delay < 1.0  # the normal schedule: idle polls at most 0.5 s apart


async def test_followers_go_on_when_the_listening_connection_is_lost(
    adapter: PostgresAdapter,
) -> None:
    await adapter.append(entry("f", "lost", LedgerEvent.SandboxCreated, 1))
    stream = adapter.follow("f", "lost", until_closed=False)
    try:
        await anext(stream)
        listener = adapter._listener
        assert listener is not None and listener.healthy
        await listener._conn.close()  # the server or the network drops it
        await asyncio.sleep(0.5)
        assert not listener.healthy
        await adapter.append(entry("f", "lost", LedgerEvent.ExecStarted, 2, step=0))
        stored = time.perf_counter()
        followed = await asyncio.wait_for(anext(stream), 30)
        assert followed.entry.ts == 2
        assert time.perf_counter() - stored < 1.5
    finally:
        await stream.aclose()


async def test_a_name_postgres_cannot_store_is_a_session_that_never_begins(
    adapter: PostgresAdapter,
) -> None:
    """NUL cannot be stored in PostgreSQL text: following such a name waits, as following
    any session not begun does, instead of failing on the server's refusal."""
    await adapter.append(entry("f", "other", LedgerEvent.SandboxCreated, 1))  # connected
    stream = adapter.follow("a\x00b", "s")
    waiting = asyncio.create_task(anext(stream))
    await asyncio.sleep(1.5)
    assert not waiting.done()
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await stream.aclose()
