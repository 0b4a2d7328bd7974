"""Every contract operation as a generator of SDK calls (see :mod:`sandbox_ledger.sdk.steps`).

Shared by :class:`DynamoDBAdapter` and :class:`SyncDynamoDBAdapter`; tested without AWS by
driving them with a fake client.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from sandbox_ledger import keys as k
from sandbox_ledger._json import MAX_SAFE_INTEGER
from sandbox_ledger.cursor import bad_position, check_int, decode_cursor, encode_cursor
from sandbox_ledger.deployment import (
    SweepSettings,
    TableDescriptor,
    complete_descriptor,
    new_store_id,
    put_descriptor,
)
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb import _sequence as _seq
from sandbox_ledger.errors import ConflictError, StorageError, gave_up
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.models import (
    CheckpointInfo,
    EnvironmentRecord,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    SandboxDetails,
    SandboxPage,
)
from sandbox_ledger.sdk import steps
from sandbox_ledger.sdk.attributes import Item, N, S
from sandbox_ledger.sdk.batching import batch_get, batch_write
from sandbox_ledger.sdk.paging import (
    ScanStarts,
    check_resume,
    newest_first,
    query_all,
    scan_round,
)
from sandbox_ledger.sdk.steps import MAX_ATTEMPTS, Call, Op, Sleep, error_code, log
from sandbox_ledger.summary import apply_list_options, session_listing
from sandbox_ledger.telemetry import retried

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sandbox_ledger.dynamodb._sequence import Sequencer

_RETRYABLE_CANCELLATIONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)


# -- writes ---------------------------------------------------------------------------------


def append(
    table: str,
    entry: LedgerEntry,
    order: str,
    shard_count: int,
    sequencer: Sequencer,
    *,
    claim: str | None = None,
    ttl: int | None = None,
) -> Op[bool]:
    """Store ``entry`` exactly once: parts first, then the head in one TransactWriteItems
    with the session's next sequence mark (see :mod:`._sequence`).

    The head's key contains ``order``, fixed before the first attempt, so a resent write
    (the first one landed but its response was lost) fails its condition and is recognised
    as already done, without a second event or a second execCount increment. A sequence
    mark that another writer took first is read again and the write retried with the next.

    With ``claim`` (an import identity, see :func:`sandbox_ledger.keys.claim_sk`), a claim
    item is put in the same transaction under the condition that it does not exist yet:
    returns False, writing nothing, when another write already holds that identity.

    With ``ttl`` (Unix seconds: the entry's time plus the retention), every item written
    carries it; the summary's expiry becomes it unless the summary's is later (an
    out-of-order append never moves it back; in the same transaction, see
    :func:`_summary_condition`), and the summary's TTL stays past the session's last mark
    (raised in the same transaction where this write's mark passes it, see
    :data:`._items.SUMMARY_SLACK_S`): TTL never deletes a summary while its session has a
    live entry.
    """
    encoded = it.encode_entry(entry, order, ttl)
    changes = it.changes_summary(entry)
    checkpoint = entry.event == LedgerEvent.CheckpointCreated
    marker = it.checkpoint_marker(entry, order, ttl) if checkpoint else None  # refused first
    if encoded.parts:
        yield from batch_write(table, [{"PutRequest": {"Item": part}} for part in encoded.parts])
    pk = encoded.head[k.PARTITION_KEY]["S"]
    absent = {
        "ConditionExpression": "attribute_not_exists(#pk)",
        "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY},
    }
    claim_item: Item | None = None
    if claim is not None:
        claim_item = {**it.summary_key(pk), A.CLAIM_ORDER: S(order)}
        claim_item[k.SORT_KEY] = S(claim)
        if ttl is not None:
            claim_item[k.TTL_ATTRIBUTE] = N(ttl)
    mark = sequencer.guess(pk)
    if mark is None:
        mark = yield from _seq.read_last(table, pk)
    attempt = misses = conflicts = 0
    session = (entry.name, entry.sandbox_id)
    heads = [encoded.head]
    # The form of the summary update that fits the stored summary's expiry (see
    # _summary_condition), switched to once a failed condition shows it.
    form = FRESH
    while True:
        now = _now_ms()
        head = _seq.sequenced(encoded.head, mark.number)
        actions: list[dict[str, Any]] = [{"Put": {"TableName": table, "Item": head, **absent}}]
        claim_at = summary_at = -1
        if claim_item is not None:
            claim_at = len(actions)
            actions.append({"Put": {"TableName": table, "Item": claim_item, **absent}})
        mark_ttl = mark.ttl_after(heads)
        kept = None if mark_ttl is None else it.summary_expiry(mark_ttl, now // 1000)
        raising = False
        if changes:
            summary_at = len(actions)
            update = summary_form(entry, shard_count, ttl, kept, form)
            update = it.summary_sequenced(update, mark.number, mark.incarnation)
            condition = _summary_condition(update, now, ttl, form=form)
            actions.append({"Update": {"TableName": table, **update, **condition}})
        elif kept is not None and mark.needs_raise(heads, now // 1000 + it.SUMMARY_RENEW_S):
            # Its mark passes what the writer knows of the summary's TTL: raise it, so that
            # TTL keeps the summary while this entry lives (see _items.SUMMARY_SLACK_S).
            summary_at, raising = len(actions), True
            actions.append({"Update": {"TableName": table, **it.summary_raise(pk, kept)}})
        if marker is not None:  # a checkpoint's marker carries its mark too (list_checkpoints)
            item = _seq.sequenced(marker, mark.number)
            actions.append({"Put": {"TableName": table, "Item": item}})
        marks_at = len(actions)
        actions.extend(_seq.mark_actions(table, pk, mark, heads))
        try:
            yield Call("transact_write_items", {"TransactItems": actions})
            sequencer.learn(pk, mark.after(heads, kept if raising or changes else None))
            return True
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            cancellations = exc.response.get("CancellationReasons", [])
            reasons = [r.get("Code") for r in cancellations]
            if reasons and reasons[0] == "ConditionalCheckFailed":
                # The head is already stored: this was a resend of a landed write.
                log.debug("append %s/%s: already stored (a resent write)", *session)
                sequencer.forget(pk)
                return True
            if claim_at > 0 and len(reasons) > claim_at and reasons[claim_at] == _FAILED:
                return False  # another write stored this identity first
            if _FAILED in reasons[marks_at:]:
                # Another writer took this mark first, or a delete made the guess stale.
                misses += 1
                if misses >= MAX_SEQUENCE_MISSES:
                    raise StorageError(
                        f"append: the session's sequence moved {misses} times while writing "
                        "(too many writers at once)",
                        code="TransactionCanceledException",
                    ) from exc
                if misses > 2:
                    yield Sleep(steps.backoff(misses - 2))
                mark = yield from _seq.read_last(table, pk)
                continue
            deleting = False
            if 0 <= summary_at < len(reasons) and reasons[summary_at] == _FAILED:
                if raising:
                    # No summary with a TTL is stored: none to keep (the write that makes
                    # one sets its TTL). Known on this mark only: read again on a miss.
                    mark.kept = _seq.NO_SUMMARY
                    continue
                stored = cancellations[summary_at].get("Item") or {}
                # Without a TTL the lease is the only condition.
                deleting = ttl is None or (
                    A.DELETING in stored and int(stored[A.DELETING]["N"]) >= now
                )
                if not deleting and ttl is not None:
                    # The expiry part failed: take the form that fits the stored one, at once.
                    form = form_for(stored, ttl)
                    attempt += 1
                    if attempt < MAX_ATTEMPTS:
                        continue
            if not deleting and not _RETRYABLE_CANCELLATIONS.intersection(reasons):
                raise
            # Another writer's transaction in flight on one of these items is contention, not
            # a fault: counted apart, with more tries (steps.MAX_CONFLICTS).
            contended = not deleting and steps.contended(reasons)
            if contended:
                conflicts += 1
            else:
                attempt += 1
            tries = conflicts if contended else attempt
            log.info("append %s/%s: transaction cancelled %s, retry %d", *session, reasons, tries)
            retried(
                "conflict"
                if "TransactionConflict" in reasons
                else "throttle"
                if contended
                else "error",
                attempt=tries,
                operation="TransactWriteItems",
                code=",".join(str(reason) for reason in reasons),
            )
            if tries >= (steps.MAX_CONFLICTS if contended else MAX_ATTEMPTS):
                log.warning("append %s/%s: giving up after %d attempts", *session, tries)
                if deleting:
                    raise ConflictError(
                        "append: the session is being deleted (retry once delete_sandbox "
                        "has returned)",
                        code="TransactionCanceledException",
                    ) from exc
                raise gave_up(
                    f"append: transaction cancelled {tries} times ({reasons})",
                    reasons,
                    code="TransactionCanceledException",
                ) from exc
            yield Sleep(steps.backoff(tries))


FRESH, HELD, LEGACY = "fresh", "held", "legacy"
"""The forms of a summary update with a TTL (see :func:`_summary_condition`)."""


def summary_form(
    entry_or_entries: LedgerEntry | Sequence[LedgerEntry],
    shard_count: int,
    ttl: int | None,
    kept: int | None,
    form: str,
) -> dict[str, Any]:
    """The summary update of ``form``: FRESH sets the summary's expiry to ``ttl`` and its TTL
    to ``kept``; HELD (a later expiry is stored) its TTL only; LEGACY (a summary of an
    earlier version, whose TTL is its expiry, a later one) makes that TTL its expiry and
    sets its TTL to ``kept``, as the other forms keep it."""
    entries = [entry_or_entries] if isinstance(entry_or_entries, LedgerEntry) else entry_or_entries
    expiry = ttl if form == FRESH else None
    update = it.summary_fold(entries, shard_count, expiry, kept, legacy=form == LEGACY)
    if update is None:
        raise ValueError("no entry of these changes the summary")
    return update


def form_for(stored: Item, ttl: int) -> str:
    """The form of a summary update with TTL ``ttl`` that fits the summary ``stored``."""
    expiry = stored.get(A.ENTRY_EXPIRES)
    if expiry is not None:
        return HELD if int(expiry["N"]) > ttl else FRESH
    legacy = stored.get(k.TTL_ATTRIBUTE)
    return LEGACY if legacy is not None and int(legacy["N"]) > ttl else FRESH


_FAILED = "ConditionalCheckFailed"

MAX_SEQUENCE_MISSES = 64
"""How often an append reads the session's sequence again before it gives up: each miss is
another writer's entry stored meanwhile, so this bounds only a session written by very many
writers at once."""


# How long a delete_sandbox holds off appends that would change the summary; a delete that
# dies leaves its mark for at most this long (a new delete_sandbox call clears it at once).
DELETE_LEASE_MS = 60_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _summary_condition(
    summary: dict[str, Any], now_ms: int, ttl: int | None, *, form: str = FRESH
) -> dict[str, Any]:
    """The summary update's condition: no delete_sandbox holds the session (or its lease is
    over), so appends that would change the summary wait for a running delete; and, with a
    TTL, the summary's expiry never moves back. The FRESH form (:func:`summary_form`) sets
    the expiry where the stored one is not later; the HELD form applies only where it is
    later, and leaves it; the LEGACY form only where an earlier version's summary holds a
    later TTL (its expiry: such a summary has no ``eex``), and makes it its expiry. The stored
    item comes back on a failed condition (ALL_OLD), which tells the failures apart
    (:func:`form_for`).

    The summary's TTL (``kept``) needs no condition: each write sets it past its own
    sequence mark's TTL, and marks commit in order, each TTL the latest of the session's
    entries' so far: whichever write lands last leaves it past every entry's."""
    condition = "(attribute_not_exists(#dl) OR #dl < :now)"
    names = {**summary["ExpressionAttributeNames"], "#dl": A.DELETING}
    values = {**summary["ExpressionAttributeValues"], ":now": N(now_ms)}
    if ttl is not None:
        names["#eex"] = A.ENTRY_EXPIRES
        if form != HELD:
            names["#ttl"] = k.TTL_ATTRIBUTE
        values[":ttl"] = N(ttl)
        later = {
            FRESH: (
                "(#eex <= :ttl OR (attribute_not_exists(#eex)"
                " AND (attribute_not_exists(#ttl) OR #ttl <= :ttl)))"
            ),
            HELD: "#eex > :ttl",
            LEGACY: "(attribute_not_exists(#eex) AND #ttl > :ttl)",
        }[form]
        condition += f" AND {later}"
    return {
        "ConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }


# -- reads ----------------------------------------------------------------------------------


def _prefix_query(table: str, pk: str, prefix: str, **extra: Any) -> dict[str, Any]:
    return {
        "TableName": table,
        "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
        "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY},
        "ExpressionAttributeValues": {":pk": S(pk), ":prefix": S(prefix)},
        "ConsistentRead": True,
        **extra,
    }


def _live(items: list[Any]) -> list[Any]:
    """The items whose TTL has not passed (DynamoDB deletes them up to days late)."""
    now = it.now_s()
    return [item for item in items if it.live(item, now)]


def _whole_entries(
    table: str, pk: str, name: str, sandbox_id: str, items: list[Any]
) -> Op[list[tuple[str, LedgerEntry]]]:
    """The whole entries among a session's items (with their heads' sort keys), leaving out
    those a delete took part of while they were read.

    A read of many pages can race :func:`delete_session`: a head read on one page can lose
    its parts before the next. Such a head is told from a corrupt one (a part missing from a
    session nobody deletes) by reading again, strongly consistent, first the summary, then
    the heads: the entry is left out if the summary carries a delete's mark (a delete is
    running, or died and is to be called again) or its head is gone (the delete got to it:
    a delete takes its mark before it deletes anything and removes the mark last). Reads
    that meet no broken head cost nothing more; those that do, one GetItem and one
    BatchGetItem.

    Raises:
        ValueError: a head whose part is missing in a session not being deleted.
    """
    keyed, broken = it.assemble_entries(name, sandbox_id, items)
    if not broken:
        return keyed
    summary = yield from _delete_mark(table, pk)
    if A.DELETING in summary:
        return keyed
    heads = yield from batch_get(
        table, [{k.PARTITION_KEY: S(pk), k.SORT_KEY: S(b.head_sk)} for b in broken]
    )
    stored = {item[k.SORT_KEY]["S"] for item in heads}
    for entry in broken:
        if entry.head_sk in stored:
            raise entry.error()
    return keyed


def _read_keyed(table: str, name: str, sandbox_id: str) -> Op[list[tuple[str, LedgerEntry]]]:
    """The session's live whole entries with their heads' sort keys, in read_all's order
    (ascending ts, equal ts in commit order: see :func:`._items.in_commit_order`)."""
    pk = k.session_pk(name, sandbox_id)
    items = _live((yield from query_all(_prefix_query(table, pk, k.EVENT_PREFIX))))
    keyed = yield from _whole_entries(table, pk, name, sandbox_id, items)
    return (yield from _in_commit_order(table, pk, keyed, items))


def _in_commit_order(
    table: str, pk: str, keyed: list[tuple[str, LedgerEntry]], items: list[Any]
) -> Op[list[tuple[str, LedgerEntry]]]:
    """:func:`._items.in_commit_order` of ``keyed``, whose heads are among ``items``. A head
    stored before heads carried ``q`` has it in its sequence mark only (if it has one): where
    such a head shares its ts with another head, the session's marks are read (one Query,
    keys and ``ref``: only on a table written by the version before ``q``) so that ties are
    in mark order, as an export and a follower hand them out."""
    carried = {i[k.SORT_KEY]["S"] for i in items if A.SEQUENCE in i}
    ties = Counter(entry.ts for _, entry in keyed)
    if not any(sk not in carried and ties[entry.ts] > 1 for sk, entry in keyed):
        return it.in_commit_order(keyed, items)
    marks = yield from query_all(
        {
            **_prefix_query(table, pk, k.SEQUENCE_PREFIX),
            "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY, "#r": A.REF},
            "ProjectionExpression": "#sk, #r",
        }
    )
    numbered = [
        {k.SORT_KEY: mark[A.REF], A.SEQUENCE: N(number)}
        for mark in marks
        if A.REF in mark and (number := k.sequence_number(mark[k.SORT_KEY]["S"])) is not None
    ]
    return it.in_commit_order(keyed, [*items, *numbered])


def read_all(table: str, name: str, sandbox_id: str) -> Op[list[LedgerEntry]]:
    keyed = yield from _read_keyed(table, name, sandbox_id)
    return [entry for _, entry in keyed]


def read_stored(table: str, name: str, sandbox_id: str) -> Op[list[LedgerEntry]]:
    """Every entry the session still stores, those past their TTL included (DynamoDB deletes
    them up to days late), for an import to reconcile against: entries appended live have no
    claim, so hiding them would write them again. TTL deletes an entry's items one by one:
    an expired entry missing a part is left out."""
    items = yield from query_all(stored_query(table, name, sandbox_id))
    return (yield from stored_entries(table, name, sandbox_id, items))


def stored_query(table: str, name: str, sandbox_id: str) -> dict[str, Any]:
    """The Query of :func:`read_stored` (every item of the session's entries)."""
    return _prefix_query(table, k.session_pk(name, sandbox_id), k.EVENT_PREFIX)


def stored_entries(
    table: str, name: str, sandbox_id: str, items: list[Any]
) -> Op[list[LedgerEntry]]:
    """:func:`read_stored` of the items its query returned (every page)."""
    pk = k.session_pk(name, sandbox_id)
    now = it.now_s()
    live = [item for item in items if it.live(item, now)]
    expired = [item for item in items if not it.live(item, now)]
    keyed = yield from _whole_entries(table, pk, name, sandbox_id, live)
    keyed += it.decode_keyed_entries(name, sandbox_id, expired, complete_only=True)
    return [entry for _, entry in (yield from _in_commit_order(table, pk, keyed, items))]


def read_in_append_order(table: str, name: str, sandbox_id: str) -> Op[list[LedgerEntry]]:
    """Every entry of a session in the order it was stored: by its sequence mark (see
    :mod:`._sequence`; the order ``follow`` hands entries out in), an entry without one (a
    table written before marks) first, by the order id in its key; whole as of one moment,
    or none if a delete holds the session (see :func:`_read_whole`)."""
    return [entry for entry, _, _ in (yield from read_marked(table, name, sandbox_id))]


def read_marked(
    table: str, name: str, sandbox_id: str, *, held: bool = False
) -> Op[list[tuple[LedgerEntry, tuple[int, str] | None, str]]]:
    """:func:`read_in_append_order`, each entry with its sequence mark's number and
    incarnation (None: stored without a mark) and the order id its writer chose (in its
    head's key: a resend of its append finds it there), as of the same read. ``held``: a
    session a running delete holds is read as it stands (its whole entries), not left out
    (see :func:`_read_whole`)."""
    keyed, marks = yield from _read_whole(table, name, sandbox_id, held=held)
    keyed.sort(
        key=lambda pair: (
            pair[0] in marks,
            marks[pair[0]][0] if pair[0] in marks else 0,
            it.append_order(pair[0]),
        )
    )
    return [(entry, marks.get(sk), it.append_order(sk)) for sk, entry in keyed]


def read_each_in_append_order(
    table: str, sessions: Sequence[tuple[str, str]]
) -> Op[list[list[LedgerEntry]]]:
    """:func:`read_in_append_order` of each session, in order (an export's run of them)."""
    found: list[list[LedgerEntry]] = []
    for name, sandbox_id in sessions:
        found.append((yield from read_in_append_order(table, name, sandbox_id)))
    return found


def read_each_marked(
    table: str, sessions: Sequence[tuple[str, str]]
) -> Op[list[list[tuple[LedgerEntry, tuple[int, str] | None, str]]]]:
    """:func:`read_marked` of each session, in order, sessions a delete holds read as they
    stand: what a local server's save reads (it keeps the table's items; a session whose
    delete was cut by a restart is still there, as in DynamoDB, and the delete run again
    takes it, its ``session.deleted`` in the stream)."""
    found: list[list[tuple[LedgerEntry, tuple[int, str] | None, str]]] = []
    for name, sandbox_id in sessions:
        found.append((yield from read_marked(table, name, sandbox_id, held=True)))
    return found


WHOLE_READ_ATTEMPTS = 4
"""How often :func:`_read_whole` reads a session that changed behind its read before it
gives up."""


def _read_whole(
    table: str, name: str, sandbox_id: str, *, held: bool = False
) -> Op[tuple[list[tuple[str, LedgerEntry]], dict[str, tuple[int, str]]]]:
    """The session's live whole entries with their heads' sort keys, as the session held them
    at one moment (an export's read), or none while a delete holds the session (``held``:
    what it holds then, for the local server's save); and each head's sequence mark number
    and incarnation (see :mod:`._sequence`).

    One Query reads the summary with the entries and the marks (``#SUMMARY`` sorts before
    ``E#``, the marks ``Q#`` last, the claims and markers between), so a
    session that fits one page (1 MB) is read in one request, with the delete mark it had
    then: a session marked by a running :func:`delete_session` is left out (it is being
    deleted, and a delete is not atomic: part of it may be gone already). A session of
    several pages can change between them: a delete can take what the first pages held and
    the rest before the next page is read (an export held 5 of 16 entries of a deleted
    session), an append with an old ``ts`` can land behind the read. So, after the last
    page, the summary is read again (a running delete: left out), then the keys of the
    items before the last page (a consistent Query of them, ``#sk`` and ``#ts`` projected:
    it costs what reading them cost): a head read and gone since means a delete (or TTL)
    took it, and the session is read again, at most :data:`WHOLE_READ_ATTEMPTS` times. What
    was added meanwhile is settled by the sequence marks (:func:`_as_of_marks`).

    Raises:
        StorageError: something read was gone by the end of every read.
        ValueError: a head whose part is missing in a session not being deleted.
    """
    pk = k.session_pk(name, sandbox_id)
    names = {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY}
    values = {":pk": S(pk), ":summary": S(k.SUMMARY_SK), ":last": S(_AFTER_MARKS)}
    query: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :summary AND :last",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ConsistentRead": True,
    }
    for attempt in range(1, WHOLE_READ_ATTEMPTS + 1):
        pages: list[list[Any]] = []
        start: dict[str, Any] | None = None
        while True:
            page = yield Call("query", {**query, "ExclusiveStartKey": start} if start else query)
            items = page.get("Items", [])
            if not pages and items and items[0][k.SORT_KEY]["S"] == k.SUMMARY_SK:
                if not held and _held_by_delete(items[0]):
                    return [], {}
                items = items[1:]
            pages.append(items)
            start = page.get("LastEvaluatedKey")
            if not start:
                break
            boundary = start[k.SORT_KEY]
        entries = [item for page in pages for item in page]
        if len(pages) == 1:
            break
        if not held and _held_by_delete((yield from _delete_mark(table, pk))):
            return [], {}
        keys = yield from query_all(
            {
                **query,
                "ExpressionAttributeNames": {**names, "#ts": A.TS},
                "ExpressionAttributeValues": {**values, ":last": boundary},
                "ProjectionExpression": "#sk, #ts",
            }
        )
        read = {item[k.SORT_KEY]["S"] for page in pages[:-1] for item in page if A.TS in item}
        still = {item[k.SORT_KEY]["S"] for item in keys if A.TS in item}
        if read <= still:
            break  # nothing read is gone; what was added behind the read: see _as_of_marks
        log.info("read %s/%s: changed behind the read (attempt %d)", name, sandbox_id, attempt)
    else:
        raise StorageError(
            f"read of {name}/{sandbox_id}: the session changed behind each of "
            f"{WHOLE_READ_ATTEMPTS} reads (deleted meanwhile); read it again"
        )
    items, rank = yield from _as_of_marks(table, pk, entries)
    return (yield from _whole_entries(table, pk, name, sandbox_id, _live(items))), rank


def _head_of(sk: str) -> str:
    """The sort key of the head an entry's item (head or part) belongs to."""
    return k.part_head(sk) or sk


def _as_of_marks(
    table: str, pk: str, entries: list[Any]
) -> Op[tuple[list[Any], dict[str, tuple[int, str]]]]:
    """The entries' items (heads and parts) of a session read in one or more pages, as of the
    last sequence mark read: the marks are dense and in commit order, and sort after every
    entry's items, so they say what was stored up to the moment they were read. A head that
    landed behind the read (its ``ts`` before the read's place) has its mark among them and
    is fetched (one BatchGetItem); a head read whose mark was not (stored after the marks
    were read) is left out, as is every mark after one missing among them that is stored
    now (a Query is no snapshot: it can read mark n + 1 committed while it ran without mark
    n; a mark missing for good, the entry's TTL or a delete, is passed). Marks whose own
    TTL has passed are left aside (they expire in order, TTL deletes them in any). Returns
    the items and each kept head's mark number and incarnation."""
    now = it.now_s()
    sequence = sorted(
        (number, item)
        for item in entries
        if (number := k.sequence_number(item[k.SORT_KEY]["S"])) is not None and it.live(item, now)
    )
    kept: list[tuple[int, Any]] = []
    for number, item in sequence:
        if kept and number != kept[-1][0] + 1:
            missing = k.sequence_sk(kept[-1][0] + 1)
            found = yield Call(
                "get_item",
                {
                    "TableName": table,
                    "Key": {k.PARTITION_KEY: S(pk), k.SORT_KEY: S(missing)},
                    "ConsistentRead": True,
                    "ProjectionExpression": "#sk",
                    "ExpressionAttributeNames": {"#sk": k.SORT_KEY},
                },
            )
            if "Item" in found:
                break  # stored while the read ran, after the moment the read holds
        kept.append((number, item))
    rank = {
        item[A.REF]["S"]: (number, item.get(A.INCARNATION, {}).get("S", ""))
        for number, item in kept
        if A.REF in item
    }
    last = kept[-1][0] if kept else None
    items = [i for i in entries if i[k.SORT_KEY]["S"].startswith(k.EVENT_PREFIX)]
    heads = {i[k.SORT_KEY]["S"]: i for i in items if k.part_head(i[k.SORT_KEY]["S"]) is None}
    late = {
        sk
        for sk, head in heads.items()
        if last is not None and A.SEQUENCE in head and int(head[A.SEQUENCE]["N"]) > last
    }
    items = [
        i for i in items if (k.part_head(i[k.SORT_KEY]["S"]) or i[k.SORT_KEY]["S"]) not in late
    ]
    wanted = []
    for _, mark in kept:
        ref = mark.get(A.REF, {}).get("S")
        if ref is None or ref in heads or not _seq.entry_live(mark, now):
            continue
        parts = int(mark[A.PARTS]["N"]) if A.PARTS in mark else 0
        for sk in (ref, *(k.part_sk(ref, n) for n in range(1, parts + 1))):
            wanted.append({k.PARTITION_KEY: S(pk), k.SORT_KEY: S(sk)})
    if wanted:
        items += yield from batch_get(table, wanted)
        items.sort(key=lambda item: item[k.SORT_KEY]["S"])
    return items, rank


_AFTER_MARKS = k.SEQUENCE_PREFIX[:-1] + "$"
"""``Q$``: after every sequence mark (``Q#``), the last kind of item in a session."""


def _delete_mark(table: str, pk: str) -> Op[dict[str, Any]]:
    """The session's summary as far as a running delete's mark goes (strongly consistent):
    ``{}`` when there is no summary or no mark."""
    found = yield Call(
        "get_item",
        {
            "TableName": table,
            "Key": it.summary_key(pk),
            "ConsistentRead": True,
            "ProjectionExpression": "#dl",
            "ExpressionAttributeNames": {"#dl": A.DELETING},
        },
    )
    item: dict[str, Any] = found.get("Item", {})
    return item


def _held_by_delete(summary: dict[str, Any]) -> bool:
    """Whether a session's summary carries the mark of a delete that is running (its lease
    not over; a delete that died leaves a mark that holds nothing)."""
    return A.DELETING in summary and int(summary[A.DELETING]["N"]) >= _now_ms()


def scan_sessions(table: str, *, name: str | None, segments: int) -> Op[list[tuple[str, str]]]:
    """Every session that has at least one entry (a head), listed or not, by a parallel Scan.

    The one Scan of the adapter: it reads the whole table (every item, 4 KB per read unit
    at half a unit, eventually consistent), so it serves exports, never a hot path.
    ``name`` keeps only that name's sessions (a filter: the Scan costs the same).
    """
    names = {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY, "#ttl": k.TTL_ATTRIBUTE, "#ts": A.TS}
    values: dict[str, Any] = {":e": S(k.EVENT_PREFIX), ":now": N(it.now_s())}
    # Only heads count (they alone carry ts): a session holding nothing but parts without a
    # head (a dead writer's, which a delete leaves for 15 minutes) has no entry to export.
    # Entries whose TTL has passed are not counted (DynamoDB deletes them days late).
    condition = (
        "begins_with(#sk, :e) AND attribute_exists(#ts)"
        " AND (attribute_not_exists(#ttl) OR #ttl > :now)"
    )
    if name is not None:
        values[":p"] = S(k.session_prefix(name))
        condition += " AND begins_with(#pk, :p)"
    base = {
        "TableName": table,
        "ProjectionExpression": "#pk",
        "FilterExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "TotalSegments": segments,
    }
    starts: ScanStarts = dict.fromkeys(range(segments))
    found: set[str] = set()
    while starts:
        items, starts = yield from scan_round(base, starts)
        found.update(item[k.PARTITION_KEY]["S"] for item in items)
    sessions = [k.parse_session_pk(pk) for pk in found if pk.startswith("S#")]
    if name is not None:
        sessions = [s for s in sessions if s[0] == name]
    return sorted(sessions)


def last_checkpoint(table: str, name: str, sandbox_id: str) -> Op[LedgerEntry | None]:
    """The last checkpoint in read_all order: the newest checkpoint marker (one request) gives
    the last ts, then the entries of that ts (one more; almost always the checkpoint alone),
    the last checkpoint among them in commit order (markers of equal ts sort by order id,
    which is when an append began, not when it committed)."""
    pk = k.session_pk(name, sandbox_id)
    page = yield Call(
        "query", _prefix_query(table, pk, k.CHECKPOINT_PREFIX, ScanIndexForward=False, Limit=1)
    )
    # The newest marker expires last (its TTL runs from the newest ts): if it has expired,
    # every checkpoint has.
    if not _live(page.get("Items", [])):
        return None
    ts = int(page["Items"][0][A.TS]["N"])
    items = _live((yield from query_all(_prefix_query(table, pk, k.event_sk(ts, "")))))
    keyed = yield from _whole_entries(table, pk, name, sandbox_id, items)
    keyed = yield from _in_commit_order(table, pk, keyed, items)
    found = [entry for _, entry in keyed if entry.event == LedgerEvent.CheckpointCreated]
    return found[-1] if found else None


def list_checkpoints(table: str, name: str, sandbox_id: str) -> Op[list[CheckpointInfo]]:
    """The session's checkpoints in read_all order: by ts, equal ts by the mark number each
    marker carries (``q``), a marker without one (stored before markers carried it) first, by
    its order id."""
    pk = k.session_pk(name, sandbox_id)
    items = _live((yield from query_all(_prefix_query(table, pk, k.CHECKPOINT_PREFIX))))
    items.sort(key=lambda i: (int(i[A.TS]["N"]), int(i.get(A.SEQUENCE, {"N": "-1"})["N"])))
    return [it.decode_checkpoint(item) for item in items]


def get_sandbox_details(table: str, name: str, sandbox_id: str) -> Op[SandboxDetails | None]:
    key = it.summary_key(k.session_pk(name, sandbox_id))
    response = yield Call("get_item", {"TableName": table, "Key": key, "ConsistentRead": True})
    item = response.get("Item")
    return it.decode_details(item) if item and _live([item]) else None


_CURSOR_KIND = "dynamodb-sessions"


def list_details(
    table: str,
    *,
    name: str | None,
    opts: ListSandboxOptions | None,
    shard_count: int,
    store: str | None,
) -> Op[SandboxPage]:
    """Sessions newest first from the status-appropriate index; never reads events.
    ``store`` is what the cursors are bound to (:func:`sandbox_ledger.deployment.store_identity`;
    None for a listing with neither cursor nor limit, which reads and makes none).

    The cursor holds, per index partition, the key of the last item the page took from it:
    a Query resumes exactly after it (ExclusiveStartKey), so sessions sharing a startedAt
    across a page boundary are neither skipped nor repeated.

    While the index lags (docs/table-design.md, "Listings and index lag"), a page lists a
    session only through its current index entry (the summary, read strongly consistent,
    holds the entry's partition and ``gsk``): an entry left from before the session was
    deleted and created again with another startedAt would list it at the old place, and the
    walk would list it again at the new one. And the cursor carries the walk's frontier,
    where the merge's order (newest ``gsk`` first, ties by partition in turn) reached: the
    ``gsk`` and partition of the last key a page took (``f``). A later page steps over keys
    before it in that order, which the index showed only after the walk had gone past their
    place (a session started during the walk, or shown late, in a partition the walk had not
    taken from yet).
    """
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
    listing = session_listing(store, name, opts) if store is not None else []
    resume = None
    frontier: tuple[int, int] | None = None
    if opts is not None and opts.cursor is not None:
        state = decode_cursor(_CURSOR_KIND, opts.cursor, listing)
        if set(state) not in ({"p"}, {"p", "f"}):  # no "f": a cursor of an earlier version
            raise bad_position()
        resume = check_resume(state["p"], index, partitions, _is_summary_key, before=before)
        if "f" in state:
            frontier = _frontier(state["f"], before, len(partitions))
    keys, state = yield from newest_first(
        table,
        index,
        partitions,
        before=before,
        want=want,
        resume=resume,
        passed=None if frontier is None else _passed(index, partitions, frontier),
    )
    # Each summary once: a partition read again within the page (past keys the frontier
    # stepped over) may return a session a moment ago moved below where it was taken, and
    # BatchGetItem refuses a key named twice.
    wanted = {key[k.PARTITION_KEY]["S"]: key for key in keys}
    summaries = yield from batch_get(
        table,
        [
            {k.PARTITION_KEY: key[k.PARTITION_KEY], k.SORT_KEY: key[k.SORT_KEY]}
            for key in wanted.values()
        ],
    )
    # Summaries come back in any order: in the index order (the cursor's), each through its
    # current entry only.
    fresh = {item[k.PARTITION_KEY]["S"]: item for item in _live(summaries)}
    current = [
        summary
        for key in keys
        if (summary := fresh.get(key[k.PARTITION_KEY]["S"])) is not None
        and _is_current(summary, key, index)
    ]
    details = [d for d in map(it.decode_details, current) if d is not None]
    # The index is eventually consistent: re-apply the filters to the fresh summaries.
    sessions = apply_list_options(details, opts)
    more = want is not None and any(where != "done" for where in state.values())
    reached = _reached(index, partitions, keys[-1]) if keys else frontier
    walk: dict[str, Any] = {"p": state} if reached is None else {"p": state, "f": list(reached)}
    cursor = encode_cursor(_CURSOR_KIND, walk, listing) if more else None
    return SandboxPage(sessions=sessions, cursor=cursor)


def _is_current(summary: Item, key: Item, index: k.IndexSpec) -> bool:
    """Whether an index ``key`` is the session's entry as the ``summary`` now makes it (same
    partition, same ``gsk``), not one the index still shows from an earlier write."""
    return all(
        name in summary and summary[name] == key[name]
        for name in (index.partition_key, index.sort_key)
    )


def _reached(index: k.IndexSpec, partitions: list[str], key: Item) -> tuple[int, int]:
    """Where an index key stands in the merge's order: its ``gsk`` and its partition's turn."""
    return int(key[index.sort_key]["N"]), partitions.index(key[index.partition_key]["S"])


def _passed(
    index: k.IndexSpec, partitions: list[str], frontier: tuple[int, int]
) -> Callable[[Item], bool]:
    """Whether an index key comes before a walk's frontier in the merge's order (newer, or as
    new in an earlier partition): the walk went past its place."""
    gsk, turn = frontier

    def passed(key: Item) -> bool:
        at, its = _reached(index, partitions, key)
        return at > gsk or (at == gsk and its < turn)

    return passed


def _frontier(state: object, before: int | None, partitions: int) -> tuple[int, int]:
    """A cursor's frontier: a ``gsk`` below ``before`` (as every position of the listing) and
    a partition's turn.

    Raises:
        InvalidInputError: naming ``cursor``.
    """
    if not isinstance(state, list) or len(state) != 2:
        raise bad_position()
    gsk = check_int(state[0], 0, before - 1 if before else MAX_SAFE_INTEGER)
    return gsk, check_int(state[1], 0, partitions - 1)


def _is_summary_key(pk: str, sk: str) -> bool:
    """Whether (pk, sk) is the key of a session summary (what the session indexes hold)."""
    if sk != k.SUMMARY_SK:
        return False
    try:
        return k.session_pk(*k.parse_session_pk(pk)) == pk
    except ValueError:  # InvalidInputError and KeyTooLongError are ValueErrors
        return False


# -- environments ---------------------------------------------------------------------------


def get_environment(table: str, name: str) -> Op[EnvironmentRecord | None]:
    key = it.environment_key(name)
    response = yield Call("get_item", {"TableName": table, "Key": key, "ConsistentRead": True})
    item = response.get("Item")
    return it.decode_environment(item) if item else None


def save_environment(table: str, record: EnvironmentRecord, order: str) -> Op[None]:
    """Replace the record's content; ``order`` is kept from the first save (``if_not_exists``),
    so equal ``builtAt`` list in first-saved order, as a JavaScript Map keeps them."""
    item = it.environment_item(record)
    yield Call(
        "update_item",
        {
            "TableName": table,
            "Key": it.environment_key(record.name),
            "UpdateExpression": "SET #b = :b, #r = :r, #f = if_not_exists(#f, :o)",
            "ExpressionAttributeNames": {"#b": A.BUILT_AT, "#r": A.RECORD, "#f": A.FIRST_SAVED},
            "ExpressionAttributeValues": {
                ":b": item[A.BUILT_AT],
                ":r": item[A.RECORD],
                ":o": S(order),
            },
        },
    )


def delete_environment(table: str, name: str) -> Op[None]:
    yield Call("delete_item", {"TableName": table, "Key": it.environment_key(name)})


def list_environments(table: str) -> Op[list[EnvironmentRecord]]:
    items = yield from query_all(
        {
            "TableName": table,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY},
            "ExpressionAttributeValues": {":pk": S(k.ENVIRONMENT_PK)},
            "ConsistentRead": True,
        }
    )
    items.sort(
        key=lambda item: (-int(item[A.BUILT_AT]["N"]), item.get(A.FIRST_SAVED, {}).get("S", ""))
    )
    return [it.decode_environment(item) for item in items]


# -- table ----------------------------------------------------------------------------------


def create_table(
    table: str,
    shard_count: int,
    retention: int | None = None,
    sweep: SweepSettings | None = None,
    store_id: str | None = None,
) -> Op[tuple[bool, TableDescriptor]]:
    """Create the table and its TTL setting if absent, wait for ACTIVE, and write its
    deployment descriptor with ``shard_count``, the ledger ``retention`` (seconds, None:
    keep forever), ``sweep``'s bus and windows and ``store_id`` (None: a fresh one) unless it
    has one (then only the sweep settings it lacks are added). Returns whether this call
    created the table, and the table's descriptor (the existing one wins: the caller checks
    that it agrees)."""
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
    settings = asdict(sweep) if sweep is not None else {}
    described = yield from put_descriptor(
        table,
        TableDescriptor(
            shard_count=shard_count,
            ledger_retention_seconds=retention,
            store_id=store_id if store_id is not None else new_store_id(),
            **settings,
        ),
    )
    if sweep is not None and not described.describes_sweep:
        described = yield from complete_descriptor(table, sweep)
    return created, described
