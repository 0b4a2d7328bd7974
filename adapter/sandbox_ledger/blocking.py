"""The synchronous twin of any async store: :class:`BlockingAdapter`.

The DynamoDB adapter has a native twin, :class:`~sandbox_ledger.dynamodb.SyncDynamoDBAdapter`,
which shares its operation generators with the async one. The SQL adapters are written against
async drivers (aiosqlite, psycopg's async pool), so no such twin falls out of their design; a
synchronous program (a script, a WSGI app, a thread pool) uses them through this facade
instead::

    from sandbox_ledger.blocking import open_blocking_store

    with open_blocking_store("sqlite:///ledger.db") as ledger:
        ledger.append(entry)
        print(ledger.get_sandbox_details("job", "sb-1"))

The facade owns one event loop, in a daemon thread of its own, and runs each call there: the
methods are :class:`~sandbox_ledger.protocol.TransferAdapter`'s without ``await``, with the
same results and errors (a :class:`~sandbox_ledger.protocol.SyncTransferAdapter`). It may be
called from any number of threads at once (their calls run concurrently on the loop, as
concurrent tasks of one async client would). A call interrupted in the calling thread (Ctrl-C)
cancels its task on the loop. ``close()`` closes the adapter, then stops the loop; used again,
it starts another and the adapter reconnects, as every adapter does after ``close()``.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Coroutine, Generator, Sequence

    from sandbox_ledger.changes import Change
    from sandbox_ledger.errors import InvalidInputError
    from sandbox_ledger.follow import FollowedEntry
    from sandbox_ledger.models import (
        CheckpointInfo,
        EnvironmentRecord,
        LedgerEntry,
        ListSandboxOptions,
        SandboxDetails,
        SandboxPage,
    )
    from sandbox_ledger.protocol import TransferAdapter

T = TypeVar("T")

__all__ = ["BlockingAdapter", "open_blocking_store"]


class BlockingAdapter:
    """An async storage adapter behind synchronous methods (see the module docstring)."""

    def __init__(self, adapter: TransferAdapter) -> None:
        self.adapter = adapter
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def consistent_listings(self) -> bool:
        """The wrapped adapter's (see the DynamoDB adapter's)."""
        return bool(getattr(self.adapter, "consistent_listings", True))

    @property
    def record_trace_ids(self) -> bool | None:
        """The wrapped adapter's (:func:`sandbox_ledger.telemetry.records_trace_ids`): its
        appends are the ones that record the ids, so it is set there."""
        own = getattr(self.adapter, "record_trace_ids", None)
        return None if own is None else bool(own)

    @record_trace_ids.setter
    def record_trace_ids(self, value: bool | None) -> None:
        self.adapter.record_trace_ids = value  # type: ignore[attr-defined]

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started on first use and again after ``close()``; the caller holds
        ``_lock``."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=self._loop.run_forever, name="sandbox-ledger-blocking", daemon=True
            )
            self._thread.start()
        return self._loop

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                "BlockingAdapter called from its own event loop: await the adapter instead"
            )
        with self._lock:
            future = asyncio.run_coroutine_threadsafe(
                _carried(coro, contextvars.copy_context()), self._running_loop()
            )
        try:
            return future.result()
        except BaseException:
            future.cancel()  # interrupted here (Ctrl-C): stop the task there too
            raise

    # -- lifecycle ---------------------------------------------------------------------------

    def connect(self) -> None:
        self._run(self.adapter.connect())

    def close(self) -> None:
        """Close the adapter, then stop the loop and its thread; idempotent. Like every
        adapter, it reconnects lazily (on a new loop) if used again."""
        if self._loop is None:
            return
        try:
            self._run(self.adapter.close())
        finally:
            with self._lock:
                loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
            if loop is not None and thread is not None:
                loop.call_soon_threadsafe(loop.stop)
                thread.join()
                loop.close()

    def __enter__(self) -> BlockingAdapter:
        self.connect()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the contract, without await ----------------------------------------------------------

    def append(self, entry: LedgerEntry) -> None:
        self._run(self.adapter.append(entry))

    def read_all(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        return self._run(self.adapter.read_all(name, sandbox_id))

    def last_checkpoint(self, name: str, sandbox_id: str) -> LedgerEntry | None:
        return self._run(self.adapter.last_checkpoint(name, sandbox_id))

    def list_sandbox_details(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        return self._run(self.adapter.list_sandbox_details(name, opts))

    def list_all_sandbox_details(
        self, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        return self._run(self.adapter.list_all_sandbox_details(opts))

    def list_sandbox_page(self, name: str, opts: ListSandboxOptions | None = None) -> SandboxPage:
        return self._run(self.adapter.list_sandbox_page(name, opts))

    def list_all_sandbox_page(self, opts: ListSandboxOptions | None = None) -> SandboxPage:
        return self._run(self.adapter.list_all_sandbox_page(opts))

    def get_sandbox_details(self, name: str, sandbox_id: str) -> SandboxDetails | None:
        return self._run(self.adapter.get_sandbox_details(name, sandbox_id))

    def delete_sandbox(self, name: str, sandbox_id: str) -> None:
        self._run(self.adapter.delete_sandbox(name, sandbox_id))

    def list_checkpoints(self, name: str, sandbox_id: str) -> list[CheckpointInfo]:
        return self._run(self.adapter.list_checkpoints(name, sandbox_id))

    def get_environment(self, name: str) -> EnvironmentRecord | None:
        return self._run(self.adapter.get_environment(name))

    def save_environment(self, record: EnvironmentRecord) -> None:
        self._run(self.adapter.save_environment(record))

    def delete_environment(self, name: str) -> None:
        self._run(self.adapter.delete_environment(name))

    def list_environments(self) -> list[EnvironmentRecord]:
        return self._run(self.adapter.list_environments())

    # -- moving a ledger (TransferAdapter), without await ------------------------------------

    def scan_sessions(
        self, name: str | None = None, *, segments: int | None = None
    ) -> list[tuple[str, str]]:
        return self._run(self.adapter.scan_sessions(name, segments=segments))

    def read_in_append_order(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        return self._run(self.adapter.read_in_append_order(name, sandbox_id))

    def read_sessions_in_append_order(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]:
        return self._run(self.adapter.read_sessions_in_append_order(sessions))

    def read_stored(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        return self._run(self.adapter.read_stored(name, sandbox_id))

    def append_once(self, entry: LedgerEntry, occurrence: int) -> bool:
        return self._run(self.adapter.append_once(entry, occurrence))

    def read_stored_sessions(self, sessions: Sequence[tuple[str, str]]) -> list[list[LedgerEntry]]:
        return self._run(self.adapter.read_stored_sessions(sessions))

    def append_once_many(
        self,
        items: Sequence[tuple[LedgerEntry, int]],
        *,
        digests: Sequence[str] | None = None,
    ) -> list[bool | InvalidInputError]:
        return self._run(self.adapter.append_once_many(items, digests=digests))

    def ledger_retention(self) -> int | None:
        return self._run(self.adapter.ledger_retention())

    # -- following a session (FollowAdapter), without await ----------------------------------

    def follow(
        self, name: str, sandbox_id: str, *, after: str | None = None, until_closed: bool = True
    ) -> Generator[FollowedEntry, None, None]:
        """The adapter's ``follow`` as a plain iterator: each entry is waited for on the
        facade's loop; closing the iterator (or Ctrl-C while it waits) stops the follower."""
        from sandbox_ledger.protocol import FollowAdapter

        if not isinstance(self.adapter, FollowAdapter):
            raise TypeError(f"{type(self.adapter).__name__} cannot follow a session")
        stream = self.adapter.follow(name, sandbox_id, after=after, until_closed=until_closed)
        return self._iterate(stream)

    # -- the fleet's changes (ChangesAdapter), without await -------------------------------

    def changes(self, *, after: str | None = None) -> Generator[Change, None, None]:
        """The adapter's ``changes`` as a plain iterator (see :meth:`follow`)."""
        from sandbox_ledger.protocol import ChangesAdapter

        if not isinstance(self.adapter, ChangesAdapter):
            raise TypeError(f"{type(self.adapter).__name__} has no change feed")
        return self._iterate(self.adapter.changes(after=after))

    def _iterate(self, stream: AsyncGenerator[T, None]) -> Generator[T, None, None]:
        async def next_one() -> T | None:
            try:
                return await anext(stream)
            except StopAsyncIteration:
                return None

        async def stop() -> None:
            await stream.aclose()

        try:
            while (found := self._run(next_one())) is not None:
                yield found
        finally:
            if self._loop is not None:
                self._run(stop())


def open_blocking_store(url: str, *, read_only: bool = False) -> BlockingAdapter:
    """:func:`sandbox_ledger.open_store` for synchronous programs: the store ``url`` names,
    behind :class:`BlockingAdapter` (for ``dynamodb://`` prefer ``SyncDynamoDBAdapter``)."""
    from sandbox_ledger.stores import open_store

    return BlockingAdapter(open_store(url, read_only=read_only))


async def _carried(coro: Coroutine[Any, Any, T], context: contextvars.Context) -> T:
    """``coro`` run in the caller's context (its context variables: the current span of
    OpenTelemetry, whose children the adapter's spans then are), not the loop thread's; a
    cancellation of this task cancels it."""
    return await asyncio.get_running_loop().create_task(coro, context=context)
