"""The client's own CPU per operation, next to the raw SDK call, with the network removed.

Each operation runs once against a local moto server while botocore's hooks record every
request it makes (operation, parameters) and every response body. Then both sides run against
those recorded responses, replayed through botocore's ``before-send`` hook (no socket, no
server): the adapter's operation, and the raw boto3 calls with the very same parameters on a
plain boto3 client (botocore's own parser) (plus, for ``read_all``, the same decoding of the
items into entries). What is left is client CPU:
parameter validation, serialization, signing, parsing, and whatever the adapter adds.

    python benchmarks/replay.py            # 2,000 runs per operation and side
    python benchmarks/replay.py --runs 300 # quicker
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any, TypeVar

from botocore.awsrequest import AWSResponse

from sandbox_ledger import EnvironmentRecord, LedgerEntry, LedgerEvent, ListSandboxOptions
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.local import LocalDynamoDB

T = TypeVar("T")


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


class Tape:
    """Records (operation, params, status, headers, body) while live; replays bodies after."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: list[tuple[str, dict[str, Any], int, dict[str, str], bytes]] = []
        self._params: list[tuple[str, dict[str, Any]]] = []
        self._position = 0
        events = client.meta.events
        events.register("provide-client-params.dynamodb", self._on_params)
        events.register("response-received.dynamodb", self._on_response)

    def _on_params(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self._params.append((model.name, dict(params)))

    def _on_response(self, response_dict: dict[str, Any] | None, **_: Any) -> None:
        assert response_dict is not None
        operation, params = self._params.pop(0)
        headers = {k: v for k, v in response_dict["headers"].items() if k.lower() != "date"}
        self.calls.append(
            (operation, params, response_dict["status_code"], headers, response_dict["body"])
        )

    def stop_recording(self) -> None:
        events = self.client.meta.events
        events.unregister("provide-client-params.dynamodb", self._on_params)
        events.unregister("response-received.dynamodb", self._on_response)

    def replay(self) -> None:
        """From now on answer every request with the recorded responses, in order, cycling."""
        self.client.meta.events.register_first("before-send.dynamodb", self._answer)

    def _answer(self, request: Any, **_: Any) -> AWSResponse:
        _, _, status, headers, body = self.calls[self._position % len(self.calls)]
        self._position += 1
        return AWSResponse(request.url, status, headers, _Raw(body))


def cpu_per_run(
    ours: Callable[[], Any], theirs: Callable[[], Any], runs: int
) -> tuple[float, float]:
    """Process CPU per run in microseconds of each side: rounds alternate between the sides
    (so drift in the machine's speed hits both alike), median of 7 rounds each."""
    rounds: tuple[list[float], list[float]] = ([], [])
    per_round = max(1, runs // 7)
    for _ in range(7):
        for side, fn in enumerate((ours, theirs)):
            start = time.process_time()
            for _ in range(per_round):
                fn()
            rounds[side].append((time.process_time() - start) / per_round)
    return statistics.median(rounds[0]) * 1e6, statistics.median(rounds[1]) * 1e6


def entry(sid: str, event: str, ts: int, step: int = -1, payload: Any = None) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name="bench", sandbox_id=sid, step_index=step, event=event, payload=payload
    )


def seed(adapter: SyncDynamoDBAdapter) -> None:
    adapter.append(entry("s", LedgerEvent.SandboxCreated, 1))
    for i in range(50):
        adapter.append(entry("s", LedgerEvent.ExecStarted, 10 + i, i, {"cmd": "make", "i": i}))
        adapter.append(entry("s", LedgerEvent.ExecComplete, 10 + i, i, {"exitCode": 0}))
    adapter.append(entry("s", LedgerEvent.CheckpointCreated, 100, -1, {"snapshotId": "snap"}))
    adapter.append(entry("s", LedgerEvent.SandboxClosed, 200))
    for i in range(5):
        adapter.save_environment(EnvironmentRecord(name=f"env-{i}", built_at=i))


def cases(adapter: SyncDynamoDBAdapter) -> list[tuple[str, Callable[[], Any], bool]]:
    """(label, operation, whether the raw side also decodes the items into entries)."""
    # The entries are built once: the caller's model construction is not the adapter's cost
    # (appending the same entry again is a new entry, as in the contract).
    started = entry("w", LedgerEvent.ExecStarted, 1000, 0, {"cmd": "ls -la"})
    # The client's steady state: it knows where the session's sequence goes next (its first
    # append to a session it has not written reads it first, a Query the replay would lack).
    adapter.append(entry("w", LedgerEvent.SandboxCreated, 999))
    complete = entry("w", LedgerEvent.ExecComplete, 1001, 0, {"exitCode": 0})
    environment = EnvironmentRecord(name="env-x", built_at=7)
    return [
        ("append exec.started (TransactWriteItems)", lambda: adapter.append(started), False),
        ("append exec.complete (TransactWriteItems)", lambda: adapter.append(complete), False),
        ("get_sandbox_details (GetItem)", lambda: adapter.get_sandbox_details("bench", "s"), False),
        ("get_environment (GetItem)", lambda: adapter.get_environment("env-1"), False),
        ("save_environment (PutItem)", lambda: adapter.save_environment(environment), False),
        ("list_checkpoints (Query)", lambda: adapter.list_checkpoints("bench", "s"), False),
        ("list_environments (Query)", lambda: adapter.list_environments(), False),
        (
            "list_sandbox_details (Query + BatchGetItem)",
            lambda: adapter.list_sandbox_details("bench", ListSandboxOptions(limit=20)),
            False,
        ),
        ("read_all, 103 entries (Query)", lambda: adapter.read_all("bench", "s"), True),
    ]


def measure(endpoint: str, runs: int) -> list[tuple[str, int, float, float]]:
    setup = SyncDynamoDBAdapter("replay-bench", endpoint_url=endpoint)
    setup.create_table()
    seed(setup)
    rows = []
    for index in range(len(cases(setup))):
        # A fresh adapter per case: its client carries this case's tape.
        adapter = SyncDynamoDBAdapter("replay-bench", endpoint_url=endpoint)
        # The descriptor is read once per client, on its first write or listing: read it
        # before recording, so the tape holds the operation's own requests only.
        adapter.table_shard_count()
        label, live, decode = cases(adapter)[index]
        tape = Tape(adapter.client())
        live()
        tape.stop_recording()
        tape.replay()
        raw = _raw_side(_raw_client(endpoint, tape), tape.calls, decode)
        raw()  # warm both sides once on the tape
        live()
        ours, theirs = cpu_per_run(live, raw, runs)
        rows.append((label, len(tape.calls), ours, theirs))
        adapter.close()
    setup.close()
    return rows


def _raw_client(endpoint: str, tape: Tape) -> Any:
    """A plain boto3 client (botocore's own parser: the library's clients decode reads from
    the wire) answered from ``tape``'s recorded responses."""
    import boto3

    client = boto3.session.Session().client(
        "dynamodb", endpoint_url=endpoint, region_name=tape.client.meta.region_name
    )
    replayed = Tape(client)
    replayed.stop_recording()
    replayed.calls = tape.calls
    replayed.replay()
    return client


def _raw_side(
    client: Any, calls: list[tuple[str, dict[str, Any], int, dict[str, str], bytes]], decode: bool
) -> Callable[[], Any]:
    methods = [(getattr(client, _snake(op)), params) for op, params, *_ in calls]

    def run() -> Any:
        results = [method(**params) for method, params in methods]
        if decode:
            items = [item for page in results for item in page.get("Items", [])]
            return [e for _, e in it.decode_keyed_entries("bench", "s", items)]
        return results

    return run


def _snake(operation: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in operation).lstrip("_")


def on_local_server(measure: Callable[[str, int], T], runs: int) -> T:
    """``measure(endpoint, runs)`` against a fresh embedded server (local credentials and
    region where the shell has none), the server stopped after."""
    for var, value in [
        ("AWS_ACCESS_KEY_ID", "local"),
        ("AWS_SECRET_ACCESS_KEY", "local"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ]:
        os.environ.setdefault(var, value)
    server = LocalDynamoDB()
    endpoint = server.start()
    try:
        return measure(endpoint, runs)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    rows = on_local_server(measure, args.runs)
    print(f"Client CPU per operation, responses replayed ({args.runs} runs per side)\n")
    print("| operation | requests | adapter µs | raw SDK µs | ratio |")
    print("|---|---:|---:|---:|---:|")
    for label, requests, ours, theirs in rows:
        print(f"| {label} | {requests} | {ours:.0f} | {theirs:.0f} | {ours / theirs:.2f}x |")


if __name__ == "__main__":
    main()
