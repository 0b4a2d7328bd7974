"""Benchmark ledger retention on the SQL adapters, next to a baseline in the same run.

1. Appends/s (``exec.complete``, each worker on its own session) with ``retention=30 days``
   next to the same adapter without a retention, on fresh databases: what computing the
   expiries in the append costs. CPU seconds of this process beside (SQLite runs in it).
2. ``purge_expired()`` (batches of 1,000) of a database whose entries have all expired, bulk
   seeded with SESSIONS sessions of 20 entries, next to the raw driver deleting the same rows
   in one statement per table on an identical copy; while each runs, another adapter on the
   same database appends one entry every 10 ms and the slowest of those appends is reported:
   how long a purge makes a writer wait.

    python benchmarks/bench_sql_retention.py            # the report in docs/benchmarks.md
    python benchmarks/bench_sql_retention.py --quick    # small sizes, a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiosqlite
import psycopg

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger.local import LocalPostgres
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.sqlite import SQLiteAdapter

RETENTION = timedelta(days=30)
EVENTS_PER_SESSION = 20


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def entry(sid: str, i: int, event: str = LedgerEvent.ExecComplete) -> LedgerEntry:
    return LedgerEntry(
        ts=time.time_ns() // 1_000_000,
        name="bench",
        sandbox_id=sid,
        step_index=i,
        event=event,
        payload={"cmd": "make", "exitCode": 0, "i": i},
    )


async def rate(adapter: Any, n: int, concurrency: int) -> tuple[float, float]:
    """(appends/s, CPU s of this process) for n appends by ``concurrency`` workers."""
    for w in range(concurrency):  # warm-up: connections opened, statements prepared
        await adapter.append(entry(f"s{w}", -1, LedgerEvent.SandboxCreated))
    queue = iter(range(n))

    async def worker(w: int) -> None:
        for i in queue:
            await adapter.append(entry(f"s{w}", i))

    start, cpu0 = time.perf_counter(), cpu()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed, used = time.perf_counter() - start, cpu() - cpu0
    total = 0
    for w in range(concurrency):
        details = await adapter.get_sandbox_details("bench", f"s{w}")
        assert details is not None
        total += details.exec_count
    assert total == n, (total, n)
    return n / elapsed, used


async def appends(
    make: Callable[[str, timedelta | None], Any], n: int, levels: list[int]
) -> list[tuple[int, float, float, float, float]]:
    out = []
    for concurrency in levels:
        row: dict[str, tuple[float, float]] = {}
        for label, retention in (("forever", None), ("retention", RETENTION)):
            adapter = make(f"{label}{concurrency}", retention)
            await adapter.connect()
            row[label] = await rate(adapter, n, concurrency)
            await adapter.close()
        out.append((concurrency, *row["retention"], *row["forever"]))
    return out


async def while_writing(purge: Callable[[], Awaitable[Any]], writer: Any) -> tuple[float, float]:
    """(seconds the purge took, slowest concurrent append in ms)."""
    stop = asyncio.Event()
    slowest = 0.0

    async def write() -> None:
        nonlocal slowest
        i = 0
        while not stop.is_set():
            start = time.perf_counter()
            await writer.append(entry("writer", i))
            slowest = max(slowest, time.perf_counter() - start)
            i += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(write())
    await asyncio.sleep(0.1)
    start = time.perf_counter()
    await purge()
    took = time.perf_counter() - start
    stop.set()
    await task
    return took, slowest * 1000


# -- SQLite ---------------------------------------------------------------------------------

SQLITE_SEED = [
    """
    WITH RECURSIVE i(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM i WHERE x < {sessions})
    INSERT INTO ledger_sessions (name, sandbox_id, started_at, status, exec_count,
                                 summary_expires_at, expires_at)
    SELECT 'old', 'sb-' || x, 1000000 + x, 'running', 19, 1000 + x, 1000 + x FROM i
    """,
    """
    WITH RECURSIVE j(y) AS (SELECT 0 UNION ALL SELECT y + 1 FROM j WHERE y < {last})
    INSERT INTO ledger_events (session_id, ts, step_index, event, payload, expires_at)
    SELECT s.id, s.started_at + y, y,
           CASE WHEN y = 0 THEN 'sandbox.created' ELSE 'exec.complete' END, '{{"i":1}}',
           s.expires_at
    FROM ledger_sessions AS s, j
    """,
]


async def sqlite_purge(folder: Path, sessions: int) -> tuple[tuple[float, float], ...]:
    seeded = folder / "seeded.db"
    async with SQLiteAdapter(seeded, retention=RETENTION):
        pass  # the schema and the recorded retention
    seed = sqlite3.connect(seeded)
    with seed:
        for sql in SQLITE_SEED:
            seed.execute(sql.format(sessions=sessions, last=EVENTS_PER_SESSION - 1))
    seed.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all in the main file, which is copied
    seed.close()
    results = []
    for kind in ("adapter", "raw"):
        path = folder / f"purge-{kind}.db"
        shutil.copy(seeded, path)
        async with (
            SQLiteAdapter(path) as purger,
            SQLiteAdapter(path, busy_timeout=30) as writer,
            aiosqlite.connect(path, isolation_level=None, timeout=30) as db,
        ):
            if kind == "adapter":
                results.append(await while_writing(purger.purge_expired, writer))
                continue
            await db.execute("PRAGMA foreign_keys = ON")
            now = int(time.time())

            async def raw(db: Any = db, now: int = now) -> None:
                await db.execute("BEGIN IMMEDIATE")
                await db.execute("DELETE FROM ledger_events WHERE expires_at <= ?", (now,))
                await db.execute("DELETE FROM ledger_sessions WHERE expires_at <= ?", (now,))
                await db.execute("COMMIT")

            results.append(await while_writing(raw, writer))
        with sqlite3.connect(path) as check:
            left = check.execute("SELECT count(*) FROM ledger_events").fetchone()[0]
            assert left < 1000, left  # the writer's own entries only
        check.close()
    return tuple(results)


# -- PostgreSQL -----------------------------------------------------------------------------

PG_SEED = [
    """
    INSERT INTO {s}.ledger_sessions (name, sandbox_id, started_at, status, exec_count,
                                     summary_expires_at, expires_at)
    SELECT 'old', 'sb-' || x, 1000000 + x, 'running', 19, 1000 + x, 1000 + x
    FROM generate_series(1, {sessions}) AS x
    """,
    """
    INSERT INTO {s}.ledger_events (session_id, ts, step_index, event, payload, append_key,
                                   expires_at)
    SELECT s.id, s.started_at + y, y,
           CASE WHEN y = 0 THEN 'sandbox.created' ELSE 'exec.complete' END, '{{"i":1}}',
           s.id || '-' || y, s.expires_at
    FROM {s}.ledger_sessions AS s, generate_series(0, {last}) AS y
    """,
]


async def pg_purge(dsn: str, sessions: int) -> tuple[tuple[float, float], ...]:
    results = []
    for kind in ("adapter", "raw"):
        schema = f"purge_{kind}"
        async with PostgresAdapter(dsn, schema=schema, retention=RETENTION):
            pass
        with psycopg.connect(dsn, autocommit=True) as conn:
            for sql in PG_SEED:
                conn.execute(
                    sql.format(s=schema, sessions=sessions, last=EVENTS_PER_SESSION - 1).encode()
                )
            conn.execute(f"ANALYZE {schema}.ledger_events".encode())
            conn.execute(f"ANALYZE {schema}.ledger_sessions".encode())
        async with (
            PostgresAdapter(dsn, schema=schema) as purger,
            PostgresAdapter(dsn, schema=schema) as writer,
        ):
            if kind == "adapter":
                results.append(await while_writing(purger.purge_expired, writer))
                continue
            now = int(time.time())

            async def raw(schema: str = schema, now: int = now) -> None:
                async with await psycopg.AsyncConnection.connect(dsn) as conn:
                    for table in ("ledger_events", "ledger_sessions"):
                        await conn.execute(
                            f"DELETE FROM {schema}.{table} WHERE expires_at <= %s".encode(),
                            (now,),
                        )

            results.append(await while_writing(raw, writer))
        with psycopg.connect(dsn, autocommit=True) as conn:
            [(left,)] = conn.execute(f"SELECT count(*) FROM {schema}.ledger_events".encode())
            assert left < 1000, left  # the writer's own entries only
    return tuple(results)


def report_appends(title: str, rows: list[tuple[int, float, float, float, float]]) -> None:
    print(f"\n#### {title}\n")
    print("| concurrency | with retention: appends/s | CPU s | keep forever: appends/s | CPU s |")
    print("|---:|---:|---:|---:|---:|")
    for concurrency, ours, ours_cpu, base, base_cpu in rows:
        print(f"| {concurrency} | {ours:.0f} | {ours_cpu:.2f} | {base:.0f} | {base_cpu:.2f} |")


def report_purge(title: str, rows: tuple[tuple[float, float], ...]) -> None:
    (ours, ours_wait), (raw, raw_wait) = rows
    print(f"\n#### {title}\n")
    print("| | seconds | slowest concurrent append (ms) |")
    print("|---|---:|---:|")
    print(f"| purge_expired() (batches of 1,000) | {ours:.2f} | {ours_wait:.0f} |")
    print(f"| raw DELETE, one statement per table | {raw:.2f} | {raw_wait:.0f} |")


async def main(quick: bool) -> None:
    n = 200 if quick else 2000
    levels = [1, 10]
    sessions = 500 if quick else 5000
    entries = sessions * EVENTS_PER_SESSION
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = await appends(
            lambda name, retention: SQLiteAdapter(folder / f"{name}.db", retention=retention),
            n,
            levels,
        )
        report_appends(f"SQLite: exec.complete appends ({n} per level)", rows)
        purge = await sqlite_purge(folder, sessions)
        report_purge(f"SQLite: purging {entries:,} expired entries of {sessions:,} sessions", purge)
    with LocalPostgres() as dsn:
        rows = await appends(
            lambda name, retention: PostgresAdapter(
                dsn, schema=f"appends_{name}", retention=retention, max_size=20
            ),
            n,
            levels,
        )
        report_appends(f"PostgreSQL: exec.complete appends ({n} per level)", rows)
        purge = await pg_purge(dsn, sessions)
        report_purge(
            f"PostgreSQL: purging {entries:,} expired entries of {sessions:,} sessions", purge
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    asyncio.run(main(parser.parse_args().quick))
