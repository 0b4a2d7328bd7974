"""BatchWriteItem and BatchGetItem over any number of requests, retrying what comes back
unprocessed (never dropping it), as operations for :mod:`sandbox_ledger.sdk.steps`."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from sandbox_ledger.errors import ThrottledError
from sandbox_ledger.sdk import steps
from sandbox_ledger.sdk.steps import MAX_ATTEMPTS, Call, Op, Sleep, log

if TYPE_CHECKING:
    from sandbox_ledger.sdk.attributes import Item

BATCH_WRITE_MAX = 25
BATCH_GET_MAX = 100


def batch_write(table: str, requests: list[dict[str, Any]]) -> Op[None]:
    """BatchWriteItem in batches of 25 until every request is processed.

    UnprocessedItems go back to the front of the queue and ride with the next batch (never
    dropped); each partial batch backs off with jitter, longer while no batch makes progress.
    """
    queue = deque(requests)
    stalled = 0
    while queue:
        batch = [queue.popleft() for _ in range(min(BATCH_WRITE_MAX, len(queue)))]
        response = yield Call("batch_write_item", {"RequestItems": {table: batch}})
        left = (response.get("UnprocessedItems") or {}).get(table, [])
        if left:
            queue.extendleft(reversed(left))
            stalled = stalled + 1 if len(left) >= len(batch) else 0
            log.info(
                "BatchWriteItem on %s: %d of %d writes unprocessed (stalled %d), retrying",
                table,
                len(left),
                len(batch),
                stalled,
            )
            if stalled >= MAX_ATTEMPTS:
                log.warning("BatchWriteItem on %s: giving up after %d retries", table, stalled)
                raise ThrottledError(
                    f"BatchWriteItem: no progress after {stalled} retries, "
                    f"{len(queue)} writes not done",
                    code="UnprocessedItems",
                )
            yield Sleep(steps.backoff(stalled + 1))


def batch_get(table: str, keys: list[Item]) -> Op[list[Item]]:
    """BatchGetItem (strongly consistent) in chunks of 100, retrying UnprocessedKeys."""
    found: list[Item] = []
    for start in range(0, len(keys), BATCH_GET_MAX):
        pending: dict[str, Any] = {
            table: {"Keys": keys[start : start + BATCH_GET_MAX], "ConsistentRead": True}
        }
        attempt = 0
        while pending:
            response = yield Call("batch_get_item", {"RequestItems": pending})
            found.extend(response.get("Responses", {}).get(table, []))
            pending = response.get("UnprocessedKeys") or {}
            if pending:
                attempt += 1
                log.info("BatchGetItem on %s: keys unprocessed, retry %d", table, attempt)
                if attempt >= MAX_ATTEMPTS:
                    log.warning("BatchGetItem on %s: giving up after %d retries", table, attempt)
                    raise ThrottledError(
                        f"BatchGetItem: keys still unprocessed after {attempt} retries",
                        code="UnprocessedKeys",
                    )
                yield Sleep(steps.backoff(attempt))
    return found
