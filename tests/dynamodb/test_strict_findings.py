"""What the strict profile of the embedded DynamoDB (sandbox_ledger.local.strict) found in the
product, each held here against a strict server: the rule DynamoDB applies, and the product
coping with it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.local import LocalDynamoDB, StrictProfile


@pytest.fixture(scope="module")
def held() -> Iterator[str]:
    """A strict server whose transactions stay in flight half a second."""
    server = LocalDynamoDB(strict=StrictProfile(conflict_hold=0.5))
    yield server.start()
    server.stop()


def e(event: str, ts: int, step: int = -1) -> LedgerEntry:
    return LedgerEntry(ts=ts, name="strict", sandbox_id="s", step_index=step, event=event)


def hold_the_summary(endpoint: str, table: str) -> threading.Thread:
    """A transaction that updates the session's summary, in flight for half a second."""
    raw = boto3.client("dynamodb", endpoint_url=endpoint)
    key = it.summary_key(k.session_pk("strict", "s"))

    def run() -> None:
        raw.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": table,
                        "Key": key,
                        "UpdateExpression": "SET #x = :x",
                        "ExpressionAttributeNames": {"#x": "held"},
                        "ExpressionAttributeValues": {":x": {"S": "by a transaction"}},
                    }
                }
            ]
        )

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.15)  # in flight now
    return thread


def test_a_delete_whose_lease_meets_a_transaction_in_flight_retries_it(held: str) -> None:
    """DynamoDB: "a PutItem, UpdateItem, or DeleteItem request for an item conflicts with an
    ongoing TransactWriteItems request that includes the same item" and fails with
    TransactionConflictException, which botocore does not retry. delete_sandbox's lease (an
    UpdateItem of the summary every append updates in its transaction) met it and failed
    with StorageError; single-item writes now wait and send again."""
    table = f"strict-{uuid.uuid4().hex[:8]}"
    ledger = SyncDynamoDBAdapter(table, endpoint_url=held)
    ledger.create_table()
    ledger.append(e(LedgerEvent.SandboxCreated, 1))
    thread = hold_the_summary(held, table)
    ledger.delete_sandbox("strict", "s")
    thread.join()
    assert ledger.read_all("strict", "s") == []


async def test_the_async_twin_retries_a_conflicting_write_too(held: str) -> None:
    table = f"strict-{uuid.uuid4().hex[:8]}"
    async with DynamoDBAdapter(table, endpoint_url=held) as ledger:
        await ledger.create_table()
        await ledger.append(e(LedgerEvent.SandboxCreated, 1))
        thread = hold_the_summary(held, table)
        await ledger.delete_sandbox("strict", "s")
        thread.join()
        assert await ledger.read_all("strict", "s") == []


def test_a_write_held_past_every_retry_says_so(held: str, monkeypatch: Any) -> None:
    """Past its retries the conflict leaves as the package's error, naming it."""
    from sandbox_ledger.errors import StorageError
    from sandbox_ledger.sdk import steps

    monkeypatch.setattr(steps, "MAX_CONFLICTS", 1)
    table = f"strict-{uuid.uuid4().hex[:8]}"
    ledger = SyncDynamoDBAdapter(table, endpoint_url=held)
    ledger.create_table()
    ledger.append(e(LedgerEvent.SandboxCreated, 1))
    thread = hold_the_summary(held, table)
    with pytest.raises(StorageError, match="TransactionConflict"):
        ledger.delete_sandbox("strict", "s")
    thread.join()


# -- contention and throttling past the SDK's retries -----------------------------------------


def _fast_backoff(monkeypatch: Any) -> None:
    from sandbox_ledger.sdk import steps

    monkeypatch.setattr(steps, "backoff", lambda attempt, **_: 0.0)


def test_an_append_outlasts_a_run_of_conflicts_longer_than_a_fault_gets(
    moto_endpoint: str, sync_table: str, monkeypatch: Any
) -> None:
    """Three imports of one file at once on the strict server (transactions in flight 20 ms)
    gave up with StorageError: each lost its transaction to another's in flight 12 times in
    a row while the others made progress. A conflict is contention, not a fault: twenty in a
    row now pass, the entry stored once."""
    from dynamodb.faults import CancelTransactions

    _fast_backoff(monkeypatch)
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    conflicts = CancelTransactions("TransactionConflict", times=20, aio=False)
    conflicts.attach(ledger.client())
    created = e(LedgerEvent.SandboxCreated, 1)
    ledger.append(created)
    assert conflicts.injected == 20
    assert ledger.read_all("strict", "s") == [created]


def test_an_import_outlasts_a_run_of_conflicts_longer_than_a_fault_gets(
    moto_endpoint: str, sync_table: str, monkeypatch: Any
) -> None:
    from dynamodb.faults import CancelTransactions

    _fast_backoff(monkeypatch)
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    conflicts = CancelTransactions("TransactionConflict", times=20, aio=False)
    conflicts.attach(ledger.client())
    lines = [(e(LedgerEvent.SandboxCreated, 1), 1), (e(LedgerEvent.ExecStarted, 2, step=0), 1)]
    assert ledger.append_once_many(lines) == [True, True]
    assert conflicts.injected == 20
    assert ledger.read_all("strict", "s") == [entry for entry, _ in lines]


def test_an_import_outlasts_a_partition_s_throughput_spent_for_longer_than_a_fault_gets(
    moto_endpoint: str, sync_table: str, monkeypatch: Any
) -> None:
    """An import of a session of 4.6 MB (test_import_batches.py) gave up with StorageError once
    the strict server charged a transaction's items as DynamoDB does (a 4 MB transaction:
    about 7,500 write units, seven seconds of one partition key's 1,000 a second): its next
    transaction was cancelled with ThrottlingError 12 times in a row, a fault's budget. A
    partition's throughput spent is waited for as a conflict is: twenty in a row now pass."""
    from dynamodb.faults import CancelTransactions

    _fast_backoff(monkeypatch)
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    throttled = CancelTransactions("ThrottlingError", times=20, aio=False)
    throttled.attach(ledger.client())
    lines = [(e(LedgerEvent.SandboxCreated, 1), 1), (e(LedgerEvent.ExecStarted, 2, step=0), 1)]
    assert ledger.append_once_many(lines) == [True, True]
    assert throttled.injected == 20
    assert ledger.read_all("strict", "s") == [entry for entry, _ in lines]


def test_conflicts_without_end_give_up_with_the_package_error(
    moto_endpoint: str, sync_table: str, monkeypatch: Any
) -> None:
    from dynamodb.faults import CancelTransactions
    from sandbox_ledger.errors import StorageError
    from sandbox_ledger.sdk import steps

    _fast_backoff(monkeypatch)
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    conflicts = CancelTransactions("TransactionConflict", times=10**6, aio=False)
    conflicts.attach(ledger.client())
    with pytest.raises(StorageError, match="cancelled 40 times"):
        ledger.append(e(LedgerEvent.SandboxCreated, 1))
    with pytest.raises(StorageError, match="cancelled 40 times"):
        ledger.append_once_many([(e(LedgerEvent.SandboxCreated, 1), 1)])
    assert conflicts.injected == 2 * steps.MAX_CONFLICTS
    assert ledger.read_all("strict", "s") == []


def test_a_delete_whose_batches_are_throttled_whole_past_the_sdk_retries_finishes(
    moto_endpoint: str, sync_table: str, monkeypatch: Any
) -> None:
    """A delete of a session of 10,000 entries on the strict server failed with
    ThrottledError: its BatchWriteItems into one partition outran the partition's 1,000
    write units a second, and DynamoDB answers a batch none of whose items it can write with
    ProvisionedThroughputExceededException (not UnprocessedItems), which botocore retries a
    few times only. Such a batch is now unprocessed as a whole: backed off and sent again."""
    from botocore.config import Config

    from dynamodb.faults import FailShare

    _fast_backoff(monkeypatch)
    once = Config(retries={"mode": "standard", "max_attempts": 1})
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint, config=once)
    entries = [e(LedgerEvent.SandboxCreated, 1)]
    entries += [e(LedgerEvent.ExecStarted, 2 + i, step=i) for i in range(60)]
    ledger.append_once_many([(entry, 1) for entry in entries])
    throttle = FailShare(
        0.5, "ProvisionedThroughputExceededException", operations={"BatchWriteItem"}, aio=False
    ).attach(ledger.client())
    ledger.delete_sandbox("strict", "s")
    assert throttle.injected >= 2
    assert ledger.read_all("strict", "s") == []
    assert ledger.get_sandbox_details("strict", "s") is None
