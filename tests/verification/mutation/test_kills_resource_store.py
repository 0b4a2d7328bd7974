"""The DynamoDB record store's own promises (``resources/store.py``, on the moto server): what
a scan returns and refuses, and the settings it refuses by name."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import boto3
import pytest

from resources.resource_fixtures import caught_up, record
from sandbox_ledger import ConflictError, InvalidInputError
from sandbox_ledger.deployment import (
    DeploymentMismatchError,
    TableDescriptor,
    deploy_descriptor_request,
)
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.resources import ExpiryPolicy, ResourceRecordStore, SyncResourceRecordStore
from sandbox_ledger.resources.models import to_iso
from verification.mutation.test_kills_resource_claims import NOW, new_store, stored

UNUSED = "http://127.0.0.1:9"  # a store makes no request until it is used
SECOND = timedelta(seconds=1)


@pytest.fixture
def store(moto_endpoint: str) -> SyncResourceRecordStore:
    return new_store(moto_endpoint)


@pytest.mark.parametrize("segments", [0, 65, True, 2.0, "2"])
def test_a_scan_refuses_a_segment_count_outside_1_to_64_by_name(
    store: SyncResourceRecordStore, segments: object
) -> None:
    with pytest.raises(InvalidInputError, match=r"^segments: must be an integer from 1 to 64$"):
        next(store.scan(segments=segments))  # type: ignore[arg-type]


@pytest.mark.parametrize("page_size", [0, -1, True, 1.0])
def test_a_scan_refuses_a_page_size_below_one_by_name(
    store: SyncResourceRecordStore, page_size: object
) -> None:
    with pytest.raises(InvalidInputError, match=r"^page_size: must be a positive integer$"):
        next(store.scan(page_size=page_size))  # type: ignore[arg-type]


@pytest.mark.parametrize(("segments", "page_size"), [(64, 1), (1, 1), (3, 2)])
def test_a_scan_finds_every_record_once_in_pages_of_its_size_per_segment(
    store: SyncResourceRecordStore, segments: int, page_size: int
) -> None:
    ids = {stored(store, timedelta(minutes=i)) for i in range(5)}
    pages = list(store.scan(segments=segments, page_size=page_size))
    found = [item.record.id for page in pages for item in page]  # type: ignore[union-attr]
    assert sorted(found) == sorted(ids)
    assert all(len(page) <= page_size * segments for page in pages)  # a page per segment


@pytest.mark.parametrize("horizon", [timedelta(0), timedelta(seconds=-1)])
def test_a_ttl_horizon_that_is_not_positive_is_refused_by_name(horizon: timedelta) -> None:
    with pytest.raises(InvalidInputError, match=r"^ttl_horizon: must be positive$"):
        SyncResourceRecordStore("records", endpoint_url=UNUSED, ttl_horizon=horizon)
    assert (
        SyncResourceRecordStore("records", endpoint_url=UNUSED, ttl_horizon=SECOND).ttl_horizon
        == SECOND
    )


def test_a_shard_count_given_is_checked_against_the_tables(
    moto_endpoint: str, moto_server: Any
) -> None:
    first = new_store(moto_endpoint)
    stored(first)
    caught_up(moto_server)  # about the shard count: the listing's settled state
    shards = first.shard_count  # the table's, once read
    assert shards is not None
    agreeing = SyncResourceRecordStore(
        first.table_name, endpoint_url=moto_endpoint, shard_count=shards
    )
    assert agreeing.shard_count == shards  # the one given, before any request
    assert len(agreeing.list().records) == 1
    other = SyncResourceRecordStore(
        first.table_name, endpoint_url=moto_endpoint, shard_count=shards + 1
    )
    assert other.shard_count == shards + 1
    with pytest.raises(
        DeploymentMismatchError, match=f"^shard_count: .* table {first.table_name} "
    ):
        other.list()
    with pytest.raises(InvalidInputError, match=r"^shard_count: must be between 1 and "):
        SyncResourceRecordStore("records", endpoint_url=UNUSED, shard_count=0)


def test_the_policy_given_sets_the_ttls_when_the_table_records_none(moto_endpoint: str) -> None:
    keep_failed = ExpiryPolicy(stale_after=timedelta(hours=1), retain_failed=timedelta(0))
    table = new_store(moto_endpoint).table_name
    store = SyncResourceRecordStore(
        table, endpoint_url=moto_endpoint, clock=lambda: NOW, policy=keep_failed
    )
    assert store.policy == keep_failed  # the one given, before any request
    failed = store.put(record(phase="cleanup-failed", now=NOW))
    ready = store.put(record(phase="ready", now=NOW))
    assert failed.expires_at is None  # kept forever, as the policy says
    horizon = int(store.ttl_horizon.total_seconds())
    latest = keep_failed.latest_expiry("ready")  # its window from the hour given
    assert latest is not None and latest != ExpiryPolicy().latest_expiry("ready")
    assert ready.expires_at == int(NOW.timestamp() + latest.total_seconds()) + horizon
    assert store.policy == keep_failed


def test_a_listing_cursor_of_another_table_is_refused(moto_endpoint: str, moto_server: Any) -> None:
    first, second = new_store(moto_endpoint), new_store(moto_endpoint)
    for store in (first, second):
        stored(store), stored(store, timedelta(hours=2))
    caught_up(moto_server)  # about whose cursor it is: the listings' settled state
    page = first.list(limit=1)
    assert page.cursor is not None
    assert len(first.list(limit=1, cursor=page.cursor).records) == 1
    with pytest.raises(InvalidInputError, match=r"^cursor: "):
        second.list(limit=1, cursor=page.cursor)


def test_the_store_follows_the_shard_count_the_table_records(
    moto_endpoint: str, moto_server: Any
) -> None:
    table = f"shards-{uuid.uuid4().hex[:12]}"
    with SyncDynamoDBAdapter(table, endpoint_url=moto_endpoint, shard_count=2) as adapter:
        adapter.create_table()
    writer = SyncResourceRecordStore(table, endpoint_url=moto_endpoint)
    rid = stored(writer)
    assert writer.shard_count == 2
    caught_up(moto_server)  # about the shards listed: the listing's settled state
    reader = SyncResourceRecordStore(table, endpoint_url=moto_endpoint, shard_count=2)
    assert [r.record.id for r in reader.list().records] == [rid]


def test_a_policy_given_is_checked_against_the_windows_the_table_records(
    moto_endpoint: str,
) -> None:
    table = new_store(moto_endpoint).table_name
    described = TableDescriptor(shard_count=4, stale_after_seconds=600, retain_failed_seconds=0)
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    client.put_item(**deploy_descriptor_request(table, described))
    follower = SyncResourceRecordStore(table, endpoint_url=moto_endpoint, clock=lambda: NOW)
    stored(follower)
    assert follower.policy == ExpiryPolicy(timedelta(seconds=600), timedelta(0))
    other = ExpiryPolicy(stale_after=timedelta(hours=1), retain_failed=timedelta(0))
    dissenter = SyncResourceRecordStore(table, endpoint_url=moto_endpoint, policy=other)
    with pytest.raises(DeploymentMismatchError, match=f"^stale_after_seconds: .* table {table} "):
        dissenter.list()


def test_a_put_of_anything_but_a_record_is_refused_by_name(store: SyncResourceRecordStore) -> None:
    wire = record(now=NOW).model_dump(by_alias=True)
    with pytest.raises(
        InvalidInputError, match=r"^record: expected a ResourceActivityRecord, got dict$"
    ):
        store.put(wire)  # type: ignore[arg-type]
    assert store.list().records == []


async def test_the_async_store_takes_every_setting_and_argument_it_is_given(
    moto_endpoint: str, indexes_caught_up: Callable[[str | None], Awaitable[None]]
) -> None:
    table = f"async-{uuid.uuid4().hex[:12]}"
    with SyncDynamoDBAdapter(
        table, endpoint_url=moto_endpoint, region_name="eu-west-1", shard_count=2
    ) as adapter:  # a region the tests' environment does not name
        adapter.create_table()
    keep_failed = ExpiryPolicy(stale_after=timedelta(hours=1), retain_failed=timedelta(0))
    later = NOW + timedelta(days=400)  # past every TTL of a record written at NOW
    clock = [NOW]
    kwargs: dict[str, Any] = {"endpoint_url": moto_endpoint, "clock": lambda: clock[0]}
    async with ResourceRecordStore(
        table, **kwargs, region_name="eu-west-1", shard_count=3
    ) as dissenter:
        with pytest.raises(DeploymentMismatchError, match=r"^shard_count: "):
            await dissenter.list()
    async with ResourceRecordStore(
        table, **kwargs, region_name="eu-west-1", policy=keep_failed
    ) as store:
        failed = await store.put(record(phase="cleanup-failed", now=NOW, provider="vm"))
        assert failed.expires_at is None  # the policy given: kept forever
        ready = await store.put(record(phase="ready", now=NOW))
        assert ready.record.updated_at == to_iso(NOW)  # written at the store's clock
        rid = ready.record.id
        with pytest.raises(ConflictError):
            await store.put(ready.record, expected_revision=7)
        await indexes_caught_up(table)  # about the arguments: the listings' settled state
        assert [v.record.id for v in (await store.list(phase="ready")).records] == [rid]
        assert [v.record.id for v in (await store.list(provider="vm")).records] == [
            failed.record.id
        ]
        first = await store.list(limit=1)
        assert first.cursor is not None
        rest = await store.list(limit=1, cursor=first.cursor)
        assert {first.records[0].record.id, rest.records[0].record.id} == {
            rid,
            failed.record.id,
        }
        with pytest.raises(ConflictError):
            await store.delete(rid, expected_revision=7)
        assert await store.inspect(rid) == await store.get_versioned(rid)
        await store.record_operation_start(rid, "exec")
        finished = await store.record_operation_finish(rid, "exec", "failed", error="boom")
        assert finished.record.last_failure is not None
        assert (finished.record.last_failure.outcome, finished.record.last_failure.error) == (
            "failed",
            "boom",
        )
        pages = [page async for page in store.scan(segments=2, page_size=1)]
        scanned = [item.record.id for page in pages for item in page]  # type: ignore[union-attr]
        assert sorted(scanned) == sorted([rid, failed.record.id])
        assert all(len(page) <= 2 for page in pages)
        with pytest.raises(InvalidInputError, match=r"^segments: "):
            await anext(store.scan(segments=65))
        with pytest.raises(InvalidInputError, match=r"^page_size: "):
            await anext(store.scan(page_size=0))
        clock[0] = later
        assert await store.get_versioned(rid) is None  # past its TTL: hidden
        assert await store.inspect(rid) is None
        assert await store.get_versioned(failed.record.id) is not None  # kept forever


def test_the_store_reads_the_tables_descriptor(store: SyncResourceRecordStore) -> None:
    described = store.descriptor()
    assert described is not None and described.shard_count == 4
    assert store.descriptor() == described


def test_inspect_reads_a_record_as_stored_and_hides_one_past_its_ttl(moto_endpoint: str) -> None:
    clock = [NOW]
    table = new_store(moto_endpoint).table_name
    store = SyncResourceRecordStore(table, endpoint_url=moto_endpoint, clock=lambda: clock[0])
    rid = stored(store)
    assert store.inspect(rid) == store.get_versioned(rid)
    assert store.inspect("0123abcd-0000-4000-8000-000000000009") is None
    clock[0] = NOW + timedelta(days=400)  # past the record's TTL
    assert store.inspect(rid) is None
