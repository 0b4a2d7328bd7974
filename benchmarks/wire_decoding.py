"""What decoding reads from the wire (``sandbox_ledger.sdk.wire``) saves a ``read_all``, in
client CPU with the network removed (replay.py's tape: the responses recorded once from the
embedded DynamoDB, then replayed through botocore's ``before-send``).

Two sides of the same sync ``read_all`` on one tape, alternating in rounds (process CPU,
median of the rounds): the adapter's client as it is (reads decoded from the wire), and the
same client with botocore's own parser put back (the baseline: the adapter before). Sessions
of 10, 100 and 1,000 entries, each entry with a small JSON payload.

    python benchmarks/wire_decoding.py            # 200 reads of 10 entries per round, fewer of more
    python benchmarks/wire_decoding.py --runs 20  # quicker
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from replay import Tape, entry, on_local_server
from sandbox_ledger import LedgerEvent
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.sdk import wire

SIZES = (10, 100, 1_000)
ROUNDS = 15


def _side(client: Any, decoded: bool) -> Callable[[], None]:
    """Put the client's parser factory in the state of a side."""
    endpoint = client._endpoint
    installed = endpoint._response_parser_factory
    botocore_s = installed._factory if isinstance(installed, wire._Factory) else installed

    def switch() -> None:
        endpoint._response_parser_factory = botocore_s
        if decoded:
            wire.install(client)

    return switch


def measure(endpoint: str, runs: int) -> list[tuple[int, float, float]]:
    rows = []
    for size in SIZES:
        adapter = SyncDynamoDBAdapter(f"wire-{size}", endpoint_url=endpoint)
        adapter.create_table()
        adapter.append(entry("s", LedgerEvent.SandboxCreated, 1))
        for i in range(size - 1):
            payload = {"cmd": "make test", "i": i, "env": {"CI": "1"}}
            adapter.append(entry("s", LedgerEvent.ExecStarted, 2 + i, i, payload=payload))
        client = adapter.client()
        tape = Tape(client)
        assert len(adapter.read_all("bench", "s")) == size
        tape.stop_recording()
        tape.replay()
        sides = [_side(client, True), _side(client, False)]
        per_round = max(1, runs * 10 // size)
        cpu: list[list[float]] = [[], []]
        for _ in range(ROUNDS):
            for number, switch in enumerate(sides):
                switch()
                adapter.read_all("bench", "s")  # warm
                gc.collect()  # each side's collections are its own garbage's
                start = time.process_time()
                for _ in range(per_round):
                    adapter.read_all("bench", "s")
                cpu[number].append((time.process_time() - start) / per_round)
        wired, botocore_s = (statistics.median(c) * 1e6 for c in cpu)
        rows.append((size, wired, botocore_s))
        adapter.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="reads of 10 entries per round")
    args = parser.parse_args()
    rows = on_local_server(measure, args.runs)
    print("| read_all | wire decoding µs | botocore's parser µs | ratio |")
    print("|---|---|---|---|")
    for size, wired, botocore_s in rows:
        print(f"| {size:,} entries | {wired:,.0f} | {botocore_s:,.0f} | {wired / botocore_s:.2f} |")


if __name__ == "__main__":
    main()
