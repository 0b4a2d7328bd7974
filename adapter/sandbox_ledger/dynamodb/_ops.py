"""Every contract operation as a generator of SDK calls (see :mod:`._steps`).

Shared by :class:`DynamoDBAdapter` and :class:`SyncDynamoDBAdapter`; tested without AWS by
driving them with a fake client.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb._steps import Call, Op, Parallel, Sleep, backoff, error_code
from sandbox_ledger.errors import StorageError, ThrottledError
from sandbox_ledger.models import (
    CheckpointInfo,
    EnvironmentRecord,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    SandboxDetails,
)
from sandbox_ledger.summary import apply_list_options

BATCH_WRITE_MAX = 25
BATCH_GET_MAX = 100
# Retries of our own, on top of botocore's (which cover throttled and failed requests):
# partial batches and transaction conflicts, which botocore does not retry.
MAX_ATTEMPTS = 12

_RETRYABLE_CANCELLATIONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)


# -- writes ---------------------------------------------------------------------------------


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
            if stalled >= MAX_ATTEMPTS:
                raise ThrottledError(
                    f"BatchWriteItem: no progress after {stalled} retries, "
                    f"{len(queue)} writes not done",
                    code="UnprocessedItems",
                )
            yield Sleep(backoff(stalled + 1))


def append(table: str, entry: LedgerEntry, order: str, shard_count: int) -> Op[None]:
    """Store ``entry`` exactly once: parts first, then the head in one conditional write.

    The head's key contains ``order``, fixed before the first attempt, so a resent write
    (the first one landed but its response was lost) fails its condition and is recognised
    as already done, without a second event or a second execCount increment.
    """
    encoded = it.encode_entry(entry, order)
    summary = it.summary_update(entry, shard_count)
    if encoded.parts:
        yield from batch_write(table, [{"PutRequest": {"Item": part}} for part in encoded.parts])
    put = {
        "TableName": table,
        "Item": encoded.head,
        "ConditionExpression": "attribute_not_exists(#pk)",
        "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY},
    }
    actions: list[dict[str, Any]] = [{"Put": put}]
    if summary is not None:
        actions.append({"Update": {"TableName": table, **summary}})
    if entry.event == LedgerEvent.CheckpointCreated:
        actions.append({"Put": {"TableName": table, "Item": it.checkpoint_marker(entry, order)}})
    if len(actions) == 1:
        try:
            yield Call("put_item", put)
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
        return
    attempt = 0
    while True:
        try:
            yield Call("transact_write_items", {"TransactItems": actions})
            return
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if reasons and reasons[0] == "ConditionalCheckFailed":
                return  # the head is already stored: this was a resend of a landed write
            if not _RETRYABLE_CANCELLATIONS.intersection(reasons):
                raise
            attempt += 1
            if attempt >= MAX_ATTEMPTS:
                raise StorageError(
                    f"append: transaction cancelled {attempt} times ({reasons})",
                    code="TransactionCanceledException",
                ) from exc
            yield Sleep(backoff(attempt))


def delete_partition(table: str, pk: str) -> Op[None]:
    """Delete every item of one partition, page by page, summary first."""
    start: dict[str, Any] | None = None
    while True:
        params: dict[str, Any] = {
            "TableName": table,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY},
            "ExpressionAttributeValues": {":pk": it.S(pk)},
            "ProjectionExpression": "#pk, #sk",
            "ConsistentRead": True,
        }
        if start:
            params["ExclusiveStartKey"] = start
        page = yield Call("query", params)
        requests = [{"DeleteRequest": {"Key": item}} for item in page.get("Items", [])]
        yield from batch_write(table, requests)
        start = page.get("LastEvaluatedKey")
        if not start:
            return


# -- reads ----------------------------------------------------------------------------------


def query_all(params: dict[str, Any]) -> Op[list[it.Item]]:
    """Every item a Query matches, following LastEvaluatedKey."""
    items: list[it.Item] = []
    start: dict[str, Any] | None = None
    while True:
        page = yield Call("query", {**params, "ExclusiveStartKey": start} if start else params)
        items.extend(page.get("Items", []))
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


def _prefix_query(table: str, pk: str, prefix: str, **extra: Any) -> dict[str, Any]:
    return {
        "TableName": table,
        "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
        "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY},
        "ExpressionAttributeValues": {":pk": it.S(pk), ":prefix": it.S(prefix)},
        "ConsistentRead": True,
        **extra,
    }


def read_all(table: str, name: str, sandbox_id: str) -> Op[list[LedgerEntry]]:
    pk = k.session_pk(name, sandbox_id)
    items = yield from query_all(_prefix_query(table, pk, k.EVENT_PREFIX))
    return it.decode_entries(name, sandbox_id, items)


def last_checkpoint(table: str, name: str, sandbox_id: str) -> Op[LedgerEntry | None]:
    """The newest checkpoint marker (one request), then its entry (one more)."""
    pk = k.session_pk(name, sandbox_id)
    page = yield Call(
        "query", _prefix_query(table, pk, k.CHECKPOINT_PREFIX, ScanIndexForward=False, Limit=1)
    )
    if not page.get("Items"):
        return None
    ref = page["Items"][0]["ref"]["S"]
    items = yield from query_all(_prefix_query(table, pk, ref))
    entries = it.decode_entries(name, sandbox_id, items)
    return entries[0] if entries else None


def list_checkpoints(table: str, name: str, sandbox_id: str) -> Op[list[CheckpointInfo]]:
    pk = k.session_pk(name, sandbox_id)
    items = yield from query_all(_prefix_query(table, pk, k.CHECKPOINT_PREFIX))
    return [it.decode_checkpoint(item) for item in items]


def get_sandbox_details(table: str, name: str, sandbox_id: str) -> Op[SandboxDetails | None]:
    key = it.summary_key(k.session_pk(name, sandbox_id))
    response = yield Call("get_item", {"TableName": table, "Key": key, "ConsistentRead": True})
    item = response.get("Item")
    return it.decode_details(item) if item else None


def batch_get(table: str, keys: list[it.Item]) -> Op[list[it.Item]]:
    """BatchGetItem (strongly consistent) in chunks of 100, retrying UnprocessedKeys."""
    found: list[it.Item] = []
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
                if attempt >= MAX_ATTEMPTS:
                    raise ThrottledError(
                        f"BatchGetItem: keys still unprocessed after {attempt} retries",
                        code="UnprocessedKeys",
                    )
                yield Sleep(backoff(attempt))
    return found


@dataclass
class _Stream:
    """One index partition being read newest first."""

    params: dict[str, Any]
    buffer: list[it.Item] = field(default_factory=list)
    start: dict[str, Any] | None = None
    done: bool = False
    position: dict[str, Any] | None = None
    """The key of the last item handed out (where a later page resumes)."""


def newest_first(
    table: str,
    index: k.IndexSpec,
    partitions: list[str],
    *,
    before: int | None,
    want: int | None,
    resume: dict[str, Any] | None = None,
) -> Op[tuple[list[it.Item], dict[str, Any]]]:
    """Index keys from several partitions, merged newest ``gsk`` first, at most ``want``.

    Each partition is queried with ``Limit=want``; one is read further only when the merge
    has used up what it returned, so a page costs one query per partition in the common case.
    Returns the keys and, per partition, where a next page resumes (``"done"`` when drained);
    pass that back as ``resume``.
    """
    condition = "#ipk = :ipk" + (" AND #gsk < :before" if before else "")
    names = {"#ipk": index.partition_key}
    if before:
        names["#gsk"] = index.sort_key
    streams: dict[str, _Stream] = {}
    for partition in partitions:
        values: dict[str, Any] = {":ipk": it.S(partition)}
        if before:
            values[":before"] = it.N(before)
        params: dict[str, Any] = {
            "TableName": table,
            "IndexName": index.name,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": False,
        }
        if want:
            params["Limit"] = min(want, 1000)
        stream = streams[partition] = _Stream(params)
        where = (resume or {}).get(partition)
        if where == "done":
            stream.done = True
        elif isinstance(where, dict):
            stream.start = stream.position = where
    out: list[it.Item] = []
    while want is None or len(out) < want:
        hungry = [s for s in streams.values() if not s.buffer and not s.done]
        if hungry:
            calls = tuple(
                Call("query", {**s.params, "ExclusiveStartKey": s.start} if s.start else s.params)
                for s in hungry
            )
            pages = yield Parallel(calls)
            for stream, page in zip(hungry, pages, strict=True):
                stream.buffer = list(page.get("Items", []))
                stream.start = page.get("LastEvaluatedKey")
                stream.done = not stream.start
        ready = [s for s in streams.values() if s.buffer]
        if not ready:
            break
        best = max(ready, key=lambda s: int(s.buffer[0][index.sort_key]["N"]))
        item = best.buffer.pop(0)
        best.position = item
        out.append(item)
    state = {
        partition: "done" if s.done and not s.buffer else s.position
        for partition, s in streams.items()
    }
    return out, state


def list_details(
    table: str,
    *,
    name: str | None,
    opts: ListSandboxOptions | None,
    shard_count: int,
) -> Op[list[SandboxDetails]]:
    """Sessions newest first from the status-appropriate index; never reads events."""
    status = opts.status if opts else None
    before = opts.before if opts else None
    want = opts.limit if opts and opts.limit else None
    if name is not None:
        index = k.BY_NAME_STATUS if status else k.BY_NAME
        partitions = [
            k.by_name_status_pk(status, name) if status else k.by_name_pk(name),
        ]
    else:
        index = k.ALL_STATUS if status else k.ALL
        partitions = [
            k.all_status_pk(status, shard) if status else k.all_pk(shard)
            for shard in range(shard_count)
        ]
    keys, _ = yield from newest_first(table, index, partitions, before=before, want=want)
    summaries = yield from batch_get(
        table,
        [{k.PARTITION_KEY: key[k.PARTITION_KEY], k.SORT_KEY: key[k.SORT_KEY]} for key in keys],
    )
    details = [d for d in map(it.decode_details, summaries) if d is not None]
    # The index is eventually consistent: re-apply the filters to the fresh summaries.
    return apply_list_options(details, opts)


# -- environments ---------------------------------------------------------------------------


def get_environment(table: str, name: str) -> Op[EnvironmentRecord | None]:
    key = it.environment_key(name)
    response = yield Call("get_item", {"TableName": table, "Key": key, "ConsistentRead": True})
    item = response.get("Item")
    return it.decode_environment(item) if item else None


def save_environment(table: str, record: EnvironmentRecord) -> Op[None]:
    yield Call("put_item", {"TableName": table, "Item": it.environment_item(record)})


def delete_environment(table: str, name: str) -> Op[None]:
    yield Call("delete_item", {"TableName": table, "Key": it.environment_key(name)})


def list_environments(table: str) -> Op[list[EnvironmentRecord]]:
    items = yield from query_all(
        {
            "TableName": table,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY},
            "ExpressionAttributeValues": {":pk": it.S(k.ENVIRONMENT_PK)},
            "ConsistentRead": True,
        }
    )
    records = [it.decode_environment(item) for item in items]
    return sorted(records, key=lambda r: -r.built_at)


# -- table ----------------------------------------------------------------------------------


def create_table(table: str) -> Op[bool]:
    """Create the table and its TTL setting if absent, then wait for ACTIVE. True if created."""
    created = False
    try:
        yield Call("create_table", k.table_definition(table))
        created = True
    except ClientError as exc:
        if error_code(exc) != "ResourceInUseException":
            raise
    for attempt in range(600):
        described = yield Call("describe_table", {"TableName": table})
        info = described["Table"]
        indexes_ready = all(
            g.get("IndexStatus", "ACTIVE") == "ACTIVE"
            for g in info.get("GlobalSecondaryIndexes", [])
        )
        if info.get("TableStatus") == "ACTIVE" and indexes_ready:
            break
        yield Sleep(min(0.05 * 2**attempt, 2.0))
    else:
        raise StorageError(f"table {table} did not become ACTIVE")
    ttl = yield Call("describe_time_to_live", {"TableName": table})
    if ttl.get("TimeToLiveDescription", {}).get("TimeToLiveStatus") not in ("ENABLED", "ENABLING"):
        yield Call(
            "update_time_to_live",
            {
                "TableName": table,
                "TimeToLiveSpecification": {"Enabled": True, "AttributeName": k.TTL_ATTRIBUTE},
            },
        )
    return created
