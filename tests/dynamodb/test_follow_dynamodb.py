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


def test_a_session_deleted_before_its_summary_was_seen_ends_the_follower(
    moto_endpoint: str, sync_table: str
) -> None:
    """The follower hands out an entry and checks its head is still there, then the session is
    deleted before the follower's first look at its summary: the next liveness poll must say
    gone (it said "not begun yet" forever; CI saw the conformance test time out when a delete
    fell in that window)."""
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.dynamodb._follow import SessionPoller
    from sandbox_ledger.follow import Poll
    from sandbox_ledger.sdk.steps import run_sync

    settings = PollSettings()
    assert settings.liveness_every > 1
    with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as ledger:
        ledger.append(entry("f", "d", LedgerEvent.SandboxCreated, 1))
        poller = SessionPoller(sync_table, "f", "d", settings, settle_ms=0)
        first = run_sync(ledger.client(), poller.poll(Poll(state=None, idle=1)))
        [(state, followed)] = first.found
        assert followed.ts == 1 and not first.gone
        idle = run_sync(ledger.client(), poller.poll(Poll(state=state, idle=1)))
        assert idle.found == [] and not idle.gone and not poller.summary_seen
        ledger.delete_sandbox("f", "d")
        after = run_sync(ledger.client(), poller.poll(Poll(state=state, idle=0)))
        assert after.found == [] and after.gone
