"""Following a session as it grows: :class:`FollowedEntry`, positions and the poll loop.

Every adapter's ``follow(name, sandbox_id, *, after=None, until_closed=True)`` is the same loop
(:func:`follow_flow`) over a store's own poll: read what is newer than the last position,
hand it out, wait with backoff while nothing is new. The loop is written once as a generator
that yields what it needs (:class:`Poll`) and what it hands out
(:class:`FollowedEntry`); :func:`drive` and :func:`drive_async` run it.

A position is an opaque string sealed as cursors are (:mod:`sandbox_ledger.cursor`): bound
to the store and the session, so a position of another session or store, or an altered one,
is refused with :class:`~sandbox_ledger.errors.InvalidInputError` naming ``after``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sandbox_ledger._poll import DEFAULT_POLL as DEFAULT_POLL
from sandbox_ledger._poll import PollSettings
from sandbox_ledger.cursor import decode_cursor, encode_cursor
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.models import LedgerEntry, LedgerEvent
from sandbox_ledger.telemetry import Traced, poll_span

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Awaitable, Callable

__all__ = [
    "Batch",
    "FollowedEntry",
    "PollSettings",
    "Position",
    "check_counters",
    "drive",
    "drive_async",
    "follow_flow",
    "open_position",
    "start",
]

_KIND = "follow"


@dataclass(frozen=True)
class FollowedEntry:
    """One entry handed out by ``follow``: the entry (exactly as ``read_all`` returns it) and
    the position to pass back as ``after`` to resume just after it."""

    entry: LedgerEntry
    position: str


@dataclass(frozen=True)
class Batch:
    """What one poll found: (state after it, entry) pairs in follow order, and whether the
    session is gone (deleted: the follower ends once the pairs are handed out)."""

    found: list[tuple[dict[str, Any], LedgerEntry]]
    gone: bool = False
    due: float | None = None
    """Seconds until an entry the store holds back is due: the next poll comes then, if that
    is sooner than the backoff's (no store holds entries back today)."""


@dataclass(frozen=True)
class Poll:
    """Ask the store for what follows ``state`` (None: from the session's start), after
    waiting ``wait`` seconds; ``idle`` is how many empty polls came right before."""

    state: dict[str, Any] | None
    idle: int
    wait: float = 0.0


class Position:
    """Seals and reads the positions of one session of one store."""

    def __init__(self, store: str, name: str, sandbox_id: str) -> None:
        self._listing = [store, name, sandbox_id]

    def seal(self, state: dict[str, Any], closed: bool) -> str:
        """The position after the entry that left the store's poll at ``state``; ``closed``:
        ``sandbox.closed`` was handed out by then (a follower resumed there ends at once)."""
        return encode_cursor(_KIND, {"at": state, "closed": closed}, self._listing)

    def read(self, after: object) -> tuple[dict[str, Any], bool]:
        """The store's state in ``after``, a position this store made for this session, and
        whether ``sandbox.closed`` came before it.

        Raises:
            InvalidInputError: naming ``after``: not a position, altered, or another
                session's or store's.
        """
        body = open_position(_KIND, after, self._listing, "this session in this store")
        state, closed = body.get("at"), body.get("closed")
        if set(body) != {"at", "closed"} or not isinstance(state, dict):
            raise bad_after()
        if not isinstance(closed, bool):
            raise bad_after()
        return state, closed


def open_position(kind: str, after: object, listing: list[Any], of: str) -> dict[str, Any]:
    """The body of ``after``, a position of ``kind`` sealed for ``listing``.

    Raises:
        InvalidInputError: naming ``after`` (not a position ``of`` ..., altered, or another's).
    """
    try:
        return decode_cursor(kind, after, listing)
    except InvalidInputError as exc:
        reason = str(exc).partition(": ")[2] or str(exc)
        raise InvalidInputError("after", f"not a position of {of} ({reason})") from exc


def check_counters(
    state: dict[str, Any], names: set[str], refused: Callable[[], InvalidInputError]
) -> dict[str, Any]:
    """``state`` if its keys are ``names``, each a non-negative 64-bit integer; else the
    error ``refused`` makes (a position's state: a row id, a sequence number)."""
    if set(state) != names or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 for v in state.values()
    ):
        raise refused()
    return state


def bad_after() -> InvalidInputError:
    """The error of a position whose state is not one this store makes."""
    return InvalidInputError("after", "not a position of this session in this store")


Out = TypeVar("Out")
R = TypeVar("R")

FlowStep = Poll | FollowedEntry
Flow = Generator[FlowStep, "Batch | None", None]
"""The follow loop (:func:`follow_flow`) as its drivers see it."""


def start(
    position: Position,
    after: object,
    check: Callable[[dict[str, Any]], dict[str, Any]],
    *,
    until_closed: bool,
    settings: PollSettings,
) -> Flow:
    """The follow loop of one follower, from ``after`` (a position, checked by ``position``
    and its state by the store's ``check``) or from the session's start."""
    state, closed = (None, False) if after is None else position.read(after)
    return follow_flow(
        None if state is None else check(state),
        position.seal,
        until_closed=until_closed,
        closed=closed,
        settings=settings,
    )


def follow_flow(
    begin: dict[str, Any] | None,
    seal: Callable[[dict[str, Any], bool], str],
    *,
    until_closed: bool,
    closed: bool = False,
    settings: PollSettings = DEFAULT_POLL,
) -> Generator[FlowStep, Batch | None, None]:
    """The follow loop, once for every store and runner: poll, hand out, back off while idle;
    ends after ``sandbox.closed`` (``until_closed``; ``closed``: the position resumed from
    came after it) or when a poll finds the session gone."""
    state, idle, wait = begin, 0, 0.0
    if until_closed and closed:
        return
    while True:
        batch = yield Poll(state, idle, wait)
        assert batch is not None
        for state, entry in batch.found:
            closed = closed or entry.event == LedgerEvent.SandboxClosed
            yield FollowedEntry(entry, seal(state, closed))
            if until_closed and closed:
                return
        if batch.gone:
            return
        idle = 0 if batch.found else idle + 1
        wait = settings.delay(idle) if idle else 0.0
        if batch.due is not None:
            wait = min(wait, batch.due)


def _advance(flow: Generator[Poll | Out, R | None, None], reply: R | None) -> Poll | Out | None:
    try:
        return flow.send(reply)
    except StopIteration:
        return None


def drive(
    flow: Generator[Poll | Out, R | None, None],
    poll: Callable[[Poll], R],
    *,
    traced: Traced | None = None,
) -> Generator[Out, None, None]:
    """Run ``flow`` (a follow or a changes loop) in this thread: each :class:`Poll` by
    ``poll``, after its wait, in a span of its own when ``traced`` names the store, the
    operation and its attributes (:func:`sandbox_ledger.telemetry.poll_span`); everything
    else it yields is handed out."""
    with contextlib.closing(flow):
        reply: R | None = None
        while (step := _advance(flow, reply)) is not None:
            if not isinstance(step, Poll):
                yield step
                reply = None
                continue
            time.sleep(step.wait)
            with poll_span(traced):
                reply = poll(step)


async def _sleep(step: Poll) -> None:
    import asyncio  # here: building a DynamoDB adapter must not load the async stack

    await asyncio.sleep(step.wait)


async def drive_async(
    flow: Generator[Poll | Out, R | None, None],
    poll: Callable[[Poll], Awaitable[R]],
    wait: Callable[[Poll], Awaitable[None]] = _sleep,
    *,
    traced: Traced | None = None,
) -> AsyncGenerator[Out, None]:
    """Run ``flow`` on the running event loop: each :class:`Poll` by awaiting ``poll``,
    after ``wait`` (default: sleep its ``wait``; a store that is told of new entries wakes
    sooner), in a span of its own as :func:`drive` says."""
    with contextlib.closing(flow):
        reply: R | None = None
        while (step := _advance(flow, reply)) is not None:
            if isinstance(step, Poll):
                await wait(step)
                with poll_span(traced):
                    reply = await poll(step)
            else:
                reply = None
                yield step
