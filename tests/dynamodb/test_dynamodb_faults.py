"""Faults lose nothing and duplicate nothing: throttling, resent writes, conflicts, partial
batches, on both twins."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.config import Config

from dynamodb.faults import FailShare, PartialBatches, ResendAfterSuccess
from sandbox_ledger import LedgerEntry, LedgerEvent, StorageError, ThrottledError
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb.instrument import RequestCounter
from sandbox_ledger.keys import session_pk
from sandbox_ledger.sdk.batching import batch_write
from sandbox_ledger.sdk.paging import query_all
from sandbox_ledger.sdk.steps import run_sync

pytestmark = pytest.mark.usefixtures("fast_sdk_backoff")


def workload(name: str, sandbox_id: str, execs: int) -> list[LedgerEntry]:
    """A session whose every entry carries a unique payload id, to count exactly."""
    entries = [
        LedgerEntry(
            ts=1000,
            name=name,
            sandbox_id=sandbox_id,
            step_index=-1,
            event=LedgerEvent.SandboxCreated,
            payload={"id": "created"},
        )
    ]
    for i in range(execs):
        entries.append(
            LedgerEntry(
                ts=1000 + i,
                name=name,
                sandbox_id=sandbox_id,
                step_index=i,
                event=LedgerEvent.ExecStarted,
                payload={"id": f"start-{i}"},
            )
        )
        entries.append(
            LedgerEntry(
                ts=1000 + i,
                name=name,
                sandbox_id=sandbox_id,
                step_index=i,
                event=LedgerEvent.ExecComplete,
                payload={"id": f"done-{i}"},
            )
        )
        if i % 5 == 0:
            entries.append(
                LedgerEntry(
                    ts=1000 + i,
                    name=name,
                    sandbox_id=sandbox_id,
                    step_index=i,
                    event=LedgerEvent.CheckpointCreated,
                    payload={"id": f"ckpt-{i}", "snapshotId": f"snap-{i}"},
                )
            )
    entries.append(
        LedgerEntry(
            ts=9999,
            name=name,
            sandbox_id=sandbox_id,
            step_index=-1,
            event=LedgerEvent.SandboxClosed,
            payload={"id": "closed"},
        )
    )
    return entries


def assert_exactly_once(stored: list[LedgerEntry], sent: list[LedgerEntry]) -> None:
    assert sorted(e.payload["id"] for e in stored) == sorted(e.payload["id"] for e in sent)


def sync_adapter(endpoint: str, table: str) -> SyncDynamoDBAdapter:
    return SyncDynamoDBAdapter(
        table,
        endpoint_url=endpoint,
        config=Config(retries={"mode": "standard", "max_attempts": 10}),
    )


# -- throttling -----------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["ProvisionedThroughputExceededException", "ThrottlingException"])
def test_sync_throttling_is_retried_and_loses_nothing(
    moto_endpoint: str, sync_table: str, code: str
) -> None:
    adapter = sync_adapter(moto_endpoint, sync_table)
    faults = FailShare(0.25, code, aio=False).attach(adapter.client())
    sent = workload("n", "s", 20)
    for e in sent:
        adapter.append(e)
    stored = adapter.read_all("n", "s")
    details = adapter.get_sandbox_details("n", "s")
    assert faults.injected > 10
    assert_exactly_once(stored, sent)
    assert details is not None and details.exec_count == 20
    assert len(adapter.list_checkpoints("n", "s")) == 4


async def test_async_throttling_and_5xx_lose_nothing(moto_endpoint: str, sync_table: str) -> None:
    adapter = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    client = await adapter.client()
    throttle = FailShare(0.2, "ThrottlingException", aio=True).attach(client)
    broken = FailShare(0.1, "InternalServerError", status=500, aio=True, seed=3).attach(client)
    sent = workload("n", "s", 20)
    await asyncio.gather(*(adapter.append(e) for e in sent))
    assert throttle.injected > 5 and broken.injected > 2
    assert_exactly_once(await adapter.read_all("n", "s"), sent)
    details = await adapter.get_sandbox_details("n", "s")
    assert details is not None and details.exec_count == 20
    await adapter.close()


def test_throttling_beyond_retries_surfaces_as_throttled_error(
    moto_endpoint: str, sync_table: str
) -> None:
    adapter = SyncDynamoDBAdapter(
        sync_table,
        endpoint_url=moto_endpoint,
        config=Config(retries={"mode": "standard", "max_attempts": 3}),
    )
    FailShare(1.0, "ProvisionedThroughputExceededException", aio=False).attach(adapter.client())
    entry = workload("n", "s", 0)[0]
    with pytest.raises(ThrottledError) as info:
        adapter.append(entry)
    assert info.value.__cause__ is not None  # the botocore error stays chained
    adapter.close()
    assert sync_adapter(moto_endpoint, sync_table).read_all("n", "s") == []


# -- resent writes (first response lost) ------------------------------------------------------


def test_sync_resent_writes_do_not_duplicate(moto_endpoint: str, sync_table: str) -> None:
    adapter = sync_adapter(moto_endpoint, sync_table)
    resend = ResendAfterSuccess(0.5, {"PutItem", "TransactWriteItems"}).attach(adapter.client())
    counter = RequestCounter().attach(adapter.client())
    sent = workload("n", "s", 15)
    for e in sent:
        adapter.append(e)
    assert resend.resent > 10
    assert counter.sends["TransactWriteItems"] > counter.calls["TransactWriteItems"]
    assert_exactly_once(adapter.read_all("n", "s"), sent)
    details = adapter.get_sandbox_details("n", "s")
    assert details is not None and details.exec_count == 15
    assert [c.snapshot_id for c in adapter.list_checkpoints("n", "s")] == [
        "snap-0",
        "snap-5",
        "snap-10",
    ]


async def test_async_resent_writes_under_concurrency(moto_endpoint: str, sync_table: str) -> None:
    adapter = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    resend = ResendAfterSuccess(0.5, {"PutItem", "TransactWriteItems"}).attach(
        await adapter.client()
    )
    sent = workload("n", "s", 25)
    await asyncio.gather(*(adapter.append(e) for e in sent))
    assert resend.resent > 10
    assert_exactly_once(await adapter.read_all("n", "s"), sent)
    details = await adapter.get_sandbox_details("n", "s")
    assert details is not None and details.exec_count == 25
    await adapter.close()


# -- concurrency ----------------------------------------------------------------------------


def _execs(name: str, sandbox_id: str, n: int) -> list[LedgerEntry]:
    return [
        LedgerEntry(
            ts=5000 + i % 3,
            name=name,
            sandbox_id=sandbox_id,
            step_index=i,
            event=LedgerEvent.ExecComplete,
            payload={"id": i},
        )
        for i in range(n)
    ]


async def test_fifty_concurrent_appends_async(moto_endpoint: str, sync_table: str) -> None:
    adapter = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    await adapter.append(workload("n", "s", 0)[0])
    sent = _execs("n", "s", 50)
    await asyncio.gather(*(adapter.append(e) for e in sent))
    stored = await adapter.read_all("n", "s")
    assert sorted(e.payload["id"] for e in stored[1:]) == list(range(50))
    details = await adapter.get_sandbox_details("n", "s")
    assert details is not None and details.exec_count == 50
    await adapter.close()


def test_fifty_concurrent_appends_threads(moto_endpoint: str, sync_table: str) -> None:
    adapter = sync_adapter(moto_endpoint, sync_table)
    adapter.append(workload("n", "s", 0)[0])
    sent = _execs("n", "s", 50)
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(adapter.append, sent))
    stored = adapter.read_all("n", "s")
    assert sorted(e.payload["id"] for e in stored[1:]) == list(range(50))
    details = adapter.get_sandbox_details("n", "s")
    assert details is not None and details.exec_count == 50


async def test_transaction_conflicts_are_retried(moto_endpoint: str, sync_table: str) -> None:
    """Real DynamoDB cancels concurrent transactions on one summary item; moto never does."""
    adapter = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    conflicts = FailShare(
        0.4,
        "TransactionCanceledException",
        operations={"TransactWriteItems"},
        aio=True,
        CancellationReasons=[{"Code": "None"}, {"Code": "TransactionConflict"}],
    ).attach(await adapter.client())
    await adapter.append(workload("n", "s", 0)[0])
    await asyncio.gather(*(adapter.append(e) for e in _execs("n", "s", 50)))
    assert conflicts.injected > 10
    details = await adapter.get_sandbox_details("n", "s")
    assert details is not None and details.exec_count == 50
    assert len(await adapter.read_all("n", "s")) == 51
    await adapter.close()


def test_other_cancellations_are_errors_not_retries(moto_endpoint: str, sync_table: str) -> None:
    adapter = sync_adapter(moto_endpoint, sync_table)
    FailShare(
        1.0,
        "TransactionCanceledException",
        operations={"TransactWriteItems"},
        aio=False,
        CancellationReasons=[{"Code": "None"}, {"Code": "ValidationError"}],
    ).attach(adapter.client())
    with pytest.raises(StorageError, match="TransactionCanceledException"):
        adapter.append(workload("n", "s", 0)[0])


# -- partial batches ------------------------------------------------------------------------


def _seed_events(adapter: SyncDynamoDBAdapter, name: str, sandbox_id: str, n: int) -> None:
    """Write n plain entries quickly, straight through batch_write (no summaries)."""
    requests = []
    for i in range(n):
        entry = LedgerEntry(
            ts=i,
            name=name,
            sandbox_id=sandbox_id,
            step_index=i,
            event=LedgerEvent.ExecStarted,
            payload={"i": i},
        )
        requests.append({"PutRequest": {"Item": it.encode_entry(entry, it.order_ids.next()).head}})
    run_sync(adapter.client(), batch_write(adapter.table_name, requests))


def _count_partition(adapter: SyncDynamoDBAdapter, pk: str) -> int:
    items = run_sync(
        adapter.client(),
        query_all(
            {
                "TableName": adapter.table_name,
                "KeyConditionExpression": "PK = :pk",
                "ExpressionAttributeValues": {":pk": {"S": pk}},
                "Select": "COUNT",
            }
        ),
    )
    return len(items)


@pytest.mark.parametrize("events", [600, pytest.param(10_000, marks=pytest.mark.slow)])
def test_delete_of_many_events_with_unprocessed_items(
    moto_endpoint: str, sync_table: str, events: int
) -> None:
    adapter = sync_adapter(moto_endpoint, sync_table)
    _seed_events(adapter, "big", "s", events)
    adapter.append(workload("big", "s", 0)[0])
    adapter.append(workload("keep", "s", 1)[1])
    assert len(adapter.read_all("big", "s")) == events + 1
    partial = PartialBatches(0.5).attach(adapter.client())
    counter = RequestCounter().attach(adapter.client())
    adapter.delete_sandbox("big", "s")
    assert partial.held_back > events // 10
    assert counter.calls["BatchWriteItem"] > (events + 1) // 25
    partial_free = sync_adapter(moto_endpoint, sync_table)
    assert partial_free.read_all("big", "s") == []
    assert partial_free.get_sandbox_details("big", "s") is None
    assert len(partial_free.read_all("keep", "s")) == 1


def test_batches_never_exceed_dynamodb_limits(moto_endpoint: str, sync_table: str) -> None:
    adapter = sync_adapter(moto_endpoint, sync_table)
    sizes: list[int] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        sizes.extend(len(v) for v in params["RequestItems"].values())

    adapter.client().meta.events.register("before-parameter-build.dynamodb.BatchWriteItem", record)
    _seed_events(adapter, "n", "s", 130)
    adapter.delete_sandbox("n", "s")
    assert sizes and max(sizes) <= 25


async def test_listing_survives_unprocessed_keys(
    moto_endpoint: str, sync_table: str, indexes_caught_up: Callable[[None], Awaitable[None]]
) -> None:
    adapter = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    for i in range(40):
        await adapter.append(
            LedgerEntry(
                ts=100 + i,
                name="n",
                sandbox_id=f"s{i}",
                step_index=-1,
                event=LedgerEvent.SandboxCreated,
            )
        )
    await indexes_caught_up(None)  # settled listings (index lag waited out)
    partial = PartialBatches(0.6).attach(await adapter.client())
    listed = await adapter.list_all_sandbox_details()
    assert partial.held_back > 0
    assert [d.sandbox_id for d in listed] == [f"s{i}" for i in reversed(range(40))]
    await adapter.close()


def test_session_pk_for_reference() -> None:
    assert session_pk("a#b", "c") != session_pk("a", "b#c")
