"""PostgreSQL followers woken by ``LISTEN``/``NOTIFY`` instead of polling on a short timer.

Schema version 4 adds a trigger that, for every entry stored, sends a notification on the
channel :data:`CHANNEL` with ``<schema>:<session row id>`` (PostgreSQL delivers it when the
append commits, and folds identical ones of one transaction into one). A
:class:`Listener` per adapter holds one connection of its own that listens on that channel
and wakes the followers of that session (a follower whose session has not begun yet wakes
on every notification of its schema). A follower then polls (the same indexed read) and,
while nothing comes, waits for a notification up to :data:`FALLBACK_POLL` seconds: a poll
that long after the last catches what a notification could not carry (the listening
connection lost and reconnecting).

Notifications need the adapter's own DSN (an adapter given a ``pool`` polls) and a server
that allows ``LISTEN`` (not through a transaction-mode pooler such as PgBouncer's): when the
listening connection cannot be opened or is lost, followers poll on the normal schedule
(:class:`~sandbox_ledger.follow.PollSettings`) and a warning is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox_ledger.follow import PollSettings

if TYPE_CHECKING:
    from sandbox_ledger.follow import Poll

__all__ = ["CHANNEL", "FALLBACK_POLL", "Listener", "Waker"]

CHANNEL = "sandbox_ledger_follow"
FALLBACK_POLL = 5.0
"""The longest wait between two polls of an idle follower while notifications work."""

log = logging.getLogger("sandbox_ledger.follow")


@dataclass(eq=False)
class Waker:
    """One follower's wake-up: set by a notification of its session (None: not begun yet)."""

    session: int | None = None
    event: asyncio.Event = field(default_factory=asyncio.Event)


class Listener:
    """One listening connection shared by an adapter's followers (see the module)."""

    def __init__(self, dsn: str, schema: str) -> None:
        self._dsn, self._schema = dsn, schema
        self._wakers: set[Waker] = set()
        self._conn: Any = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.healthy = False

    async def start(self) -> bool:
        """Listen, if not already (idempotent); False when notifications cannot be had."""
        async with self._lock:
            if self.healthy:
                return True
            import psycopg

            try:
                self._conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True)
                await self._conn.execute(f"LISTEN {CHANNEL}")
            except psycopg.Error as exc:
                log.warning("follow: no notifications (%s); followers poll", type(exc).__name__)
                await self._drop()
                return False
            self.healthy = True
            self._task = asyncio.get_running_loop().create_task(self._run(self._conn))
            return True

    def settings(self, polling: PollSettings) -> PollSettings:
        """The poll schedule of a follower: the given one, but idle polls at most every
        :data:`FALLBACK_POLL` seconds while notifications wake it."""
        if not self.healthy:
            return polling
        return PollSettings(polling.first, max(polling.longest, FALLBACK_POLL))

    async def wait(self, waker: Waker, step: Poll, polling: PollSettings) -> None:
        """Wait ``step.wait`` seconds or until a notification for ``waker``'s session."""
        waker.session = None if step.state is None else int(step.state["s"])
        if step.wait > 0:
            if self.healthy:
                self._wakers.add(waker)
                try:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(waker.event.wait(), step.wait)
                finally:
                    self._wakers.discard(waker)
            else:  # lost: the normal schedule's wait, never the long one
                await asyncio.sleep(min(step.wait, polling.longest))
        # Cleared before the poll: a notification arriving during it wakes the next wait.
        waker.event.clear()

    async def _run(self, conn: Any) -> None:
        try:
            async for note in conn.notifies():
                schema, _, session = str(note.payload).partition(":")
                if schema != self._schema:
                    continue
                for waker in list(self._wakers):
                    if waker.session is None or str(waker.session) == session:
                        waker.event.set()
        except Exception as exc:  # the connection is lost: followers go back to polling
            log.warning("follow: notifications lost (%s); followers poll", type(exc).__name__)
        finally:
            self.healthy = False
            for waker in list(self._wakers):
                waker.event.set()

    async def close(self) -> None:
        """Stop listening; idempotent."""
        async with self._lock:
            self.healthy = False
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._task
                self._task = None
            await self._drop()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
