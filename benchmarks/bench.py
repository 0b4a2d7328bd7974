"""Benchmark every contract operation against a local moto server, next to raw SDK calls.

For each operation: SDK API calls per operation (botocore ``before-call``), latency p50/p99,
and the same for the minimal raw boto3 call doing the equivalent, in the same run, as a ratio.
Then concurrent append throughput (aioboto3) at several concurrencies next to raw aioboto3
puts, and how list and read_all costs grow with the data.

    python benchmarks/bench.py            # the full report (docs/benchmarks.md)
    python benchmarks/bench.py --quick    # small sizes, a smoke run

moto is one Python process: absolute times say little about DynamoDB; ratios and request
counts are what carry over.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import aioboto3
import boto3

from sandbox_ledger import EnvironmentRecord, LedgerEntry, LedgerEvent, ListSandboxOptions
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb.instrument import RequestCounter
from sandbox_ledger.local import LocalDynamoDB
from sandbox_ledger.sdk.batching import batch_write
from sandbox_ledger.sdk.steps import run_sync


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def timed(fn: Callable[[], Any], n: int, counter: RequestCounter) -> tuple[float, float, float]:
    """(API calls per op, p50 ms, p99 ms) over n runs."""
    samples = []
    counter.reset()
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return counter.total / n, pct(samples, 0.5), pct(samples, 0.99)


def entry(
    name: str, sid: str, event: str, ts: int, step: int = -1, payload: Any = None
) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name=name, sandbox_id=sid, step_index=step, event=event, payload=payload
    )


def bulk_events(adapter: SyncDynamoDBAdapter, name: str, sid: str, n: int, *, ts0: int = 0) -> None:
    """n exec.started entries with the items append writes, in batches of 25 (fast to seed)."""
    requests = [
        {
            "PutRequest": {
                "Item": it.encode_entry(
                    entry(name, sid, LedgerEvent.ExecStarted, ts0 + j, j, {"cmd": "make", "j": j}),
                    it.order_ids.next(),
                ).head
            }
        }
        for j in range(n)
    ]
    run_sync(adapter.client(), batch_write(adapter.table_name, requests))


def bulk_sessions(adapter: SyncDynamoDBAdapter, sessions: int, *, ts0: int) -> None:
    """Session summaries through the same UpdateItem append uses (no transaction)."""
    client = adapter.client()
    for i in range(sessions):
        name, sid = f"job-{i % 10}", f"bulk-{ts0}-{i}"
        for e in [entry(name, sid, LedgerEvent.SandboxCreated, ts0 + i)] + (
            [entry(name, sid, LedgerEvent.SandboxClosed, ts0 + i + 5)] if i % 2 else []
        ):
            update = it.summary_update(e, adapter.table_shard_count())
            assert update is not None
            client.update_item(TableName=adapter.table_name, **update)


Row = tuple[str, float, float, float, str, float, float, float]
Case = tuple[str, Callable[[], Any], Callable[[], Any], str]


def operations_table(endpoint: str, n: int) -> list[Row]:
    """Each operation next to the raw SDK call it reduces to: API calls, p50, p99."""
    table = f"bench-ops-{uuid.uuid4().hex[:8]}"
    adapter = SyncDynamoDBAdapter(table, endpoint_url=endpoint)
    adapter.create_table()
    raw = boto3.client("dynamodb", endpoint_url=endpoint)
    counter = RequestCounter().attach(adapter.client())
    raw_counter = RequestCounter().attach(raw)
    _seed_operations_table(adapter)
    rows = []
    for label, ours, theirs, raw_label in _operation_cases(adapter, raw, table):
        calls, p50, p99 = timed(ours, n, counter)
        rcalls, rp50, rp99 = timed(theirs, n, raw_counter)
        rows.append((label, calls, p50, p99, raw_label, rcalls, rp50, rp99))
    rows.append(_delete_row(adapter, counter))
    adapter.close()
    return rows


def _seed_operations_table(adapter: SyncDynamoDBAdapter) -> None:
    """200 sessions, one session of 206 events with 5 checkpoints, 20 environments."""
    bulk_sessions(adapter, 200, ts0=1_000_000)
    adapter.append(entry("bench", "s", LedgerEvent.SandboxCreated, 1))
    bulk_events(adapter, "bench", "s", 200, ts0=10)
    for i in range(5):
        adapter.append(
            entry(
                "bench",
                "s",
                LedgerEvent.CheckpointCreated,
                500 + i,
                -1,
                {"snapshotId": f"snap-{i}", "name": f"c{i}"},
            )
        )
    for i in range(20):
        adapter.save_environment(EnvironmentRecord(name=f"env-{i}", built_at=i, snapshotId="s"))


def _operation_cases(adapter: SyncDynamoDBAdapter, raw: Any, table: str) -> list[Case]:
    """(label, our call, the raw call it reduces to, the raw call's name)."""
    seq = iter(range(10**9))
    pk = k.session_pk("bench", "s")
    raw_item = lambda: {
        "PK": {"S": pk},
        "SK": {"S": f"raw#{next(seq):012d}"},
        "d": {"B": b'{"x":1}'},
    }
    query = {
        "TableName": table,
        "KeyConditionExpression": "PK = :pk",
        "ExpressionAttributeValues": {":pk": {"S": pk}},
    }
    return [
        (
            "append exec.started",
            lambda: adapter.append(
                entry("bench", "w", LedgerEvent.ExecStarted, next(seq), 0, {"cmd": "ls"})
            ),
            lambda: raw.put_item(TableName=table, Item=raw_item()),
            "PutItem",
        ),
        (
            "append exec.complete",
            lambda: adapter.append(
                entry("bench", "w", LedgerEvent.ExecComplete, next(seq), 0, {"exitCode": 0})
            ),
            lambda: raw.put_item(TableName=table, Item=raw_item()),
            "PutItem",
        ),
        (
            "read_all (206 events)",
            lambda: adapter.read_all("bench", "s"),
            lambda: raw.query(**query),
            "Query",
        ),
        (
            "get_sandbox_details",
            lambda: adapter.get_sandbox_details("bench", "s"),
            lambda: raw.get_item(TableName=table, Key={"PK": {"S": pk}, "SK": {"S": k.SUMMARY_SK}}),
            "GetItem",
        ),
        (
            "last_checkpoint",
            lambda: adapter.last_checkpoint("bench", "s"),
            lambda: raw.get_item(TableName=table, Key={"PK": {"S": pk}, "SK": {"S": k.SUMMARY_SK}}),
            "GetItem",
        ),
        (
            "list_checkpoints",
            lambda: adapter.list_checkpoints("bench", "s"),
            lambda: raw.query(**query, Limit=5),
            "Query",
        ),
        (
            "list_sandbox_details limit 20",
            lambda: adapter.list_sandbox_details("job-3", ListSandboxOptions(limit=20)),
            lambda: raw.query(
                TableName=table,
                IndexName=k.BY_NAME.name,
                KeyConditionExpression="g1pk = :p",
                ExpressionAttributeValues={":p": {"S": k.by_name_pk("job-3")}},
                Limit=20,
                ScanIndexForward=False,
            ),
            "Query (GSI)",
        ),
        (
            "list_all_sandbox_details limit 20",
            lambda: adapter.list_all_sandbox_details(ListSandboxOptions(limit=20)),
            lambda: raw.query(
                TableName=table,
                IndexName=k.ALL.name,
                KeyConditionExpression="g3pk = :p",
                ExpressionAttributeValues={":p": {"S": k.all_pk(0)}},
                Limit=20,
                ScanIndexForward=False,
            ),
            "Query (GSI)",
        ),
        (
            "save_environment",
            lambda: adapter.save_environment(EnvironmentRecord(name="env-x", built_at=next(seq))),
            lambda: raw.put_item(TableName=table, Item=raw_item()),
            "PutItem",
        ),
        (
            "get_environment",
            lambda: adapter.get_environment("env-3"),
            lambda: raw.get_item(
                TableName=table, Key={"PK": {"S": k.ENVIRONMENT_PK}, "SK": {"S": "env-3"}}
            ),
            "GetItem",
        ),
        (
            "list_environments (21)",
            adapter.list_environments,
            lambda: raw.query(
                TableName=table,
                KeyConditionExpression="PK = :pk",
                ExpressionAttributeValues={":pk": {"S": k.ENVIRONMENT_PK}},
            ),
            "Query",
        ),
    ]


def _delete_row(adapter: SyncDynamoDBAdapter, counter: RequestCounter) -> Row:
    """delete_sandbox of a 1,000-event session: one run (no raw equivalent in one call)."""
    bulk_events(adapter, "bench", "del", 1000)
    counter.reset()
    start = time.perf_counter()
    adapter.delete_sandbox("bench", "del")
    elapsed = (time.perf_counter() - start) * 1000
    return (
        "delete_sandbox (1,000 events)",
        float(counter.total),
        elapsed,
        elapsed,
        "-",
        0.0,
        0.0,
        0.0,
    )


async def concurrency(
    endpoint: str, levels: list[int], total: int
) -> list[tuple[int, float, float, float]]:
    """(concurrency, ours appends/s, raw puts/s, API calls per append)."""
    out = []
    for level in levels:
        table = f"bench-conc-{level}-{uuid.uuid4().hex[:6]}"
        adapter = DynamoDBAdapter(table, endpoint_url=endpoint)
        await adapter.create_table()
        counter = RequestCounter().attach(await adapter.client())
        entries = [
            entry("c", f"s{i % 10}", LedgerEvent.ExecStarted, i, i, {"i": i}) for i in range(total)
        ]
        sem = asyncio.Semaphore(level)

        async def one(e: LedgerEntry) -> None:
            async with sem:
                await adapter.append(e)

        start = time.perf_counter()
        await asyncio.gather(*(one(e) for e in entries))
        ours = total / (time.perf_counter() - start)
        calls = counter.total / total
        async with aioboto3.Session().client("dynamodb", endpoint_url=endpoint) as raw:

            async def put(i: int) -> None:
                async with sem:
                    await raw.put_item(
                        TableName=table,
                        Item={
                            "PK": {"S": f"raw-{i % 10}"},
                            "SK": {"S": f"{i:012d}"},
                            "d": {"B": b'{"i":1}'},
                        },
                    )

            start = time.perf_counter()
            await asyncio.gather(*(put(i) for i in range(total)))
            theirs = total / (time.perf_counter() - start)
        await adapter.close()
        out.append((level, ours, theirs, calls))
    return out


def growth(
    endpoint: str, event_counts: list[int], read_sizes: list[int], n: int
) -> tuple[list[Any], list[Any]]:
    table = f"bench-growth-{uuid.uuid4().hex[:6]}"
    adapter = SyncDynamoDBAdapter(table, endpoint_url=endpoint)
    adapter.create_table()
    counter = RequestCounter().attach(adapter.client())
    raw = boto3.client("dynamodb", endpoint_url=endpoint)
    raw_counter = RequestCounter().attach(raw)
    bulk_sessions(adapter, 100, ts0=5_000_000)
    list_rows = []
    stored = 0
    for target in event_counts:
        per_session = 100
        while stored < target:
            sid = f"grow-{stored}"
            bulk_sessions_one = entry("job-1", sid, LedgerEvent.SandboxCreated, 6_000_000 + stored)
            update = it.summary_update(bulk_sessions_one, adapter.table_shard_count())
            assert update is not None
            adapter.client().update_item(TableName=table, **update)
            bulk_events(adapter, "job-1", sid, per_session, ts0=6_000_000 + stored)
            stored += per_session
        calls, p50, p99 = timed(
            lambda: adapter.list_all_sandbox_details(ListSandboxOptions(limit=20)), n, counter
        )
        name_calls, np50, np99 = timed(
            lambda: adapter.list_sandbox_details("job-1", ListSandboxOptions(limit=20)), n, counter
        )
        _, rp50, _ = timed(
            lambda: raw.query(
                TableName=table,
                IndexName=k.ALL.name,
                KeyConditionExpression="g3pk = :p",
                ExpressionAttributeValues={":p": {"S": k.all_pk(0)}},
                Limit=20,
                ScanIndexForward=False,
            ),
            n,
            raw_counter,
        )
        list_rows.append((stored, calls, p50, p99, name_calls, np50, np99, rp50))
    read_rows = []
    for size in read_sizes:
        sid = f"read-{size}"
        bulk_events(adapter, "reader", sid, size)
        calls, p50, p99 = timed(lambda: adapter.read_all("reader", sid), max(3, n // 4), counter)
        pk = k.session_pk("reader", sid)
        rcalls, rp50, _ = timed(lambda: _raw_query_all(raw, table, pk), max(3, n // 4), raw_counter)
        read_rows.append((size, calls, p50, p99, rcalls, rp50))
    adapter.close()
    return list_rows, read_rows


def _raw_query_all(raw: Any, table: str, pk: str) -> int:
    """The raw equivalent of read_all: every item of the partition, page by page."""
    params: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "PK = :pk",
        "ExpressionAttributeValues": {":pk": {"S": pk}},
    }
    count = 0
    while True:
        page = raw.query(**params)
        count += len(page["Items"])
        if not page.get("LastEvaluatedKey"):
            return count
        params["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--endpoint", help="an existing DynamoDB endpoint (default: embedded moto)")
    args = parser.parse_args()
    server = None
    endpoint = args.endpoint
    if endpoint is None:
        server = LocalDynamoDB()
        endpoint = server.start()
    n = 5 if args.quick else 50
    print(
        f"# sandbox-ledger benchmark ({'quick' if args.quick else 'full'}), endpoint {endpoint}\n"
    )
    print("## Operations (SDK API calls per operation, latency in ms)\n")
    print(
        "| operation | calls/op | p50 | p99 | raw boto3 equivalent | raw calls | raw p50 "
        "| raw p99 | p50 ratio |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|")
    for label, calls, p50, p99, raw_label, rcalls, rp50, rp99 in operations_table(endpoint, n):
        ratio = f"{p50 / rp50:.1f}x" if rp50 else "-"
        print(
            f"| {label} | {calls:.1f} | {p50:.1f} | {p99:.1f} | {raw_label} | {rcalls:.1f} "
            f"| {rp50:.1f} | {rp99:.1f} | {ratio} |"
        )
    levels = [1, 10, 100]
    total = 200 if args.quick else 1000
    print(f"\n## Concurrent appends, aioboto3 ({total} exec.started appends per level)\n")
    print("| concurrency | adapter appends/s | raw put_item/s | ratio | calls/append |")
    print("|---:|---:|---:|---:|---:|")
    for level, ours, theirs, calls in asyncio.run(concurrency(endpoint, levels, total)):
        print(f"| {level} | {ours:.0f} | {theirs:.0f} | {ours / theirs:.2f} | {calls:.2f} |")
    event_counts = [1_000, 5_000] if args.quick else [1_000, 10_000, 100_000]
    read_sizes = [10, 500] if args.quick else [10, 1_000, 10_000]
    list_rows, read_rows = growth(endpoint, event_counts, read_sizes, 3 if args.quick else 10)
    print("\n## Listing as the table grows (limit 20; must stay flat in requests)\n")
    print(
        "| events in table | list_all calls | p50 | p99 | list by name calls | p50 | p99 "
        "| raw GSI query p50 |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for stored, calls, p50, p99, name_calls, np50, np99, rp50 in list_rows:
        print(
            f"| {stored:,} | {calls:.0f} | {p50:.1f} | {p99:.1f} | {name_calls:.0f} "
            f"| {np50:.1f} | {np99:.1f} | {rp50:.1f} |"
        )
    print("\n## read_all as the session grows (linear)\n")
    print("| events in session | calls | p50 | p99 | raw query calls | raw p50 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size, calls, p50, p99, rcalls, rp50 in read_rows:
        print(f"| {size:,} | {calls:.0f} | {p50:.1f} | {p99:.1f} | {rcalls:.0f} | {rp50:.1f} |")
    if server is not None:
        server.stop()


if __name__ == "__main__":
    main()
