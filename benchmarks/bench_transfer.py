"""Benchmark moving a ledger: ``import`` and ``export`` on every store, beside the raw driver.

For each store and size, a file of JSON lines (sessions of 6 entries: created, two started
and two complete execs, closed, as an export writes them) is imported into an empty store,
imported again (every line already present), and exported; each run is a fresh process, so
its peak RSS is its own (``os.wait4``). The raw baseline is the driver's ``executemany`` of
the same rows (sessions, then entries) in one transaction, in the same run. DynamoDB runs
against the embedded server in its own process, with the requests counted by
``RequestCounter``.

    python benchmarks/bench_transfer.py                          # 100,000 and 1,000,000 lines
    python benchmarks/bench_transfer.py --lines 20000 --stores sqlite   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EVENTS = [
    "sandbox.created",
    "exec.started",
    "exec.complete",
    "exec.started",
    "exec.complete",
    "sandbox.closed",
]


def write_file(path: Path, lines: int, size: int = 6) -> None:
    """``lines`` entries in sessions of ``size`` (created, started/complete pairs, closed),
    in (name, sandboxId) order as an export writes them: 50 names, each a run of sessions."""
    sessions = -(-lines // size)
    with path.open("w") as out:
        for i in range(lines):
            session, position = divmod(i, size)
            k = 0 if position == 0 else 5 if position == size - 1 else 1 + (position - 1) % 4
            entry: dict[str, Any] = {
                "ts": 1_700_000_000_000 + i,
                "name": f"job-{session * 50 // sessions:02d}",
                "sandboxId": f"sb-{session:08d}",
                "stepIndex": position // 2,
                "event": EVENTS[k],
            }
            if EVENTS[k] == "exec.complete":
                entry["payload"] = {"exitCode": 0, "durationMs": 1234, "stdout": "ok ok ok"}
            out.write(json.dumps(entry) + "\n")


def run_child(args: list[str]) -> tuple[dict[str, Any], float, int]:
    """Run this script as a child (``--child ...``); its JSON result, wall seconds and peak
    RSS in MB."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, __file__, "--child", *args], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"child {args} failed ({status})")
    return json.loads(output), seconds, usage.ru_maxrss // 1024


# -- the child: one measured operation -----------------------------------------------------


def child(kind: str, store: str, operation: str, path: str) -> dict[str, Any]:
    if kind == "raw-sqlite":
        return raw_sqlite(store, path)
    if kind == "raw-postgres":
        return raw_postgres(store, path)
    counter = capacity = None
    ledger: Any
    if kind == "dynamodb":
        from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
        from sandbox_ledger.dynamodb.instrument import RequestCounter

        table, endpoint = store.split("@", 1)
        ledger = SyncDynamoDBAdapter(table, endpoint_url=endpoint, region_name="us-east-1")
        ledger.create_table()
        counter = RequestCounter().attach(ledger.client())
        capacity = WriteCapacity().attach(ledger.client())
    else:
        from sandbox_ledger.blocking import open_blocking_store

        ledger = open_blocking_store(store)
    start = time.perf_counter()
    result: dict[str, Any] = {}
    if operation == "append":  # the same entries, each through a plain append
        from sandbox_ledger.transfer import parse_lines

        with open(path, "rb") as source:
            parsed = parse_lines(source)
        for _, entry in parsed.entries:
            ledger.append(entry)
        result = {"appended": len(parsed.entries)}
    elif operation == "import":
        from sandbox_ledger.transfer import import_lines

        with open(path, "rb") as source:
            report = import_lines(ledger, source)
        result = {"new": report.new, "present": report.present, "failed": len(report.failed)}
    else:
        from sandbox_ledger.transfer import export_lines

        count = 0
        with open(path, "w") as out:
            for line in export_lines(ledger, ledger.scan_sessions()):
                out.write(line)
                count += 1
        result = {"exported": count}
    result["seconds"] = time.perf_counter() - start
    if counter is not None:
        result["requests"] = sum(counter.calls.values())
        result["calls"] = dict(counter.calls)
    if capacity is not None and capacity.units:
        result["wcu"] = capacity.units
    ledger.close()
    return result


class WriteCapacity:
    """Write capacity units the requests would consume on DynamoDB (moto reports none), from
    the items' sizes: 1 per KB per item written, 2 in a transaction; an update counted as a
    summary item of at most 1 KB."""

    def __init__(self) -> None:
        self.units = 0

    def attach(self, client: Any) -> WriteCapacity:
        for op in ("PutItem", "UpdateItem", "BatchWriteItem", "TransactWriteItems"):
            client.meta.events.register(f"before-parameter-build.dynamodb.{op}", self._count)
        return self

    def _count(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        from sandbox_ledger.dynamodb._packing import item_bytes

        def kb(item: dict[str, Any]) -> int:
            return max(1, -(-item_bytes(item) // 1024))

        if model.name == "PutItem":
            self.units += kb(params["Item"])
        elif model.name == "UpdateItem":
            self.units += 1
        elif model.name == "BatchWriteItem":
            for requests in params["RequestItems"].values():
                self.units += sum(
                    kb(r["PutRequest"]["Item"]) for r in requests if "PutRequest" in r
                )
        else:
            for action in params["TransactItems"]:
                put = action.get("Put")
                self.units += 2 * (kb(put["Item"]) if put else 1)


def _rows(path: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    sessions: dict[tuple[str, str], int] = {}
    events = []
    with open(path, "rb") as source:
        for raw in source:
            d = json.loads(raw)
            key = (d["name"], d["sandboxId"])
            sid = sessions.setdefault(key, len(sessions) + 1)
            payload = json.dumps(d.get("payload")) if "payload" in d else None
            events.append((sid, d["ts"], d["stepIndex"], None, d["event"], payload, None))
    return [(i, n, s) for (n, s), i in sessions.items()], events


def raw_sqlite(store: str, path: str) -> dict[str, Any]:
    import sqlite3

    sessions, events = _rows(path)
    start = time.perf_counter()
    db = sqlite3.connect(store, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE s (id INTEGER PRIMARY KEY, name TEXT, sandbox_id TEXT)")
    db.execute(
        "CREATE TABLE e (seq INTEGER PRIMARY KEY, session_id INTEGER, ts INTEGER, "
        "step_index INTEGER, branch INTEGER, event TEXT, payload TEXT, error TEXT)"
    )
    db.execute("BEGIN")
    db.executemany("INSERT INTO s VALUES (?, ?, ?)", sessions)
    db.executemany(
        "INSERT INTO e (session_id, ts, step_index, branch, event, payload, error) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        events,
    )
    db.execute("COMMIT")
    db.close()
    return {"seconds": time.perf_counter() - start}


def raw_postgres(dsn: str, path: str) -> dict[str, Any]:
    import psycopg

    sessions, events = _rows(path)
    start = time.perf_counter()
    with psycopg.connect(dsn) as conn:
        conn.execute("DROP TABLE IF EXISTS raw_e, raw_s")
        conn.execute("CREATE TABLE raw_s (id bigint PRIMARY KEY, name text, sandbox_id text)")
        conn.execute(
            "CREATE TABLE raw_e (seq bigserial PRIMARY KEY, session_id bigint, ts bigint, "
            "step_index bigint, branch bigint, event text, payload text, error text)"
        )
        with conn.cursor() as cursor:
            cursor.executemany("INSERT INTO raw_s VALUES (%s, %s, %s)", sessions)
            cursor.executemany(
                "INSERT INTO raw_e (session_id, ts, step_index, branch, event, payload, error) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                events,
            )
    return {"seconds": time.perf_counter() - start}


# -- the parent -----------------------------------------------------------------------------


def bench(
    kind: str,
    store: str,
    lines: int,
    file: Path,
    folder: Path,
    raw: float | None,
    label: str | None = None,
) -> None:
    """Import into the empty store, import again, export (on DynamoDB also a plain append of
    each entry into another table, for its requests and capacity); one table row each."""
    operations = ["import"] if kind == "memory" else ["import", "re-import", "export"]
    if kind == "dynamodb":
        operations.append("append")  # the plain append's requests and capacity, beside
    for operation in operations:
        target = file if operation != "export" else folder / f"{kind}-{lines}.export.jsonl"
        where = store if operation != "append" else store.replace("@", "append@", 1)
        result, _, rss = run_child([kind, where, operation.replace("re-", ""), str(target)])
        rate = lines / result["seconds"]
        requests = result.get("requests")
        per_entry = f"{requests / lines:.3f}" if requests is not None else "-"
        if "wcu" in result:
            result["wcu/entry"] = round(result.pop("wcu") / lines, 2)
        ratio = f"{result['seconds'] / raw:.1f}x" if raw and operation == "import" else "-"
        detail = {k: v for k, v in result.items() if k not in ("seconds", "requests")}
        print(
            f"| {label or kind} | {lines:,} | {operation} | {result['seconds']:.1f} s | "
            f"{rate:,.0f} | {ratio} | {per_entry} | {rss} MB | {detail} |",
            flush=True,
        )


def raw_row(name: str, lines: int, args: list[str]) -> float:
    result, _, rss = run_child(args)
    seconds: float = result["seconds"]
    print(
        f"| raw {name} executemany | {lines:,} | insert | {seconds:.2f} s | "
        f"{lines / seconds:,.0f} | 1x | - | {rss} MB | one transaction |",
        flush=True,
    )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgres", "memory", "dynamodb"])
    parser.add_argument(
        "--dynamodb-lines", type=int, default=6_000, help="lines for DynamoDB (embedded server)"
    )
    parser.add_argument(
        "--dynamodb-sessions",
        type=int,
        nargs="+",
        default=[6, 10],
        help="entries per session in the DynamoDB files",
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    folder = Path(tempfile.mkdtemp(prefix="bench-transfer-"))
    print(
        "| store | lines | operation | time | lines/s | time / raw | requests/entry | peak RSS |"
        " result |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    pg: Any = None
    ddb: Any = None
    try:
        for lines in args.lines:
            file = folder / f"{lines}.jsonl"
            write_file(file, lines)
            for kind in args.stores:
                if kind == "sqlite":
                    raw = raw_row(
                        "sqlite3",
                        lines,
                        ["raw-sqlite", str(folder / f"raw{lines}.db"), "-", str(file)],
                    )
                    bench(kind, f"sqlite:///{folder / f'{lines}.db'}", lines, file, folder, raw)
                elif kind == "postgres":
                    if pg is None:
                        from sandbox_ledger.local import LocalPostgres

                        pg = LocalPostgres()
                        pg.start()
                    raw = raw_row("psycopg", lines, ["raw-postgres", pg.dsn, "-", str(file)])
                    bench(kind, f"{pg.dsn}?schema=bench{lines}", lines, file, folder, raw)
                elif kind == "memory":
                    bench(kind, "memory://", lines, file, folder, None)
                else:
                    n = min(lines, args.dynamodb_lines)
                    if ddb is None:
                        from sandbox_ledger.local import LocalDynamoDBProcess

                        ddb = LocalDynamoDBProcess()
                        ddb.start()
                    for size in args.dynamodb_sessions:
                        source = folder / f"ddb{n}-{size}.jsonl"
                        write_file(source, n, size)
                        where = f"bench{lines}s{size}@{ddb.endpoint_url}"
                        label = f"dynamodb, sessions of {size}"
                        bench(kind, where, n, source, folder, None, label)
    finally:
        for server in (pg, ddb):
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
