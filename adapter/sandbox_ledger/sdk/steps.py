"""Multi-step algorithms as generators, driven by a sync and an async runner.

An operation is a generator that yields :class:`Call` (one SDK call; the response is sent
back, a botocore error is thrown in), :class:`Parallel` (several calls, responses sent back as a
list; the first error is thrown in, or, with ``settle``, each call's response or SDK error sent
back in its place once every call has finished), :class:`Sleep` or :class:`Region` (the
client's region is sent back). Paging, retrying unprocessed items and merging shards are
written once here; only :func:`run_sync` and :func:`run_async` do I/O.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Generator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextvars import copy_context
from dataclasses import dataclass
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from sandbox_ledger.errors import ConflictError, LedgerError, translate_client_error
from sandbox_ledger.telemetry import retried

T = TypeVar("T")

log = logging.getLogger("sandbox_ledger")


@dataclass(frozen=True)
class Call:
    """One low-level client call, e.g. ``Call("put_item", {...})``."""

    operation: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Parallel:
    """Independent calls that may run concurrently."""

    calls: tuple[Call, ...]
    settle: bool = False
    """Wait for every call and send back each one's response or SDK error (an operation
    that retries each call on its own), instead of throwing the first error in."""


@dataclass(frozen=True)
class Sleep:
    """Back off before the next step."""

    seconds: float


@dataclass(frozen=True)
class Region:
    """Ask for the client's region (``client.meta.region_name``)."""


Step = Call | Parallel | Sleep | Region
Op = Generator[Step, Any, T]

_SDK_ERRORS = (ClientError, BotoCoreError)

# Retries of our own, on top of botocore's (which cover throttled and failed requests):
# partial batches and transaction conflicts, which botocore does not retry.
MAX_ATTEMPTS = 12

MAX_CONFLICTS = 40
"""How often a write refused only because another writer's transaction was in flight on one
of its items (``TransactionConflict``) is sent again before it gives up. A conflict is
contention, not a fault: the other transaction ends within milliseconds, and the write is
not applied. Writers that meet head on (imports of one file at once, appenders racing an
import into one session) can each lose many times in a row while the others make progress,
so they get more tries than a fault does: about a minute of backoff at its 2 s cap. A
transaction cancelled for a partition's throughput alone (``ThrottlingError``) waits as long:
the partition's units come back at their rate (:func:`contended`)."""

_WAITED_FOR = frozenset({"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"})
_CONTENTION = frozenset({None, "None", *_WAITED_FOR})


def contended(codes: Sequence[Any]) -> bool:
    """Whether a transaction's cancellation reasons say only that it waits for others: another
    transaction in flight on some of its items (``TransactionConflict``) or a partition's
    throughput spent (``ThrottlingError``: a transaction of a few MB into one partition key
    spends its 1,000 write units a second for seconds), the others ``None``."""
    return bool(_WAITED_FOR.intersection(codes)) and _CONTENTION.issuperset(codes)


def backoff(attempt: int, *, base: float = 0.025, cap: float = 2.0) -> float:
    """Full-jitter exponential backoff for retry ``attempt`` (1-based)."""
    return random.uniform(0, min(cap, base * 2**attempt))


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError, or ''."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def give_up(exc: BaseException, step: Step | None) -> LedgerError:
    """The package's error for an SDK error that leaves an operation, logged with the call
    and the SDK's own retry count (a conflict at INFO, anything else at WARNING)."""
    error = translate_client_error(exc)
    operation = step.operation if isinstance(step, Call) else type(step).__name__
    # Connection errors carry no response (their ``response`` may be None).
    response = getattr(exc, "response", None)
    metadata = response.get("ResponseMetadata", {}) if isinstance(response, dict) else {}
    log.log(
        logging.INFO if isinstance(error, ConflictError) else logging.WARNING,
        "%s: %s (after %s SDK retries)",
        operation,
        error,
        metadata.get("RetryAttempts", "?"),
    )
    return error


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _settled_call(client: Any, call: Call) -> Any:
    """The call's response, or the SDK error it raised (anything else propagates)."""
    try:
        return getattr(client, call.operation)(**call.params)
    except _SDK_ERRORS as exc:
        return exc


def _parallel_sync(client: Any, step: Parallel) -> list[Any]:
    """Run independent calls on a shared thread pool (boto3 clients are thread-safe)."""
    global _pool
    calls = step.calls
    if step.settle:
        if len(calls) == 1:
            return [_settled_call(client, calls[0])]
    elif len(calls) == 1:
        return [getattr(client, calls[0].operation)(**calls[0].params)]
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="sandbox-ledger")
    # Each call in a copy of the caller's context: its requests belong to the caller's
    # operation (its span, its consumed units), as a call on the caller's thread would.
    if step.settle:
        settling = [_pool.submit(copy_context().run, _settled_call, client, c) for c in calls]
        return [f.result() for f in settling]
    futures = [_pool.submit(copy_context().run, _plain_call, client, c) for c in calls]
    # On the first error, calls not yet started are cancelled and the error is raised at
    # once, instead of after every other call has run out its own retries.
    done, pending = wait(futures, return_when=FIRST_EXCEPTION)
    errors = [f.exception() for f in futures if f in done]
    error = next((e for e in errors if e is not None), None)
    if error is not None:
        for future in pending:
            future.cancel()
        raise error
    return [f.result() for f in futures]


def _plain_call(client: Any, call: Call) -> Any:
    return getattr(client, call.operation)(**call.params)


def _sequential(client: Any, step: Parallel) -> list[Any]:
    """A :class:`Parallel` step's calls one after the other, as :func:`_parallel_sync`
    returns them."""
    if step.settle:
        return [_settled_call(client, call) for call in step.calls]
    return [getattr(client, call.operation)(**call.params) for call in step.calls]


_IN_FLIGHT = "TransactionConflictException"


def _conflicted(exc: ClientError, call: Call, attempt: int) -> float | None:
    """How long to wait before sending ``call`` again after ``exc``, or None to give up.

    DynamoDB refuses a PutItem, UpdateItem or DeleteItem on an item that a transaction in
    flight holds with ``TransactionConflictException`` (Developer Guide, "Transaction
    conflict handling"): the write was not applied, and botocore does not retry it. It is
    sent again with backoff, up to :data:`MAX_CONFLICTS` times (a delete's lease on a summary
    that appends update in their transactions meets it on a busy session)."""
    if error_code(exc) != _IN_FLIGHT or attempt >= MAX_CONFLICTS:
        return None
    log.info("%s: an item is held by a transaction in flight, retry %d", call.operation, attempt)
    retried("conflict", attempt=attempt, operation=call.operation, code=_IN_FLIGHT)
    return backoff(attempt)


def _call_sync(client: Any, call: Call) -> Any:
    attempt = 0
    while True:
        try:
            return getattr(client, call.operation)(**call.params)
        except ClientError as exc:
            attempt += 1
            pause = _conflicted(exc, call, attempt)
            if pause is None:
                raise
            time.sleep(pause)


async def _call_async(client: Any, call: Call) -> Any:
    import asyncio

    attempt = 0
    while True:
        try:
            return await getattr(client, call.operation)(**call.params)
        except ClientError as exc:
            attempt += 1
            pause = _conflicted(exc, call, attempt)
            if pause is None:
                raise
            await asyncio.sleep(pause)


def run_sync(client: Any, op: Op[T], *, concurrent: bool = True) -> T:
    """Drive ``op`` with a boto3 client; SDK errors leave as the package's own types.
    ``concurrent=False``: a :class:`Parallel` step's calls are made one after the other (a
    client whose calls cannot overlap, the embedded server's in-process one)."""
    value: Any = None
    error: BaseException | None = None
    step: Step | None = None
    try:
        while True:
            try:
                step = op.throw(error) if error is not None else op.send(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            value, error = None, None
            try:
                if isinstance(step, Call):
                    value = _call_sync(client, step)
                elif isinstance(step, Parallel):
                    value = (_parallel_sync if concurrent else _sequential)(client, step)
                elif isinstance(step, Region):
                    value = client.meta.region_name
                else:
                    time.sleep(step.seconds)
            except _SDK_ERRORS as exc:
                error = exc
    except _SDK_ERRORS as exc:
        raise give_up(exc, step) from exc
    finally:
        op.close()


async def _settled_async(client: Any, call: Call) -> Any:
    try:
        return await getattr(client, call.operation)(**call.params)
    except _SDK_ERRORS as exc:
        return exc


async def _parallel_async(client: Any, step: Parallel) -> list[Any]:
    """Run independent calls concurrently; the first error cancels the others (with
    ``settle``, every call runs to its end and its SDK error takes its place)."""
    import asyncio  # here, not at module level: a sync caller (a Lambda handler) never pays it

    calls = step.calls
    if step.settle:
        return list(await asyncio.gather(*(_settled_async(client, c) for c in calls)))
    tasks = [asyncio.ensure_future(getattr(client, c.operation)(**c.params)) for c in calls]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        errors = [t.exception() for t in tasks if t in done]
        error = next((e for e in errors if e is not None), None)
        if error is not None:
            raise error
        return [t.result() for t in tasks]
    finally:
        for task in tasks:
            task.cancel()
        # Let cancelled calls unwind (release their connections) before going on.
        await asyncio.gather(*tasks, return_exceptions=True)


async def run_async(client: Any, op: Op[T]) -> T:
    """Drive ``op`` with an aioboto3 client; parallel steps run concurrently."""
    value: Any = None
    error: BaseException | None = None
    step: Step | None = None
    try:
        while True:
            try:
                step = op.throw(error) if error is not None else op.send(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            value, error = None, None
            try:
                if isinstance(step, Call):
                    value = await _call_async(client, step)
                elif isinstance(step, Parallel):
                    value = await _parallel_async(client, step)
                elif isinstance(step, Region):
                    value = client.meta.region_name
                else:
                    import asyncio

                    await asyncio.sleep(step.seconds)
            except _SDK_ERRORS as exc:
                error = exc
    except _SDK_ERRORS as exc:
        raise give_up(exc, step) from exc
    finally:
        op.close()
