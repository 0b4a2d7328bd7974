"""The ledger contract on one SQLite file (or ``:memory:``), over aiosqlite.

Concurrency: one connection per adapter, one operation at a time on it; several adapters,
threads or processes may share one file. WAL mode lets readers run beside the writer; every
write is one ``BEGIN IMMEDIATE`` transaction that waits ``busy_timeout`` for the file's write
lock and is retried with backoff while SQLite reports SQLITE_BUSY, so concurrent writers
lose nothing and, since a busy transaction never commits, duplicate nothing.

The contract's methods are :class:`~sandbox_ledger.sql.adapter.SQLAdapter`'s; this module
brings SQLite's connection, retries, migrations and statements as its hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sandbox_ledger.errors import (
    ConfigurationError,
    InvalidInputError,
    StorageError,
    StoreNotFoundError,
)
from sandbox_ledger.sql import rows
from sandbox_ledger.sql.adapter import SQLAdapter
from sandbox_ledger.sql.schema import Migration, load_migrations
from sandbox_ledger.sqlite.connection import SQLiteConnection as _Connection
from sandbox_ledger.sqlite.connection import attach_stage, open_connection
from sandbox_ledger.sqlite.queries import Queries, stored_key

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from datetime import timedelta

    import aiosqlite

    from sandbox_ledger.models import LedgerEntry
    from sandbox_ledger.sql.connection import Connection

MIGRATIONS: tuple[Migration, ...] = load_migrations("sandbox_ledger.sqlite")
"""The schema files shipped with this library, oldest first."""
SCHEMA_VERSION = MIGRATIONS[-1].version
"""The schema version this library writes."""

T = TypeVar("T")


def _is_busy(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc)
    return "locked" in text or "busy" in text


async def _release(db: aiosqlite.Connection) -> None:
    """End a write transaction that failed or was cancelled. A statement whose await was
    cancelled (a timeout, Ctrl-C) still runs in aiosqlite's thread: a BEGIN IMMEDIATE waiting
    for the write lock takes it later. A no-op queued behind it waits for it, so
    in_transaction is then current, and the lock is not left held by an abandoned
    transaction."""
    async with db.execute("SELECT 1"):
        pass
    if db.in_transaction:
        await db.execute("ROLLBACK")


MAX_CACHE_MB = 2**21
"""The largest page cache SQLite takes (``PRAGMA cache_size`` holds -2**31 KiB at most; a
larger size wraps, and SQLite silently keeps another)."""


class SQLiteAdapter(SQLAdapter):
    """The ledger contract on one SQLite database file.

    Args:
        path: the database file (created with its schema on first use), or ``":memory:"``
            for a private in-memory database that lives until :meth:`close`.
        busy_timeout: seconds one attempt waits for another writer's lock.
        max_wait: seconds a write keeps retrying SQLITE_BUSY before raising StorageError.
        retention: how long ledger entries are kept (a positive ``timedelta``; None, the
            default: the database's), as :class:`~sandbox_ledger.sql.adapter.SQLAdapter` says.
        read_only: open for reading only: a missing file raises ``StoreNotFoundError`` (none
            is created), and nothing is migrated, recorded or written.
        cache_mb: the most memory SQLite's page cache of this connection takes, in MiB
            (filled only as pages are read or written). SQLite's own default, 2 MiB, makes
            every insert into a large ledger read and spill index pages (an import of
            300,000 lines took a quarter longer); 32 MiB imported a million lines as fast
            as 64 MiB did.

    The file is put in WAL mode (not when opened ``read_only``). Safe to share between
    processes and threads (each with its own adapter); one adapter serializes its own
    operations.
    """

    text_holds_nul = True
    telemetry_system = "sqlite"

    queries: Queries

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout: float = 5.0,
        max_wait: float = 60.0,
        retention: timedelta | None = None,
        read_only: bool = False,
        cache_mb: int = 32,
    ) -> None:
        if isinstance(path, Path):
            path = str(path)
        if not isinstance(path, str) or not path:
            raise ValueError("path: must be a file path or ':memory:'")
        private = path == ":memory:"
        store = f"sqlite:{secrets.token_hex(8) if private else os.path.realpath(path)}"
        super().__init__(
            store=store,
            retention=retention,
            where=f"sqlite {path}",
            read_only=read_only,
            namespace=str(path),
        )
        self.path = path
        self.busy_timeout = busy_timeout
        self.max_wait = max_wait
        if (
            not isinstance(cache_mb, int)
            or isinstance(cache_mb, bool)
            or not 1 <= cache_mb <= MAX_CACHE_MB
        ):
            raise InvalidInputError(
                "cache_mb", f"must be a whole number of MiB from 1 to {MAX_CACHE_MB:,}"
            )
        self.cache_mb = cache_mb
        self.queries = Queries()
        self._db: aiosqlite.Connection | None = None
        self._releasing: asyncio.Future[None] | None = None
        self._lock = asyncio.Lock()

    # -- lifecycle --------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the file, switch it to WAL, create or migrate its schema, agree on the
        retention; idempotent.

        Raises:
            SchemaVersionError: the file's schema is newer than this library.
            DeploymentMismatchError: ``retention`` is not the one the database records.
        """
        async with self._lock:
            await self._open()

    async def close(self) -> None:
        """Close the connection (an in-memory database is gone); idempotent."""
        async with self._lock:
            db, self._db = self._db, None
            if db is not None:
                await db.close()

    async def _open(self) -> aiosqlite.Connection:
        if self._db is not None:
            return self._db
        try:
            import aiosqlite  # noqa: F401 - only whether it is installed: open_connection uses it
        except ImportError as exc:
            raise ConfigurationError(
                "SQLiteAdapter needs aiosqlite: pip install 'sandbox-ledger-dynamodb[sqlite]' "
                f"(missing module: {exc.name})"
            ) from exc
        location = self.path
        if self.path != ":memory:":
            # ~ is the user's home in the folder check and in the file opened alike.
            location = str(Path(self.path).expanduser())
            parent = Path(location).parent
            if not parent.is_dir():
                raise StorageError(f"sqlite: folder {parent} does not exist (for {self.path})")
            if self.read_only and not Path(location).is_file():
                what = "is not a file" if Path(location).exists() else "does not exist"
                raise StoreNotFoundError(f"sqlite: {self.path} {what} (a read never creates one)")
        try:
            db = await open_connection(location, timeout=self.busy_timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise StorageError(f"sqlite: cannot open {self.path}: {exc}") from exc
        try:
            await self._retry(lambda: self._set_up(db), db)
        except BaseException:
            await db.close()
            raise
        self._db = db
        return db

    async def _set_up(self, db: aiosqlite.Connection) -> None:
        await db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        await db.execute(f"PRAGMA cache_size = -{self.cache_mb * 1024}")  # negative: KiB
        if self.path != ":memory:" and not self.read_only:
            async with db.execute("PRAGMA journal_mode = WAL") as cursor:
                row = await cursor.fetchone()
            if row is None or str(row[0]).lower() != "wal":
                raise StorageError(f"sqlite: {self.path} cannot use WAL mode (got {row})")
        await db.execute("PRAGMA foreign_keys = ON")
        await attach_stage(db)
        await self._prepare(_Connection(db))

    def _migrations(self) -> tuple[Migration, ...]:
        return MIGRATIONS

    async def _retry(self, attempt: Callable[[], Awaitable[Any]], db: aiosqlite.Connection) -> Any:
        """Run ``attempt`` until it is not refused by SQLITE_BUSY, up to ``max_wait`` seconds."""
        deadline = time.monotonic() + self.max_wait
        tries = 0
        while True:
            try:
                return await attempt()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise StorageError(f"sqlite {self.path}: {exc}") from exc
                if db.in_transaction:
                    await db.execute("ROLLBACK")
                tries += 1
                if time.monotonic() >= deadline:
                    raise StorageError(
                        f"sqlite {self.path}: still busy after {tries} attempts "
                        f"({self.max_wait:g} s): {exc}",
                        code="SQLITE_BUSY",
                    ) from exc
                await asyncio.sleep(random.uniform(0, min(0.5, 0.005 * 2**tries)))
            except sqlite3.Error as exc:
                raise StorageError(f"sqlite {self.path}: {exc}") from exc

    async def _run(self, op: Callable[[aiosqlite.Connection], Awaitable[Any]]) -> Any:
        """One operation on the connection (opened lazily), with SQLITE_BUSY retried."""
        async with self._lock:
            db = await self._open()
            if self._releasing is not None:
                # An earlier write cancelled twice left its release running: wait for it, so
                # that neither a read nor a write runs inside that write's transaction (a read
                # would see what its ROLLBACK is about to undo).
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._releasing)
                self._releasing = None
            return await self._retry(lambda: op(db), db)

    async def _transaction(
        self,
        op: Callable[[aiosqlite.Connection], Awaitable[Any]],
        *,
        journal_in_memory: bool = False,
    ) -> Any:
        """One write transaction: BEGIN IMMEDIATE, ``op``, COMMIT; rolled back on any error.

        ``journal_in_memory``: temp_store is MEMORY for this transaction only, switched
        before its BEGIN (a database's pager fixes where its statement journal goes when its
        write transaction begins: a switch inside the transaction is too late for it, and is
        refused once the connection's temporary database is open) and back to DEFAULT after
        its COMMIT or ROLLBACK."""

        async def transaction(db: aiosqlite.Connection) -> Any:
            # _run waited for an earlier cancelled write's release: this BEGIN comes after
            # its ROLLBACK on the connection.
            try:
                if journal_in_memory:
                    await db.execute("PRAGMA temp_store = MEMORY")
                await db.execute("BEGIN IMMEDIATE")
                result = await op(db)
                await db.execute("COMMIT")
            except BaseException:
                # The release runs to its end even if this task is cancelled again meanwhile
                # (shielded); the original error is raised either way.
                self._releasing = asyncio.ensure_future(_release(db))
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.shield(self._releasing)
                    self._releasing = None
                if journal_in_memory:
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await db.execute("PRAGMA temp_store = DEFAULT")
                raise
            if journal_in_memory:
                with contextlib.suppress(Exception):
                    await db.execute("PRAGMA temp_store = DEFAULT")
            return result

        return await self._run(transaction)

    # -- the contract's hooks ---------------------------------------------------------------

    async def _read(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        result: T = await self._run(lambda db: work(_Connection(db)))
        return result

    async def _writing(
        self, work: Callable[[Connection], Awaitable[T]], *, one_statement: bool
    ) -> T:
        # Every write, one statement or more, is a BEGIN IMMEDIATE transaction: it waits for
        # the file's write lock and is retried whole while SQLite reports busy.
        result: T = await self._transaction(lambda db: work(_Connection(db)))
        return result

    async def _writing_batch(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        # The change feed's trigger makes SQLite journal the batch's statements, in a
        # temporary file by default; in memory for the batch only (a large sort of another
        # query still spills to disk). See _transaction's journal_in_memory.
        result: T = await self._transaction(
            lambda db: work(_Connection(db)), journal_in_memory=True
        )
        return result

    def _live_append_key(self, entry: LedgerEntry) -> str:
        # None (stored NULL): a write refused as busy never commits (one transaction), so a
        # retry of it cannot store it twice.
        return ""

    async def _insert(self, row: rows.EventRow, *, idempotent: bool) -> bool:
        params = {**rows.append_params(row), "append_key": row.append_key or None}
        q = self.queries

        async def work(conn: Connection) -> bool:
            # BEGIN IMMEDIATE holds the file's write lock: nothing stores the key meanwhile.
            if idempotent and await conn.rows(q.claimed, params):
                return False
            [(session_id,)] = await conn.rows(q.upsert_session, params)
            key = None if row.append_key == "" else stored_key(session_id, row.append_key)
            stored = {**params, "session_id": session_id, "append_key": key}
            await conn.count(q.insert_event, stored)
            return True

        return await self._writing(work, one_statement=False)

    async def _between_batches(self, elapsed: float) -> None:
        # More to come: step aside as long as the batch held the file's write lock, so
        # writers polling for it (SQLite's busy handler sleeps) get it first.
        await asyncio.sleep(elapsed)
