"""One append at a time per session within one client (both twins).

Every entry takes the session's next sequence mark (:mod:`._sequence`), and marks are taken
in order: two appends of one client to one session at once would guess the same mark, and
all but one would read the sequence again and retry. Within a client they queue instead,
each held only for its own transaction; writers in other processes still meet on the mark's
condition, which stays the rule that keeps the marks dense.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio
    from collections.abc import AsyncIterator, Iterator

__all__ = ["AsyncSessionLocks", "SessionLocks"]


class SessionLocks:
    """Per-session locks for threads; a session's lock lives while someone holds or waits."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def held(self, session: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(session, (None, 0))
            lock = lock or threading.Lock()
            self._locks[session] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                _, users = self._locks[session]
                if users == 1:
                    del self._locks[session]
                else:
                    self._locks[session] = (lock, users - 1)


class AsyncSessionLocks:
    """Per-session locks for the tasks of one event loop."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def held(self, session: str) -> AsyncIterator[None]:
        import asyncio  # here: building an adapter must not load the async stack

        lock, users = self._locks.get(session, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[session] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            _, users = self._locks[session]
            if users == 1:
                del self._locks[session]
            else:
                self._locks[session] = (lock, users - 1)
