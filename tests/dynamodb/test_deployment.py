"""The deployment descriptor: one item that every client of a table agrees on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import quote

import boto3
import pytest

from resources.resource_fixtures import record
from sandbox_ledger import (
    InvalidInputError,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    SandboxStatus,
    open_store,
)
from sandbox_ledger import keys as k
from sandbox_ledger.deployment import (
    DeploymentMismatchError,
    TableDescriptor,
    aread_descriptor,
    deploy_descriptor_request,
    descriptor_item,
    read_descriptor,
    resolve_shard_count,
)
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.dynamodb.instrument import RequestCounter
from sandbox_ledger.resources import SyncResourceRecordStore


def client(endpoint: str) -> object:
    return boto3.client("dynamodb", endpoint_url=endpoint)


def test_create_table_writes_the_descriptor_once(moto_endpoint: str, table_name: str) -> None:
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=8) as adapter:
        assert adapter.create_table() is True
        made = read_descriptor(client(moto_endpoint), table_name)
        assert made is not None and made.store_id  # a random identity, for cursors
        assert made == TableDescriptor(shard_count=8, store_id=made.store_id)
        # Creating again with the same shard count is a no-op; a different one is refused.
        assert adapter.create_table() is False
    other = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=4)
    with pytest.raises(DeploymentMismatchError, match=r"shard_count: 4 .* 8"):
        other.create_table()
    assert read_descriptor(client(moto_endpoint), table_name) == made


def test_a_redeploy_may_change_every_setting_but_the_shard_count(
    moto_endpoint: str, table_name: str, wait_for_indexes: Callable[[], None]
) -> None:
    """The stack's descriptor write (the request its custom resource makes at every deploy):
    a new bus, windows or retention replace the old ones; another shard count fails the
    write (and so the deploy), leaving the descriptor and every item's visibility as they
    were."""
    from botocore.exceptions import ClientError

    raw = client(moto_endpoint)
    raw.create_table(**k.table_definition(table_name))  # type: ignore[attr-defined]
    first = TableDescriptor(
        shard_count=4, event_bus_name="bus-a", stale_after_seconds=900, retain_failed_seconds=0
    )
    raw.put_item(**deploy_descriptor_request(table_name, first))  # type: ignore[attr-defined]
    ledger = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint)
    for i in range(12):
        ledger.append(
            LedgerEntry(ts=i, name="n", sandbox_id=f"s{i}", step_index=-1, event="sandbox.created")
        )
    changed = TableDescriptor(
        shard_count=4,
        event_bus_name="bus-b",
        stale_after_seconds=600,
        retain_failed_seconds=86400,
        ledger_retention_seconds=86400 * 90,
    )
    raw.put_item(**deploy_descriptor_request(table_name, changed))  # type: ignore[attr-defined]
    assert read_descriptor(raw, table_name) == changed
    fewer = TableDescriptor(shard_count=2, event_bus_name="bus-b")
    with pytest.raises(ClientError) as refused:
        raw.put_item(**deploy_descriptor_request(table_name, fewer))  # type: ignore[attr-defined]
    assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert read_descriptor(raw, table_name) == changed
    fresh = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint)
    wait_for_indexes()  # settled listings (index lag waited out)
    assert len(fresh.list_all_sandbox_details(ListSandboxOptions(limit=50))) == 12


async def test_async_create_table_and_reader(moto_endpoint: str, table_name: str) -> None:
    async with DynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=2) as adapter:
        await adapter.create_table()
        found = await aread_descriptor(await adapter.client(), table_name)
    assert found is not None and found.store_id
    assert found == TableDescriptor(shard_count=2, store_id=found.store_id)


def test_a_table_without_descriptor_reads_none(moto_endpoint: str, table_name: str) -> None:
    raw = client(moto_endpoint)
    raw.create_table(**k.table_definition(table_name))  # type: ignore[attr-defined]
    assert read_descriptor(raw, table_name) is None
    assert resolve_shard_count(None, None) == k.DEFAULT_SHARD_COUNT
    assert resolve_shard_count(None, 16) == 16


def test_the_store_follows_the_descriptor(
    moto_endpoint: str, table_name: str, wait_for_indexes: Callable[[], None]
) -> None:
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
    wait_for_indexes()  # settled listings (index lag waited out)
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


# -- the ledger adapters follow the descriptor ----------------------------------------------


def _fleet(sessions: int) -> list[LedgerEntry]:
    """``sessions`` created sessions (every third one closed), spread over the shards."""
    entries = []
    for i in range(sessions):
        entries.append(_e(f"job-{i % 3}", f"sb-{i:02d}", LedgerEvent.SandboxCreated, 1_000 + i))
        if i % 3 == 0:
            entries.append(_e(f"job-{i % 3}", f"sb-{i:02d}", LedgerEvent.SandboxClosed, 5_000 + i))
    return entries


def _e(name: str, sid: str, event: str, ts: int) -> LedgerEntry:
    return LedgerEntry(ts=ts, name=name, sandbox_id=sid, step_index=-1, event=event, payload=None)


def _expected(sessions: int) -> list[tuple[str, str]]:
    return sorted((f"job-{i % 3}", f"sb-{i:02d}") for i in range(sessions))


@pytest.mark.parametrize("shards", [4, 8])
def test_a_ledger_client_without_a_shard_count_lists_every_session(
    moto_endpoint: str, table_name: str, shards: int, wait_for_indexes: Callable[[], None]
) -> None:
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=shards) as made:
        made.create_table()
        for entry in _fleet(24):
            made.append(entry)
    wait_for_indexes()  # settled listings (index lag waited out)
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint) as ledger:
        assert ledger.shard_count is None  # not read yet
        listed = ledger.list_all_sandbox_details()
        assert sorted((d.name, d.sandbox_id) for d in listed) == _expected(24)
        assert ledger.shard_count == shards == ledger.table_shard_count()
        running = ledger.list_all_sandbox_details(ListSandboxOptions(status=SandboxStatus.Running))
        assert len(running) == 16
        # Writes by this client land on the table's shards too.
        ledger.append(_e("late", "sb-late", LedgerEvent.SandboxCreated, 9_000))
    wait_for_indexes()  # settled listings (index lag waited out)
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=shards) as same:
        assert len(same.list_all_sandbox_details()) == 25


async def test_an_async_ledger_client_without_a_shard_count_lists_every_session(
    moto_endpoint: str, table_name: str, indexes_caught_up: Callable[[None], Awaitable[None]]
) -> None:
    async with DynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=4) as made:
        await made.create_table()
        for entry in _fleet(20):
            await made.append(entry)
    await indexes_caught_up(None)  # settled listings (index lag waited out)
    async with DynamoDBAdapter(table_name, endpoint_url=moto_endpoint) as ledger:
        listed = await ledger.list_all_sandbox_details()
        assert sorted((d.name, d.sandbox_id) for d in listed) == _expected(20)
        assert ledger.shard_count == 4


def _refused(caught: pytest.ExceptionInfo[DeploymentMismatchError], table: str) -> None:
    message = str(caught.value)
    assert "shard_count" in message and "2" in message and "4" in message and table in message
    assert (caught.value.explicit, caught.value.described) == (2, 4)


def test_a_ledger_client_with_a_disagreeing_shard_count_is_refused(
    moto_endpoint: str, table_name: str
) -> None:
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=4) as made:
        made.create_table()
        for entry in _fleet(12):
            made.append(entry)
    wrong = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=2)
    with pytest.raises(DeploymentMismatchError) as caught:
        wrong.list_all_sandbox_details()
    _refused(caught, table_name)
    # Refused before any write: a created or closed event would index on the wrong shard.
    for event in (LedgerEvent.SandboxCreated, LedgerEvent.SandboxClosed):
        with pytest.raises(DeploymentMismatchError):
            wrong.append(_e("other", "sb-x", event, 1))
    with pytest.raises(DeploymentMismatchError):
        wrong.table_shard_count()
    with pytest.raises(DeploymentMismatchError):
        wrong.create_table()
    assert wrong.read_all("other", "sb-x") == []
    wrong.close()


async def test_an_async_ledger_client_with_a_disagreeing_shard_count_is_refused(
    moto_endpoint: str, table_name: str
) -> None:
    async with DynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=4) as made:
        await made.create_table()
    async with DynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=2) as wrong:
        with pytest.raises(DeploymentMismatchError) as caught:
            await wrong.list_all_sandbox_details()
        _refused(caught, table_name)
        with pytest.raises(DeploymentMismatchError):
            await wrong.append(_e("other", "sb-x", LedgerEvent.SandboxCreated, 1))
        assert await wrong.read_all("other", "sb-x") == []


def test_the_descriptor_is_read_once_per_client(
    moto_endpoint: str, table_name: str, wait_for_indexes: Callable[[], None]
) -> None:
    """One GetItem per client lifetime, on its first write (any event: its retention must be
    the table's) or its first listing of every name (the shard count); reads that depend on
    neither never read it."""
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint) as made:
        made.create_table()
        made.append(_e("n", "s0", LedgerEvent.SandboxCreated, 1))
    reader = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint)
    counter = RequestCounter().attach(reader.client())
    reader.list_sandbox_details("n")
    assert reader.get_sandbox_details("n", "s0") is not None
    assert counter.calls["GetItem"] == 1  # the details, not the descriptor
    reader.close()
    ledger = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint)
    counter = RequestCounter().attach(ledger.client())
    ledger.append(_e("n", "s1", LedgerEvent.ExecStarted, 2))
    # The descriptor, once; the session's last sequence mark (a session this client has not
    # written), then the entry with its mark.
    assert dict(counter.calls) == {"GetItem": 1, "Query": 1, "TransactWriteItems": 1}
    counter.reset()
    ledger.append(_e("n", "s1", LedgerEvent.SandboxCreated, 3))
    assert dict(counter.calls) == {"TransactWriteItems": 1}
    counter.reset()
    ledger.append(_e("n", "s1", LedgerEvent.SandboxClosed, 4))
    ledger.list_all_sandbox_details()
    assert counter.calls["GetItem"] == 0
    ledger.close()
    wait_for_indexes()  # the listings find what they read (index lag waited out)
    fresh = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint)
    counter = RequestCounter().attach(fresh.client())
    fresh.list_all_sandbox_details()
    assert dict(counter.calls) == {"GetItem": 1, "Query": 4, "BatchGetItem": 1}
    counter.reset()
    fresh.list_all_sandbox_details()
    assert dict(counter.calls) == {"Query": 4, "BatchGetItem": 1}
    fresh.close()


def test_a_table_without_descriptor_uses_the_given_count_and_says_so(
    moto_endpoint: str,
    table_name: str,
    caplog: pytest.LogCaptureFixture,
    wait_for_indexes: Callable[[], None],
) -> None:
    raw = client(moto_endpoint)
    raw.create_table(**k.table_definition(table_name))  # type: ignore[attr-defined]
    old = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=8)
    with caplog.at_level(logging.WARNING, logger="sandbox_ledger"):
        old.append(_e("n", "s", LedgerEvent.SandboxCreated, 1))
        wait_for_indexes()  # settled listings (index lag waited out)
        assert [d.sandbox_id for d in old.list_all_sandbox_details()] == ["s"]
    warnings = [r.getMessage() for r in caplog.records if "no deployment descriptor" in r.message]
    assert len(warnings) == 1, warnings  # once per client
    assert table_name in warnings[0] and "shard_count 8 (as given)" in warnings[0]
    assert old.shard_count == 8
    caplog.clear()
    default = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint)
    with caplog.at_level(logging.WARNING, logger="sandbox_ledger"):
        assert default.table_shard_count() == k.DEFAULT_SHARD_COUNT
    assert "shard_count 4 (the default)" in caplog.text
    # create_table() on the existing table records the count: every client follows it.
    assert old.create_table() is False
    recorded = read_descriptor(raw, table_name)
    assert recorded is not None and recorded.store_id
    assert recorded == TableDescriptor(shard_count=8, store_id=recorded.store_id)
    follower = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint)
    assert [d.sandbox_id for d in follower.list_all_sandbox_details()] == ["s"]
    assert follower.shard_count == 8
    for adapter in (old, default, follower):
        adapter.close()


def test_store_urls_and_the_cli_follow_the_descriptor(
    moto_endpoint: str,
    table_name: str,
    monkeypatch: pytest.MonkeyPatch,
    wait_for_indexes: Callable[[], None],
) -> None:
    from typer.testing import CliRunner

    from sandbox_ledger.cli import app

    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=8) as made:
        made.create_table()
        for entry in _fleet(16):
            made.append(entry)
    wait_for_indexes()  # settled listings (index lag waited out)
    endpoint = quote(moto_endpoint, safe="")
    store = open_store(f"dynamodb://{table_name}?endpoint_url={endpoint}")
    assert isinstance(store, DynamoDBAdapter)
    listed = asyncio.run(_list_and_close(store))
    assert sorted(listed) == _expected(16)
    wrong = open_store(f"dynamodb://{table_name}?endpoint_url={endpoint}&shard_count=2")
    with pytest.raises(DeploymentMismatchError, match=r"2 .* 8"):
        asyncio.run(_list_and_close(wrong))

    monkeypatch.delenv("SANDBOX_LEDGER_TABLE", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    runner = CliRunner()
    url = f"dynamodb://{table_name}?endpoint_url={endpoint}"
    result = runner.invoke(app, ["ls", "--store", url, "--limit", "0"])
    assert result.exit_code == 0, result.output
    assert all(sid in result.output for _, sid in _expected(16))
    refused = runner.invoke(app, ["--shard-count", "2", "ls", "--store", url])
    assert refused.exit_code == 2  # usage: a flag that disagrees with the table
    assert "shard_count" in refused.output and "2" in refused.output and "8" in refused.output
    table_args = ["--table", table_name, "--endpoint-url", moto_endpoint, "--shard-count", "4"]
    refused = runner.invoke(app, [*table_args, "ls"])
    assert refused.exit_code == 2 and "8" in refused.output


async def _list_and_close(store: object) -> list[tuple[str, str]]:
    assert isinstance(store, DynamoDBAdapter)
    try:
        return [(d.name, d.sandbox_id) for d in await store.list_all_sandbox_details()]
    finally:
        await store.close()


@pytest.mark.parametrize("described", [True, False], ids=["descriptor-without-id", "none"])
def test_cursors_of_a_table_without_store_id_are_bound_to_its_region(
    moto_endpoint: str, table_name: str, described: bool, wait_for_indexes: Callable[[], None]
) -> None:
    """A table described before descriptors held an id (or not described at all) keeps
    paging: its cursors are bound to its name and the client's region, and a listing
    writes nothing to record an id."""
    regions = ("us-east-1", "eu-west-1")
    for region in regions:
        raw = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name=region)
        raw.create_table(**k.table_definition(table_name))
        if described:
            raw.put_item(TableName=table_name, Item=descriptor_item(TableDescriptor()))
    here, there, again = (
        SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, region_name=region)
        for region in (*regions, regions[0])
    )
    for adapter, base in ((here, 100), (there, 200)):
        for i in range(3):
            adapter.append(_e("n", f"s{base + i}", LedgerEvent.SandboxCreated, base + i))
    wait_for_indexes()  # settled listings (index lag waited out)
    for name in ("n", None):
        first = (
            here.list_sandbox_page(name, ListSandboxOptions(limit=1))
            if name
            else here.list_all_sandbox_page(ListSandboxOptions(limit=1))
        )
        options = ListSandboxOptions(cursor=first.cursor)
        with pytest.raises(InvalidInputError, match="cursor") as refused:
            there.list_sandbox_details("n", options) if name else there.list_all_sandbox_details(
                options
            )
        assert refused.value.field == "cursor"
        rest = (
            again.list_sandbox_details("n", options)
            if name
            else again.list_all_sandbox_details(options)
        )
        assert [d.sandbox_id for d in rest] == ["s101", "s100"]
    for adapter in (here, there, again):
        stored = read_descriptor(adapter.client(), table_name)
        assert stored == (TableDescriptor() if described else None)  # nothing recorded
        adapter.close()


def test_create_table_records_a_store_id_every_client_reads(
    moto_endpoint: str, table_name: str
) -> None:
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint) as made:
        made.create_table()
        first = read_descriptor(made.client(), table_name)
        made.create_table()  # again: the table's id is kept
        assert first is not None and first.store_id
        assert read_descriptor(made.client(), table_name) == first
