"""Benchmark the SQL adapters (SQLite, PostgreSQL) next to the raw driver, in the same run.

1. Appends/s at concurrency 1, 10 and 100 (``exec.complete``: the append that moves the
   session's summary; each worker appends to its own session, as concurrent sandboxes do),
   next to the raw driver inserting one row into a plain table: the minimal write an append
   needs. The summaries are checked after each run (execCount equals the appends).
2. List latency (limit 20) with 1,000, 10,000 and 100,000 events in the database (bulk seeded,
   20 events per session), next to the raw driver running the same single SELECT: flat, since
   the listing reads an index, not the events.

    python benchmarks/bench_sql.py            # the report in docs/benchmarks.md
    python benchmarks/bench_sql.py --quick    # small sizes, a smoke run

PostgreSQL is a real local server (sandbox_ledger.local.LocalPostgres, durable: fsync on),
SQLite a file in a temporary folder (WAL, synchronous=FULL, the defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite
import psycopg
from psycopg_pool import AsyncConnectionPool

from sandbox_ledger import LedgerEntry, LedgerEvent, ListSandboxOptions, SandboxStatus
from sandbox_ledger.local import LocalPostgres
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.sqlite import SQLiteAdapter

EVENTS_PER_SESSION = 20
POOL_SIZE = 20


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def rate(n: int, concurrency: int, one: Callable[[int, int], Awaitable[None]]) -> float:
    """Operations per second running ``one(worker, i)`` for i < n, ``concurrency`` workers,
    after a warm-up of 2 operations per worker (connections opened, statements prepared)."""
    for w in range(concurrency):
        for i in range(2):
            await one(w, n + w * 2 + i)
    queue = iter(range(n))

    async def worker(w: int) -> None:
        for i in queue:
            await one(w, i)

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return n / (time.perf_counter() - start)


async def latency(n: int, one: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await one()
        samples.append(time.perf_counter() - start)
    return pct(samples, 0.5), pct(samples, 0.99)


async def exec_total(adapter: SQLiteAdapter | PostgresAdapter, workers: int) -> int:
    """execCount summed over the workers' sessions (each opened with sandbox.created)."""
    total = 0
    for w in range(workers):
        created = LedgerEntry(
            ts=0, name="bench", sandbox_id=f"s{w}", step_index=-1, event="sandbox.created"
        )
        await adapter.append(created)
        details = await adapter.get_sandbox_details("bench", f"s{w}")
        assert details is not None
        total += details.exec_count
    return total


def exec_complete(sid: str, i: int) -> LedgerEntry:
    return LedgerEntry(
        ts=1_700_000_000_000 + i,
        name="bench",
        sandbox_id=sid,
        step_index=i,
        event=LedgerEvent.ExecComplete,
        payload={"cmd": "make", "exitCode": 0, "i": i},
    )


RAW_TABLE = "CREATE TABLE raw_events (seq {pk}, ts bigint NOT NULL, payload text)"


# -- SQLite ---------------------------------------------------------------------------------


async def sqlite_appends(folder: Path, n: int, levels: list[int]) -> list[tuple[int, float, float]]:
    out = []
    for concurrency in levels:
        adapter = SQLiteAdapter(folder / f"appends-{concurrency}.db")
        ours = await rate(n, concurrency, lambda w, i: adapter.append(exec_complete(f"s{w}", i)))
        assert await exec_total(adapter, concurrency) == n + 2 * concurrency
        await adapter.close()
        async with aiosqlite.connect(folder / f"raw-{concurrency}.db", isolation_level=None) as db:
            await db.execute("PRAGMA journal_mode = WAL")
            await db.execute(RAW_TABLE.format(pk="INTEGER PRIMARY KEY"))
            lock = asyncio.Lock()  # one connection: one statement at a time, as the adapter

            async def raw(w: int, i: int) -> None:
                async with lock:
                    await db.execute(
                        "INSERT INTO raw_events (ts, payload) VALUES (?, ?)",
                        (i, '{"cmd":"make","exitCode":0}'),
                    )

            theirs = await rate(n, concurrency, raw)
        out.append((concurrency, ours, theirs))
    return out


SQLITE_SEED = [
    """
    WITH RECURSIVE i(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM i WHERE x < {sessions})
    INSERT INTO ledger_sessions (name, sandbox_id, started_at, completed_at, status, exec_count)
    SELECT 'job-' || (x % 10), 'sb-' || x, 1000000 + x,
           CASE WHEN x % 3 = 0 THEN 1000000 + x + 10 END,
           CASE WHEN x % 3 = 0 THEN 'completed' ELSE 'running' END, 18
    FROM i
    """,
    """
    WITH RECURSIVE j(y) AS (SELECT 0 UNION ALL SELECT y + 1 FROM j WHERE y < {last})
    INSERT INTO ledger_events (session_id, ts, step_index, event, payload)
    SELECT s.id, s.started_at + y, y,
           CASE WHEN y = 0 THEN 'sandbox.created' ELSE 'exec.complete' END, '{{"i":1}}'
    FROM ledger_sessions AS s, j
    """,
]


async def sqlite_listing(folder: Path, events: int, n: int) -> dict[str, tuple[float, float]]:
    path = folder / f"list-{events}.db"
    adapter = SQLiteAdapter(path)
    await adapter.connect()
    async with aiosqlite.connect(path, isolation_level=None) as db:
        for statement in SQLITE_SEED:
            await db.execute(
                statement.format(sessions=events // EVENTS_PER_SESSION, last=EVENTS_PER_SESSION - 1)
            )
        await db.execute("ANALYZE")
        sql, params = adapter.queries.list_sessions(
            adapter_query(None, ListSandboxOptions(limit=20))
        )

        async def raw() -> None:
            async with db.execute(sql, params) as cursor:
                await cursor.fetchall()

        result = await list_rows(adapter, n, raw)
    await adapter.close()
    return result


# -- PostgreSQL -----------------------------------------------------------------------------


async def pg_appends(dsn: str, n: int, levels: list[int]) -> list[tuple[int, float, float]]:
    out = []
    for concurrency in levels:
        schema = f"bench_append_{concurrency}"
        adapter = PostgresAdapter(dsn, schema=schema, min_size=POOL_SIZE, max_size=POOL_SIZE)
        ours = await rate(n, concurrency, lambda w, i: adapter.append(exec_complete(f"s{w}", i)))
        assert await exec_total(adapter, concurrency) == n + 2 * concurrency
        await adapter.close()
        async with AsyncConnectionPool(
            dsn, min_size=POOL_SIZE, max_size=POOL_SIZE, kwargs={"autocommit": True}, open=False
        ) as pool:
            async with pool.connection() as conn:
                await conn.execute(f"CREATE SCHEMA raw_{concurrency}")
                await conn.execute(
                    RAW_TABLE.format(pk="bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY").replace(
                        "raw_events", f"raw_{concurrency}.raw_events"
                    )
                )

            async def raw(w: int, i: int) -> None:
                async with pool.connection() as conn:
                    await conn.execute(
                        f"INSERT INTO raw_{concurrency}.raw_events (ts, payload) VALUES (%s, %s)",
                        (i, '{"cmd":"make","exitCode":0}'),
                    )

            theirs = await rate(n, concurrency, raw)
        out.append((concurrency, ours, theirs))
    return out


PG_SEED = [
    """
    INSERT INTO ledger_sessions (name, sandbox_id, started_at, completed_at, status, exec_count)
    SELECT 'job-' || (x %% 10), 'sb-' || x, 1000000 + x,
           CASE WHEN x %% 3 = 0 THEN 1000000 + x + 10 END,
           CASE WHEN x %% 3 = 0 THEN 'completed' ELSE 'running' END, 18
    FROM generate_series(1, %(sessions)s) AS x
    """,
    """
    INSERT INTO ledger_events (session_id, ts, step_index, event, payload, append_key)
    SELECT s.id, s.started_at + y, y,
           CASE WHEN y = 0 THEN 'sandbox.created' ELSE 'exec.complete' END, '{"i":1}',
           s.id || '-' || y
    FROM ledger_sessions AS s, generate_series(0, %(last)s) AS y
    """,
]


async def pg_listing(dsn: str, events: int, n: int) -> dict[str, tuple[float, float]]:
    schema = f"bench_list_{events}"
    adapter = PostgresAdapter(dsn, schema=schema)
    await adapter.connect()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        for statement in PG_SEED:
            conn.execute(
                statement,
                {"sessions": events // EVENTS_PER_SESSION, "last": EVENTS_PER_SESSION - 1},
            )
        conn.execute("ANALYZE")
    sql, params = adapter.queries.list_sessions(adapter_query(None, ListSandboxOptions(limit=20)))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as raw_conn:

        async def raw() -> None:
            await (await raw_conn.execute(sql, params)).fetchall()

        result = await list_rows(adapter, n, raw)
    await adapter.close()
    return result


# -- shared ---------------------------------------------------------------------------------


def adapter_query(name: str | None, opts: ListSandboxOptions) -> Any:
    from sandbox_ledger.sql.rows import list_query

    # The store only binds the listing's cursors; a first page has none.
    return list_query(name, opts, "bench")


async def list_rows(
    adapter: SQLiteAdapter | PostgresAdapter, n: int, raw: Callable[[], Awaitable[None]]
) -> dict[str, tuple[float, float]]:
    page = ListSandboxOptions(limit=20)
    running = ListSandboxOptions(limit=20, status=SandboxStatus.Running)
    found = await adapter.list_all_sandbox_details(page)
    assert len(found) == 20
    return {
        "list_all": await latency(n, lambda: adapter.list_all_sandbox_details(page)),
        "list_name_running": await latency(
            n, lambda: adapter.list_sandbox_details("job-3", running)
        ),
        "raw": await latency(n, raw),
    }


def print_appends(title: str, rows: list[tuple[int, float, float]]) -> None:
    print(f"\n### {title}\n")
    print("| concurrency | adapter appends/s | raw INSERT/s | ratio |")
    print("|---:|---:|---:|---:|")
    for concurrency, ours, theirs in rows:
        print(f"| {concurrency} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f} |")


def print_listing(title: str, rows: dict[int, dict[str, tuple[float, float]]]) -> None:
    print(f"\n### {title}\n")
    print(
        "| events in database | list_all limit 20 p50 | p99 "
        "| list by name, running, limit 20 p50 | p99 | raw SELECT p50 | p99 |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for events, r in rows.items():
        print(
            f"| {events:,} | {r['list_all'][0]:.2f} | {r['list_all'][1]:.2f} "
            f"| {r['list_name_running'][0]:.2f} | {r['list_name_running'][1]:.2f} "
            f"| {r['raw'][0]:.2f} | {r['raw'][1]:.2f} |"
        )


async def main(quick: bool) -> None:
    appends = 200 if quick else 2000
    levels = [1, 10, 100]
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    samples = 50 if quick else 300
    with tempfile.TemporaryDirectory() as tmp, LocalPostgres(durable=True) as dsn:
        folder = Path(tmp)
        print_appends(
            f"SQLite: exec.complete appends ({appends} per level, one adapter, one file)",
            await sqlite_appends(folder, appends, levels),
        )
        print_appends(
            f"PostgreSQL: exec.complete appends ({appends} per level, pool of {POOL_SIZE})",
            await pg_appends(dsn, appends, levels),
        )
        print_listing(
            "SQLite: listing as the database grows (ms)",
            {size: await sqlite_listing(folder, size, samples) for size in sizes},
        )
        print_listing(
            "PostgreSQL: listing as the database grows (ms)",
            {size: await pg_listing(dsn, size, samples) for size in sizes},
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    asyncio.run(main(parser.parse_args().quick))
