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

    monkeypatch.setattr(steps, "MAX_ATTEMPTS", 1)
    table = f"strict-{uuid.uuid4().hex[:8]}"
    ledger = SyncDynamoDBAdapter(table, endpoint_url=held)
    ledger.create_table()
    ledger.append(e(LedgerEvent.SandboxCreated, 1))
    thread = hold_the_summary(held, table)
    with pytest.raises(StorageError, match="TransactionConflict"):
        ledger.delete_sandbox("strict", "s")
    thread.join()
