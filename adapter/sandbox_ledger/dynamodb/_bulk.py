"""The batched import operations of the DynamoDB twins (shared, as every operation is).

:func:`append_once_many` writes a batch of identified entries (an import's, see
:func:`sandbox_ledger.keys.claim_sk`) in few TransactWriteItems: each carries whole sessions
where they fit (see :mod:`._packing` for DynamoDB's limits), each
entry as its head and its claim (and a checkpoint's marker) put under the condition that they
do not exist, each session with ONE summary write folding its entries in
(:func:`~sandbox_ledger.dynamodb._items.summary_fold`): put whole where none is stored in the
session's first transaction (:func:`~sandbox_ledger.dynamodb._items.summary_item`; a stored
one fails the put's condition, comes back with the failure, and is updated from then on),
updated otherwise. Up to :data:`CONCURRENCY`
transactions run at once; a session split over several transactions has them run one after
the other, in its append order.

Exactly once, as the single append: every head's key holds an order id fixed before the
first attempt, so a transaction that landed but whose response was lost fails its heads'
conditions when resent (a transaction is all or nothing: every entry of it is stored, once).
A claim that exists already (another import stored that identity first) cancels the
transaction naming that action: the entry's outcome is False and the rest goes again
without it. A summary held by a running delete, a conflict or throttling is retried with
backoff, at most ``MAX_ATTEMPTS`` times, then raised: never reported as stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import _ops
from sandbox_ledger.dynamodb import _sequence as _seq
from sandbox_ledger.dynamodb._packing import (
    Slot,
    Transaction,
    Unit,
    new_unit,
    pack,
    remove,
    request,
)
from sandbox_ledger.errors import (
    THROTTLE_CODES,
    ConflictError,
    InvalidInputError,
    StorageError,
    gave_up,
)
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.sdk import steps
from sandbox_ledger.sdk.attributes import S
from sandbox_ledger.sdk.batching import batch_write
from sandbox_ledger.sdk.paging import query_all
from sandbox_ledger.sdk.steps import MAX_ATTEMPTS, Call, Op, Parallel, Sleep, error_code, log
from sandbox_ledger.transfer import content_digest

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sandbox_ledger.dynamodb._sequence import Sequencer
    from sandbox_ledger.models import LedgerEntry

__all__ = ["CONCURRENCY", "READS", "append_once_many", "read_each_stored"]

CONCURRENCY = 8
"""TransactWriteItems in flight at once."""

READS = 16
"""Reconciliation queries (one per session) in flight at once."""

_THROTTLED = THROTTLE_CODES


def append_once_many(
    table: str,
    items: Sequence[tuple[LedgerEntry, int]],
    shard_count: int,
    retention: int | None,
    sequencer: Sequencer,
    *,
    check: Callable[[object], LedgerEntry],
    digests: Sequence[str] | None = None,
) -> Op[list[bool | InvalidInputError]]:
    """Append each identified copy ``(entry, occurrence)`` unless stored (see the module):
    True if written, False if an import stored that identity already, the
    :class:`InvalidInputError` of an item refused before writing (``check``: the rule an
    entry passes to be stored; ``digests``: the items' content digests, if the caller has
    them).

    Raises:
        ConflictError: a session stayed held by a running delete.
        StorageError: a transaction stayed cancelled (conflicts, throttling).
    """
    outcomes: list[bool | InvalidInputError | None] = [None] * len(items)
    units: list[Unit] = []
    first: dict[tuple[str, str], int] = {}
    repeats: list[tuple[int, int]] = []
    checked: tuple[str, str] | None = None
    for index, (entry, occurrence) in enumerate(items):
        try:
            entry = check(entry)
            session = (entry.name, entry.sandbox_id)
            if session != checked:  # a batch holds its sessions' entries together
                k.check_session_key(*session)
                checked = session
            digest = content_digest(entry) if digests is None else digests[index]
            claim = k.claim_sk(digest, k.check_occurrence(occurrence))
        except InvalidInputError as exc:
            outcomes[index] = exc
            continue
        identity = (k.session_pk(*session), claim)
        if identity in first:  # the same identity twice: the later one finds it stored
            repeats.append((index, first[identity]))
            continue
        first[identity] = index
        try:
            units.append(new_unit(index, entry, claim, retention))
        except InvalidInputError as exc:  # an item DynamoDB cannot hold: this line alone
            outcomes[index] = exc
    units.sort(key=lambda u: (u.head[k.PARTITION_KEY]["S"], u.index))
    parts = [{"PutRequest": {"Item": part}} for u in units for part in u.parts]
    if parts:  # each head is written after its parts, as the single append does
        yield from batch_write(table, parts)
    done: list[tuple[Unit, bool]] = []
    try:
        yield from _transact(table, pack(units), shard_count, sequencer, done)
    except (ClientError, BotoCoreError, StorageError) as exc:
        # Stopped part way: what landed before (and beside) the failure stays stored, once;
        # the error says which items (a caller's report counts them, a re-run finds them).
        error = (
            exc
            if isinstance(exc, StorageError)
            else steps.give_up(exc, Call("transact_write_items", {}))
        )
        if isinstance(error, StorageError) and done:
            error.outcomes = _known(outcomes, done, repeats)
        if error is exc:
            raise
        raise error from exc
    result = _known(outcomes, done, repeats)
    assert all(outcome is not None for outcome in result)
    return [o for o in result if o is not None]


def _known(
    outcomes: list[bool | InvalidInputError | None],
    done: list[tuple[Unit, bool]],
    repeats: list[tuple[int, int]],
) -> list[bool | InvalidInputError | None]:
    """Each item's outcome: ``outcomes`` (the refused ones') with the transactions' results
    and the repeated identities' (False where the first one is known) filled in."""
    known = list(outcomes)
    for unit, outcome in done:
        known[unit.index] = outcome
    for index, earlier in repeats:
        known[index] = False if isinstance(known[earlier], bool) else known[earlier]
    return known


def _place_marks(table: str, transaction: Transaction, sequencer: Sequencer) -> Op[None]:
    """Where each group's sequence marks start: the client's guess, else (a session it has
    not seen, or after a miss) the session's last mark, read (one Query per session, at
    once; see :func:`._sequence.read_last` for why a new-looking session is read too)."""
    unread = []
    for group in transaction.groups:
        if group.mark is not None:
            continue
        guess = None if group.misses else sequencer.guess(group.pk)
        if guess is not None:
            group.mark = guess
        else:
            unread.append(group)
    if unread:
        pages = yield Parallel(tuple(Call("query", _seq.last_query(table, g.pk)) for g in unread))
        for group, page in zip(unread, pages, strict=True):
            group.mark = _seq.next_mark(page)


def _landed(transaction: Transaction, sequencer: Sequencer, *, resent: bool = False) -> None:
    for group in transaction.groups:
        if resent or group.mark is None:
            sequencer.forget(group.pk)
        else:
            heads = [u.head for u in group.units]
            sequencer.learn(group.pk, group.mark.after(heads, group.kept))


def _transact(
    table: str,
    transactions: list[Transaction],
    shard_count: int,
    sequencer: Sequencer,
    done: list[tuple[Unit, bool]],
) -> Op[None]:
    """Run ``transactions`` (see :func:`pack`) until each is done, adding every unit's
    outcome to ``done`` as its transaction ends. A transaction that gives up raises once the
    round it ran in is judged: what the others of the round wrote is in ``done``."""
    finished: set[int] = set()
    waiting = dict(enumerate(transactions))
    while waiting:
        ready = [(n, t) for n, t in waiting.items() if t.after <= finished][:CONCURRENCY]
        for _, transaction in ready:
            yield from _place_marks(table, transaction, sequencer)
        now = _ops._now_ms()
        requests = [request(table, t, shard_count, now) for _, t in ready]
        results = yield Parallel(
            tuple(Call("transact_write_items", params) for params, _ in requests), settle=True
        )
        pause = 0
        failure: Exception | None = None
        for (n, transaction), (_, slots), result in zip(ready, requests, results, strict=True):
            if isinstance(result, BaseException):
                try:
                    taken = _cancelled(transaction, slots, result, now)
                except Exception as exc:  # given up: the round's others still count
                    failure = failure or exc
                    continue
                done.extend((u, False) for u in taken)
                if transaction.landed:
                    _landed(transaction, sequencer, resent=True)
                    done.extend((u, True) for u in transaction.units)
                elif transaction.groups:  # to run again
                    if transaction.backoff:
                        pause = max(pause, transaction.attempt, transaction.conflicts)
                    continue
            else:
                _landed(transaction, sequencer)
                done.extend((u, True) for u in transaction.units)
            finished.add(n)
            del waiting[n]
        if failure is not None:
            raise failure
        if pause:
            yield Sleep(steps.backoff(pause))


def _cancelled(
    transaction: Transaction, slots: list[Slot], exc: BaseException, now_ms: int
) -> list[Unit]:
    """Judge a failed transaction: returns the units another import stored first, removed
    from it. A transaction that had landed (a resend) is marked ``landed``; otherwise it is
    left to run again (its attempt counted, ``backoff`` set when it must wait first), or the
    error is raised.
    """
    code = error_code(exc)
    reasons: list[dict[str, Any]] = (
        exc.response.get("CancellationReasons", [])
        if isinstance(exc, ClientError) and code == "TransactionCanceledException"
        else []
    )
    transaction.backoff = False
    if reasons and len(reasons) == len(slots):
        return _judge(transaction, slots, reasons, exc, now_ms)
    if code in _THROTTLED or (isinstance(exc, BotoCoreError) and not isinstance(exc, ClientError)):
        # Past the SDK's own retries: back off and send it again (if it had landed after
        # all, its heads say so).
        transaction.attempt += 1
        transaction.backoff = True
        _give_up_after(transaction, exc, deleting=False, codes=[code or type(exc).__name__])
        return []
    raise exc


def _judge(
    transaction: Transaction,
    slots: list[Slot],
    reasons: list[dict[str, Any]],
    exc: BaseException,
    now_ms: int,
) -> list[Unit]:
    """:func:`_cancelled` for a transaction cancelled with a reason per action."""
    failed = [
        (s, r)
        for s, r in zip(slots, reasons, strict=True)
        if r.get("Code") == "ConditionalCheckFailed"
    ]
    if any(s.kind == "head" for s, _ in failed):
        # A head holds an order id of this writer only: this was a resend of a transaction
        # that landed (all or nothing), every entry of it stored once. Reported as written.
        log.debug("import: a transaction already stored (a resent write)")
        transaction.landed = True
        return []
    taken = [s.unit for s, _ in failed if s.kind == "claim" and s.unit is not None]
    deleting = switched = moved = False
    for group in {id(s.group): s.group for s, _ in failed if s.kind == "mark" and s.group}.values():
        # Another writer took a mark first (or the session was deleted meanwhile): read the
        # session's last mark before the next attempt.
        group.mark = None
        group.misses += 1
        if group.misses >= _ops.MAX_SEQUENCE_MISSES:
            raise StorageError(
                f"import: a session's sequence moved {group.misses} times while writing "
                "(too many writers at once)",
                code="TransactionCanceledException",
            ) from exc
        moved = True
    for slot, reason in failed:
        if slot.kind == "summary" and slot.group is not None:
            group = slot.group
            stored = reason.get("Item") or {}
            ttl = group.ttl()
            lease = A.DELETING in stored and int(stored[A.DELETING]["N"]) >= now_ms
            if group.puts_summary:
                # The summary exists (the target holds the session, or a writer created it
                # meanwhile): updated from now on, in the form its stored TTL asks for.
                group.stored = switched = True
                deleting = deleting or lease
            elif ttl is None or lease:
                deleting = True
                continue
            if ttl is not None and not lease:  # the form that fits the stored expiry
                group.form = _ops.form_for(stored, ttl)
        elif slot.kind == "raise" and slot.group is not None:
            # No summary with a TTL is stored: none to keep (the write that makes one sets
            # its TTL). Known on this mark only, as an append knows it: a mark read again
            # (another writer's write meanwhile, which may have made the summary) knows
            # nothing of it, and the next try raises it.
            if slot.group.mark is not None:
                slot.group.mark.kept = _seq.NO_SUMMARY
            switched = True
    remove(transaction, taken)
    codes = [r.get("Code") for r in reasons]
    if not failed and not _ops._RETRYABLE_CANCELLATIONS.intersection(codes):
        raise exc
    transaction.backoff = deleting or not failed
    # Removing what another import stored, turning a put into an update (once a group), or
    # reading a sequence another writer moved (counted apart), is progress. A transaction in
    # flight on its items is another writer's progress: counted apart, with more tries.
    if not failed and steps.contended(codes):
        transaction.conflicts += 1
    elif not (taken or switched or moved) or deleting:
        transaction.attempt += 1
    if transaction.groups:
        _give_up_after(transaction, exc, deleting=deleting, codes=codes)
    return taken


def _give_up_after(
    transaction: Transaction, exc: BaseException, *, deleting: bool, codes: list[Any]
) -> None:
    log.info(
        "import: transaction cancelled %s, retry %d (conflicts %d)",
        codes,
        transaction.attempt,
        transaction.conflicts,
    )
    if transaction.attempt < MAX_ATTEMPTS and transaction.conflicts < steps.MAX_CONFLICTS:
        return
    log.warning("import: giving up after %d attempts", transaction.attempt + transaction.conflicts)
    if deleting:
        raise ConflictError(
            "import: a session is being deleted (retry once delete_sandbox has returned)",
            code="TransactionCanceledException",
        ) from exc
    raise gave_up(
        f"import: transaction cancelled {transaction.attempt + transaction.conflicts} times "
        f"({codes})",
        codes,
        code=error_code(exc) or "TransactionCanceledException",
    ) from exc


def read_each_stored(
    table: str, sessions: Sequence[tuple[str, str]], sequencer: Sequencer | None = None
) -> Op[list[list[LedgerEntry]]]:
    """``read_stored`` of each session in order: the first page of :data:`READS` sessions'
    queries at once (most sessions fit one page), then each one's further pages. The same
    Query reads the session's sequence marks (and its claims and markers, between them in
    the partition): ``sequencer`` learns where each session's next mark goes, so the import
    that follows does not read it again."""
    found: list[list[LedgerEntry]] = []
    for start in range(0, len(sessions), READS):
        chunk = sessions[start : start + READS]
        queries = [_stored_and_marks(table, name, sandbox_id) for name, sandbox_id in chunk]
        pages = yield Parallel(tuple(Call("query", q) for q in queries))
        for (name, sandbox_id), query, page in zip(chunk, queries, pages, strict=True):
            items = list(page.get("Items", []))
            if page.get("LastEvaluatedKey"):
                rest = {**query, "ExclusiveStartKey": page["LastEvaluatedKey"]}
                items += yield from query_all(rest)
            marks = [item for item in items if _seq.numbered(item) or _seq.is_seal(item)]
            if sequencer is not None:
                last = {"Items": marks[-1:]}
                sequencer.learn(k.session_pk(name, sandbox_id), _seq.next_mark(last))
            entries = [item for item in items if item[k.SORT_KEY]["S"].startswith(k.EVENT_PREFIX)]
            found.append((yield from _ops.stored_entries(table, name, sandbox_id, entries)))
    return found


def _stored_and_marks(table: str, name: str, sandbox_id: str) -> dict[str, Any]:
    """The Query of a session's entries through its sequence marks (``E#`` to ``Q#``)."""
    return {
        "TableName": table,
        "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :lo AND :hi",
        "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY},
        "ExpressionAttributeValues": {
            ":pk": S(k.session_pk(name, sandbox_id)),
            ":lo": S(k.EVENT_PREFIX),
            ":hi": S(k.SEQUENCE_PREFIX[:-1] + "$"),
        },
        "ConsistentRead": True,
    }
