"""DynamoDB's follower reads the session's sequence marks (dynamodb/_sequence.py,
dynamodb/_follow.py): every stored entry is handed out exactly once, in commit order,
however late it was stored after its ts, whatever the writers' clocks, and whoever stored it
(an append, an import); a position never resumes inside a session deleted and begun again."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
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


async def test_an_entry_stored_long_after_its_ts_is_handed_out(adapter: DynamoDBAdapter) -> None:
    """B (ts t) is stored, then 1.5 s later A (ts t - 100, sorting before B: a write retried
    for long): a follower running all along hands out both, in the order they were stored
    (a 500 ms settle window passed A by)."""
    await adapter.append(entry("f", "late", LedgerEvent.SandboxCreated, _now_ms() - 1_000))
    follower = asyncio.create_task(collect(adapter, "f", "late"))
    await asyncio.sleep(0.1)
    t = _now_ms()
    await adapter.append(entry("f", "late", LedgerEvent.ExecStarted, t, step=1))
    await asyncio.sleep(1.5)
    await adapter.append(entry("f", "late", LedgerEvent.ExecStarted, t - 100, step=0))
    await adapter.append(entry("f", "late", LedgerEvent.SandboxClosed, _now_ms()))
    assert [f.entry.step_index for f in await follower] == [-1, 1, 0, -1]
    assert [e.step_index for e in await adapter.read_all("f", "late")] == [-1, 0, 1, -1]


async def test_entries_from_writers_whose_clocks_are_far_behind_are_handed_out(
    adapter: DynamoDBAdapter,
) -> None:
    """Clock skew: a writer a year behind, and one an hour ahead, append after the follower
    has passed their entries' places in the sort order."""
    now = _now_ms()
    await adapter.append(entry("f", "skew", LedgerEvent.SandboxCreated, now))
    follower = asyncio.create_task(collect(adapter, "f", "skew"))
    await asyncio.sleep(0.1)
    await adapter.append(entry("f", "skew", LedgerEvent.ExecStarted, now + 3_600_000, step=0))
    await asyncio.sleep(0.1)
    await adapter.append(entry("f", "skew", LedgerEvent.ExecStarted, now - 31_536_000_000, step=1))
    await adapter.append(entry("f", "skew", LedgerEvent.SandboxClosed, now + 1))
    assert [f.entry.step_index for f in await follower] == [-1, 0, 1, -1]


class _HeldBeforeSending:
    """Holds the first TransactWriteItems of a client ``seconds`` before it is sent (a slow
    network, a throttle retried): another writer's entry lands meanwhile."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.held = seconds, threading.Event()

    def __call__(self, **_: Any) -> None:
        if not self.held.is_set():
            self.held.set()
            time.sleep(self.seconds)


def test_an_append_held_before_it_reaches_the_table_is_not_missed(
    moto_endpoint: str, sync_table: str
) -> None:
    """The issue's case: writer A's append is held 1.5 s before it reaches the table while
    writer B's later entry lands; the follower hands out both (it handed out B's and never
    A's, though read_all had it)."""
    clients = [SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) for _ in range(3)]
    a, b, reader = clients
    reader.follow_poll = FAST
    try:
        a.append(entry("f", "held", LedgerEvent.SandboxCreated, _now_ms()))
        seen: list[Any] = []
        follower = threading.Thread(target=lambda: seen.extend(reader.follow("f", "held")))
        follower.start()
        hold = _HeldBeforeSending(1.5)
        a.client().meta.events.register("before-send.dynamodb.TransactWriteItems", hold)
        writer = threading.Thread(
            target=a.append, args=(entry("f", "held", LedgerEvent.ExecStarted, _now_ms(), step=0),)
        )
        writer.start()
        assert hold.held.wait(5)
        time.sleep(0.1)
        b.append(entry("f", "held", LedgerEvent.ExecStarted, _now_ms(), step=1))
        writer.join(10)
        b.append(entry("f", "held", LedgerEvent.SandboxClosed, _now_ms()))
        follower.join(30)
        assert not follower.is_alive()
        assert sorted(f.entry.step_index for f in seen) == [-1, -1, 0, 1]
        assert [f.entry.step_index for f in seen][-1] == -1  # closed last, as stored
        assert len(reader.read_all("f", "held")) == 4
    finally:
        for client in clients:
            client.close()


def test_writers_in_many_clients_are_followed_once_each(
    moto_endpoint: str, sync_table: str
) -> None:
    """Four clients (each its own sequence guesses, as four processes) append to one session
    at once: they meet on the sequence marks' conditions; every entry is followed once, in
    the order stored."""
    writers = [SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) for _ in range(4)]
    reader = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    reader.follow_poll = FAST
    try:
        writers[0].append(entry("f", "many", LedgerEvent.SandboxCreated, _now_ms()))
        seen: list[Any] = []

        def follow() -> None:
            for followed in reader.follow("f", "many", until_closed=False):
                seen.append(followed)
                if len(seen) == 81:
                    return

        follower = threading.Thread(target=follow)
        follower.start()

        def write(w: int) -> None:
            for i in range(20):
                writers[w].append(
                    entry("f", "many", LedgerEvent.ExecStarted, _now_ms(), step=i, payload=[w, i])
                )

        threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        follower.join(60)
        stored = reader.read_in_append_order("f", "many")
        assert len(stored) == 81
        assert [f.entry.wire() for f in seen] == [e.wire() for e in stored]
    finally:
        for client in (*writers, reader):
            client.close()


async def test_an_import_behind_the_followers_place_is_handed_out(
    adapter: DynamoDBAdapter, moto_endpoint: str, sync_table: str
) -> None:
    """Entries an import stores with ts older than what the follower has handed out."""
    from sandbox_ledger.transfer import import_lines

    now = _now_ms()
    await adapter.append(entry("f", "imp", LedgerEvent.SandboxCreated, now))
    follower = asyncio.create_task(collect(adapter, "f", "imp"))
    await asyncio.sleep(0.1)
    old = [entry("f", "imp", LedgerEvent.ExecStarted, now - 10_000 + i, step=i) for i in range(5)]
    lines = [json.dumps(e.wire()).encode() + b"\n" for e in old]
    with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as importer:
        report = await asyncio.to_thread(import_lines, importer, lines)
    assert report.new == 5
    await adapter.append(entry("f", "imp", LedgerEvent.SandboxClosed, now + 1))
    assert [f.entry.step_index for f in await follower] == [-1, 0, 1, 2, 3, 4, -1]


async def test_a_position_of_a_deleted_session_never_resumes_the_new_one(
    adapter: DynamoDBAdapter,
) -> None:
    """A session deleted and begun again (with more entries than the position had seen): a
    follower resumed from the old position ends, and never hands out the new session from
    its middle."""
    for ts in range(1, 4):
        await adapter.append(entry("f", "again", LedgerEvent.ExecStarted, ts, step=ts))
    followed = await collect(adapter, "f", "again", until_closed=False, limit=2)
    await adapter.delete_sandbox("f", "again")
    for ts in range(10, 16):
        await adapter.append(entry("f", "again", LedgerEvent.ExecStarted, ts, step=ts))
    rest = await collect(adapter, "f", "again", after=followed[-1].position, until_closed=False)
    assert rest == []
    # A follower from the start sees the new session whole.
    fresh = await collect(adapter, "f", "again", until_closed=False, limit=6)
    assert [f.entry.ts for f in fresh] == list(range(10, 16))


def test_a_gap_is_waited_for_once_then_passed_by() -> None:
    """A Query can read mark n + 1 and not mark n (committed while it ran): the follower
    stops there; still missing on the next poll (so deleted: its entry's TTL), it is passed."""
    from sandbox_ledger import keys as k
    from sandbox_ledger.dynamodb._follow import SessionPoller
    from sandbox_ledger.dynamodb._sequence import Mark, mark_item

    poller = SessionPoller("t", "f", "g", PollSettings())
    head = {k.PARTITION_KEY: {"S": poller.pk}, k.SORT_KEY: {"S": "E#x#y"}}
    marks = [mark_item(poller.pk, Mark("i1", n), head) for n in (3, 5, 6)]
    state = {"q": 2, "i": "i1"}
    run, gone, seal = poller._run(state, marks)
    assert [n for n, _, _ in run] == [3] and not gone and seal is None
    run, gone, seal = poller._run({"q": 3, "i": "i1"}, marks[1:])
    assert [n for n, _, _ in run] == [5, 6] and not gone and seal is None
    other = [mark_item(poller.pk, Mark("i2", 4), head)]
    assert poller._run({"q": 3, "i": "i1"}, other) == ([], True, None)


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


def test_a_session_deleted_between_polls_ends_the_follower(
    moto_endpoint: str, sync_table: str
) -> None:
    """The follower hands out an entry, then the session is deleted: the next liveness poll
    finds its mark gone and says so."""
    from sandbox_ledger.dynamodb._follow import SessionPoller
    from sandbox_ledger.follow import Poll
    from sandbox_ledger.sdk.steps import run_sync

    settings = PollSettings()
    assert settings.liveness_every > 1
    with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as ledger:
        ledger.append(entry("f", "d", LedgerEvent.SandboxCreated, 1))
        poller = SessionPoller(sync_table, "f", "d", settings)
        first = run_sync(ledger.client(), poller.poll(Poll(state=None, idle=1)))
        [(state, followed)] = first.found
        assert followed.ts == 1 and not first.gone
        idle = run_sync(ledger.client(), poller.poll(Poll(state=state, idle=1)))
        assert idle.found == [] and not idle.gone
        ledger.delete_sandbox("f", "d")
        after = run_sync(ledger.client(), poller.poll(Poll(state=state, idle=0)))
        assert after.found == [] and after.gone


def test_a_follower_from_the_start_reads_entries_and_marks_in_one_query(
    moto_endpoint: str, sync_table: str
) -> None:
    """Catching up from the start costs what read_all costs (a Query of the partition), not a
    read per entry; a later poll reads the new marks, then only the new entries."""
    from tests.dynamodb.test_dynamodb_design import RequestCounter

    from sandbox_ledger.dynamodb._follow import SessionPoller
    from sandbox_ledger.follow import Poll
    from sandbox_ledger.sdk.steps import run_sync

    with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as ledger:
        ledger.append(entry("f", "c", LedgerEvent.SandboxCreated, 1))
        for i in range(30):
            ledger.append(entry("f", "c", LedgerEvent.ExecStarted, 2 + i, step=i))
        poller = SessionPoller(sync_table, "f", "c", PollSettings())
        counter = RequestCounter().attach(ledger.client())
        first = run_sync(ledger.client(), poller.poll(Poll(state=None, idle=0)))
        assert len(first.found) == 31
        assert dict(counter.calls) == {"Query": 1}
        ledger.append(entry("f", "c", LedgerEvent.ExecStarted, 0, step=99))
        counter.reset()
        state = first.found[-1][0]
        later = run_sync(ledger.client(), poller.poll(Poll(state=state, idle=0)))
        assert [e.step_index for _, e in later.found] == [99]
        assert dict(counter.calls) == {"Query": 1, "BatchGetItem": 1}
