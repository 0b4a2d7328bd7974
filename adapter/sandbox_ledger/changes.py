"""The fleet's change feed: :class:`Change`, :class:`ChangeKind`, positions and the loop.

Every adapter's ``changes(*, after=None)`` is the same loop (:func:`changes_flow`) over a
store's own poll: read the changes after the last position, hand them out, wait with backoff
while nothing is new. The loop is a generator that yields what it needs
(:class:`~sandbox_ledger.follow.Poll`) and what it hands out (:class:`Change`); the follow
drivers (:func:`~sandbox_ledger.follow.drive`, :func:`~sandbox_ledger.follow.drive_async`)
run it.

A position is an opaque string sealed as cursors are (:mod:`sandbox_ledger.cursor`), bound to
the store: another store's position, or an altered one, is refused with
:class:`~sandbox_ledger.errors.InvalidInputError` naming ``after``. The feed is delivered at
least once: a change may come again (a consumer that resumes from an older position, a
DynamoDB stream read again), always with the same :attr:`Change.id`, so a consumer drops
repeats by id. See docs/live.md.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from sandbox_ledger.cursor import encode_cursor
from sandbox_ledger.errors import InvalidInputError, StorageError
from sandbox_ledger.follow import DEFAULT_POLL, Poll, PollSettings, check_counters, open_position

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "Change",
    "ChangeBatch",
    "ChangeFlow",
    "ChangeKind",
    "ChangesTrimmedError",
    "changes_flow",
    "start_changes",
]

_KIND = "changes"


class ChangeKind(StrEnum):
    """What happened. Sessions: created and closed (an entry of that event was stored),
    deleted (``delete_sandbox``), expired (the ledger retention removed it: DynamoDB's TTL,
    a SQL ``purge_expired``). Resource records (DynamoDB): expired by a sweeper, or removed by
    DynamoDB's TTL."""

    SESSION_CREATED = "session.created"
    SESSION_CLOSED = "session.closed"
    SESSION_DELETED = "session.deleted"
    SESSION_EXPIRED = "session.expired"
    RESOURCE_EXPIRED = "resource.expired"
    RESOURCE_TTL_REMOVED = "resource.ttl_removed"


@dataclass(frozen=True)
class Change:
    """One change of the fleet.

    ``id`` is the same every time this change is handed out (drop repeats by it);
    ``position`` resumes just after it (``changes(after=position)``); ``at`` is when it
    happened (Unix ms: the entry's ts for created and closed, else the store's clock).
    Sessions carry ``name`` and ``sandbox_id``, resource records ``record_id``.
    """

    kind: ChangeKind
    id: str
    at: int
    name: str | None = None
    sandbox_id: str | None = None
    record_id: str | None = None
    position: str = ""

    def wire(self) -> dict[str, Any]:
        """The change as JSON (``watch --output json`` prints one per line)."""
        out: dict[str, Any] = {"kind": self.kind.value, "id": self.id, "at": self.at}
        if self.record_id is None:
            out.update(name=self.name, sandboxId=self.sandbox_id)
        else:
            out["recordId"] = self.record_id
        out["position"] = self.position
        return out


class ChangesTrimmedError(StorageError):
    """The position is older than what the store keeps (a DynamoDB stream keeps 24 hours;
    a SQL store prunes, see docs/live.md): changes after it are lost. Start again without
    ``after`` (and reconcile from ``list``) or from a newer position."""


@dataclass(frozen=True)
class ChangeBatch:
    """What one poll found: (store state after it, change) pairs in feed order, and the
    state after everything the poll read (None: the last pair's), where the next poll goes
    on from."""

    found: list[tuple[dict[str, Any], Change]]
    end: dict[str, Any] | None = None


class _Positions:
    def __init__(self, store: str) -> None:
        self._listing = [store]

    def seal(self, state: dict[str, Any]) -> str:
        return encode_cursor(_KIND, {"at": state}, self._listing)

    def read(self, after: object) -> dict[str, Any]:
        body = open_position(_KIND, after, self._listing, "this store's changes")
        state = body.get("at")
        if set(body) != {"at"} or not isinstance(state, dict):
            raise bad_after()
        return state


def bad_after() -> InvalidInputError:
    """The error of a position whose state is not one this store makes."""
    return InvalidInputError("after", "not a position of this store's changes")


ChangeFlow = Generator["Poll | Change", "ChangeBatch | None", None]


def start_changes(
    store: str,
    after: object,
    check: Callable[[dict[str, Any]], dict[str, Any]],
    *,
    settings: PollSettings = DEFAULT_POLL,
) -> ChangeFlow:
    """The feed loop of one reader, from ``after`` (a position of ``store``, its state
    checked by the store's ``check``) or from the oldest change the store keeps.

    Raises:
        InvalidInputError: naming ``after`` (raised here, before any request).
    """
    positions = _Positions(store)
    state = None if after is None else check(positions.read(after))
    return changes_flow(state, positions.seal, settings=settings)


def changes_flow(
    begin: dict[str, Any] | None,
    seal: Callable[[dict[str, Any]], str],
    *,
    settings: PollSettings = DEFAULT_POLL,
) -> ChangeFlow:
    """The feed loop, once for every store and runner: poll, hand out, back off while idle.
    Never ends on its own: the consumer stops it (closing the iterator)."""
    state, idle, wait = begin, 0, 0.0
    while True:
        batch = yield Poll(state, idle, wait)
        assert batch is not None
        for at, change in batch.found:
            yield replace(change, position=seal(at))
            state = at
        if batch.end is not None:
            state = batch.end
        idle = 0 if batch.found else idle + 1
        wait = settings.delay(idle) if idle else 0.0


KEEP_SECONDS = 24 * 3600
"""How long the SQL and memory stores keep a change (DynamoDB's stream keeps 24 hours)."""


class ChangeLog:
    """The memory store's feed: changes in order, each numbered; a change older than
    ``keep_seconds`` is pruned when the next one is written (see docs/live.md)."""

    def __init__(self, store: str, keep_seconds: float = KEEP_SECONDS) -> None:
        self._store = store
        self.keep_seconds = keep_seconds
        self._kept: list[tuple[int, float, Change]] = []  # (seq, written at, change)
        self._next = 1
        self._pruned_through = 0

    def add(self, change: Change, now: float) -> None:
        """Record ``change`` (its ``id`` is given here), pruning what is too old."""
        seq, self._next = self._next, self._next + 1
        self._kept.append((seq, now, replace(change, id=f"{self._store}:{seq}")))
        while self._kept and self._kept[0][1] < now - self.keep_seconds:
            self._pruned_through = self._kept.pop(0)[0]

    def after(self, state: dict[str, Any] | None) -> ChangeBatch:
        """The changes after ``state`` (``{"q": seq}``; None: the oldest kept).

        Raises:
            ChangesTrimmedError: changes after ``state`` were pruned.
        """
        last = 0 if state is None else state["q"]
        if state is not None and last < self._pruned_through:
            raise trimmed(f"changes after it were pruned ({self.keep_seconds:g} s kept)")
        return ChangeBatch([({"q": q}, c) for q, _, c in self._kept if q > last])


def check_seq_state(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` if it is ``{"q": a non-negative integer}`` (the memory feed's)."""
    return check_counters(state, {"q"}, bad_after)


def trimmed(why: str) -> ChangesTrimmedError:
    """The error of a position older than what the store keeps."""
    return ChangesTrimmedError(
        f"after: the position is older than the changes this store keeps: {why}; changes "
        "after it are lost: start again without --after/after= and reconcile from a listing"
    )
