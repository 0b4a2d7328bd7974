"""Resource record operations as generators of SDK calls, shared by both store twins."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from sandbox_ledger import keys as k
from sandbox_ledger.cursor import bad_position, decode_cursor, encode_cursor
from sandbox_ledger.errors import ConflictError, InvalidInputError, StorageError
from sandbox_ledger.resources import _items as ri
from sandbox_ledger.resources.models import (
    FAILED_PHASES,
    LIVE_PHASES,
    ResourceActivityRecord,
    ResourceOperation,
    ResourceOperationResult,
    to_iso,
)
from sandbox_ledger.sdk import steps
from sandbox_ledger.sdk.attributes import MAX_ITEM_BYTES, N, S, item_size
from sandbox_ledger.sdk.batching import batch_get
from sandbox_ledger.sdk.paging import (
    Frontier,
    ScanStarts,
    check_resume,
    newest_first,
    scan_round,
)
from sandbox_ledger.sdk.steps import Call, Op, Parallel, Sleep, error_code

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

MAX_RMW_ATTEMPTS = 25
_PHASES = (*LIVE_PHASES, *FAILED_PHASES)


@dataclass(frozen=True)
class Page:
    """One page of records, newest updatedAt first; pass ``cursor`` back for the next."""

    records: list[ri.VersionedRecord]
    cursor: str | None
    unreadable: list[ri.Unreadable] = field(default_factory=list)
    """Records on this page that cannot be decoded (see :class:`Unreadable`)."""


class AnyIncarnation(enum.Enum):
    """A write that expects no incarnation in particular (the default)."""

    ANY = "any"


_BOOKKEEPING_BYTES = 512
"""Room kept in a record's item for what owners and sweepers add besides the record (its
revision, incarnation, claim, lease and observation)."""


def _conflict(
    exc: ClientError, record_id: str, action: str, incarnation: str | AnyIncarnation | None
) -> ConflictError:
    old = exc.response.get("Item")
    held = None if old is None else old.get(k.INCARNATION, {}).get("S")
    if old is None:
        why = "it does not exist"
    elif not isinstance(incarnation, AnyIncarnation) and held != incarnation:
        why = "it was deleted and allocated again since it was read (another incarnation)"
    elif k.CLAIM in old:
        why = f"a sweeper is expiring it ({old[k.CLAIM]['S']})"
    else:
        why = f"it changed meanwhile (now revision {old.get(k.REVISION, {}).get('N', '?')})"
    return ConflictError(f"{action} {record_id}: {why}", code="ConditionalCheckFailedException")


def _conditional(
    operation: str,
    params: dict[str, Any],
    record_id: str,
    action: str,
    incarnation: str | AnyIncarnation | None = AnyIncarnation.ANY,
) -> Op[dict[str, Any]]:
    """One conditional write; a failed condition becomes a ConflictError saying why (the
    request asks for the old item on failure), ``incarnation`` being the one the write
    expects (:data:`AnyIncarnation.ANY`: none in particular)."""
    try:
        response: dict[str, Any] = yield Call(operation, params)
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            raise _conflict(exc, record_id, action, incarnation) from exc
        raise
    return response


def new_incarnation() -> str:
    """A fresh incarnation token (:data:`sandbox_ledger.keys.INCARNATION`)."""
    return uuid.uuid4().hex


def _incarnation_is(incarnation: str | None, names: dict[str, str], values: dict[str, Any]) -> str:
    """The condition that the stored record is the incarnation ``incarnation`` (None: one
    written before incarnations existed, which has none)."""
    names["#inc"] = k.INCARNATION
    if incarnation is None:
        return "attribute_not_exists(#inc)"
    values[":inc"] = S(incarnation)
    return "#inc = :inc"


def put(
    table: str,
    record: ResourceActivityRecord,
    *,
    expected_revision: int | None,
    expires_at: int | None,
    shard_count: int,
    expected_incarnation: str | AnyIncarnation | None = AnyIncarnation.ANY,
) -> Op[ri.VersionedRecord]:
    """Create or replace. With ``expected_revision`` the stored revision must match (and, with
    ``expected_incarnation``, the stored incarnation: see :func:`record_operation`); without,
    the write must not go back in time (a stored newer updatedAt wins). Never over a record
    a sweeper is expiring. The TTL attribute is set to ``expires_at``, or removed if None. A
    record created by this write gets a new incarnation; a replaced one keeps its own."""
    values = ri.write_values(record, expires_at=expires_at, shard_count=shard_count)
    size = item_size({**ri.record_key(record.id), **values}) + _BOOKKEEPING_BYTES
    if size > MAX_ITEM_BYTES:
        raise InvalidInputError(
            "record",
            f"{record.id} would be a {size:,}-byte item, over DynamoDB's {MAX_ITEM_BYTES:,} "
            "bytes (its workspace, metadata or operations are too large)",
        )
    names = {f"#a{i}": name for i, name in enumerate(values)}
    assignments = [f"#a{i} = :a{i}" for i in range(len(values))]
    expr_values: dict[str, Any] = {f":a{i}": v for i, v in enumerate(values.values())}
    expr_values[":one"] = N(1)
    expr_values[":zero"] = N(0)
    expr_values[":newinc"] = S(new_incarnation())
    names["#rev"] = k.REVISION
    names["#exp"] = k.CLAIM
    names["#inc"] = k.INCARNATION
    remove = ""
    if expires_at is None:
        names["#ttl"] = k.TTL_ATTRIBUTE
        remove = " REMOVE #ttl"
    if expected_revision is None:
        names["#gsk"] = k.INDEX_SORT_KEY
        names["#pk"] = k.PARTITION_KEY
        condition = "(attribute_not_exists(#pk) OR #gsk <= :ms) AND attribute_not_exists(#exp)"
        expr_values[":ms"] = N(record.updated_at_ms)
    else:
        condition = "#rev = :expected AND attribute_not_exists(#exp)"
        expr_values[":expected"] = N(expected_revision)
        if not isinstance(expected_incarnation, AnyIncarnation):
            condition += " AND " + _incarnation_is(expected_incarnation, names, expr_values)
    response = yield from _conditional(
        "update_item",
        {
            "TableName": table,
            "Key": ri.record_key(record.id),
            "UpdateExpression": "SET "
            + ", ".join(assignments)
            + ", #rev = if_not_exists(#rev, :zero) + :one, #inc = if_not_exists(#inc, :newinc)"
            + remove,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": expr_values,
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        },
        record.id,
        "put",
        expected_incarnation,
    )
    return ri.decode(response["Attributes"])


def get(table: str, record_id: str, *, now_s: int | None) -> Op[ri.VersionedRecord | None]:
    """The record, or None when absent or past its TTL at ``now_s`` (DynamoDB may not have
    deleted it; a record the policy keeps forever has none). ``now_s`` None: as stored."""
    k.check_record_id(record_id)  # the canonical spelling only, before any request
    stored = yield from inspect(table, record_id, now_s=now_s)
    if isinstance(stored, ri.Unreadable):
        raise StorageError(f"record {record_id} is unreadable: {stored.reason}", code="Unreadable")
    return stored


def inspect(
    table: str, record_id: str, *, now_s: int | None
) -> Op[ri.VersionedRecord | ri.Unreadable | None]:
    """:func:`get`, except that a record this version cannot read comes back as
    :class:`Unreadable` with its stored JSON instead of failing, and that ``record_id`` is
    read as given: an older version took other spellings of a UUID, which ``list`` names."""
    given = ri.check_stored_id(record_id)
    key = ri.stored_record_key(given)
    response = yield Call("get_item", {"TableName": table, "Key": key, "ConsistentRead": True})
    item = response.get("Item")
    if not item:
        # Not stored under that spelling: as get, which names the canonical one (a record
        # stored under it is found by it; one UUID is one record).
        k.check_record_id(given)
        return None
    stored = ri.decode_or_unreadable(item)
    if isinstance(stored, ri.VersionedRecord) and now_s is not None and ri.hidden(stored, now_s):
        return None
    return stored


def touch(
    table: str, record_id: str, *, now: datetime, ttl_by_phase: Mapping[str, int | None]
) -> Op[ri.VersionedRecord]:
    """The owner's heartbeat: refresh updatedAt (and the TTL its phase calls for, from
    ``ttl_by_phase``) in one conditional UpdateItem; two when the record is in a failed phase
    (the first write assumes a live phase, the usual heartbeat)."""
    now_ms = int(now.timestamp() * 1000)
    phase: str | None = None  # the phase the write assumes: first any live one
    for _ in range(MAX_RMW_ATTEMPTS):
        names = {
            "#u": k.RECORD_UPDATED_AT,
            "#gsk": k.INDEX_SORT_KEY,
            "#ttl": k.TTL_ATTRIBUTE,
            "#rev": k.REVISION,
            "#exp": k.CLAIM,
            "#ph": k.RECORD_PHASE,
            "#inc": k.INCARNATION,
        }
        values: dict[str, Any] = {
            ":u": S(to_iso(now)),
            ":ms": N(now_ms),
            ":one": N(1),
            ":newinc": S(new_incarnation()),
        }
        if phase is None:
            values |= {f":p{i}": S(p) for i, p in enumerate(LIVE_PHASES)}
            in_phase = f"#ph IN ({', '.join(f':p{i}' for i in range(len(LIVE_PHASES)))})"
            ttl = ttl_by_phase[LIVE_PHASES[0]]  # the live phases share one window
        else:
            values[":p"] = S(phase)
            in_phase = "#ph = :p"
            ttl = ttl_by_phase[phase]
        # A record written before incarnations existed gets one (it keeps it from then on).
        update = "SET #u = :u, #gsk = :ms, #rev = #rev + :one, #inc = if_not_exists(#inc, :newinc)"
        if ttl is None:
            update += " REMOVE #ttl"
        else:
            update += ", #ttl = :ttl"
            values[":ttl"] = N(ttl)
        try:
            response = yield Call(
                "update_item",
                {
                    "TableName": table,
                    "Key": ri.record_key(record_id),
                    "UpdateExpression": update,
                    # Only the record's state decides, never the owner's clock: a heartbeat
                    # succeeds whatever its timestamp, unless the record is gone or claimed.
                    "ConditionExpression": "attribute_exists(#rev) AND "
                    f"attribute_not_exists(#exp) AND {in_phase}",
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                    "ReturnValues": "ALL_NEW",
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                },
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            old = exc.response.get("Item")
            held = (old or {}).get(k.RECORD_PHASE, {}).get("S")
            if not old or k.CLAIM in old or k.REVISION not in old or held not in ttl_by_phase:
                raise _conflict(exc, record_id, "touch", AnyIncarnation.ANY) from exc
            phase = held  # again, with the TTL of the phase it holds now
            continue
        return ri.decode(response["Attributes"])
    raise ConflictError(f"touch {record_id}: still contended after {MAX_RMW_ATTEMPTS} tries")


def _started(record: ResourceActivityRecord, kind: str, at: str) -> ResourceActivityRecord:
    ops = [o for o in record.operations]
    for i, op in enumerate(ops):
        if op.kind == kind:
            ops[i] = ResourceOperation(kind=kind, count=op.count + 1)
            break
    else:
        ops.append(ResourceOperation(kind=kind, count=1))
    return record.model_copy(update={"operations": ops, "updated_at": at})


def _finished(
    record: ResourceActivityRecord, kind: str, outcome: str, error: str | None, at: str
) -> ResourceActivityRecord:
    ops = []
    for op in record.operations:
        if op.kind == kind:
            if op.count > 1:
                ops.append(ResourceOperation(kind=kind, count=op.count - 1))
        else:
            ops.append(op)
    result = ResourceOperationResult.model_validate(
        {"kind": kind, "outcome": outcome, "at": at, "error": error}
    )
    update: dict[str, Any] = {"operations": ops, "updated_at": at, "last_operation": result}
    if outcome == "failed":
        update["last_failure"] = result
    return ResourceActivityRecord.model_validate({**record.model_dump(), **update})


def record_operation(
    table: str,
    record_id: str,
    *,
    kind: str,
    finish: tuple[str, str | None] | None,
    now: datetime,
    ttl_by_phase: Mapping[str, int | None],
    shard_count: int,
) -> Op[ri.VersionedRecord]:
    """Read, change the operations, write back on the observed revision; retry on a race.

    The write back is conditional on the incarnation read too: a record deleted and allocated
    again under its id meanwhile is read again, never overwritten with the old one's fields.

    Like a heartbeat, judged by the record's state, never the writer's clock: a record past
    its TTL that DynamoDB has not removed yet (so nothing reported it expired) is still the
    owner's; a record a sweeper claimed, or one removed, refuses with ConflictError."""
    if not isinstance(kind, str) or not kind:
        raise InvalidInputError("kind", "must be a non-empty string")
    if finish is not None and finish[0] not in ("completed", "failed"):
        raise InvalidInputError("outcome", "must be 'completed' or 'failed'")
    at = to_iso(now)
    for attempt in range(MAX_RMW_ATTEMPTS):
        if attempt:
            yield Sleep(steps.backoff(min(attempt, 6)))
        current = yield from get(table, record_id, now_s=None)
        if current is None:
            raise ConflictError(f"record {record_id}: it does not exist")
        if current.expiring:
            raise ConflictError(f"record {record_id}: a sweeper is expiring it")
        if finish is None:
            changed = _started(current.record, kind, at)
        else:
            changed = _finished(current.record, kind, finish[0], finish[1], at)
        if changed.updated_at_ms < current.record.updated_at_ms:
            changed = changed.model_copy(update={"updated_at": current.record.updated_at})
        try:
            return (
                yield from put(
                    table,
                    changed,
                    expected_revision=current.revision,
                    expires_at=ttl_by_phase[changed.phase],
                    shard_count=shard_count,
                    # The record read, not one allocated again under its id since (whose
                    # revision may have reached the same number): the write is built on it.
                    expected_incarnation=current.incarnation,
                )
            )
        except ConflictError:
            continue
    raise ConflictError(f"record {record_id}: still contended after {MAX_RMW_ATTEMPTS} tries")


def delete(
    table: str,
    record_id: str,
    *,
    expected_revision: int | None,
    expected_incarnation: str | None = None,
) -> Op[bool]:
    """Delete; with ``expected_revision`` only that revision, with ``expected_incarnation``
    only that incarnation. True if something was deleted."""
    params: dict[str, Any] = {
        "TableName": table,
        "Key": ri.record_key(record_id),
        "ReturnValues": "ALL_OLD",
    }
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    conditions = []
    if expected_revision is not None:
        names["#rev"] = k.REVISION
        values[":rev"] = N(expected_revision)
        conditions.append("#rev = :rev")
    if expected_incarnation is not None:
        conditions.append(_incarnation_is(expected_incarnation, names, values))
    if conditions:
        params |= {
            "ConditionExpression": " AND ".join(conditions),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    response = yield from _conditional(
        "delete_item",
        params,
        record_id,
        "delete",
        AnyIncarnation.ANY if expected_incarnation is None else expected_incarnation,
    )
    return bool(response.get("Attributes"))


def _as_judged(judged: ri.VersionedRecord, names: dict[str, str], values: dict[str, Any]) -> str:
    """The condition that the stored record is still exactly ``judged``, as far as a
    sweeper's decision rests on it: the same incarnation and revision (every write but an
    observation bumps it), the same observation and the same claim owner (so that a record
    written before incarnations existed, deleted and allocated again by an older writer, is
    not taken for the one judged either)."""
    names |= {"#rev": k.REVISION, "#oat": k.OBSERVED_AT, "#by": k.CLAIM_OWNER}
    values[":rev"] = N(judged.revision)
    parts = ["#rev = :rev", _incarnation_is(judged.incarnation, names, values)]
    if judged.observed_rev is None or judged.observed_at_ms is None:
        parts.append("attribute_not_exists(#oat)")
    else:
        names["#orev"] = k.OBSERVED_REV
        parts.append("#orev = :orev AND #oat = :oat")
        values |= {":orev": N(judged.observed_rev), ":oat": N(judged.observed_at_ms)}
    if judged.claimed_by is None:
        parts.append("attribute_not_exists(#by)")
    else:
        parts.append("#by = :by")
        values[":by"] = S(judged.claimed_by)
    return " AND ".join(parts)


def _held(claimed: ri.VersionedRecord, names: dict[str, str], values: dict[str, Any]) -> str:
    """The condition that ``claimed`` (as this run's claim left it) still stands: the same
    claim owner, incarnation and revision (a takeover or a release bumps it)."""
    if claimed.claimed_by is None:
        raise ValueError(f"record {claimed.record.id}: not claimed")
    names |= {"#rev": k.REVISION, "#by": k.CLAIM_OWNER}
    values |= {":rev": N(claimed.revision), ":owner": S(claimed.claimed_by)}
    return "#by = :owner AND #rev = :rev AND " + _incarnation_is(claimed.incarnation, names, values)


def mark_expiring(
    table: str,
    judged: ri.VersionedRecord,
    reason: str,
    *,
    owner: str,
    now_ms: int,
    until_ms: int,
) -> Op[ri.VersionedRecord]:
    """Claim a record for expiry, if it is still exactly ``judged`` (:func:`_as_judged`: never
    another incarnation under its id, whatever its revision) and unclaimed or its claim's
    lease ended before ``now_ms``: from here its owner can no longer refresh it, so the event
    the sweeper publishes next is never contradicted. The lease runs until ``until_ms``."""
    names = {"#exp": k.CLAIM, "#until": k.CLAIM_UNTIL, "#crev": k.CLAIM_REV}
    values: dict[str, Any] = {
        ":reason": S(reason),
        ":one": N(1),
        ":owner": S(owner),
        ":now": N(now_ms),
        ":until": N(until_ms),
    }
    as_judged = _as_judged(judged, names, values)
    response = yield from _conditional(
        "update_item",
        {
            "TableName": table,
            "Key": ri.record_key(judged.record.id),
            # claimRev is set by the first claim only: a takeover keeps it, so every
            # publication of this expiry carries the same idempotency key.
            "UpdateExpression": "SET #exp = :reason, #by = :owner, #until = :until, "
            "#crev = if_not_exists(#crev, :rev), #rev = #rev + :one",
            "ConditionExpression": f"{as_judged} AND (attribute_not_exists(#exp) OR "
            "attribute_not_exists(#until) OR #until < :now)",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        },
        judged.record.id,
        "expire",
        judged.incarnation,
    )
    return ri.decode(response["Attributes"])


def release_claim(table: str, claimed: ri.VersionedRecord) -> Op[bool]:
    """Give back the claim ``claimed`` holds (its event could not be published): the owner may
    refresh the record again. False if that claim no longer stands (:func:`_held`)."""
    names = {"#exp": k.CLAIM, "#until": k.CLAIM_UNTIL, "#crev": k.CLAIM_REV}
    values: dict[str, Any] = {":one": N(1)}
    condition = _held(claimed, names, values)
    try:
        yield from _conditional(
            "update_item",
            {
                "TableName": table,
                "Key": ri.record_key(claimed.record.id),
                "UpdateExpression": "REMOVE #exp, #by, #until, #crev SET #rev = #rev + :one",
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            },
            claimed.record.id,
            "release",
        )
    except ConflictError:
        return False
    return True


_CURSOR_KIND = "dynamodb-resources"


def _is_record_key(pk: str, sk: str) -> bool:
    """Whether (pk, sk) is the key of a resource record (what its list indexes hold)."""
    return sk == k.RESOURCE_SK and _is_record_pk(pk)


def _is_record_pk(pk: str) -> bool:
    """Whether ``pk`` is the partition key of a resource record."""
    return pk.startswith(k.RESOURCE_PREFIX) and pk != k.RESOURCE_PREFIX


def list_records(
    table: str,
    *,
    store: str,
    phase: str | None,
    provider: str | None,
    limit: int,
    cursor: str | None,
    shard_count: int,
    now_s: int,
) -> Op[Page]:
    """Records newest updatedAt first, by phase or provider (or all phases), one page; its
    cursor is bound to ``store`` (:func:`sandbox_ledger.deployment.store_identity`)."""
    if not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidInputError("limit", "must be between 1 and 1000")
    if phase is not None and phase not in _PHASES:
        raise InvalidInputError("phase", f"must be one of {', '.join(_PHASES)}")
    if provider is not None and (not isinstance(provider, str) or not provider):
        raise InvalidInputError("provider", "must be a non-empty string")
    if provider is not None and phase is None:
        index = k.RESOURCES_BY_PROVIDER
        partitions = [k.resource_provider_pk(provider, s) for s in range(shard_count)]
    else:
        index = k.RESOURCES_BY_PHASE
        phases = [phase] if phase else list(_PHASES)
        partitions = [k.resource_phase_pk(p, s) for p in phases for s in range(shard_count)]
    listing = [store, phase, provider]
    resume = None
    frontier: Frontier | None = None
    if cursor is not None:
        state = decode_cursor(_CURSOR_KIND, cursor, listing)
        if set(state) not in ({"p"}, {"p", "f"}):  # no "f": a cursor of an earlier version
            raise bad_position()
        resume = check_resume(state["p"], index, partitions, _is_record_key)
        frontier = Frontier.of(state["f"], _is_record_pk) if "f" in state else None
    keys, state = yield from newest_first(
        table,
        index,
        partitions,
        before=None,
        want=limit,
        resume=resume,
        passed=None if frontier is None else frontier.passed(index),
    )
    # An index shows a record once, but a page's queries are served one after another: a
    # record that moved to another partition in between can come from two of them.
    unique = {i[k.PARTITION_KEY]["S"]: i for i in keys}
    items = yield from batch_get(
        table,
        [{k.PARTITION_KEY: i[k.PARTITION_KEY], k.SORT_KEY: i[k.SORT_KEY]} for i in unique.values()],
    )
    decoded = [ri.decode_or_unreadable(item) for item in items if ri.is_record(item)]
    unreadable = [r for r in decoded if isinstance(r, ri.Unreadable)]
    records = [r for r in decoded if isinstance(r, ri.VersionedRecord) and not ri.hidden(r, now_s)]
    if provider is not None:
        records = [r for r in records if r.record.sandbox_provider == provider]
    if phase is not None:
        records = [r for r in records if r.record.phase == phase]
    records.sort(key=lambda r: -r.record.updated_at_ms)
    more = any(v != "done" for v in state.values())
    reached = Frontier.after(keys, index, frontier)
    walk = {"p": state} if reached is None else {"p": state, "f": reached.state()}
    next_cursor = encode_cursor(_CURSOR_KIND, walk, listing) if more else None
    return Page(records, next_cursor, unreadable)


def candidate_keys(
    table: str,
    partition: str,
    bound_ms: int,
    start: dict[str, Any] | None,
    page_size: int,
    *,
    after: bool = False,
) -> Op[tuple[list[str], dict[str, Any] | None]]:
    """One page of record ids in ``partition`` (a phase shard) last updated before
    ``bound_ms`` (oldest first), or with ``after`` later than it (newest first), and where
    the next page starts."""
    ri.check_page_size(page_size)
    params: dict[str, Any] = {
        "TableName": table,
        "IndexName": k.RESOURCES_BY_PHASE.name,
        "KeyConditionExpression": f"#ipk = :p AND #gsk {'>' if after else '<'} :bound",
        "ExpressionAttributeNames": {
            "#ipk": k.RESOURCES_BY_PHASE.partition_key,
            "#gsk": k.INDEX_SORT_KEY,
        },
        "ExpressionAttributeValues": {":p": S(partition), ":bound": N(bound_ms)},
        "ScanIndexForward": not after,
        "Limit": page_size,
    }
    if start:
        params["ExclusiveStartKey"] = start
    page = yield Call("query", params)
    ids = [ri.record_id_of(item) for item in page.get("Items", [])]
    return ids, page.get("LastEvaluatedKey")


def observe(table: str, seen: ri.VersionedRecord, at_ms: int) -> Op[bool]:
    """Record that a sweeper saw ``seen``'s revision at ``at_ms`` (its clock), if the record is
    still that incarnation at that revision, unclaimed, and that revision is not observed
    already (an earlier observation of it is kept: the window runs from the first). The
    revision is not bumped, so no owner write ever conflicts with an observation. False if the
    condition failed."""
    record_id, revision = seen.record.id, seen.revision
    names = {
        "#rev": k.REVISION,
        "#exp": k.CLAIM,
        "#orev": k.OBSERVED_REV,
        "#oat": k.OBSERVED_AT,
    }
    values: dict[str, Any] = {":rev": N(revision), ":at": N(at_ms)}
    same = _incarnation_is(seen.incarnation, names, values)
    try:
        yield from _conditional(
            "update_item",
            {
                "TableName": table,
                "Key": ri.record_key(record_id),
                "UpdateExpression": "SET #orev = :rev, #oat = :at",
                "ConditionExpression": f"#rev = :rev AND {same} AND attribute_not_exists(#exp) "
                "AND (attribute_not_exists(#orev) OR #orev <> :rev)",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            },
            record_id,
            "observe",
        )
    except ConflictError:
        return False
    return True


def scan_records(
    table: str, starts: ScanStarts, *, total_segments: int, page_size: int, now_s: int
) -> Op[tuple[list[ri.VersionedRecord | ri.Unreadable], ScanStarts]]:
    """One page of every segment in ``starts`` (in parallel): each record item in it, decoded
    or reported unreadable, whatever its phase or index attributes, and where each segment
    goes on. Records past their TTL are left out (DynamoDB deletes them days late).

    A Scan reads the whole table (ledger entries too, filtered out after they are read), so
    its cost grows with the table: it serves exports, never a listing. An export cannot go
    through the phase index: a record whose phase this version does not know (a newer
    writer's), or which lacks its index attributes, is in no partition this version queries.
    """
    base = {
        "TableName": table,
        "FilterExpression": "begins_with(#pk, :r) AND #sk = :sk",
        "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY},
        "ExpressionAttributeValues": {":r": S(k.RESOURCE_PREFIX), ":sk": S(k.RESOURCE_SK)},
        "TotalSegments": total_segments,
        "Limit": page_size,
    }
    items, after = yield from scan_round(base, starts)
    found: list[ri.VersionedRecord | ri.Unreadable] = []
    for item in items:
        stored = ri.decode_or_unreadable(item)
        if isinstance(stored, ri.Unreadable) or not ri.hidden(stored, now_s):
            found.append(stored)
    return found, after


def put_stored(table: str, item: Mapping[str, Any]) -> Op[None]:
    """Write a resource record item exactly as another table stored it, where no record is.

    Raises:
        InvalidInputError: naming ``item``: its key is not a resource record's.
        ConflictError: a record is stored under that key.
    """
    pk, sk = item.get(k.PARTITION_KEY, {}).get("S"), item.get(k.SORT_KEY, {}).get("S")
    if not isinstance(pk, str) or not pk.startswith(k.RESOURCE_PREFIX) or sk != k.RESOURCE_SK:
        raise InvalidInputError("item", f"not a resource record's key ({pk!r}, {sk!r})")
    ri.check_stored_id(k.resource_id(pk))
    yield from _conditional(
        "put_item",
        {
            "TableName": table,
            "Item": dict(item),
            "ConditionExpression": "attribute_not_exists(#pk)",
            "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        },
        k.resource_id(pk),
        "put as stored",
    )


def batch_get_records(table: str, ids: list[str]) -> Op[list[ri.VersionedRecord | ri.Unreadable]]:
    """The stored records among ``ids`` (absent ones left out; undecodable ones reported)."""
    items = yield from batch_get(table, [ri.stored_record_key(i) for i in ids])
    return [ri.decode_or_unreadable(item) for item in items if ri.is_record(item)]


DELETES_AT_ONCE = 16
"""Conditional deletes sent at once (one DeleteItem each: a BatchWriteItem cannot carry a
condition)."""


def delete_claimed(table: str, claims: list[ri.VersionedRecord]) -> Op[list[str]]:
    """Delete each record whose claim in ``claims`` (as the claim left it) still stands: one
    conditional DeleteItem each (:func:`_held`), so a record whose claim another run took
    over, or one deleted and allocated again under its id, is never deleted. Returns the ids
    deleted; the others' claims were lost.

    Raises:
        StorageError: a delete failed otherwise (the claims left stay for a later run)."""
    deleted: list[str] = []
    for start in range(0, len(claims), DELETES_AT_ONCE):
        chunk = claims[start : start + DELETES_AT_ONCE]
        calls = []
        for claimed in chunk:
            names: dict[str, str] = {}
            values: dict[str, Any] = {}
            condition = _held(claimed, names, values)
            calls.append(
                Call(
                    "delete_item",
                    {
                        "TableName": table,
                        "Key": ri.record_key(claimed.record.id),
                        "ConditionExpression": condition,
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    },
                )
            )
        results = yield Parallel(tuple(calls), settle=True)
        failure: BaseException | None = None
        for claimed, result in zip(chunk, results, strict=True):
            if not isinstance(result, BaseException):
                deleted.append(claimed.record.id)
            elif error_code(result) != "ConditionalCheckFailedException":
                failure = failure or result
        if failure is not None:
            raise failure
    return deleted
