"""Following a session: append-to-delivery latency, requests per idle minute, many followers.

For each store at the default poll settings (``sandbox_ledger.follow.PollSettings()``):

* latency: one follower beside one writer appending entries 20-80 ms apart (ts from the
  clock, as the client stamps it); for each entry, the time from ``append`` returning to
  the follower handing it out, p50/p99;
* idle: the requests one follower makes while nothing is appended (DynamoDB: SDK calls
  counted with ``RequestCounter``; SQL: polls counted), over ``--idle`` seconds, per minute;
* many followers: ``--followers`` idle followers in one process (distinct sessions), the
  process's CPU per second, and the latency of one append to one of them meanwhile.

    python benchmarks/bench_follow.py            # docs/benchmarks.md, Following a session
    python benchmarks/bench_follow.py --quick    # a smoke run

The embedded DynamoDB is moto in a child process (``LocalDynamoDBProcess``); absolute
latencies say little about DynamoDB, the settle window and the poll schedule carry over.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger.dynamodb import DynamoDBAdapter
from sandbox_ledger.dynamodb.instrument import RequestCounter
from sandbox_ledger.local import LocalPostgres
from sandbox_ledger.local.dynamodb import LocalDynamoDBProcess
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.sql import follow as sql_follow
from sandbox_ledger.sqlite import SQLiteAdapter


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def one(sandbox_id: str, i: int, event: str = LedgerEvent.ExecStarted) -> LedgerEntry:
    step = -1 if event == LedgerEvent.SandboxCreated else i
    return LedgerEntry(
        ts=now_ms(), name="bench", sandbox_id=sandbox_id, step_index=step, event=event, payload=i
    )


async def latency(adapter: Any, sandbox_id: str, n: int) -> list[float]:
    """Seconds from each append returning to its delivery."""
    await adapter.append(one(sandbox_id, -1, LedgerEvent.SandboxCreated))
    stored: dict[int, float] = {}
    delivered: dict[int, float] = {}

    async def follower() -> None:
        async for followed in adapter.follow("bench", sandbox_id, until_closed=False):
            delivered[followed.entry.payload] = time.perf_counter()
            if len(delivered) == n + 1:
                return

    task = asyncio.create_task(follower())
    await asyncio.sleep(0.5)
    for i in range(n):
        await asyncio.sleep(random.uniform(0.02, 0.08))
        await adapter.append(one(sandbox_id, i))
        stored[i] = time.perf_counter()
    await asyncio.wait_for(task, 60)
    return [delivered[i] - stored[i] for i in range(n)]


async def idle_requests(
    adapter: Any, sandbox_id: str, seconds: float, count: Callable[[], int]
) -> float:
    """Requests per minute of one follower of a session where nothing is appended."""
    await adapter.append(one(sandbox_id, -1, LedgerEvent.SandboxCreated))
    stream = adapter.follow("bench", sandbox_id, until_closed=False)
    await anext(stream)  # the created entry: from here on it is idle
    task = asyncio.create_task(anext(stream))
    await asyncio.sleep(2)  # past the backoff's ramp
    before = count()
    await asyncio.sleep(seconds)
    made = count() - before
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await stream.aclose()
    return made * 60 / seconds


async def many(adapter: Any, followers: int, seconds: float) -> tuple[float, float]:
    """CPU seconds per second of this process with ``followers`` idle followers, and the
    latency (s) of one append to one of them meanwhile."""
    streams = []
    tasks = []
    for f in range(followers):
        await adapter.append(one(f"m{f}", -1, LedgerEvent.SandboxCreated))
        stream = adapter.follow("bench", f"m{f}", until_closed=False)
        await anext(stream)
        streams.append(stream)
    for stream in streams:
        tasks.append(asyncio.create_task(anext(stream)))
    await asyncio.sleep(2)
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    usage = (time.process_time() - cpu) / (time.perf_counter() - wall)
    await adapter.append(one("m0", 0))
    start = time.perf_counter()
    await asyncio.wait_for(tasks[0], 30)
    probe = time.perf_counter() - start
    for task in tasks[1:]:
        task.cancel()
    await asyncio.gather(*tasks[1:], return_exceptions=True)
    for stream in streams:
        await stream.aclose()
    return usage, probe


class PollCount:
    """Counts the SQL adapters' follow polls (benchmark-only instrumentation)."""

    def __init__(self) -> None:
        self.n = 0
        self._poll = sql_follow.poll

        async def counted(*args: Any) -> Any:
            self.n += 1
            return await self._poll(*args)

        sql_follow.poll = counted  # type: ignore[assignment]


@asynccontextmanager
async def stores(tmp: Path) -> AsyncIterator[dict[str, tuple[Any, Callable[[], int]]]]:
    polls = PollCount()
    server = LocalDynamoDBProcess()
    endpoint = server.start()
    with LocalPostgres(durable=True) as dsn:
        ddb = DynamoDBAdapter("bench-follow", endpoint_url=endpoint, region_name="us-east-1")
        await ddb.create_table()
        counter = RequestCounter().attach(await ddb.client())
        sqlite = SQLiteAdapter(tmp / "follow.db")
        pg = PostgresAdapter(dsn, schema="bench_follow")
        try:
            yield {
                "DynamoDB (embedded)": (ddb, lambda: sum(counter.calls.values())),
                "SQLite": (sqlite, lambda: polls.n),
                "PostgreSQL": (pg, lambda: polls.n),
            }
        finally:
            for adapter in (ddb, sqlite, pg):
                await adapter.close()
            server.stop()


async def main(quick: bool, idle: float, followers: int) -> None:
    n = 30 if quick else 300
    idle = 5 if quick else idle
    followers = 10 if quick else followers
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        async with stores(Path(tmp)) as found:
            for label, (adapter, count) in found.items():
                lat = await latency(adapter, f"lat-{label[:2]}", n)
                per_minute = await idle_requests(adapter, f"idle-{label[:2]}", idle, count)
                cpu, probe = await many(adapter, followers, idle)
                rows.append((label, lat, per_minute, cpu, probe))
    print(f"\n{n} appends 20-80 ms apart; idle over {idle:.0f} s; {followers} idle followers\n")
    print(
        "| store | delivery p50 ms | p99 ms | max ms | requests per idle minute per follower "
        f"| CPU with {followers} idle followers | one delivery meanwhile ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, lat, per_minute, cpu, probe in rows:
        print(
            f"| {label} | {pct(lat, 0.5):.0f} | {pct(lat, 0.99):.0f} | {max(lat) * 1000:.0f} "
            f"| {per_minute:.0f} | {cpu * 100:.0f}% of a core | {probe * 1000:.0f} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--idle", type=float, default=60.0, help="seconds idle (default 60)")
    parser.add_argument("--followers", type=int, default=100, help="idle followers (default 100)")
    args = parser.parse_args()
    asyncio.run(main(args.quick, args.idle, args.followers))
