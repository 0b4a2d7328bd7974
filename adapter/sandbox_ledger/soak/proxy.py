"""A loopback TCP proxy between clients and a server that delays, resets, and drops a
response after the server has processed its request (a lost acknowledgement: the client
sends again what already happened).

It does not parse what it carries: each chunk a client sends draws one fault (most draw
none), so a request, which a client sends whole, draws once or a few times. ``drop`` lets
the chunk through and, once the server starts answering, aborts both connections: the
server acted, the client hears a connection reset. ``reset`` aborts both before the chunk
reaches the server. ``delay`` holds the chunk a moment.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from dataclasses import dataclass

__all__ = ["FaultProxy", "Faults"]


@dataclass(frozen=True)
class Faults:
    """The chance of each fault per chunk a client sends, and the longest delay (seconds)."""

    drop: float = 0.01
    reset: float = 0.005
    delay: float = 0.05
    max_delay: float = 0.2


class FaultProxy:
    """Serves on ``127.0.0.1`` (a port of its own) what ``upstream`` serves, with faults drawn
    from ``seed``. :attr:`counts` says how many of each it made."""

    def __init__(self, upstream: tuple[str, int], seed: int, faults: Faults = Faults()) -> None:
        self.upstream, self.faults = upstream, faults
        self._rng = random.Random(seed)
        self.counts: Counter[str] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        # Each connection's task, held until it ends: asyncio keeps only a weak reference, and
        # one waiting on a server that restarted was collected mid-way ("Task was destroyed
        # but it is pending!" on the run's output, its connections never closed).
        self._handlers: set[asyncio.Task[None]] = set()
        self.port = 0

    def start(self) -> int:
        """Start serving in a daemon thread; the port it serves on."""
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="soak-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self.port

    def stop(self) -> None:
        """Stop serving; idempotent."""
        loop, server, self._loop, self._server = self._loop, self._server, None, None
        if loop is not None and server is not None:
            loop.call_soon_threadsafe(server.close)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def _draw(self) -> str | None:
        roll = self._rng.random()
        for name, chance in (("drop", self.faults.drop), ("reset", self.faults.reset)):
            if roll < chance:
                return name
            roll -= chance
        return "delay" if roll < self.faults.delay else None

    async def _handle(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        self.counts["connections"] += 1
        try:
            server, to_server = await asyncio.open_connection(*self.upstream)
        except OSError:
            to_client.transport.abort()
            return
        dropping = asyncio.Event()

        def abort() -> None:
            to_client.transport.abort()
            to_server.transport.abort()

        async def requests() -> None:
            while data := await client.read(65536):
                fault = self._draw()
                if fault == "reset":
                    self.counts["reset"] += 1
                    abort()
                    return
                if fault == "delay":
                    self.counts["delayed"] += 1
                    await asyncio.sleep(self._rng.uniform(0, self.faults.max_delay))
                if fault == "drop":
                    dropping.set()
                to_server.write(data)
                await to_server.drain()
            if to_server.can_write_eof():
                to_server.write_eof()

        async def responses() -> None:
            while data := await server.read(65536):
                if dropping.is_set():
                    # The server answered: it acted on the request. The client never hears it.
                    self.counts["dropped"] += 1
                    abort()
                    return
                to_client.write(data)
                await to_client.drain()
            to_client.close()

        try:
            await asyncio.gather(requests(), responses())
        except (OSError, asyncio.IncompleteReadError):
            abort()
