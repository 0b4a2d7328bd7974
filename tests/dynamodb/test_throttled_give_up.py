"""A write whose transactions are cancelled for throughput alone every time it sends them gives
up with ThrottledError, as a throttled single write does, not with a bare StorageError: a
caller that backs off on throttling must be able to tell. Found by benchmarks/strict_cost.py:
at 188% of a new table's write throughput for 30 s, one sandbox's append gave up after 40
transactions cancelled with ``ThrottlingError`` and raised ``StorageError``."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from dynamodb.faults import CancelTransactions
from dynamodb.test_dynamodb_faults import workload
from sandbox_ledger import StorageError, ThrottledError
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.errors import cancelled_for_throughput, translate_client_error
from sandbox_ledger.sdk import steps

pytestmark = pytest.mark.usefixtures("fast_sdk_backoff", "few_conflicts")


@pytest.fixture
def few_conflicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A contended write's budget cut from 40 tries to 3, to give up in a moment."""
    monkeypatch.setattr(steps, "MAX_CONFLICTS", 3)


def test_an_append_throttled_past_its_retries_raises_throttled_error(
    moto_endpoint: str, sync_table: str
) -> None:
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    faults = CancelTransactions("ThrottlingError", times=10_000, aio=False).attach(adapter.client())
    with pytest.raises(ThrottledError, match="cancelled 3 times") as info:
        adapter.append(workload("n", "s", 0)[0])
    assert faults.injected == 3
    assert isinstance(info.value.__cause__, ClientError)
    adapter.close()


async def test_the_async_twin_raises_throttled_error_too(
    moto_endpoint: str, sync_table: str
) -> None:
    adapter = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    CancelTransactions("ThrottlingError", times=10_000, aio=True).attach(await adapter.client())
    with pytest.raises(ThrottledError, match="cancelled"):
        await adapter.append(workload("n", "a", 0)[0])
    await adapter.close()


def test_an_import_throttled_past_its_retries_raises_throttled_error(
    moto_endpoint: str, sync_table: str
) -> None:
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    CancelTransactions("ThrottlingError", times=10_000, aio=False).attach(adapter.client())
    entries = workload("n", "i", 2)
    with pytest.raises(ThrottledError, match="import: transaction cancelled"):
        adapter.append_once_many([(entry, 1) for entry in entries])
    adapter.close()


def test_a_give_up_for_conflicts_is_no_throttling(moto_endpoint: str, sync_table: str) -> None:
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    CancelTransactions("TransactionConflict", times=10_000, aio=False).attach(adapter.client())
    with pytest.raises(StorageError, match="cancelled") as info:
        adapter.append(workload("n", "c", 0)[0])
    assert not isinstance(info.value, ThrottledError)
    adapter.close()


@pytest.mark.parametrize(
    ("reasons", "throttled"),
    [
        (["ThrottlingError", "ThrottlingError"], True),
        (["None", "ThrottlingError"], True),
        ([None, "ProvisionedThroughputExceeded"], True),
        (["TransactionConflict", "ThrottlingError"], False),
        (["ConditionalCheckFailed", "ThrottlingError"], False),
        (["TransactionConflict"], False),
        (["None"], False),
        ([], False),
    ],
)
def test_a_cancellation_is_for_throughput_only_when_every_cause_is(
    reasons: list[str | None], throttled: bool
) -> None:
    assert cancelled_for_throughput(reasons) is throttled
    assert cancelled_for_throughput([{"Code": r} for r in reasons]) is throttled
    # A transaction left to botocore (a delete's seal past its budget) is translated alike.
    error = ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
            "CancellationReasons": [{"Code": r} for r in reasons],
        },
        "TransactWriteItems",
    )
    translated = translate_client_error(error)
    assert isinstance(translated, StorageError)
    assert isinstance(translated, ThrottledError) is throttled
