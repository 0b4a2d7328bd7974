"""The embedded DynamoDB under a long run of transactional appends, next to stock moto.

Each server runs in a process of its own, so its memory is its own: ``sandbox_ledger.local``'s
``LocalDynamoDB`` (moto with item-level transaction rollback and bounded streams), and stock
moto's ``ThreadedMotoServer`` at a smaller count (its cost per transaction grows with the
table, so the full count would take hours and many GB). The client appends sequentially
through ``SyncDynamoDBAdapter``: per session one ``sandbox.created`` and three
``exec.complete`` (each a TransactWriteItems), 200-byte payloads, into one table made by
``create_table()`` (stream on).

    python benchmarks/embedded.py                  # 10,000 appends; stock moto at 400
    python benchmarks/embedded.py --appends 2000 --stock-appends 200   # quicker

Reported per window of appends: median and p99 time per append, and the server's resident
memory (VmRSS) at the end of the window; then the peak (VmHWM).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

PAYLOAD = {"cmd": "make test", "out": "x" * 170}


def serve(kind: str) -> None:
    """Child process: start a server, print its endpoint, serve until stdin closes."""
    if kind == "local":
        from sandbox_ledger.local import LocalDynamoDB

        endpoint = LocalDynamoDB().start()
    else:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
    print(endpoint, flush=True)
    sys.stdin.read()
    os._exit(0)  # the servers' threads would keep the process alive


def memory_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not found for {pid}")


def entries(n: int) -> list[LedgerEntry]:
    out = []
    for i in range(n):
        session, step = divmod(i, 4)
        event = LedgerEvent.SandboxCreated if step == 0 else LedgerEvent.ExecComplete
        out.append(
            LedgerEntry(
                ts=1_700_000_000_000 + i,
                name=f"job-{session % 10}",
                sandbox_id=f"s-{session}",
                step_index=step - 1,
                event=event,
                payload=PAYLOAD,
            )
        )
    return out


def run(kind: str, appends: int, window: int) -> list[tuple[int, float, float, float]]:
    """(appends so far, median ms, p99 ms, server RSS MB) per window, then peak RSS."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    endpoint = ""
    while not endpoint.startswith("http://"):  # moto's server prints a banner first
        endpoint = child.stdout.readline().strip()
    rows = []
    try:
        adapter = SyncDynamoDBAdapter(f"bench-{uuid.uuid4().hex[:8]}", endpoint_url=endpoint)
        adapter.create_table()
        samples: list[float] = []
        for i, e in enumerate(entries(appends), 1):
            start = time.perf_counter()
            adapter.append(e)
            samples.append(time.perf_counter() - start)
            if i % window == 0:
                ordered = sorted(samples)
                rows.append(
                    (
                        i,
                        statistics.median(ordered) * 1000,
                        ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
                        memory_mb(child.pid, "VmRSS"),
                    )
                )
                samples = []
        rows.append((appends, 0.0, 0.0, memory_mb(child.pid, "VmHWM")))
        adapter.close()
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    return rows


def report(kind: str, label: str, appends: int, window: int) -> None:
    started = time.perf_counter()
    rows = run(kind, appends, window)
    elapsed = time.perf_counter() - started
    *windows, (_, _, _, peak) = rows
    print(f"\n### {label}: {appends:,} transactional appends in {elapsed:.1f} s\n")
    print("| appends so far | median ms/append | p99 ms | server RSS MB |")
    print("|---:|---:|---:|---:|")
    for done, p50, p99, rss in windows:
        print(f"| {done:,} | {p50:.1f} | {p99:.1f} | {rss:.0f} |")
    first, last = windows[0][1], windows[-1][1]
    print(
        f"\nLast window / first window: {last / first:.2f}x; server peak memory (VmHWM) "
        f"{peak:.0f} MB."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=10_000, help="0 to skip LocalDynamoDB")
    parser.add_argument("--window", type=int, default=1_000)
    parser.add_argument("--stock-appends", type=int, default=400, help="0 to skip stock moto")
    parser.add_argument("--stock-window", type=int, default=50)
    parser.add_argument("--serve", choices=["local", "stock"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    import moto

    # moto signs against any credentials; they never leave this machine.
    for var, value in [
        ("AWS_ACCESS_KEY_ID", "local"),
        ("AWS_SECRET_ACCESS_KEY", "local"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ]:
        os.environ.setdefault(var, value)
    python = sys.version.split()[0]
    print(f"# Embedded DynamoDB benchmark (moto {moto.__version__}, Python {python})")
    if args.appends:
        report("local", "sandbox_ledger.local.LocalDynamoDB", args.appends, args.window)
    if args.stock_appends:
        report("stock", "stock moto ThreadedMotoServer", args.stock_appends, args.stock_window)


if __name__ == "__main__":
    main()
