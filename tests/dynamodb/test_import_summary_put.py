"""The DynamoDB import's summary put against stores that hold part of the
sessions, split sessions, concurrent importers and racing appends."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest

from dynamodb.test_import_batches import _summary, sync_adapter
from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.transfer import content_digest

pytestmark = pytest.mark.usefixtures("fast_sdk_backoff")
E = LedgerEvent
EVENTS = [
    E.SandboxCreated,
    E.SandboxClosed,
    E.ExecStarted,
    E.ExecComplete,
    E.ExecFailed,
    E.CheckpointCreated,
]


def sessions(rng: random.Random, count: int, big: int) -> list[LedgerEntry]:
    out = []
    for s in range(count):
        n = big if s % 3 == 0 else rng.randint(1, 12)
        once: set[str] = set()
        for i in range(n):
            event = rng.choice(EVENTS)
            if event in (E.SandboxCreated, E.SandboxClosed):
                if event in once:  # one of each a session: the first wins by arrival order
                    event = E.ExecComplete
                once.add(event)
            payload: dict[str, Any] = {"u": f"{s}-{i}"}
            if event == E.CheckpointCreated:
                payload["snapshotId"] = f"snap-{s}-{i}"
            out.append(
                LedgerEntry(
                    ts=1_000 + rng.randint(0, 50),
                    name="n",
                    sandbox_id=f"r{s}",
                    step_index=i,
                    event=event,
                    payload=payload,
                )
            )
    return out


def replayed(endpoint: str, table: str, entries: list[LedgerEntry]) -> Any:
    replay = sync_adapter(endpoint, table + "-replay")
    replay.create_table()
    for e in entries:
        replay.append(e)
    return replay


def check(
    adapter: Any, replay: Any, entries: list[LedgerEntry], settled: Callable[[], None]
) -> None:
    for sid in sorted({e.sandbox_id for e in entries}):
        mine = [e for e in entries if e.sandbox_id == sid]
        stored = adapter.read_all("n", sid)
        assert sorted(map(content_digest, stored)) == sorted(map(content_digest, mine)), sid
        assert adapter.get_sandbox_details("n", sid) == replay.get_sandbox_details("n", sid)
        try:
            want = _summary(replay, sid)
        except KeyError:
            want = None
        try:
            got = _summary(adapter, sid)
        except KeyError:
            got = None
        # sq, the mark number of the last entry that changed the summary, is the commit
        # order's (as each head's q): racing importers commit in an order of their own; lc,
        # the lifecycle entries the last write folded in, is that write's (lq: its mark).
        for summary in (want, got):
            if summary is not None:
                mark = summary.pop(A.LIFECYCLE_SEQUENCE)["S"]
                assert mark.endswith(f"#{summary[A.SUMMARY_SEQUENCE]['N']}"), mark
                summary.pop(A.SUMMARY_SEQUENCE, None)
                summary.pop(A.LIFECYCLE, None)
        assert got == want, sid
    settled()  # the listings of settled indexes
    assert adapter.list_sandbox_details("n") == replay.list_sandbox_details("n")


@pytest.mark.parametrize("seed", [1, 2])
def test_a_rerun_after_a_partial_import_with_racing_importers(
    moto_endpoint: str, sync_table: str, seed: int, wait_for_indexes: Callable[[], None]
) -> None:
    rng = random.Random(seed)
    entries = sessions(rng, 9, 130)  # sessions of 130: over 100 actions, split
    adapter = sync_adapter(moto_endpoint, sync_table)
    # an interrupted earlier import: a random part of the entries, in small batches
    part = [e for e in entries if rng.random() < 0.4]
    for i in range(0, len(part), 25):
        adapter.append_once_many([(e, 1) for e in part[i : i + 25]])
    files = [entries, entries[::-1], entries]

    def run(order: list[LedgerEntry], size: int) -> None:
        mine = sync_adapter(moto_endpoint, sync_table)
        for i in range(0, len(order), size):
            mine.append_once_many([(e, 1) for e in order[i : i + size]])

    threads = [
        threading.Thread(target=run, args=(f, s))
        for f, s in zip(files, (500, 77, 1000), strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    replay = replayed(moto_endpoint, sync_table, entries)
    try:
        check(adapter, replay, entries, wait_for_indexes)
    finally:
        replay.client().delete_table(TableName=replay.table_name)


def test_an_import_racing_appends_with_retention(
    moto_endpoint: str, table_name: str, wait_for_indexes: Callable[[], None]
) -> None:
    import time
    from datetime import timedelta

    from botocore.config import Config

    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    def make() -> Any:
        return SyncDynamoDBAdapter(
            table_name,
            endpoint_url=moto_endpoint,
            retention=timedelta(days=30),
            config=Config(retries={"mode": "standard", "max_attempts": 4}),
        )

    rng = random.Random(7)
    now = int(time.time() * 1000)
    entries = [
        e.model_copy(update={"ts": now - rng.randint(0, 5) * 86_400_000 + e.ts})
        for e in sessions(rng, 8, 120)
    ]
    extra = [
        LedgerEntry(
            ts=now + rng.randint(-9, 9) * 86_400_000,
            name="n",
            sandbox_id=f"r{s}",
            step_index=900 + j,
            event=E.ExecComplete,
            payload={"extra": f"{s}-{j}"},
        )
        for s in range(8)
        for j in range(3)
    ]
    adapter = make()
    adapter.create_table()

    def importer(order: list[LedgerEntry]) -> None:
        mine = make()
        for i in range(0, len(order), 60):
            mine.append_once_many([(e, 1) for e in order[i : i + 60]])

    def appender() -> None:
        mine = make()
        for e in extra:
            mine.append(e)

    threads = [
        threading.Thread(target=importer, args=(entries,)),
        threading.Thread(target=importer, args=(entries[::-1],)),
        threading.Thread(target=appender),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    replay = SyncDynamoDBAdapter(
        table_name + "-replay", endpoint_url=moto_endpoint, retention=timedelta(days=30)
    )
    replay.create_table()
    try:
        for e in entries + extra:
            replay.append(e)
        check(adapter, replay, entries + extra, wait_for_indexes)
    finally:
        replay.client().delete_table(TableName=replay.table_name)
