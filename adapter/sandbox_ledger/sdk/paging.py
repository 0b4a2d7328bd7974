"""Queries followed to the end, and several index partitions merged newest first, as
operations for :mod:`sandbox_ledger.sdk.steps`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox_ledger import keys as k
from sandbox_ledger._json import MAX_SAFE_INTEGER, find_surrogate
from sandbox_ledger.cursor import bad_position, check_int
from sandbox_ledger.sdk.attributes import Item, N, S
from sandbox_ledger.sdk.steps import Call, Op, Parallel

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox_ledger.keys import IndexSpec


def query_all(params: dict[str, Any]) -> Op[list[Item]]:
    """Every item a Query matches, following LastEvaluatedKey."""
    items: list[Item] = []
    start: dict[str, Any] | None = None
    while True:
        page = yield Call("query", {**params, "ExclusiveStartKey": start} if start else params)
        items.extend(page.get("Items", []))
        start = page.get("LastEvaluatedKey")
        if not start:
            return items


@dataclass
class _Stream:
    """One index partition being read newest first."""

    params: dict[str, Any]
    buffer: list[Item] = field(default_factory=list)
    start: dict[str, Any] | None = None
    done: bool = False
    position: dict[str, Any] | None = None
    """The key of the last item handed out (where a later page resumes)."""


ScanStarts = dict[int, "Item | None"]
"""Where each segment of a parallel Scan goes on (None: from its start); a segment that is
done has no entry."""


def scan_round(params: dict[str, Any], starts: ScanStarts) -> Op[tuple[list[Item], ScanStarts]]:
    """One page of each segment in ``starts``, in parallel (``params`` carries
    ``TotalSegments``): the items read, and where each segment goes on."""
    order = sorted(starts)
    calls = tuple(
        Call(
            "scan",
            {**params, "Segment": s, **({"ExclusiveStartKey": starts[s]} if starts[s] else {})},
        )
        for s in order
    )
    pages = yield Parallel(calls)
    items: list[Item] = []
    after: ScanStarts = {}
    for segment, page in zip(order, pages, strict=True):
        items.extend(page.get("Items", []))
        if page.get("LastEvaluatedKey"):
            after[segment] = page["LastEvaluatedKey"]
    return items, after


def newest_first(
    table: str,
    index: IndexSpec,
    partitions: list[str],
    *,
    before: int | None,
    want: int | None,
    resume: dict[str, Any] | None = None,
    passed: Callable[[Item], bool] | None = None,
) -> Op[tuple[list[Item], dict[str, Any]]]:
    """Index keys from several partitions, merged newest ``gsk`` first, at most ``want``.

    Each partition is queried with ``Limit=want``; one is read further only when the merge
    has used up what it returned, so a page costs one query per partition in the common case.
    Returns the keys and, per partition, where a next page resumes (``"done"`` when drained);
    pass that back as ``resume``. A key for which ``passed`` is true is stepped over (its
    partition resumes after it) and not returned: one an earlier page of the walk already
    went past in the merge's order.
    """
    condition = "#ipk = :ipk" + (" AND #gsk < :before" if before else "")
    names = {"#ipk": index.partition_key}
    if before:
        names["#gsk"] = index.sort_key
    streams: dict[str, _Stream] = {}
    for partition in partitions:
        values: dict[str, Any] = {":ipk": S(partition)}
        if before:
            values[":before"] = N(before)
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
    out: list[Item] = []
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
        if passed is None or not passed(item):
            out.append(item)
    state = {
        partition: "done" if s.done and not s.buffer else s.position
        for partition, s in streams.items()
    }
    return out, state


def check_resume(
    state: object,
    index: IndexSpec,
    partitions: list[str],
    is_item: Callable[[str, str], bool],
    *,
    before: int | None = None,
) -> dict[str, Any]:
    """The per-partition positions of a cursor's state for :func:`newest_first`, if each is
    a position in its partition of ``index``: ``"done"``, None (not read yet) or an index key
    (the table key, which ``is_item(pk, sk)`` accepts, the partition itself, and a
    non-negative integer ``gsk``, below ``before`` if given), so a forged cursor can start at
    another position of the same listing but never send DynamoDB a key it refuses (a start
    key outside the query's range condition is a ValidationException).

    Raises:
        InvalidInputError: naming ``cursor``.
    """
    if not isinstance(state, dict) or set(state) != set(partitions):
        raise bad_position()
    key_names = {k.PARTITION_KEY, k.SORT_KEY, index.partition_key, index.sort_key}
    for partition, where in state.items():
        if where is None or where == "done":
            continue
        if not isinstance(where, dict) or set(where) != key_names:
            raise bad_position()
        pk, sk = _key_string(where[k.PARTITION_KEY]), _key_string(where[k.SORT_KEY])
        if _key_string(where[index.partition_key]) != partition or not is_item(pk, sk):
            raise bad_position()
        number = where[index.sort_key]
        digits = number.get("N") if isinstance(number, dict) and len(number) == 1 else None
        if not isinstance(digits, str) or not (digits.isascii() and digits.isdigit()):
            raise bad_position()
        if len(digits) > 16:  # past any timestamp, and int() of it could be slow
            raise bad_position()
        high = before - 1 if before else MAX_SAFE_INTEGER
        if str(check_int(int(digits), 0, high)) != digits:
            raise bad_position()
    return state


def _key_string(value: object) -> str:
    text = value.get("S") if isinstance(value, dict) and len(value) == 1 else None
    if not isinstance(text, str) or not text or find_surrogate(text, "cursor"):
        raise bad_position()
    if len(text.encode()) > k.MAX_PARTITION_KEY_BYTES:
        raise bad_position()
    return text
