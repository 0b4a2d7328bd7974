"""DynamoDB's follower holds back entries within its settle window (dynamodb/_follow.py):
an entry that commits after one sorting later, within the window, is not passed by."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from sandbox_ledger.dynamodb import DynamoDBAdapter
from sandbox_ledger.follow import PollSettings
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.testing._build import entry
from sandbox_ledger.testing.follow import collect

FAST = PollSettings(first=0.01, longest=0.02)


@pytest.fixture
async def adapter(moto_endpoint: str, sync_table: str) -> AsyncIterator[DynamoDBAdapter]:
    adapter = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    adapter.follow_poll = FAST
    yield adapter
    await adapter.close()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _late_commit(adapter: DynamoDBAdapter) -> list[int]:
    """B (ts t) is stored, then 0.2 s later A (ts t - 100, sorting before B): what a follower
    running all along hands out."""
    await adapter.append(entry("f", "late", LedgerEvent.SandboxCreated, _now_ms() - 1_000))
    follower = asyncio.create_task(collect(adapter, "f", "late"))
    await asyncio.sleep(0.1)
    t = _now_ms()
    await adapter.append(entry("f", "late", LedgerEvent.ExecStarted, t, step=1))
    await asyncio.sleep(0.2)
    await adapter.append(entry("f", "late", LedgerEvent.ExecStarted, t - 100, step=0))
    await asyncio.sleep(0.2)
    await adapter.append(entry("f", "late", LedgerEvent.SandboxClosed, _now_ms()))
    return [f.entry.step_index for f in await follower]


async def test_an_entry_committed_late_within_the_window_is_not_passed(
    adapter: DynamoDBAdapter,
) -> None:
    assert await _late_commit(adapter) == [-1, 0, 1, -1]
    assert [e.step_index for e in await adapter.read_all("f", "late")] == [-1, 0, 1, -1]


async def test_without_the_window_the_late_entry_is_passed(adapter: DynamoDBAdapter) -> None:
    """The window is what makes the test above pass: with none, the follower hands out B
    before A is stored and never sees A."""
    adapter.settle_ms = 0
    assert await _late_commit(adapter) == [-1, 1, -1]


async def test_positions_resume_across_twins(moto_endpoint: str, sync_table: str) -> None:
    """A position from the async twin resumes the sync one (the CLI and a service share
    them): both bind it to the table's store id."""
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    async with DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as a:
        await a.append(entry("f", "x", LedgerEvent.SandboxCreated, 1))
        await a.append(entry("f", "x", LedgerEvent.SandboxClosed, 2))
        [first] = await collect(a, "f", "x", limit=1)
    sync = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    try:
        rest = list(sync.follow("f", "x", after=first.position))
    finally:
        sync.close()
    assert [f.entry.ts for f in rest] == [2]
