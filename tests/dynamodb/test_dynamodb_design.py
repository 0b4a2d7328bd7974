"""The design's promises, measured in requests on a moto server: cost follows the result,
large payloads, keys, connections."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dynamodb.partition import after_delete
from sandbox_ledger import (
    KeyTooLongError,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    SandboxStatus,
    TableNotFoundError,
)
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb.instrument import RequestCounter
from sandbox_ledger.sdk.attributes import MAX_ITEM_BYTES, item_size
from sandbox_ledger.sdk.batching import batch_write
from sandbox_ledger.sdk.paging import query_all
from sandbox_ledger.sdk.steps import run_sync

PACKAGE = Path(__file__).parents[2] / "adapter" / "sandbox_ledger"


def e(name: str, sid: str, event: str, ts: int, payload: Any = None, step: int = -1) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name=name, sandbox_id=sid, step_index=step, event=event, payload=payload
    )


def seed_fleet(adapter: SyncDynamoDBAdapter, sessions: int, events: int, *, start: int) -> None:
    """Sessions and events written in bulk, with the same items append writes.

    append() uses TransactWriteItems, which moto runs in time proportional to the whole
    table (it deep-copies the table for rollback); seeding with the same summary
    UpdateItem and the same event items keeps large fleets quick to build.
    """
    client = adapter.client()
    requests = []
    for i in range(sessions):
        name, sid = f"job-{i % 7}", f"sb-{start + i}"
        lifecycle = [e(name, sid, LedgerEvent.SandboxCreated, 10_000 + start + i)]
        if i % 3:
            lifecycle.append(e(name, sid, LedgerEvent.SandboxClosed, 20_000 + start + i))
        lifecycle += [
            e(name, sid, LedgerEvent.ExecStarted, 10_000 + start + i + j, {"j": j}, j)
            for j in range(events)
        ]
        for entry in lifecycle:
            update = it.summary_update(entry, adapter.table_shard_count())
            if update is not None:
                client.update_item(TableName=adapter.table_name, **update)
            head = it.encode_entry(entry, it.order_ids.next()).head
            requests.append({"PutRequest": {"Item": head}})
    run_sync(client, batch_write(adapter.table_name, requests))


def test_no_scan_outside_the_exports() -> None:
    """One Scan call, in ``sdk.paging.scan_round``, reached only by the two exports (the
    ledger's ``scan_sessions`` and the resource records' ``scan_records``) and the local
    server's save that reads everything again (``loose_items.sessions_with_marks``); the
    record store's ``scan`` is called only by the records' directory export and the local
    server's save (``sandbox-ledger local --data``, an export of the whole table)."""
    import inspect

    from sandbox_ledger import telemetry
    from sandbox_ledger.awstest import meter
    from sandbox_ledger.awstest.runtable import RunTable
    from sandbox_ledger.dynamodb import _ops, loose_items
    from sandbox_ledger.local import inprocess, persist
    from sandbox_ledger.local.strict import front, indexes
    from sandbox_ledger.resources import _ops as resource_ops
    from sandbox_ledger.resources import files
    from sandbox_ledger.sdk import paging

    meter_source = inspect.getsource(meter)
    telemetry_source = inspect.getsource(telemetry)
    allowed = {
        "scan_round": inspect.getsource(paging.scan_round),
        "scan_sessions": inspect.getsource(_ops.scan_sessions),
        "scan_records": inspect.getsource(resource_ops.scan_records),
        "export_directory": inspect.getsource(files.export_directory),
        "snapshot": inspect.getsource(persist.snapshot),
        # The embedded server's save that reads everything again: the sessions that hold
        # nothing but loose items (a deleted session's spent marks) have no entry to scan by.
        "sessions_with_marks": inspect.getsource(loose_items.sessions_with_marks),
        # make test-aws's one table: emptied between two tests, and its indexes compared
        # with it until they agree (a test table of a few hundred items, never a store's).
        "run table emptied": inspect.getsource(RunTable.empty),
        "run table's keys": inspect.getsource(RunTable._keys),
        # The telemetry's list of the resource stores' methods it wraps: names, likewise.
        "traced methods": re.search(
            r"RESOURCE_OPERATIONS = frozenset\(\n    \{.*?\}\n\)\n", telemetry_source, re.S
        ).group(0),
        # make test-aws's meter: the names of the reads whose units it sums, never a request.
        "metered names": re.search(r"READS = frozenset\(\{[^}]*\}\)\n", meter_source).group(0),
        # The embedded server's list of the actions that only read (it notes the partitions
        # the others write): a name it is served, never a request it sends.
        "served reads": re.search(
            r"_READS = \{.*?\n\}\n", inspect.getsource(inprocess), re.S
        ).group(0),
        # The strict profile's list of the reads it meters: names it is served, likewise.
        "metered reads": re.search(r"_READS = \{[^}]*\}\n", inspect.getsource(front)).group(0),
        # The strict profile's lagging indexes: the reads of an index it serves, likewise.
        "lagged reads": re.search(
            r"_INDEX_READS = frozenset\(\{[^}]*\}\)\n", inspect.getsource(indexes)
        ).group(0),
    }
    assert re.search(r"[\"'](scan|Scan)[\"']", allowed["scan_round"])
    assert all(
        "scan_round(" in allowed[name]
        for name in ("scan_sessions", "scan_records", "sessions_with_marks")
    )
    assert ".scan(" in allowed["export_directory"] and ".scan(" in allowed["snapshot"]
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for source in allowed.values():
            text = text.replace(source, "")
        assert not re.search(r"[\"'](scan|Scan)[\"']", text), path
        assert ".scan(" not in text and "scan_round(" not in text, path
        # The record store's one caller of scan_records is the body of its scan().
        callers = text.count("scan_records(")
        assert callers == (1 if path.name == "store.py" and "resources" in path.parts else 0)


@pytest.mark.parametrize(
    "large", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["small", "large"]
)
def test_listing_cost_is_flat_in_the_table_size(
    moto_endpoint: str, sync_table: str, wait_for_indexes: Callable[[], None], large: bool
) -> None:
    """Requests per list at 60 sessions; with ``large`` (a scale test, slow marker), the same
    requests again after 500 more sessions and 15,000 events. The lists read the indexes once
    settled: the last summaries seeded are still on their way to them right after the seed."""
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    counter = RequestCounter().attach(adapter.client())
    shards = adapter.table_shard_count()  # reads the descriptor once, before any count
    queries = [
        ("all", None, ListSandboxOptions(limit=10)),
        ("all-running", None, ListSandboxOptions(limit=10, status=SandboxStatus.Running)),
        (
            "all-completed-before",
            None,
            ListSandboxOptions(limit=100, status=SandboxStatus.Completed, before=10_000 + 400),
        ),
        ("name", "job-3", ListSandboxOptions(limit=5)),
        ("name-running", "job-3", ListSandboxOptions(limit=2, status=SandboxStatus.Running)),
    ]

    def measure() -> dict[str, tuple[int, int]]:
        out = {}
        for label, name, opts in queries:
            counter.reset()
            got = (
                adapter.list_all_sandbox_details(opts)
                if name is None
                else adapter.list_sandbox_details(name, opts)
            )
            assert counter.calls["Scan"] == 0
            out[label] = (counter.total, len(got))
        return out

    seed_fleet(adapter, 60, 3, start=0)
    wait_for_indexes()
    small = measure()
    assert small == {
        "all": (shards + 1, 10),
        "all-running": (shards + 1, 10),
        "all-completed-before": (shards + 1, 40),
        "name": (2, 5),
        "name-running": (2, 2),
    }
    if large:
        seed_fleet(adapter, 500, 30, start=1000)
        wait_for_indexes()
        assert {key: calls for key, (calls, _) in measure().items()} == {
            key: calls for key, (calls, _) in small.items()
        }
    # The event items were never read: one BatchGetItem of summaries per list.
    counter.reset()
    adapter.list_all_sandbox_details(ListSandboxOptions(limit=100))
    assert counter.calls == {"Query": shards, "BatchGetItem": 1}


def test_point_reads_and_appends_take_one_or_two_requests(
    moto_endpoint: str, sync_table: str
) -> None:
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    seed_fleet(adapter, 20, 50, start=0)
    counter = RequestCounter().attach(adapter.client())
    # Every append is one transaction: the entry with its sequence mark (docs/live.md); the
    # first to a session the client has no guess for reads the last mark first.
    cases = [
        (LedgerEvent.SandboxCreated, {"Query": 1, "TransactWriteItems": 1}),
        (LedgerEvent.ExecStarted, {"TransactWriteItems": 1}),
        (LedgerEvent.ExecComplete, {"TransactWriteItems": 1}),
        (LedgerEvent.ExecFailed, {"TransactWriteItems": 1}),
        (LedgerEvent.CheckpointCreated, {"TransactWriteItems": 1}),
        ("custom.event", {"TransactWriteItems": 1}),
        (LedgerEvent.SandboxClosed, {"TransactWriteItems": 1}),
    ]
    for event, expected in cases:
        counter.reset()
        adapter.append(e("n", "s", event, 5, {"snapshotId": "x"}))
        assert dict(counter.calls) == expected, event
    counter.reset()
    assert adapter.get_sandbox_details("job-1", "sb-1") is not None
    assert dict(counter.calls) == {"GetItem": 1}
    counter.reset()
    assert adapter.last_checkpoint("n", "s") is not None
    assert dict(counter.calls) == {"Query": 2}
    counter.reset()
    assert adapter.last_checkpoint("job-1", "sb-1") is None
    assert dict(counter.calls) == {"Query": 1}


def test_read_all_grows_with_the_session_only(moto_endpoint: str, sync_table: str) -> None:
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    counter = RequestCounter().attach(adapter.client())
    big = {"blob": "x" * 30_000}  # incompressible enough? no: compressed; use random below
    rng = random.Random(1)
    noisy = {
        "blob": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(60_000))
    }
    requests = []
    for j in range(40):
        entry = e("n", "long", LedgerEvent.ExecStarted, j, noisy, j)
        requests.append({"PutRequest": {"Item": it.encode_entry(entry, it.order_ids.next()).head}})
    run_sync(adapter.client(), batch_write(adapter.table_name, requests))
    adapter.append(e("n", "short", LedgerEvent.ExecStarted, 1, big))
    counter.reset()
    assert len(adapter.read_all("n", "short")) == 1
    assert dict(counter.calls) == {"Query": 1}
    counter.reset()
    entries = adapter.read_all("n", "long")
    assert [x.ts for x in entries] == list(range(40))
    assert entries[-1].payload == noisy
    # About 1.8 MB of compressed items: the query follows LastEvaluatedKey over 1 MB pages.
    assert counter.calls["Query"] >= 2


@pytest.mark.parametrize(
    "size", [300_000, 350_000 * 2, pytest.param(10 * 1024 * 1024 + 7, marks=pytest.mark.slow)]
)
def test_large_payloads_round_trip(moto_endpoint: str, sync_table: str, size: int) -> None:
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    payload = {"random": os.urandom(size // 2).hex()[:size], "unicode": "✓" * 1000, "n": 0.1}
    entry = e("n", "s", LedgerEvent.CheckpointCreated, 7, {**payload, "snapshotId": "big"})
    adapter.append(e("n", "s", LedgerEvent.SandboxCreated, 1))
    adapter.append(entry)
    adapter.append(e("n", "s", LedgerEvent.ExecComplete, 8, {"after": True}))
    [_created, back, after] = adapter.read_all("n", "s")
    assert back == entry and after.payload == {"after": True}
    assert adapter.last_checkpoint("n", "s") == entry
    # Every stored item is under DynamoDB's 400 KB limit, whatever moto would accept.
    items = run_sync(
        adapter.client(),
        query_all(
            {
                "TableName": sync_table,
                "KeyConditionExpression": "PK = :pk",
                "ExpressionAttributeValues": {":pk": {"S": k.session_pk("n", "s")}},
            }
        ),
    )
    assert max(item_size(i) for i in items) <= 360_000 < MAX_ITEM_BYTES
    assert max(len(i["d"]["B"]) for i in items if "d" in i) <= it.CHUNK_BYTES
    adapter.delete_sandbox("n", "s")
    assert (
        after_delete(
            run_sync(
                adapter.client(),
                query_all(
                    {
                        "TableName": sync_table,
                        "KeyConditionExpression": "PK = :pk",
                        "ExpressionAttributeValues": {":pk": {"S": k.session_pk("n", "s")}},
                    }
                ),
            )
        )
        == []
    )


def test_compressible_payloads_are_compressed(moto_endpoint: str, sync_table: str) -> None:
    entry = e("n", "s", LedgerEvent.ExecComplete, 1, {"log": "line\n" * 500_000})
    encoded = it.encode_entry(entry, it.order_ids.next())
    assert encoded.head["z"] == {"S": "zlib"} and encoded.parts == []
    small = it.encode_entry(e("n", "s", LedgerEvent.ExecComplete, 1, {"x": 1}), "o")
    assert "z" not in small.head and json.loads(small.head["d"]["B"])["payload"] == {"x": 1}
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    adapter.append(entry)
    assert adapter.read_all("n", "s") == [entry]


def test_a_half_written_entry_is_never_seen(
    moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    adapter.append(e("n", "s", LedgerEvent.ExecStarted, 1, {"before": 1}))
    big = e("n", "s", LedgerEvent.ExecComplete, 2, {"r": os.urandom(600_000).hex()})

    def die_before_head(params: dict[str, Any], **_: Any) -> None:
        raise ConnectionError("writer died")

    client = adapter.client()
    client.meta.events.register(
        "before-parameter-build.dynamodb.TransactWriteItems", die_before_head
    )
    with pytest.raises(ConnectionError):
        adapter.append(big)
    client.meta.events.unregister(
        "before-parameter-build.dynamodb.TransactWriteItems", die_before_head
    )
    # The parts landed, the head did not: readers see only the complete entry before it.
    assert [x.payload for x in adapter.read_all("n", "s")] == [{"before": 1}]
    assert adapter.get_sandbox_details("n", "s") is None
    adapter.append(e("n", "s", LedgerEvent.ExecStarted, 3, {"after": 1}))
    assert [x.payload for x in adapter.read_all("n", "s")] == [{"before": 1}, {"after": 1}]

    def leftovers() -> list[str]:
        items = run_sync(
            client,
            query_all(
                {
                    "TableName": sync_table,
                    "KeyConditionExpression": "PK = :pk",
                    "ExpressionAttributeValues": {":pk": {"S": k.session_pk("n", "s")}},
                }
            ),
        )
        return [item["SK"]["S"] for item in after_delete(items)]

    # A delete leaves headless parts while they are young (an append in flight may still
    # write their head: tests/dynamodb/test_delete_race.py), and removes them once they are older.
    adapter.delete_sandbox("n", "s")
    assert [sk[-6:] for sk in leftovers()] == ["#00001"]
    monkeypatch.setattr("sandbox_ledger.dynamodb._delete.ORPHAN_PART_GRACE_MS", 0)
    adapter.delete_sandbox("n", "s")
    assert leftovers() == []


def test_keys_too_long_are_refused_before_any_request(moto_endpoint: str, sync_table: str) -> None:
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    counter = RequestCounter().attach(adapter.client())
    long_name = "名" * 700  # 2,100 bytes in UTF-8
    with pytest.raises(KeyTooLongError, match="name"):
        adapter.append(e(long_name, "s", LedgerEvent.SandboxCreated, 1))
    with pytest.raises(ValueError, match="too long"):
        adapter.read_all("n" * 1100, "s" * 1000)
    with pytest.raises(ValueError, match="name"):
        adapter.list_sandbox_details("x" * 2100)
    with pytest.raises(ValueError, match="name"):
        adapter.get_environment("e" * 1025)
    assert counter.total == 0
    # The limit is DynamoDB's: 1,000 characters each fits.
    adapter.append(e("n" * 1000, "#/" * 500, LedgerEvent.SandboxCreated, 1))
    assert adapter.get_sandbox_details("n" * 1000, "#/" * 500) is not None


def test_escaping_is_injective() -> None:
    rng = random.Random(3)
    alphabet = ["#", "%", "2", "3", "5", "a", "/", "S"]
    seen: dict[str, tuple[str, str]] = {}
    for _ in range(20_000):
        pair = (
            "".join(rng.choices(alphabet, k=rng.randint(1, 5))),
            "".join(rng.choices(alphabet, k=rng.randint(1, 5))),
        )
        pk = k.session_pk(*pair)
        assert seen.setdefault(pk, pair) == pair
        assert k.parse_session_pk(pk) == pair


def test_one_client_reused_and_released(moto_endpoint: str, sync_table: str) -> None:
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    first = adapter.client()
    adapter.get_sandbox_details("n", "s")
    assert adapter.client() is first
    adapter.close()
    adapter.close()
    assert adapter.client() is not first


async def test_async_client_shared_by_concurrent_first_calls(
    moto_endpoint: str, sync_table: str
) -> None:
    adapter = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    clients = await asyncio.gather(*(adapter.client() for _ in range(10)))
    assert all(c is clients[0] for c in clients)
    await adapter.close()
    await adapter.close()


def test_missing_table_is_a_clear_error(moto_endpoint: str) -> None:
    adapter = SyncDynamoDBAdapter("no-such-table", endpoint_url=moto_endpoint)
    with pytest.raises(TableNotFoundError) as info:
        adapter.get_sandbox_details("n", "s")
    assert info.value.__cause__ is not None


def test_create_table_is_idempotent_and_matches_the_schema(moto_endpoint: str) -> None:
    adapter = SyncDynamoDBAdapter("ledger-schema-check", endpoint_url=moto_endpoint)
    assert adapter.create_table() is True
    assert adapter.create_table() is False
    client = adapter.client()
    table = client.describe_table(TableName="ledger-schema-check")["Table"]
    definition = k.table_definition("ledger-schema-check")
    assert table["KeySchema"] == definition["KeySchema"]
    assert {g["IndexName"]: g["KeySchema"] for g in table["GlobalSecondaryIndexes"]} == {
        g["IndexName"]: g["KeySchema"]
        for g in definition["GlobalSecondaryIndexes"]  # type: ignore[attr-defined]
    }
    assert table["StreamSpecification"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"
    ttl = client.describe_time_to_live(TableName="ledger-schema-check")["TimeToLiveDescription"]
    assert ttl["AttributeName"] == k.TTL_ATTRIBUTE


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="table_name"):
        SyncDynamoDBAdapter("")
    with pytest.raises(ValueError, match="shard_count"):
        DynamoDBAdapter("ledger", shard_count=0)
    with pytest.raises(ValueError, match="shard_count"):
        DynamoDBAdapter("ledger", shard_count=1000)
