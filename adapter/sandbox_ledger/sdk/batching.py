"""BatchWriteItem and BatchGetItem over any number of requests, retrying what comes back
unprocessed (never dropping it), as operations for :mod:`sandbox_ledger.sdk.steps`."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from sandbox_ledger.errors import THROTTLE_CODES, ThrottledError
from sandbox_ledger.sdk import steps
from sandbox_ledger.sdk.steps import MAX_ATTEMPTS, Call, Op, Sleep, error_code, log
from sandbox_ledger.telemetry import retried

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
        try:
            response = yield Call("batch_write_item", {"RequestItems": {table: batch}})
        except ClientError as exc:
            # "If none of the items can be processed due to insufficient provisioned
            # throughput on all of the tables in the request, then BatchWriteItem returns a
            # ProvisionedThroughputExceededException" (API Reference, BatchWriteItem): the
            # whole batch unprocessed, past botocore's own retries. A long run of writes to
            # one partition (a delete of a session of many thousand entries) meets it once
            # it outpaces the partition's 1,000 write units a second.
            if error_code(exc) not in THROTTLE_CODES:
                raise
            response = {"UnprocessedItems": {table: batch}}
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
            retried("resend", attempt=stalled or 1, operation="BatchWriteItem", items=len(left))
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
                retried("resend", attempt=attempt, operation="BatchGetItem")
                if attempt >= MAX_ATTEMPTS:
                    log.warning("BatchGetItem on %s: giving up after %d retries", table, attempt)
                    raise ThrottledError(
                        f"BatchGetItem: keys still unprocessed after {attempt} retries",
                        code="UnprocessedKeys",
                    )
                yield Sleep(steps.backoff(attempt))
    return found
