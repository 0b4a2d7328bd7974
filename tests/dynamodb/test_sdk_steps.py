"""The step runners (sandbox_ledger.sdk.steps) against fake clients: no server adds anything
to what is tested here."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sandbox_ledger.errors import StorageError, ThrottledError
from sandbox_ledger.sdk.batching import BATCH_GET_MAX, BATCH_WRITE_MAX, batch_get, batch_write
from sandbox_ledger.sdk.steps import Call, Op, Parallel, Sleep, run_async, run_sync


def _denied(operation: str) -> ClientError:
    return ClientError({"Error": {"Code": "ValidationException", "Message": "no"}}, operation)


def shards(n: int) -> Op[list[Any]]:
    results = yield Parallel(tuple(Call("query", {"shard": i}) for i in range(n)))
    return list(results)


class BlockingClient:
    """Shard 0 fails at once; every other query waits until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = 0
        self._lock = threading.Lock()

    def query(self, shard: int) -> dict[str, Any]:
        if shard == 0:
            raise _denied("Query")
        with self._lock:
            self.started += 1
        self.release.wait(30)
        return {"shard": shard}


def test_sync_parallel_raises_the_first_error_without_waiting_for_the_rest() -> None:
    client = BlockingClient()
    started = time.monotonic()
    try:
        with pytest.raises(StorageError, match="ValidationException"):
            run_sync(client, shards(40))
        assert time.monotonic() - started < 10
        assert not client.release.is_set()
        # Queued queries that had not started were cancelled (the pool has 16 threads).
        assert client.started < 39
    finally:
        client.release.set()


def test_sync_parallel_returns_results_in_call_order() -> None:
    class Echo:
        def query(self, shard: int) -> dict[str, Any]:
            time.sleep(0.001 * (10 - shard))
            return {"shard": shard}

    assert run_sync(Echo(), shards(10)) == [{"shard": i} for i in range(10)]


class AsyncBlockingClient:
    def __init__(self) -> None:
        self.cancelled = 0
        self.finished = 0

    async def query(self, shard: int) -> dict[str, Any]:
        if shard == 0:
            await asyncio.sleep(0.01)
            raise _denied("Query")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        return {"shard": shard}


async def test_async_parallel_cancels_the_others_on_the_first_error() -> None:
    client = AsyncBlockingClient()
    started = time.monotonic()
    with pytest.raises(StorageError, match="ValidationException"):
        await run_async(client, shards(8))
    assert time.monotonic() - started < 10
    assert client.cancelled == 7 and client.finished == 0


async def test_async_parallel_returns_results_in_call_order() -> None:
    class Echo:
        async def query(self, shard: int) -> dict[str, Any]:
            await asyncio.sleep(0.001 * (10 - shard))
            return {"shard": shard}

    assert await run_async(Echo(), shards(10)) == [{"shard": i} for i in range(10)]


# -- batching, driven without any client ----------------------------------------------------------


def drive(op: Op[Any], answer: Any) -> tuple[Any, list[Any]]:
    """Run an operation by hand: ``answer(call)`` is each call's response (a Parallel's calls
    answered in their order); sleeps are skipped."""
    seen: list[Any] = []
    value: Any = None
    while True:
        try:
            step = op.send(value)
        except StopIteration as stop:
            return stop.value, seen
        seen.append(step)
        if isinstance(step, Parallel):
            value = [answer(call) for call in step.calls]
        else:
            value = answer(step) if isinstance(step, Call) else None


def test_batch_write_chunks_by_25_and_requeues_what_comes_back() -> None:
    requests = [{"PutRequest": {"Item": {"i": {"N": str(i)}}}} for i in range(130)]
    written: list[int] = []
    held_once: set[int] = set()

    def answer(call: Call) -> dict[str, Any]:
        batch = call.params["RequestItems"]["t"]
        assert 1 <= len(batch) <= BATCH_WRITE_MAX
        back = [r for r in batch[-3:] if int(r["PutRequest"]["Item"]["i"]["N"]) not in held_once]
        held_once.update(int(r["PutRequest"]["Item"]["i"]["N"]) for r in back)
        written.extend(int(r["PutRequest"]["Item"]["i"]["N"]) for r in batch if r not in back)
        return {"UnprocessedItems": {"t": back}} if back else {}

    _, seen = drive(batch_write("t", requests), answer)
    assert sorted(written) == list(range(130))  # each exactly once, none dropped
    assert held_once and any(isinstance(s, Sleep) for s in seen)


def test_batch_write_without_progress_gives_up_loudly() -> None:
    requests = [{"PutRequest": {"Item": {"i": {"N": str(i)}}}} for i in range(10)]

    def nothing_processed(call: Call) -> dict[str, Any]:
        return {"UnprocessedItems": call.params["RequestItems"]}

    with pytest.raises(ThrottledError, match="no progress") as info:
        drive(batch_write("t", requests), nothing_processed)
    assert info.value.code == "UnprocessedItems"


def test_batch_get_chunks_by_100_and_retries_unprocessed_keys() -> None:
    keys = [{"PK": {"S": f"k{i}"}} for i in range(250)]
    returned_later: set[str] = set()

    def answer(call: Call) -> dict[str, Any]:
        asked = call.params["RequestItems"]["t"]
        assert asked["ConsistentRead"] is True and len(asked["Keys"]) <= BATCH_GET_MAX
        later = [k for k in asked["Keys"][::7] if k["PK"]["S"] not in returned_later]
        returned_later.update(k["PK"]["S"] for k in later)
        now = [k for k in asked["Keys"] if k not in later]
        response: dict[str, Any] = {"Responses": {"t": now}}
        if later:
            response["UnprocessedKeys"] = {"t": {**asked, "Keys": later}}
        return response

    found, _ = drive(batch_get("t", keys), answer)
    assert sorted(k["PK"]["S"] for k in found) == sorted(k["PK"]["S"] for k in keys)
    assert returned_later
