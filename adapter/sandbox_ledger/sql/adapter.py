"""The ledger contract on SQL, written once over a dialect's hooks.

:class:`SQLAdapter` validates, encodes, picks the statement and decodes; a dialect
(``sandbox_ledger.sqlite``, ``sandbox_ledger.postgres``) subclasses it and brings only what
differs, each difference a hook: its connections, their retries and transactions
(``_read``, ``_writing``, over a :class:`~sandbox_ledger.sql.connection.Connection`), how an
append is stored exactly once (``_insert``, ``_live_append_key``), whether its text holds NUL
(``text_holds_nul``), what a purge does between batches (``_between_batches``), its
migrations (``_migrations``) and its statements
(:class:`~sandbox_ledger.sql.statements.Statements`). A new contract method is written here
once, over a statement in ``Statements`` (or one in each dialect's subclass where they differ).
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

from sandbox_ledger.changes import start_changes
from sandbox_ledger.errors import StorageError
from sandbox_ledger.follow import DEFAULT_POLL, Batch, Position, drive_async, start
from sandbox_ledger.keys import check_environment_name, check_retention
from sandbox_ledger.sql import bulk, rows
from sandbox_ledger.sql import changes as feed
from sandbox_ledger.sql import follow as live
from sandbox_ledger.sql import retention as ret
from sandbox_ledger.sql.schema import migrate
from sandbox_ledger.telemetry import Target, instrumented

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
    from datetime import timedelta
    from types import TracebackType

    from sandbox_ledger.changes import Change, ChangeBatch
    from sandbox_ledger.errors import InvalidInputError
    from sandbox_ledger.follow import FollowedEntry, Poll, PollSettings
    from sandbox_ledger.models import (
        CheckpointInfo,
        EnvironmentRecord,
        LedgerEntry,
        ListSandboxOptions,
        SandboxDetails,
        SandboxPage,
    )
    from sandbox_ledger.sql.connection import Connection
    from sandbox_ledger.sql.schema import Migration
    from sandbox_ledger.sql.statements import Statements

__all__ = ["SQLAdapter"]

T = TypeVar("T")


def _now() -> int:
    """The reader's clock in Unix seconds: what expiries are compared with."""
    return int(time.time())


@instrumented()
class SQLAdapter(ABC):
    """The ledger contract over one dialect's statements and connections.

    A dialect's ``retention`` (how long ledger entries are kept, a positive ``timedelta``) is
    recorded in the database on :meth:`connect` if it has none yet; None (the default) uses
    the database's (keep forever unless an adapter recorded one). A retention other than the
    database's raises ``DeploymentMismatchError`` naming both on :meth:`connect`. Reads hide
    what has expired; :meth:`purge_expired` deletes it. See docs/table-design.md, Ledger
    retention.

    ``read_only=True`` (what the CLI's read commands open) creates, migrates and records
    nothing: a store without the ledger schema raises ``StoreNotFoundError``, an older schema
    ``StorageError``, and every write ``StorageError``.
    """

    record_trace_ids: bool | None = None
    """Whether ``append`` records its span's trace and span ids into the entry (True, False),
    or as ``SANDBOX_LEDGER_RECORD_TRACE_IDS`` says (None: :func:`sandbox_ledger.telemetry.
    records_trace_ids`)."""

    consistent_listings: ClassVar[bool] = True
    """A listing shows every write committed before it (see the DynamoDB adapter's)."""

    text_holds_nul: ClassVar[bool]
    """Whether the dialect's text columns can hold NUL; where not, a read or delete of a key
    holding one answers as for nothing stored (writes of NUL every store refuses alike)."""

    queries: Statements
    """The SQL text the adapter runs (for DBAs and EXPLAIN)."""

    def __init__(
        self,
        *,
        store: str,
        retention: timedelta | None,
        where: str,
        read_only: bool = False,
        namespace: str | None = None,
    ) -> None:
        self._retention = check_retention(retention)
        self.read_only = read_only
        """Opened for reading only: :meth:`connect` creates, migrates and records nothing."""
        self.retention = retention
        # What cursors are bound to: the database and its own store_id (read once per
        # client), so another database refuses them, even one of the same name.
        self._store = store
        self._store_id: str | None = None
        self._where = where
        self._namespace = namespace

    def telemetry_target(self) -> Target:
        """``db.system.name``, ``db.collection.name`` (the entries table) and
        ``db.namespace`` of this store's spans (:mod:`sandbox_ledger.telemetry`)."""
        return (self.telemetry_system, "ledger_events", self._namespace)

    telemetry_system: ClassVar[str]
    """The dialect's ``db.system.name``."""

    # -- the dialect's hooks ----------------------------------------------------------------

    @abstractmethod
    async def connect(self) -> None:
        """Open the connections and create or migrate the schema; idempotent."""

    @abstractmethod
    async def close(self) -> None:
        """Close what :meth:`connect` opened; idempotent."""

    @abstractmethod
    async def _read(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """``work`` on a connection (opened lazily), retried as the dialect retries."""

    @abstractmethod
    async def _writing(
        self, work: Callable[[Connection], Awaitable[T]], *, one_statement: bool
    ) -> T:
        """``work`` in one write transaction (``one_statement``: it runs one statement)."""

    async def _writing_batch(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """``work`` in one write transaction of many statements: an import batch."""
        return await self._writing(work, one_statement=False)

    @abstractmethod
    async def _insert(self, row: rows.EventRow, *, idempotent: bool) -> bool:
        """Store one entry and fold it into its session's summary, atomically; False,
        writing nothing, when ``idempotent`` and an entry with its append key is stored."""

    @abstractmethod
    def _live_append_key(self, entry: LedgerEntry) -> str:
        """The append key of a live append (empty: none), fixed before its first attempt."""

    @abstractmethod
    async def _between_batches(self, elapsed: float) -> None:
        """What a purge does after a full batch that took ``elapsed`` seconds."""

    @abstractmethod
    def _migrations(self) -> tuple[Migration, ...]:
        """The schema files this library ships for the dialect, oldest first."""

    async def _prepare(self, conn: Connection) -> None:
        """Create or migrate the schema and agree on the retention, on ``connect()``; opened
        ``read_only``, only check that the schema is there and current."""
        migrations = self._migrations()
        await migrate(conn, self.queries, migrations, where=self._where, read_only=self.read_only)
        settings = f"ledger_settings of {self._where}"
        if self.read_only:
            await ret.check(conn, self.queries, self._retention, settings)
        else:
            await ret.settle(conn, self.queries, self._retention, settings)

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- statements -------------------------------------------------------------------------

    async def _fetchall(self, sql: str, params: Mapping[str, Any] | Sequence[Any]) -> list[Any]:
        """The rows of one read."""
        if self._never_stored(params):
            return []
        return await self._read(lambda conn: conn.rows(sql, params))

    async def _write(self, statements: tuple[str, ...], params: Mapping[str, Any]) -> int:
        """Run ``statements`` in one transaction; the rows the last one changed."""
        self._check_writable()
        if self._never_stored(params):
            return 0

        async def work(conn: Connection) -> int:
            changed = 0
            for sql in statements:
                changed = await conn.count(sql, params)
            return changed

        return await self._writing(work, one_statement=len(statements) == 1)

    def _never_stored(self, params: Mapping[str, Any] | Sequence[Any]) -> bool:
        """Whether a parameter holds NUL where the dialect's text cannot (every write refuses
        it, so nothing stored equals it): a lookup by equality then answers as for no row,
        as the other stores do, instead of sending what the server refuses."""
        return not self.text_holds_nul and rows.holds_nul(params)

    # -- ledger -----------------------------------------------------------------------------

    async def append(self, entry: LedgerEntry) -> None:
        """Store one entry and fold it into its session's summary, in one transaction."""
        key = self._live_append_key(rows.check_entry(entry))
        await self._insert(self._encode(entry, key), idempotent=False)

    async def append_at(self, entry: LedgerEntry, position: int) -> None:
        """Append idempotently at a caller-chosen position (e.g. a line number on import):
        the same entry at the same position is stored once however often it is appended."""
        key = rows.append_key(rows.check_entry(entry), position)
        await self._insert(self._encode(entry, key), idempotent=True)

    async def append_once(self, entry: LedgerEntry, occurrence: int) -> bool:
        """Append occurrence ``occurrence`` of this content in its session unless it is
        stored (what an import writes, see :mod:`sandbox_ledger.transfer`); False, writing
        nothing, when another write stored it first, so imports running at once store it
        once."""
        key = rows.claim_key(rows.check_entry(entry), occurrence)
        return await self._insert(self._encode(entry, key), idempotent=True)

    def _check_writable(self) -> None:
        if self.read_only:
            raise StorageError(f"{self._where}: opened read_only, a write is refused")

    async def read_stored_sessions(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]:
        """``read_stored`` of each session, in order, a few hundred per query (an import's
        reconciliation read of one batch; see :mod:`sandbox_ledger.sql.bulk`)."""
        return await bulk.read_sessions(self, sessions, append_order=False)

    async def append_once_many(
        self,
        items: Sequence[tuple[LedgerEntry, int]],
        *,
        digests: Sequence[str] | None = None,
    ) -> list[bool | InvalidInputError]:
        """``append_once`` of each item in one transaction, each session's summary updated
        once; a refused item's error is its outcome (see :mod:`sandbox_ledger.sql.bulk`)."""
        return await bulk.append_once_many(self, items, digests)

    def _encode(
        self, entry: LedgerEntry, key: str, *, session_checked: bool = False
    ) -> rows.EventRow:
        """The row of an entry to store (every append encodes one: refused read-only)."""
        self._check_writable()
        return rows.encode_entry(entry, key=key, session_checked=session_checked)

    async def read_all(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry of the session, ascending ts, ties in append order (one query)."""
        found = await self._fetchall(self.queries.read_all, self._key(name, sandbox_id))
        return [rows.decode_entry(name, sandbox_id, *r) for r in found]

    async def ledger_retention(self) -> int | None:
        """The ledger retention appends use (seconds; None: keep forever): what an import
        checks entries against, so it never writes one already expired.
        The database's, whatever this adapter was given."""
        [(seconds,)] = await self._fetchall(self.queries.retention, {})
        return None if seconds is None else int(seconds)

    async def read_stored(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry still stored, expired ones included until a purge removes them (what
        an import reconciles a file against, so that a re-import writes nothing twice)."""
        key = {**self._key(name, sandbox_id), "now": ret.EVERYTHING}
        found = await self._fetchall(self.queries.read_all, key)
        return [rows.decode_entry(name, sandbox_id, *r) for r in found]

    async def read_sessions_in_append_order(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]:
        """``read_in_append_order`` of each session, in order, a few hundred per query (an
        export's read of a run of sessions)."""
        return await bulk.read_sessions(self, sessions, append_order=True)

    async def read_in_append_order(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry of the session in the order it was appended (what an export replays)."""
        key = self._key(name, sandbox_id)
        found = await self._fetchall(self.queries.read_in_append_order, key)
        return [rows.decode_entry(name, sandbox_id, *r) for r in found]

    async def scan_sessions(
        self, name: str | None = None, *, segments: int | None = None
    ) -> list[tuple[str, str]]:
        """Every (name, sandboxId) with at least one entry, listed or not (sessions without
        ``sandbox.created`` included), sorted; for exports (reads every session row in one
        query: ``segments`` is checked and ignored)."""
        rows.check_scan(name, segments)
        found = await self._fetchall(
            self.queries.sessions_with_entries, {"name": name, "now": _now()}
        )
        found.sort()  # the rows are (name, sandbox_id) tuples already: sorted in place
        return found

    async def last_checkpoint(self, name: str, sandbox_id: str) -> LedgerEntry | None:
        """The session's last checkpoint entry (one indexed query), or None."""
        found = await self._fetchall(self.queries.last_checkpoint, self._key(name, sandbox_id))
        return rows.decode_entry(name, sandbox_id, *found[0]) if found else None

    async def list_checkpoints(self, name: str, sandbox_id: str) -> list[CheckpointInfo]:
        """Checkpoints in creation order (only checkpoint rows are read)."""
        found = await self._fetchall(self.queries.checkpoints, self._key(name, sandbox_id))
        return [rows.row_checkpoint(ts, payload) for ts, payload in found]

    async def list_sandbox_details(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of one name, newest first (one indexed query)."""
        rows.check_text(name, "name")
        return (await self._page(rows.list_query(name, opts, await self._identity()))).sessions

    async def list_all_sandbox_details(
        self, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of every name, newest first (one indexed query)."""
        return (await self._page(rows.list_query(None, opts, await self._identity()))).sessions

    async def list_sandbox_page(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> SandboxPage:
        """One page of sessions of one name and the cursor of the next (keyset on
        (startedAt, session id), one indexed query)."""
        rows.check_text(name, "name")
        return await self._page(rows.list_query(name, opts, await self._identity()))

    async def list_all_sandbox_page(self, opts: ListSandboxOptions | None = None) -> SandboxPage:
        """One page of sessions of every name and the cursor of the next."""
        return await self._page(rows.list_query(None, opts, await self._identity()))

    follow_poll: PollSettings = DEFAULT_POLL
    """How often ``follow`` polls while idle (see :class:`~sandbox_ledger.follow.PollSettings`)."""

    async def follow(
        self, name: str, sandbox_id: str, *, after: str | None = None, until_closed: bool = True
    ) -> AsyncGenerator[FollowedEntry, None]:
        """The session's entries in append order as they are appended (see
        :class:`~sandbox_ledger.protocol.FollowAdapter` and :mod:`sandbox_ledger.sql.follow`):
        an indexed read per poll, backing off while idle."""
        key = self._key(name, sandbox_id)
        statements = live.FollowStatements(self.queries)
        position = Position(await self._identity(), key["name"], key["sandbox_id"])
        settings, wait = await self._follow_wake()
        flow = start(
            position, after, live.check_state, until_closed=until_closed, settings=settings
        )

        async def step(request: Poll) -> Batch:
            params = {**key, "now": _now()}
            if self._never_stored(key):  # a session no write can make: it never begins
                return Batch([])
            return await self._read(lambda conn: live.poll(conn, statements, params, request.state))

        traced = (self, "follow", {"sandbox.name": name, "sandbox.id": sandbox_id})
        async for followed in drive_async(flow, step, wait, traced=traced):
            yield followed

    async def changes(self, *, after: str | None = None) -> AsyncGenerator[Change, None]:
        """The fleet's changes, oldest kept first, then each new one (see
        :class:`~sandbox_ledger.protocol.ChangesAdapter` and :mod:`sandbox_ledger.sql.changes`):
        an indexed read of the changes table per poll, backing off while idle."""
        store = await self._identity()
        flow = start_changes(store, after, feed.check_state, settings=self.follow_poll)
        # Ids name the database by its own store_id, not by the URL it was opened with, so
        # readers of one database through different paths drop the same repeats.
        ids = f"sql:{self._store_id}"

        async def step(request: Poll) -> ChangeBatch:
            return await self._read(lambda conn: feed.poll(conn, self.queries, ids, request.state))

        async for change in drive_async(flow, step, traced=(self, "changes", {})):
            yield change

    async def _follow_wake(self) -> tuple[PollSettings, Callable[[Poll], Awaitable[None]]]:
        """A new follower's poll schedule and how it waits between polls: the dialect's hook
        (PostgreSQL: woken by notifications); here it sleeps on ``follow_poll``."""

        async def sleep(step: Poll) -> None:
            await asyncio.sleep(step.wait)

        return self.follow_poll, sleep

    async def _identity(self) -> str:
        """The store the listings' cursors are bound to (read on the first listing only)."""
        if self._store_id is None:
            found = await self._fetchall(self.queries.store_id, [])
            self._store_id = str(found[0][0])
        return f"{self._store}:{self._store_id}"

    async def _page(self, query: rows.ListQuery) -> SandboxPage:
        sql, params = self.queries.list_sessions(query, _now())
        return rows.page_of(await self._fetchall(sql, params), query)

    async def get_sandbox_details(self, name: str, sandbox_id: str) -> SandboxDetails | None:
        """One session's summary (one row), or None."""
        found = await self._fetchall(self.queries.details, self._key(name, sandbox_id))
        return rows.decode_details(*found[0]) if found else None

    async def delete_sandbox(self, name: str, sandbox_id: str) -> None:
        """Delete the session's entries and summary in one transaction."""
        await self._write(self.queries.delete_sandbox, self._key(name, sandbox_id))

    async def purge_expired(self, *, batch_size: int = 1000) -> int:
        """Delete the entries, and then the session rows, that expired by now; return how
        many rows went (entries and sessions).

        Each batch of at most ``batch_size`` rows is one short transaction found through the
        partial indexes on ``expires_at``, so no lock is held for long; after a full batch the
        dialect may give way (SQLite pauses as long as the batch held the file's write lock,
        so waiting writers get it in between). A session row goes once every entry ever
        appended to it has expired (its summary with it). Nothing expires, and nothing is
        purged, on a database without a retention.
        """
        size = ret.check_batch_size(batch_size)
        params = {"now": _now(), "limit": size}

        async def batch(sql: str) -> int:
            start = time.monotonic()
            deleted = await self._write((sql,), params)
            if deleted == size:
                await self._between_batches(time.monotonic() - start)
            return deleted

        statements = (self.queries.purge_events, self.queries.purge_sessions)
        return await ret.purge_in_batches(batch, statements, size)

    @staticmethod
    def _key(name: str, sandbox_id: str) -> dict[str, Any]:
        """The session's key, and the time (Unix s) reads compare expiries with."""
        return {
            "name": rows.check_text(name, "name"),
            "sandbox_id": rows.check_text(sandbox_id, "sandboxId"),
            "now": _now(),
        }

    # -- environments -----------------------------------------------------------------------

    async def get_environment(self, name: str) -> EnvironmentRecord | None:
        """The environment record, or None."""
        key = {"name": check_environment_name(name)}
        found = await self._fetchall(self.queries.get_environment, key)
        return rows.decode_environment(found[0][0]) if found else None

    async def save_environment(self, record: EnvironmentRecord) -> None:
        """Create or replace the record with ``record.name``."""
        name, built_at, text = rows.encode_environment(record)
        values = {"name": name, "built_at": built_at, "record": text}
        await self._write((self.queries.save_environment,), values)

    async def delete_environment(self, name: str) -> None:
        """Remove the record if present."""
        key = {"name": check_environment_name(name)}
        await self._write((self.queries.delete_environment,), key)

    async def list_environments(self) -> list[EnvironmentRecord]:
        """Every record, newest builtAt first, ties in first-saved order."""
        found = await self._fetchall(self.queries.list_environments, {})
        return [rows.decode_environment(r[0]) for r in found]
