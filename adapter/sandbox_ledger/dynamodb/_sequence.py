"""A session's sequence on DynamoDB: what lets a follower hand out every entry exactly once,
whatever the delay between an entry's ``ts`` and its storage and whatever the writers' clocks.

DynamoDB has no commit sequence, and an entry's sort key (``E#<ts>#<order>``) is its
writer's: an entry stored late, or with an old ``ts`` (an import, a replay, a clock behind),
lands behind entries a follower has already passed. So every write of an entry also puts a
**sequence mark** ``Q#<n>`` in the session's partition, in the same TransactWriteItems:

- the mark holds the sort key of the entry's head (``ref``), its part count (``np``), the
  session's **incarnation** (``inc``, drawn at random with mark 0) and a TTL: its entry's,
  raised to the mark before's (no mark expires before the one before it: TTL never frees
  the number of a session's last mark while earlier ones live), the entry's own beside it;
- mark ``n`` is put only where none exists (``attribute_not_exists``), and, for ``n > 0``,
  the same transaction checks that mark ``n - 1`` exists with the same incarnation
  (a ConditionCheck). Transactions are serializable, so a mark is committed only after the
  one before it: **the marks are dense**, numbered in commit order, and a strongly
  consistent Query of the marks after ``n`` sees every entry stored after the n-th.

A writer guesses ``n`` from what it last wrote (:class:`Sequencer`, per adapter); a guess
that another writer took first, or that a delete made stale, cancels the transaction on the
mark's condition, and the writer reads the session's last mark (one Query) and tries again
with the next number, its head's key (its idempotency key) unchanged. A writer's first
write of a session it has not seen reads the last mark first, whatever the entry (see
:func:`read_last`: a guess of mark 0 could begin a second sequence).

The incarnation tells a session deleted and begun again from the one a follower's position
was taken in: ``delete_sandbox`` seals the sequence with a mark of an incarnation of its own
and deletes the marks below it with the rest (:mod:`._delete`); the next session goes on
after the seal, in the seal's incarnation. A follower that meets another incarnation, or a
spent seal, ends (docs/live.md).

**A mark number is never taken twice.** A delete leaves its seal (marked spent once the
delete has finished) and mark 0, its entry's reference removed and in an incarnation of its
own: the last mark stays at least the highest number ever put, mark 0 (the one put with no
check of a mark before it) can never be put again, and no guess of mark 1 kept from before
passes its check of mark 0; the numbers between are free, but every mark after mark 0 is put
under the check of the mark before it (a fresh one after an expired mark too: that the
expired mark holds the incarnation read), which is gone. So a writer, or a delete, that acts
on what it read before another delete ran (a guess it kept, a page it read and then stalled
on) never meets a key that means something else now: its condition fails, or the key it
deletes is of a session already gone.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from sandbox_ledger import keys as k
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.sdk.attributes import N, S
from sandbox_ledger.sdk.steps import Call, Op

if TYPE_CHECKING:
    from sandbox_ledger.sdk.attributes import Item

__all__ = [
    "MAX_MARKS",
    "NO_SUMMARY",
    "Mark",
    "Sequencer",
    "entry_live",
    "is_seal",
    "is_spent",
    "last_query",
    "mark_actions",
    "mark_count",
    "mark_item",
    "new_incarnation",
    "next_mark",
    "numbered",
    "read_last",
    "seal_item",
    "sequenced",
]

MAX_MARKS = 10**12
"""Mark numbers have 12 digits in their sort key."""


def new_incarnation() -> str:
    return secrets.token_hex(6)


class Mark:
    """Where a session's next mark goes: ``number`` in incarnation ``incarnation``;
    ``floor``: the TTL of the mark before (no mark expires before the one before it);
    ``fresh``: the first mark of its incarnation (the mark before, if any, is not of it);
    ``before``: the incarnation of the mark before a fresh one (an expired mark, read),
    which the write checks the mark before still holds; ``kept``: the session summary's TTL
    as this writer's last write left it (None: not known; :data:`NO_SUMMARY`: no summary to
    keep), which a write raises where its mark's passes it (see
    :data:`._items.SUMMARY_SLACK_S`). Marks are in commit order, so it is exact while the
    guess is: another writer's write makes the guess miss, and the mark read then knows
    nothing of the summary."""

    __slots__ = ("before", "floor", "fresh", "incarnation", "kept", "number")

    def __init__(
        self,
        incarnation: str,
        number: int,
        floor: int | None = None,
        fresh: bool | None = None,
        before: str | None = None,
        kept: int | None = None,
    ) -> None:
        self.incarnation, self.number, self.floor = incarnation, number, floor
        self.fresh = number == 0 if fresh is None else fresh
        self.before = before if self.fresh else None
        self.kept = kept

    def copy(self) -> Mark:
        return Mark(self.incarnation, self.number, self.floor, self.fresh, self.before, self.kept)

    def after(self, heads: list[Item], kept: int | None = None) -> Mark:
        """Where the next mark goes once ``heads`` took their marks from this one (and
        left the summary's TTL at ``kept``, if given)."""
        floor = self.floor
        for head in heads:
            floor = _ttl(head, floor)
        kept = self.kept if kept is None else kept
        return Mark(self.incarnation, self.number + len(heads), floor, fresh=False, kept=kept)

    def ttl_after(self, heads: list[Item]) -> int | None:
        """The TTL of the last mark of ``heads``, taken from this one: the latest of the
        session's entries' TTLs once they are stored (None without a retention)."""
        return self.after(heads).floor

    def needs_raise(self, heads: list[Item], due: int) -> bool:
        """Whether writing ``heads`` must raise the summary's TTL: what the writer knows of
        it is short of their last mark's or of ``due`` (a write of an old ``ts`` late in
        the summary's last day: see :data:`._items.SUMMARY_RENEW_S`), or nothing."""
        ttl = self.ttl_after(heads)
        return ttl is not None and (self.kept is None or self.kept < max(ttl, due))

    def __repr__(self) -> str:
        return (
            f"Mark({self.incarnation!r}, {self.number}, {self.floor}, {self.fresh}, "
            f"{self.before!r}, {self.kept})"
        )


NO_SUMMARY = 2**62
""":attr:`Mark.kept` where no summary with a TTL is stored (the write that makes one sets
its TTL)."""


def _ttl(head: Item, floor: int | None) -> int | None:
    """The TTL of the mark of ``head``: its entry's, raised to ``floor``. Marks never expire
    before the marks before them, so TTL never removes a session's last mark while earlier
    ones live (the next write would take its number again, behind a follower that handed
    it out)."""
    if k.TTL_ATTRIBUTE not in head:
        return None
    own = int(head[k.TTL_ATTRIBUTE]["N"])
    return own if floor is None else max(own, floor)


class Sequencer:
    """A client's guesses of each session's next mark (the last it wrote or read, plus one),
    for at most ``size`` sessions (least recently used first out). Thread-safe; a wrong
    guess costs a cancelled transaction and a Query, never an entry.

    A guess that begins an incarnation (mark 0, or after an expired session: nothing checks
    the mark before it) is kept only :attr:`fresh_for` seconds: it says the session held no
    live sequence when it was read, and later another writer's sequence may begin and lose
    its first marks to TTL, which the guess could not tell from a new session."""

    fresh_for = 60.0

    def __init__(self, size: int = 4096) -> None:
        self._next: OrderedDict[str, tuple[Mark, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def guess(self, pk: str) -> Mark | None:
        with self._lock:
            known = self._next.get(pk)
            if known is None:
                return None
            mark, learned = known
            if mark.fresh and time.monotonic() - learned > self.fresh_for:
                del self._next[pk]
                return None
            self._next.move_to_end(pk)
            return mark.copy()

    def learn(self, pk: str, mark: Mark) -> None:
        """``mark`` is where the session's next mark goes (after a write or a read)."""
        with self._lock:
            self._next[pk] = (mark.copy(), time.monotonic())
            self._next.move_to_end(pk)
            while len(self._next) > self._size:
                self._next.popitem(last=False)

    def forget(self, pk: str) -> None:
        with self._lock:
            self._next.pop(pk, None)


def last_query(table: str, pk: str) -> dict[str, Any]:
    """The Query of :func:`read_last`: the session's last mark, strongly consistent."""
    return {
        "TableName": table,
        "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :q)",
        "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY},
        "ExpressionAttributeValues": {":pk": S(pk), ":q": S(k.SEQUENCE_PREFIX)},
        "ScanIndexForward": False,
        "Limit": 1,
        "ConsistentRead": True,
    }


def next_mark(page: dict[str, Any], now_s: int | None = None) -> Mark:
    """Where the session's next mark goes, from the page of :func:`last_query`; a session
    without marks starts a new incarnation at 0, and so does one whose last mark expired
    (all of them have, then: a session wholly older than the retention, which TTL is
    removing in any order), after that mark: a follower of the expired session ends there."""
    items = page.get("Items", [])
    if not items:
        return Mark(new_incarnation(), 0)
    last = items[0]
    number = k.sequence_number(last[k.SORT_KEY]["S"])
    if number is None or A.INCARNATION not in last:  # not ours: start a new incarnation
        raise ValueError(f"not a sequence mark: {last[k.SORT_KEY]['S']!r}")
    ttl = int(last[k.TTL_ATTRIBUTE]["N"]) if k.TTL_ATTRIBUTE in last else None
    if ttl is not None and ttl <= (int(time.time()) if now_s is None else now_s):
        # The write checks that the expired mark still holds what was read: a guess kept
        # while the session was begun again and deleted (its marks after that one deleted,
        # their numbers free) must not put a mark below the delete's seal.
        return Mark(new_incarnation(), number + 1, fresh=True, before=last[A.INCARNATION]["S"])
    return Mark(last[A.INCARNATION]["S"], number + 1, ttl)


def read_last(table: str, pk: str) -> Op[Mark]:
    """Where the session's next mark goes, read from its last one (a strongly consistent
    Query of one item); a session without marks starts a new incarnation at 0.

    A writer reads it before its first write of a session it has no guess for, whatever
    the entry: a guess of mark 0 cannot tell a new session from one whose first marks are
    gone while later ones stay (TTL removed them, the oldest entries expiring first; an
    append that landed inside a delete_sandbox kept its mark), and it would begin a second
    sequence beside the first."""
    return next_mark((yield Call("query", last_query(table, pk))))


def mark_item(pk: str, mark: Mark, head: Item) -> Item:
    """The sequence mark of the entry whose head is ``head``, at ``mark`` (its TTL raised
    to ``mark.floor``, its entry's own kept beside it)."""
    item: Item = {
        k.PARTITION_KEY: S(pk),
        k.SORT_KEY: S(k.sequence_sk(mark.number)),
        A.REF: head[k.SORT_KEY],
        A.INCARNATION: S(mark.incarnation),
    }
    if A.PARTS in head:
        item[A.PARTS] = head[A.PARTS]
    ttl = _ttl(head, mark.floor)
    if ttl is not None:
        item[k.TTL_ATTRIBUTE] = N(ttl)
        if ttl != int(head[k.TTL_ATTRIBUTE]["N"]):
            item[A.ENTRY_EXPIRES] = head[k.TTL_ATTRIBUTE]
    return item


def seal_item(pk: str, number: int, token: str, ttl: int | None = None) -> Item:
    """A delete's seal (see :mod:`._delete`): mark ``number`` of the session with no entry, in
    an incarnation of its own (``token``), with ``ttl`` if the session's marks have one. An
    append whose guess continues the sealed incarnation fails its condition, reads the seal
    as the last mark and goes on after it in the seal's incarnation: the entries stored
    while the delete runs are a new session."""
    item: Item = {
        k.PARTITION_KEY: S(pk),
        k.SORT_KEY: S(k.sequence_sk(number)),
        A.INCARNATION: S(token),
    }
    if ttl is not None:
        item[k.TTL_ATTRIBUTE] = N(ttl)
    return item


def is_seal(item: Item, token: str | None = None) -> bool:
    """Whether ``item`` is a delete's seal (``token``'s, if given)."""
    if k.sequence_number(item.get(k.SORT_KEY, {}).get("S", "")) is None or A.REF in item:
        return False
    incarnation = item.get(A.INCARNATION, {}).get("S")
    return incarnation is not None and (token is None or incarnation == token)


def is_spent(item: Item) -> bool:
    """Whether ``item`` is a seal whose delete has finished (the session before it is gone)
    or mark 0 of a deleted entry: a follower positioned before it ends there."""
    return A.SPENT in item and is_seal(item)


def entry_live(mark: Item, now_s: int) -> bool:
    """Whether the entry of ``mark`` has not expired (its own TTL, not the mark's)."""
    ttl = mark.get(A.ENTRY_EXPIRES) or mark.get(k.TTL_ATTRIBUTE)
    return ttl is None or int(ttl["N"]) > now_s


_ABSENT = {
    "ConditionExpression": "attribute_not_exists(#pk)",
    "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY},
}


def mark_actions(table: str, pk: str, first: Mark, heads: list[Item]) -> list[dict[str, Any]]:
    """The actions that sequence ``heads`` (in this order) from ``first``: a check that the
    mark before ``first`` exists in its incarnation (for a fresh mark, in the incarnation it
    was read in; none for mark 0), then one conditional put per head."""
    if first.number + len(heads) > MAX_MARKS:
        raise ValueError("a session holds at most 10**12 entries")
    actions: list[dict[str, Any]] = []
    before = first.before if first.fresh else first.incarnation
    if before is not None:
        actions.append(
            {
                "ConditionCheck": {
                    "TableName": table,
                    "Key": {
                        k.PARTITION_KEY: S(pk),
                        k.SORT_KEY: S(k.sequence_sk(first.number - 1)),
                    },
                    "ConditionExpression": "#inc = :inc",
                    "ExpressionAttributeNames": {"#inc": A.INCARNATION},
                    "ExpressionAttributeValues": {":inc": S(before)},
                }
            }
        )
    mark = first
    for head in heads:
        actions.append({"Put": {"TableName": table, "Item": mark_item(pk, mark, head), **_ABSENT}})
        mark = mark.after([head])
    return actions


def sequenced(head: Item, number: int) -> Item:
    """``head`` carrying the number of its mark (``q``), written with it in one transaction:
    what orders entries of equal ``ts`` in commit order on every read, as the marks order a
    follower's and an export's (the order id in the head's key is when its append began)."""
    return {**head, A.SEQUENCE: N(number)}


def mark_count(first: Mark, heads: int) -> int:
    """How many actions :func:`mark_actions` makes."""
    return heads + (0 if first.fresh and first.before is None else 1)


def numbered(item: Item) -> tuple[int, str] | None:
    """A mark item's number and incarnation (None if it is not a mark)."""
    number = k.sequence_number(item[k.SORT_KEY]["S"])
    if number is None or A.INCARNATION not in item or A.REF not in item:
        return None
    return number, item[A.INCARNATION]["S"]
