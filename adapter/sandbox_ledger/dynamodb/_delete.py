"""``delete_sandbox`` on DynamoDB, as operations for :mod:`sandbox_ledger.sdk.steps`, shared by
both twins: every item of a session goes, whatever appends race it, and what they store
afterwards is a new session, whole and sequenced.

A session is many items (its summary, entry heads and parts, checkpoint markers, import
claims, sequence marks) and a delete is not atomic: it reads the partition page by page and
deletes what it read. Two things keep that safe against racing appends:

- **A lease on the summary** (``deleting``) holds off appends that would change the summary
  (created, closed, exec.complete): their transaction's condition refuses them until the
  delete has removed the summary, so the summary always counts exactly the entries stored.
- **A seal.** Before it reads anything, the delete puts the session's next sequence mark
  itself: an item at ``Q#<n>`` with an incarnation of its own and no entry (see
  :mod:`._sequence`). Marks are dense and in commit order, so every entry committed before
  the seal has a mark below it, and every entry committed after it a mark above it, in the
  seal's incarnation (an append that guessed the old incarnation fails its condition and
  reads the seal). The delete then takes every item except those of entries marked above the
  seal (their heads, parts, checkpoint markers and import claims, and the marks), and marks
  the seal spent last. A follower of the deleted session meets the seal or a mark of another
  incarnation and ends; the entries stored while the delete ran stay whole, each with its
  mark, and a follower of the new session hands out every one of them.
- **No key is reused behind a delete.** The seal stays (spent), and so does mark 0 (its
  entry's reference removed, in an incarnation of its own): the next session numbers its
  marks after the seal, and mark 0, the one mark put without a check of the one before, can
  never be put again, nor can a mark after it whose check of the mark before was made true
  before the delete (see :mod:`._sequence`). What a delete deletes without a condition
  (marks below its seal, heads, parts and markers, whose keys hold a random order id) is
  then never another session's, however long the delete stalled after its read; claims,
  whose keys are their lines' content, are deleted on the order id they were read with. A
  deleted session leaves these two small items (one when the seal was its mark 0); with a
  ledger retention they expire with it.

The partition is read whole before anything is deleted: a mark sorts after every item of its
entry (``Q#`` after ``E#``, ``I#``, ``K#``), and an entry's items commit in one transaction with
its mark, so a head read on one page has its mark on a later one, and an entry whose items
were not read at all committed after the read passed them (it is left alone either way).
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb import _ops
from sandbox_ledger.dynamodb import _sequence as _seq
from sandbox_ledger.errors import THROTTLE_CODES, StorageError
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.sdk.attributes import N, S
from sandbox_ledger.sdk.batching import BATCH_WRITE_MAX, batch_get, batch_write
from sandbox_ledger.sdk.paging import query_all
from sandbox_ledger.sdk.steps import (
    MAX_ATTEMPTS,
    MAX_CONFLICTS,
    Call,
    Op,
    Parallel,
    Sleep,
    backoff,
    contended,
    error_code,
    log,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ORPHAN_PART_GRACE_MS", "SEAL_TTL_MARGIN_S", "delete_session"]

# How long delete_sandbox leaves the parts of an entry whose head is not stored yet (an
# append between its parts and its head: its head lands after the delete, with its parts).
ORPHAN_PART_GRACE_MS = 15 * 60_000


def _young(head_sk: str, now_ns: int) -> bool:
    """True if the entry's order id (its writer's clock when the append began) is recent."""
    written = it.order_time_ns(it.append_order(head_sk))
    return written is not None and now_ns - written < ORPHAN_PART_GRACE_MS * 1_000_000


class _DeleteLease:
    """A delete's hold on a session's summary (see :func:`delete_session`): taken once with a
    token of its own, renewed when half of it has passed while the summary still carries that
    token."""

    def __init__(self, table: str, summary_key: dict[str, Any]) -> None:
        self.table, self.key = table, summary_key
        self.token = secrets.token_hex(8)
        self.until = 0
        self.held = True
        self.began = False
        """Whether the session had begun when the lease was taken (its summary stored)."""

    def take(self) -> Op[None]:
        old = yield from self._set("SET #dl = :until, #dt = :token", ReturnValues="ALL_OLD")
        self.began = A.ITEM_TYPE in old

    def renew_if_due(self) -> Op[None]:
        if not self.held or _ops._now_ms() < self.until - _ops.DELETE_LEASE_MS // 2:
            return
        try:
            yield from self._set("SET #dl = :until", ConditionExpression="#dt = :token")
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            self.held = False  # another delete_sandbox took over: it holds (and renews) it

    def take_over_if_dead(self) -> Op[bool]:
        """After this delete lost its lease before its seal: take it again if the delete that
        took it died (its lease over, its token still on the summary), and say so. False when
        another delete is running (its lease is live) or has finished (the summary is gone,
        or was begun again without a lease): that one deletes, or deleted, the session, and
        the session may have begun again after it."""
        found = yield Call(
            "get_item",
            {
                "TableName": self.table,
                "Key": self.key,
                "ConsistentRead": True,
                "ProjectionExpression": "#dl, #dt",
                "ExpressionAttributeNames": {"#dl": A.DELETING, "#dt": A.DELETING_TOKEN},
            },
        )
        item = found.get("Item", {})
        other = item.get(A.DELETING_TOKEN)
        if other is None or _ops._held_by_delete(item):
            return False
        now = _ops._now_ms()
        try:
            yield Call(
                "update_item",
                {
                    "TableName": self.table,
                    "Key": self.key,
                    "UpdateExpression": "SET #dl = :until, #dt = :token",
                    "ConditionExpression": "#dt = :other AND #dl < :now",
                    "ExpressionAttributeNames": {"#dl": A.DELETING, "#dt": A.DELETING_TOKEN},
                    "ExpressionAttributeValues": {
                        ":until": N(now + _ops.DELETE_LEASE_MS),
                        ":token": S(self.token),
                        ":other": other,
                        ":now": N(now),
                    },
                },
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return False  # another delete took it meanwhile: it runs
        self.until, self.held = now + _ops.DELETE_LEASE_MS, True
        return True

    def _set(self, update: str, **condition: str) -> Op[dict[str, Any]]:
        """Set the lease; the attributes the call returned (``ReturnValues``)."""
        until = _ops._now_ms() + _ops.DELETE_LEASE_MS
        answer = yield Call(
            "update_item",
            {
                "TableName": self.table,
                "Key": self.key,
                "UpdateExpression": update,
                **condition,
                "ExpressionAttributeNames": {"#dl": A.DELETING, "#dt": A.DELETING_TOKEN},
                "ExpressionAttributeValues": {":until": N(until), ":token": S(self.token)},
            },
        )
        self.until = until
        returned: dict[str, Any] = answer.get("Attributes") or {}
        return returned


SEAL_TTL_MARGIN_S = 86_400
"""With a ledger retention, a seal expires no sooner than this after it is put: it must outlive
the delete that put it (a seal gone while its delete runs frees its number below the entries
the delete keeps), however long the delete."""


def _seal_ttl(page: dict[str, Any], retention: int | None) -> int | None:
    """The seal's TTL, from the page of :func:`._sequence.last_query`: none when the session's
    last mark has none (no retention); else that mark's, raised to now +
    :data:`SEAL_TTL_MARGIN_S`. A seal a dead delete left then expires with the session, as
    every item of it does (before, it outlived the retention), and no mark expires before it.
    A session without marks (never written, or every mark removed by TTL) is sealed at mark 0,
    and the seal stays: with a ``retention`` (seconds) it expires now +
    :data:`SEAL_TTL_MARGIN_S`, else every delete of such a session left an item for good."""
    last = page.get("Items", [])
    if not last:
        return None if retention is None else int(time.time()) + SEAL_TTL_MARGIN_S
    if k.TTL_ATTRIBUTE not in last[0]:
        return None
    return max(int(last[0][k.TTL_ATTRIBUTE]["N"]), int(time.time()) + SEAL_TTL_MARGIN_S)


_FAILED = "ConditionalCheckFailed"
_SEAL_RETRIED = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)


def _seal(
    table: str, pk: str, lease: _DeleteLease, retention: int | None
) -> Op[tuple[int, int | None] | None]:
    """Put the session's next sequence mark as this delete's seal, in one transaction with a
    check that the summary still holds this delete's lease; the seal's number and TTL. A
    number another writer took first is read again and the next one tried; a seal already
    stored with the lease's token (a resend whose first answer was lost) is this delete's.

    None, sealing nothing, once the lease is no longer this delete's: another delete took it
    over before this seal (it deletes the session), and may have finished, the session begun
    again after it. A seal put then, after the new session's first marks, deleted the new
    session's entries below it, while their summary, which no longer carried this delete's
    lease, stayed (counting entries gone), and appends that change it were never held off.
    A delete that took the lease and died is taken over
    (:meth:`_DeleteLease.take_over_if_dead`). A lease taken over after the seal is no
    matter: the other delete's seal is after this one, and what this one deletes is of the
    session that delete deletes too."""
    attempt = 0
    while True:
        page = yield Call("query", _seq.last_query(table, pk))
        number = _seq.next_mark(page).number
        ttl = _seal_ttl(page, retention)
        # Renewed when due, right before the seal: a delete that stalled after taking its
        # lease sealed with the lease over, and a summary append stored after the seal (the
        # next session's) was not held off; the delete then deleted the summary it updated.
        yield from lease.renew_if_due()
        actions = [
            {
                "Put": {
                    "TableName": table,
                    "Item": _seq.seal_item(pk, number, lease.token, ttl),
                    "ConditionExpression": "attribute_not_exists(#pk)",
                    "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY},
                }
            },
            {
                "ConditionCheck": {
                    "TableName": table,
                    "Key": lease.key,
                    "ConditionExpression": "#dt = :token",
                    "ExpressionAttributeNames": {"#dt": A.DELETING_TOKEN},
                    "ExpressionAttributeValues": {":token": S(lease.token)},
                }
            },
        ]
        try:
            yield Call("transact_write_items", {"TransactItems": actions})
            return number, ttl
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            failure = exc
        if reasons[:1] == [_FAILED]:
            key = {k.PARTITION_KEY: S(pk), k.SORT_KEY: S(k.sequence_sk(number))}
            found = yield Call("get_item", {"TableName": table, "Key": key, "ConsistentRead": True})
            item = found.get("Item", {})
            if _seq.is_seal(item, lease.token):  # it landed (while the lease was held)
                stored = item.get(k.TTL_ATTRIBUTE)
                return number, None if stored is None else int(stored["N"])
        if reasons[1:2] == [_FAILED]:
            if (yield from lease.take_over_if_dead()):
                continue  # the delete that took it over died: this one goes on
            log.info("delete %s: another delete took the session over", pk)
            return None
        if reasons[:1] == [_FAILED]:
            continue  # another writer took the number first: the next one
        attempt += 1
        budget = MAX_CONFLICTS if contended(reasons) else MAX_ATTEMPTS
        if not _SEAL_RETRIED.intersection(reasons) or attempt >= budget:
            raise failure
        yield Sleep(backoff(attempt))


def _spend_seal(table: str, pk: str, number: int, token: str) -> Op[None]:
    """Mark this delete's seal spent: the session before it is gone. The seal stays (see
    :mod:`._sequence`: a mark number is never taken twice), only while it is this delete's
    (a later delete deletes it with the marks below its own seal)."""
    yield from _update_if(
        table,
        pk,
        number,
        "SET #spent = :one",
        "#inc = :token AND attribute_not_exists(#ref)",
        {"#inc": A.INCARNATION, "#ref": A.REF, "#spent": A.SPENT},
        {":token": S(token), ":one": N(1)},
    )


def _spend_origin(table: str, pk: str, origin: dict[str, Any], ttl: int | None) -> Op[None]:
    """Keep mark 0 (``origin``, as read) as a spent mark without an entry instead of deleting
    it: mark 0 is put with no check of a mark before it, so a writer that read the session
    empty before this delete (a guess it kept) would take it again below the next session's
    marks. An entry's mark loses its reference and part count. Only while it is still as
    read (its reference, or, a seal's or a spent mark's, its incarnation): a stalled delete
    of an older read changes nothing.

    It takes an incarnation of its own, no one's, whatever it was (an entry's mark, a seal
    at 0 of a delete of a session without marks, a mark 0 spent before): mark 1 is put under
    the check that mark 0 holds the writer's incarnation, and a writer that kept its guess of
    mark 1 (another writer took it, and this delete deleted it) would otherwise pass that
    check and put mark 1 again, below the seal, and a follower positioned at mark 0 would
    find its mark still there.

    It takes the seal's TTL (``ttl``; none when the seal has none), at least a day ahead:
    its entry's, often long past (an entry of an old ``ts``), let TTL remove it at once, and
    a guess of mark 0 kept from before the delete then put mark 0 again, below the seal."""
    names = {
        "#ref": A.REF,
        "#np": A.PARTS,
        "#eex": A.ENTRY_EXPIRES,
        "#spent": A.SPENT,
        "#inc": A.INCARNATION,
        "#ttl": k.TTL_ATTRIBUTE,
    }
    values = {":one": N(1), ":inc": S(_seq.new_incarnation())}
    if A.REF in origin:
        condition = "#ref = :ref"
        values[":ref"] = origin[A.REF]
    else:
        condition = "#inc = :was AND attribute_not_exists(#ref)"
        values[":was"] = origin[A.INCARNATION]
    if ttl is None:
        update = "SET #spent = :one, #inc = :inc REMOVE #ref, #np, #eex, #ttl"
    else:
        update = "SET #spent = :one, #inc = :inc, #ttl = :ttl REMOVE #ref, #np, #eex"
        values[":ttl"] = N(ttl)
    yield from _update_if(table, pk, 0, update, condition, names, values)


def _update_if(
    table: str,
    pk: str,
    number: int,
    update: str,
    condition: str,
    names: dict[str, str],
    values: dict[str, Any],
) -> Op[None]:
    """UpdateItem of mark ``number`` under ``condition``; nothing when it does not hold."""
    try:
        yield Call(
            "update_item",
            {
                "TableName": table,
                "Key": {k.PARTITION_KEY: S(pk), k.SORT_KEY: S(k.sequence_sk(number))},
                "UpdateExpression": update,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            },
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise


_CLAIM_RETRIED = THROTTLE_CODES | {"TransactionConflictException", "InternalServerError"}


def _delete_claims(table: str, claims: list[dict[str, Any]]) -> Op[None]:
    """Delete import claims, each only while it holds the order id it was read with: a claim's
    key is its line's content (digest and occurrence), so once this delete is overtaken (another
    delete finished, and the same line was imported again) the key may be the next session's
    claim, which a BatchWriteItem (unconditional) would take and a later import would then
    store that line twice. One conditional DeleteItem per claim (a write unit each, as in a
    batch), :data:`BATCH_WRITE_MAX` at a time; one refused by its condition is another's."""
    queue = list(claims)
    attempt = 0
    while queue:
        chunk, queue = queue[:BATCH_WRITE_MAX], queue[BATCH_WRITE_MAX:]
        calls = tuple(Call("delete_item", {"TableName": table, **claim}) for claim in chunk)
        answers = yield Parallel(calls, settle=True)
        again = []
        for claim, answer in zip(chunk, answers, strict=True):
            if not isinstance(answer, BaseException):
                continue
            code = error_code(answer)
            if code == "ConditionalCheckFailedException":
                continue
            if code not in _CLAIM_RETRIED or attempt >= MAX_CONFLICTS:
                raise answer
            again.append(claim)
        if again:
            attempt += 1
            queue = again + queue
            yield Sleep(backoff(attempt))


def _claim_delete(item: dict[str, Any]) -> dict[str, Any]:
    """The DeleteItem parameters (less the table) of the claim ``item`` as read."""
    key = {k.PARTITION_KEY: item[k.PARTITION_KEY], k.SORT_KEY: item[k.SORT_KEY]}
    names = {"#ord": A.CLAIM_ORDER}
    if A.CLAIM_ORDER not in item:
        return {
            "Key": key,
            "ConditionExpression": "attribute_not_exists(#ord)",
            "ExpressionAttributeNames": names,
        }
    return {
        "Key": key,
        "ConditionExpression": "#ord = :ord",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": {":ord": item[A.CLAIM_ORDER]},
    }


def _owner(item: dict[str, Any]) -> str | None:
    """The order id of the entry an item belongs to: a head's, a part's (its head's), a
    checkpoint marker's (``K#<ts:16>#<order id>``) or an import claim's (``ord``)."""
    sk: str = item[k.SORT_KEY]["S"]
    if sk.startswith(k.EVENT_PREFIX):
        return it.append_order(k.part_head(sk) or sk)
    if sk.startswith(k.CHECKPOINT_PREFIX):
        return sk[len(k.CHECKPOINT_PREFIX) + 17 :]
    if sk.startswith(k.CLAIM_PREFIX) and A.CLAIM_ORDER in item:
        return str(item[A.CLAIM_ORDER]["S"])
    return None


class _Plan:
    """What a delete takes of the partition it read: ``keys`` (heads, parts, markers) in
    batches, ``claims`` each on its condition, mark 0 kept spent (``origin``: the item as
    read) if it is below the seal, then the other ``marks`` below the seal in batches."""

    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = []
        self.claims: list[dict[str, Any]] = []
        self.origin: dict[str, Any] | None = None
        self.marks: list[dict[str, Any]] = []


def _doomed(items: list[dict[str, Any]], seal: int, now_ns: int) -> _Plan:
    """What the delete takes of ``items`` (the partition as read after the seal): every item
    but the summary, the seal (and marks above it), the items of entries marked above the
    seal, and mark 0 (spent instead, see :func:`_spend_origin`); parts whose head is not
    stored are left while young (an append between its parts and its head, which lands
    after the delete and needs them)."""
    kept: set[str] = set()  # order ids of the entries stored after the seal
    heads: set[str] = set()
    for item in items:
        sk = item[k.SORT_KEY]["S"]
        number = k.sequence_number(sk)
        if number is not None and number > seal and A.REF in item:
            kept.add(it.append_order(item[A.REF]["S"]))
        elif sk.startswith(k.EVENT_PREFIX) and k.part_head(sk) is None:
            heads.add(sk)
    plan = _Plan()
    for item in items:
        sk = item[k.SORT_KEY]["S"]
        number = k.sequence_number(sk)
        if sk == k.SUMMARY_SK or (number is not None and number >= seal):
            continue
        if _owner(item) in kept:
            continue
        head = k.part_head(sk) if sk.startswith(k.EVENT_PREFIX) else None
        if head is not None and head not in heads and _young(head, now_ns):
            continue
        if number == 0:
            if A.REF in item or A.INCARNATION in item:
                plan.origin = item
        elif sk.startswith(k.CLAIM_PREFIX):
            plan.claims.append(_claim_delete(item))
        else:
            key = {k.PARTITION_KEY: item[k.PARTITION_KEY], k.SORT_KEY: item[k.SORT_KEY]}
            (plan.keys if number is None else plan.marks).append(key)
    return plan


def _delete_keys(table: str, lease: _DeleteLease, keys: list[dict[str, Any]]) -> Op[None]:
    """Delete ``keys`` in batches of :data:`BATCH_WRITE_MAX`, in order, the lease renewed
    before each batch when due."""
    requests = [{"DeleteRequest": {"Key": key}} for key in keys]
    for at in range(0, len(requests), BATCH_WRITE_MAX):
        yield from lease.renew_if_due()
        yield from batch_write(table, requests[at : at + BATCH_WRITE_MAX])


def delete_session(
    table: str,
    pk: str,
    retention: int | None = None,
    shards: Callable[[], Op[int]] | None = None,
) -> Op[None]:
    """Delete every item of a session so that its summary always agrees with its entries
    and an append racing the delete is either deleted or stored whole in a new session.

    1. Mark the summary ``deleting`` (a lease until now + ``DELETE_LEASE_MS``): from then
       on, appends that would change the summary (created, closed, exec.complete) are refused
       by their transaction's condition and retry after a backoff.
    2. Seal the session's sequence (see the module's notes): entries stored from then on
       belong to the new session. The seal is put only while this delete holds the lease
       (see :func:`_seal`); otherwise another delete took the session over, and this one
       returns.
    3. Read the partition (consistent Query, keys and what ties an item to its entry), then
       delete every item but the new session's, the summary and the seal: the entries'
       items (claims one by one on their condition, :func:`_delete_claims`), then mark 0
       is kept, spent (:func:`_spend_origin`), then the other marks below the seal.
    4. Mark the seal spent (if it is still this delete's: see :func:`_spend_seal`), then
       delete the summary if it still carries this delete's mark.

    The lease is renewed right before the seal and while steps 3 runs (before each page and
    each batch of 25 deletes, once half of it has passed), so a delete longer than the lease
    (a session of many thousands of entries), or one that stalled, still holds off the
    appends it must; a delete that dies stops renewing, and its lease ends on its own (the
    seal it left is taken by the next delete).

    Appends that never touch the summary (exec.started, exec.failed, checkpoints) are not
    held off: one that commits after the seal survives, whole and with its mark.

    ``retention`` (seconds; the client's ledger retention) gives the seal of a session
    without marks a TTL (see :func:`_seal_ttl`).
    """
    summary_key = it.summary_key(pk)
    lease = _DeleteLease(table, summary_key)
    yield from lease.take()
    sealed = yield from _seal(table, pk, lease, retention)
    if sealed is None:
        return  # another delete took the session over before the seal: it deletes it
    seal, seal_ttl = sealed
    now_ns = time.time_ns()
    params: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "#pk = :pk",
        "ExpressionAttributeNames": {
            "#pk": k.PARTITION_KEY,
            "#sk": k.SORT_KEY,
            "#ref": A.REF,
            "#ord": A.CLAIM_ORDER,
            "#inc": A.INCARNATION,
        },
        "ExpressionAttributeValues": {":pk": S(pk)},
        "ProjectionExpression": "#pk, #sk, #ref, #ord, #inc",
        "ConsistentRead": True,
    }
    items: list[dict[str, Any]] = []
    start: dict[str, Any] | None = None
    while True:
        yield from lease.renew_if_due()
        page = yield Call("query", {**params, "ExclusiveStartKey": start} if start else params)
        items += page.get("Items", [])
        start = page.get("LastEvaluatedKey")
        if not start:
            break
    plan = _doomed(items, seal, now_ns)
    yield from _delete_keys(table, lease, plan.keys)
    for at in range(0, len(plan.claims), BATCH_WRITE_MAX):
        yield from lease.renew_if_due()
        yield from _delete_claims(table, plan.claims[at : at + BATCH_WRITE_MAX])
    if plan.origin is not None:
        # After the entries (a delete that dies before leaves mark 0 pointing at its deleted
        # entry, and a follower meeting it ends: never an entry stored whole without its
        # mark, which a follower would pass), before the other marks (mark 1 is free only
        # once mark 0 has left the session's incarnation: see _spend_origin).
        yield from _spend_origin(table, pk, plan.origin, seal_ttl)
    yield from _delete_keys(table, lease, plan.marks)
    yield from _spend_seal(table, pk, seal, lease.token)
    yield from _drop_summary(table, pk, lease.token, seal, shards, began=lease.began)


def _drop_summary(
    table: str,
    pk: str,
    token: str,
    seal: int,
    shards: Callable[[], Op[int]] | None,
    *,
    began: bool,
) -> Op[None]:
    """Delete the session's summary, the last step: only while it carries this delete's
    token (another delete took over: it removes it) and no entry marked after the seal
    changed it (``sq``, :func:`._items.summary_sequenced`).

    Such an entry is the next session's: a ``sandbox.created``, ``sandbox.closed`` or
    ``exec.complete`` the lease no longer held off (this delete stalled inside one call for
    longer than the lease) folded itself into the deleted session's summary. Deleted, the
    next session was left without one; kept, it would count the deleted session. So the
    summary is built again from the entries marked after the seal, as their appends would
    have built it on no summary, and put in its place (on the same two conditions, and
    ``sq`` and ``lq`` unchanged: an append meanwhile is read in on the next try). A ``sq``
    at or past the seal that no entry after it accounts for is of marks TTL removed (the
    sequence begun again at 0 while the summary stayed): the summary is the deleted
    session's, and removed on the same conditions. Where the deleted
    session had begun (``began``: its summary was stored when the lease was taken), the
    summary put carries the delete's token (``rb``): its stream record is the deleted
    session's ``session.deleted``, then the next session's created and closed again
    (:mod:`._changes`), the feed's last word on the session being what is stored."""
    summary_key = it.summary_key(pk)
    for _ in range(MAX_ATTEMPTS):
        try:
            yield Call(
                "delete_item",
                {
                    "TableName": table,
                    "Key": summary_key,
                    "ConditionExpression": (
                        "#dt = :token AND (attribute_not_exists(#sq) OR #sq < :seal)"
                    ),
                    "ExpressionAttributeNames": {
                        "#dt": A.DELETING_TOKEN,
                        "#sq": A.SUMMARY_SEQUENCE,
                    },
                    "ExpressionAttributeValues": {":token": S(token), ":seal": N(seal)},
                },
            )
            return
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
        found = yield Call(
            "get_item", {"TableName": table, "Key": summary_key, "ConsistentRead": True}
        )
        stored = found.get("Item")
        if stored is None or stored.get(A.DELETING_TOKEN, {}).get("S") != token:
            return  # gone, or another delete_sandbox took over: it removes the summary
        if A.SUMMARY_SEQUENCE not in stored or int(stored[A.SUMMARY_SEQUENCE]["N"]) < seal:
            continue  # changed between the two reads: try again
        if shards is None:
            raise ValueError("delete_session: the shard count is needed to rebuild a summary")
        shard_count = yield from shards()
        seen = stored[A.SUMMARY_SEQUENCE]
        item = yield from _summary_after(table, pk, stored, seal, int(seen["N"]), shard_count)
        # Unchanged since the read: its sq, and lq (sq alone repeats across incarnations).
        names = {"#dt": A.DELETING_TOKEN, "#sq": A.SUMMARY_SEQUENCE, "#lq": A.LIFECYCLE_SEQUENCE}
        values = {":token": S(token), ":seen": seen}
        same = "#dt = :token AND #sq = :seen AND attribute_not_exists(#lq)"
        if A.LIFECYCLE_SEQUENCE in stored:
            values[":lq"] = stored[A.LIFECYCLE_SEQUENCE]
            same = "#dt = :token AND #sq = :seen AND #lq = :lq"
        try:
            if item is None:
                # Its sq is of marks TTL removed (the session's marks began again at 0 and
                # none after the seal changed it): the deleted session's summary.
                yield Call(
                    "delete_item",
                    {
                        "TableName": table,
                        "Key": summary_key,
                        "ConditionExpression": same,
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    },
                )
                return
            if began:
                item[A.REBUILT] = S(token)  # one per delete
            if k.TTL_ATTRIBUTE in stored:
                values[":was"] = stored[k.TTL_ATTRIBUTE]
            names["#ttl"] = k.TTL_ATTRIBUTE
            kept_same = "#ttl = :was" if ":was" in values else "attribute_not_exists(#ttl)"
            log.info("delete %s: the next session changed the summary; built again", pk)
            yield Call(
                "put_item",
                {
                    "TableName": table,
                    "Item": item,
                    # A write that raised the summary's TTL since the read is read in too.
                    "ConditionExpression": f"{same} AND {kept_same}",
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                },
            )
            return
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
    raise StorageError(
        f"delete {pk}: the summary changed behind each of {MAX_ATTEMPTS} reads; "
        "call delete_sandbox again",
        code="ConditionalCheckFailedException",
    )


def _summary_after(
    table: str, pk: str, stored: dict[str, Any], seal: int, upto: int, shard_count: int
) -> Op[dict[str, Any] | None]:
    """The summary the entries marked after ``seal`` (up to mark ``upto``) make on their
    own: read through their marks (one consistent Query, one BatchGetItem), folded in mark
    order, with the latest TTL of those that change it. None where none of them changes it:
    ``upto`` (the summary's ``sq``) is then a mark number of an earlier incarnation, whose
    marks TTL removed while the summary stayed (a day longer), the sequence begun again at 0."""
    if upto <= seal:
        return None
    name, sandbox_id = stored[A.NAME]["S"], stored[A.SANDBOX_ID]["S"]
    marks = yield from query_all(
        {
            "TableName": table,
            "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :lo AND :hi",
            "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY},
            "ExpressionAttributeValues": {
                ":pk": S(pk),
                ":lo": S(k.sequence_sk(seal + 1)),
                ":hi": S(k.sequence_sk(upto)),
            },
            "ConsistentRead": True,
        }
    )
    refs = [m for m in marks if A.REF in m]
    keys = []
    for mark in refs:
        head = mark[A.REF]["S"]
        parts = int(mark[A.PARTS]["N"]) if A.PARTS in mark else 0
        for sk in (head, *(k.part_sk(head, p) for p in range(1, parts + 1))):
            keys.append({k.PARTITION_KEY: S(pk), k.SORT_KEY: S(sk)})
    items = (yield from batch_get(table, keys)) if keys else []
    items.sort(key=lambda item: item[k.SORT_KEY]["S"])
    heads = {i[k.SORT_KEY]["S"]: i for i in items if A.TS in i}
    keyed, _ = it.assemble_entries(name, sandbox_id, items)
    by_key = dict(keyed)
    found = [m[A.REF]["S"] for m in refs if m[A.REF]["S"] in by_key]
    entries = [by_key[ref] for ref in found]
    ttls = [
        int(heads[ref][k.TTL_ATTRIBUTE]["N"])
        for ref in found
        if k.TTL_ATTRIBUTE in heads[ref] and it.changes_summary(by_key[ref])
    ]
    # Its TTL as the writes after the seal left it (each raised it past its mark: the
    # stored one), and past the last mark read (see _items.SUMMARY_SLACK_S).
    kept = [int(m[k.TTL_ATTRIBUTE]["N"]) for m in marks if k.TTL_ATTRIBUTE in m]
    stored_kept = stored.get(k.TTL_ATTRIBUTE) if A.ENTRY_EXPIRES in stored else None
    if stored_kept is not None:
        kept.append(int(stored_kept["N"]) - it.SUMMARY_SLACK_S)
    if not entries:
        return None
    update = it.summary_fold(
        entries,
        shard_count,
        max(ttls) if ttls else None,
        it.summary_expiry(max(kept), it.now_s()) if kept and ttls else None,
    )
    if update is None:
        return None
    # The write of entries it holds is the last one's (lq kept: the put is no such write).
    item: dict[str, Any] = it.summary_item(it.summary_sequenced(update, upto, None))
    if A.LIFECYCLE_SEQUENCE in stored:
        item[A.LIFECYCLE_SEQUENCE] = stored[A.LIFECYCLE_SEQUENCE]
    return item
