"""The deployment descriptor: one item that every client of a table agrees on."""

from __future__ import annotations

import boto3
import pytest

from resource_fixtures import record
from sandbox_ledger import keys as k
from sandbox_ledger.deployment import (
    DeploymentMismatchError,
    TableDescriptor,
    aread_descriptor,
    descriptor_item,
    read_descriptor,
    resolve_shard_count,
)
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.resources import SyncResourceRecordStore


def client(endpoint: str) -> object:
    return boto3.client("dynamodb", endpoint_url=endpoint)


def test_create_table_writes_the_descriptor_once(moto_endpoint: str, table_name: str) -> None:
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=8) as adapter:
        assert adapter.create_table() is True
        assert read_descriptor(client(moto_endpoint), table_name) == TableDescriptor(shard_count=8)
        # Creating again with the same shard count is a no-op; a different one is refused.
        assert adapter.create_table() is False
    other = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=4)
    with pytest.raises(DeploymentMismatchError, match=r"shard_count: 4 .* 8"):
        other.create_table()
    assert read_descriptor(client(moto_endpoint), table_name) == TableDescriptor(shard_count=8)


async def test_async_create_table_and_reader(moto_endpoint: str, table_name: str) -> None:
    async with DynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=2) as adapter:
        await adapter.create_table()
        found = await aread_descriptor(await adapter.client(), table_name)
    assert found == TableDescriptor(shard_count=2)


def test_a_table_without_descriptor_reads_none(moto_endpoint: str, table_name: str) -> None:
    raw = client(moto_endpoint)
    raw.create_table(**k.table_definition(table_name))  # type: ignore[attr-defined]
    assert read_descriptor(raw, table_name) is None
    assert resolve_shard_count(None, None) == k.DEFAULT_SHARD_COUNT
    assert resolve_shard_count(None, 16) == 16


def test_the_store_follows_the_descriptor(moto_endpoint: str, table_name: str) -> None:
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=7) as adapter:
        adapter.create_table()
    store = SyncResourceRecordStore(table_name, endpoint_url=moto_endpoint)
    stored = store.put(record())
    assert store.shard_count == 7
    item = client(moto_endpoint).get_item(  # type: ignore[attr-defined]
        TableName=table_name,
        Key={
            k.PARTITION_KEY: {"S": k.resource_pk(stored.record.id)},
            k.SORT_KEY: {"S": k.RESOURCE_SK},
        },
    )["Item"]
    shard = k.shard_of(k.resource_pk(stored.record.id), 7)
    assert item[k.RESOURCES_BY_PHASE.partition_key]["S"] == k.resource_phase_pk("ready", shard)
    assert [v.record.id for v in store.list().records] == [stored.record.id]
    wrong = SyncResourceRecordStore(table_name, endpoint_url=moto_endpoint, shard_count=4)
    with pytest.raises(DeploymentMismatchError) as caught:
        wrong.list()
    message = str(caught.value)
    assert "shard_count" in message and "4" in message and "7" in message and table_name in message


def test_descriptor_round_trip_and_bad_items() -> None:
    full = TableDescriptor(
        shard_count=8, event_bus_name="bus", stale_after_seconds=600, retain_failed_seconds=0
    )
    item = descriptor_item(full)
    assert item[k.DESCRIPTOR_SHARD_COUNT] == {"N": "8"}
    assert full.describes_sweep and not TableDescriptor().describes_sweep
    with pytest.raises(ValueError, match="shard_count"):
        TableDescriptor(shard_count=0)
    with pytest.raises(ValueError, match="stale_after_seconds"):
        TableDescriptor(stale_after_seconds=0)
