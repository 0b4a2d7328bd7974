"""Following a session on DynamoDB (``DynamoDBAdapter.follow``), as operations for
:mod:`sandbox_ledger.sdk.steps`, shared by both twins.

A follower reads the session's **sequence marks** (:mod:`._sequence`): every entry stored
puts the next mark ``Q#<n>`` with it in one transaction, and a mark is committed only after
the one before it, so the marks are dense and numbered in commit order. Each poll is one
strongly consistent Query of the marks after the last one handed out, then one
BatchGetItem of the entries they point at (heads, and the parts of a large entry, which
were written before its head); a follower from the session's start reads the entries with
the marks in one Query instead (as ``read_all`` does). Every entry is handed out once, in
commit order, however late it was stored after its ``ts``, whatever the writers' clocks,
and whether an append or an import stored it.

**Gaps.** A Query is not a snapshot: it can read mark ``n + 1`` but not mark ``n``, when
``n`` committed while the Query ran. The follower stops before such a gap and polls again;
a gap still there on the next poll, after the later mark was seen, is a mark deleted since
(TTL expired its entry): passed by.

**Liveness.** A position holds its mark's number and the session's incarnation. The first
poll of a resumed follower reads its mark (absent, or of another incarnation: the session was
deleted, the follower ends); afterwards every n-th empty poll does, and a mark of another
incarnation met in a poll ends it too: a position never resumes inside a session deleted and
begun again. A delete's seal (:mod:`._delete`) met after a mark of the followed incarnation
ends it while its delete runs (the summary holds the delete's lease: one GetItem) and once
it has finished (the seal is spent); a seal a delete left when it died is passed, the
follower going on in the seal's incarnation, as the session does. A follower from the
session's start passes every seal: the session after a delete goes on in its incarnation.
A mark whose entry is gone while the mark lives (a delete is taking the
session) ends it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb import _ops
from sandbox_ledger.dynamodb import _sequence as _seq
from sandbox_ledger.follow import Batch, Poll, PollSettings, bad_after
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.sdk.attributes import S
from sandbox_ledger.sdk.batching import batch_get
from sandbox_ledger.sdk.paging import query_all
from sandbox_ledger.sdk.steps import Call, Op

if TYPE_CHECKING:
    from sandbox_ledger.models import LedgerEntry

__all__ = ["SessionPoller", "check_state"]

_AFTER_EVERY_MARK = k.SEQUENCE_PREFIX[:-1] + "$"  # "Q$": sorts after every "Q#..." key


def check_state(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` if it is one a poll makes: ``{"q": the mark's number, "i": the session's
    incarnation}``."""
    number, incarnation = state.get("q"), state.get("i")
    if set(state) != {"q", "i"} or not isinstance(incarnation, str) or not incarnation:
        raise bad_after()
    if not isinstance(number, int) or isinstance(number, bool):
        raise bad_after()
    if not 0 <= number < _seq.MAX_MARKS or len(incarnation) > 64:
        raise bad_after()
    return state


class SessionPoller:
    """The polls of one follower of one session (it remembers the gap it last stopped at)."""

    def __init__(self, table: str, name: str, sandbox_id: str, settings: PollSettings) -> None:
        self.table, self.name, self.sandbox_id = table, name, sandbox_id
        self.pk = k.session_pk(name, sandbox_id)
        self.settings = settings
        self.resumed_checked = False
        self.gap: tuple[int, int] | None = None
        """(the missing mark, the later one seen) where the last poll stopped."""
        self.dead_seals: set[tuple[int, str]] = set()
        """Seals (number, incarnation) of deletes that died: links to the seal's incarnation."""

    def poll(self, request: Poll) -> Op[Batch]:
        """One poll: the marks' Query, the entries' BatchGetItem, and the liveness read when
        it is due."""
        state = request.state
        if not self.resumed_checked:
            # A follower resumed from a position checks its mark first; one that began at
            # the session's start has nothing to check.
            self.resumed_checked = True
            if state is not None and not (yield from self._exists(state)):
                return Batch([], gone=True)
        # From the start, one Query reads the entries with their marks (heads and parts sort
        # before the marks): a catch-up costs what read_all costs, not a read per entry.
        lower = k.EVENT_PREFIX if state is None else k.sequence_sk(state["q"] + 1)
        items = yield from query_all(
            {
                "TableName": self.table,
                "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :lo AND :hi",
                "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY},
                "ExpressionAttributeValues": {
                    ":pk": S(self.pk),
                    ":lo": S(lower),
                    ":hi": S(_AFTER_EVERY_MARK),
                },
                "ConsistentRead": True,
            }
        )
        read = {i[k.SORT_KEY]["S"]: i for i in items if i[k.SORT_KEY]["S"] < k.SEQUENCE_PREFIX}
        run, gone, seal = self._run(state, items)
        while seal is not None and not run:
            # A seal after the incarnation followed: a delete is taking the session (the
            # follower ends), or one died there (the session goes on in the seal's
            # incarnation: the follower passes the seal, docs/live.md).
            if _ops._held_by_delete((yield from _ops._delete_mark(self.table, self.pk))):
                return Batch([], gone=True)
            self.dead_seals.add(seal)
            run, gone, seal = self._run(state, items)
        if run:
            found = yield from self._entries(run, read)
            if found is None:
                return Batch([], gone=True)
            if found:
                return Batch(found)
            return Batch([], gone=gone)  # every mark of the run expired: none to hand out
        if gone:
            return Batch([], gone=True)
        if state is not None and request.idle % self.settings.liveness_every == 0:
            return Batch([], gone=not (yield from self._exists(state)))
        return Batch([])

    def _run(
        self, state: dict[str, Any] | None, items: list[Any]
    ) -> tuple[list[tuple[int, str, Any]], bool, tuple[int, str] | None]:
        """The marks to hand out next: consecutive from the one after ``state`` (from the
        first stored, at the start), in one incarnation; whether the session is gone (a mark
        of another incarnation follows); and the seal (number, incarnation) the run stopped
        at, a delete's whose fate is not known yet. A seal of :attr:`dead_seals` is passed:
        the run goes on in its incarnation."""
        expected = None if state is None else state["q"] + 1
        incarnation = None if state is None else state["i"]
        run: list[tuple[int, str, Any]] = []
        for item in items:
            numbered = _seq.numbered(item)
            if numbered is None:
                if incarnation is not None and _seq.is_spent(item):
                    return run, True, None  # a delete finished here: the session is gone
                if incarnation is not None and _seq.is_seal(item):
                    number = k.sequence_number(item[k.SORT_KEY]["S"])
                    seal = (number or 0, item[A.INCARNATION]["S"])
                    if seal not in self.dead_seals:
                        return run, False, seal
                    incarnation, expected = seal[1], seal[0] + 1
                continue
            number, inc = numbered
            if incarnation is None and not it.live(item, it.now_s()):
                # From the start: a mark (and its entry) expired, of an incarnation that may
                # have ended (the session expired whole and began again after it).
                continue
            if incarnation is None:
                incarnation = inc
            if inc != incarnation:
                return run, True, None
            if expected is not None and number != expected:
                if self.gap is not None and self.gap[0] == expected:
                    # Still missing a poll after a later mark was seen: the later mark was
                    # committed after it, so it was deleted since (TTL expired its entry).
                    expected = number
                else:
                    self.gap = (expected, number)
                    return run, False, None
            run.append((number, inc, item))
            expected = number + 1
        self.gap = None
        return run, False, None

    def _entries(
        self, run: list[tuple[int, str, Any]], read: dict[str, Any]
    ) -> Op[list[tuple[dict[str, Any], LedgerEntry]] | None]:
        """The entries the marks of ``run`` point at, each with the state after it (their
        items from ``read``, the poll's Query, else one BatchGetItem: a head committed while
        the Query passed its place is read there); None if an entry of a live mark is gone
        (a delete is taking the session)."""
        now_s = it.now_s()
        items: list[Any] = []
        keys: list[Any] = []
        for _, _, mark in run:
            if not _seq.entry_live(mark, now_s):
                continue
            head = mark[A.REF]["S"]
            parts = int(mark[A.PARTS]["N"]) if A.PARTS in mark else 0
            for sk in (head, *(k.part_sk(head, p) for p in range(1, parts + 1))):
                if sk in read:
                    items.append(read[sk])
                else:
                    keys.append({k.PARTITION_KEY: S(self.pk), k.SORT_KEY: S(sk)})
        if keys:
            items += yield from batch_get(self.table, keys)
        items.sort(key=lambda item: item[k.SORT_KEY]["S"])
        keyed, broken = it.assemble_entries(self.name, self.sandbox_id, items)
        if broken:
            return None
        entries = dict(keyed)
        found: list[tuple[dict[str, Any], LedgerEntry]] = []
        for number, inc, mark in run:
            state = {"q": number, "i": inc}
            if not _seq.entry_live(mark, now_s):
                continue
            entry = entries.get(mark[A.REF]["S"])
            if entry is None:
                return None
            found.append((state, entry))
        return found

    def _exists(self, state: dict[str, Any]) -> Op[bool]:
        """Whether the mark of ``state`` is stored, in its incarnation."""
        found = yield Call(
            "get_item",
            {
                "TableName": self.table,
                "Key": {k.PARTITION_KEY: S(self.pk), k.SORT_KEY: S(k.sequence_sk(state["q"]))},
                "ConsistentRead": True,
                "ProjectionExpression": "#inc",
                "ExpressionAttributeNames": {"#inc": A.INCARNATION},
            },
        )
        item = found.get("Item")
        return item is not None and item.get(A.INCARNATION, {}).get("S") == state["i"]
