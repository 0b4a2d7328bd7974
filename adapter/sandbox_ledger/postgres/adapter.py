"""The ledger contract on PostgreSQL, over psycopg 3 and a psycopg_pool connection pool.

Every method is one statement (one round trip), except ``connect()`` the first time. An
append inserts the entry and upserts its session's summary in one statement: the summary
is computed by the database, under the session row's lock, never read and rewritten from
Python, so concurrent appends from any number of processes lose nothing. Each append carries
a key fixed before its first attempt; when a connection fails, the append is retried and a
retry whose first attempt had in fact committed is recognised and stored once.

The contract's methods are :class:`~sandbox_ledger.sql.adapter.SQLAdapter`'s; this module
brings PostgreSQL's pool, retries, migrations and statements as its hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import re
from typing import TYPE_CHECKING, Any, TypeVar

from sandbox_ledger._redact import ScrubbingFilter, scrub
from sandbox_ledger.errors import ConfigurationError, StorageError
from sandbox_ledger.postgres.failures import connection_error
from sandbox_ledger.postgres.listen import Listener, Waker
from sandbox_ledger.postgres.queries import Queries
from sandbox_ledger.sql import rows
from sandbox_ledger.sql.adapter import SQLAdapter
from sandbox_ledger.sql.schema import Migration, load_migrations

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
    from datetime import timedelta

    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

    from sandbox_ledger.follow import Poll, PollSettings
    from sandbox_ledger.models import LedgerEntry
    from sandbox_ledger.sql.connection import Connection

MIGRATIONS: tuple[Migration, ...] = load_migrations("sandbox_ledger.postgres")
"""The schema files shipped with this library, oldest first."""
SCHEMA_VERSION = MIGRATIONS[-1].version
"""The schema version this library writes."""

DEFAULT_SCHEMA = "sandbox_ledger"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
T = TypeVar("T")
# Connection failures are retried this many times (the append key keeps that exactly-once).
MAX_ATTEMPTS = 4


class _PipelineAbortFilter(logging.Filter):
    """psycopg logs a warning for a pipeline's own abort while the error that aborted it
    propagates (``executemany`` of an import batch meeting another importer's claim, which
    the import retries): the error is raised anyway, so the warning is only noise on the
    stderr of an import that succeeds."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (
            record.msg == "error ignored terminating %r: %s"
            and len(args) == 2
            and type(args[0]).__name__ in ("Pipeline", "AsyncPipeline")
        )


logging.getLogger("psycopg").addFilter(_PipelineAbortFilter())


def _lock_key(schema: str) -> int:
    """The advisory lock that serializes schema changes of one schema across processes."""
    digest = hashlib.sha256(f"sandbox_ledger:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresAdapter(SQLAdapter):
    """The ledger contract on PostgreSQL.

    Args:
        dsn: a libpq connection string or ``postgresql://`` URL; the adapter owns its pool.
        pool: an existing ``psycopg_pool.AsyncConnectionPool`` instead of ``dsn`` (opened by
            the caller; ``close()`` leaves it open).
        schema: the PostgreSQL schema holding the ledger tables (created if absent).
        min_size, max_size: the size of the pool the adapter creates from ``dsn``.
        timeout: seconds to wait for a connection from the pool.
        retention: how long ledger entries are kept (a positive ``timedelta``; None, the
            default: the database's), as :class:`~sandbox_ledger.sql.adapter.SQLAdapter` says.
        read_only: open for reading only: a schema without the ledger raises
            ``StoreNotFoundError`` (none is created), and nothing is migrated, recorded or
            written.
    """

    text_holds_nul = False
    telemetry_system = "postgresql"

    queries: Queries

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        schema: str = DEFAULT_SCHEMA,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        retention: timedelta | None = None,
        read_only: bool = False,
    ) -> None:
        if (dsn is None) == (pool is None):
            raise ValueError("dsn, pool: give exactly one")
        if dsn is not None and (not isinstance(dsn, str) or not dsn):
            raise ValueError("dsn: must be a non-empty connection string")
        if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
            raise ValueError(
                f"schema: {schema!r} is not a plain lowercase identifier ([a-z_][a-z0-9_]*)"
            )
        # Cursors are bound to the schema (the DSN may hold a password; not the server,
        # which only a query could name), so a cursor of another schema is refused.
        super().__init__(
            store=f"postgres:{schema}",
            retention=retention,
            where=f"postgres schema {schema}",
            namespace=schema,
            read_only=read_only,
        )
        self.dsn = dsn
        self.schema = schema
        self.queries = Queries(schema)
        self._given_pool = pool
        self._pool: AsyncConnectionPool[Any] | None = None
        self._sizes = (min_size, max_size)
        self._timeout = timeout
        self._lock = asyncio.Lock()
        self._log_filter: ScrubbingFilter | None = None
        self._listener: Listener | None = None

    # -- lifecycle --------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the pool and create or migrate the schema; idempotent, safe when several
        processes start at once (they take turns on an advisory lock).

        Raises:
            SchemaVersionError: the database's schema is newer than this library.
            DeploymentMismatchError: ``retention`` is not the one the database records.
            StorageError: the server cannot be reached (the reason is in the message).
        """
        await self._open()

    async def close(self) -> None:
        """Close the pool the adapter created (a given pool stays open); idempotent."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()
        async with self._lock:
            pool, self._pool = self._pool, None
            if pool is not None and pool is not self._given_pool:
                await pool.close()
            if self._log_filter is not None:
                logging.getLogger("psycopg.pool").removeFilter(self._log_filter)
                self._log_filter = None

    async def _open(self) -> AsyncConnectionPool[Any]:
        if self._pool is not None:
            return self._pool
        async with self._lock:
            if self._pool is not None:
                return self._pool
            pool = self._given_pool or await self._new_pool()
            try:
                async with pool.connection() as conn:
                    await self._prepare(_Connection(conn, self.schema))
            except BaseException as exc:
                if pool is not self._given_pool:
                    await pool.close()
                import psycopg

                if isinstance(exc, psycopg.Error):
                    # A server refusing the schema (reserved name, no privilege, a failed
                    # migration) is a StorageError like every other operation's failure.
                    raise StorageError(
                        f"postgres schema {self.schema}: {exc}", code=exc.sqlstate
                    ) from exc
                raise
            self._pool = pool
            return pool

    async def _new_pool(self) -> AsyncConnectionPool[Any]:
        try:
            import psycopg  # noqa: F401 - checked here, used by every operation
            from psycopg_pool import AsyncConnectionPool
        except ImportError as exc:
            raise ConfigurationError(
                "PostgresAdapter needs psycopg: pip install 'sandbox-ledger-dynamodb[postgres]' "
                f"(missing module: {exc.name})"
            ) from exc
        min_size, max_size = self._sizes
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.dsn or "",
            min_size=min_size,
            max_size=max_size,
            timeout=self._timeout,
            kwargs={"autocommit": True},
            open=False,
        )
        # The pool logs each failed connection attempt with libpq's text, which may quote a
        # piece of a malformed URL: scrubbed of this DSN's password while the adapter lives.
        if self._log_filter is None:
            self._log_filter = ScrubbingFilter(self.dsn)
            logging.getLogger("psycopg.pool").addFilter(self._log_filter)
        try:
            await pool.open(wait=True, timeout=self._timeout)
        except Exception as exc:
            await pool.close()
            raise await connection_error(self.dsn or "", self._timeout, exc) from exc
        return pool

    async def _run(self, op: Callable[[AsyncConnection[Any]], Awaitable[Any]]) -> Any:
        """``op`` on a pooled connection; connection failures retried, errors translated."""
        pool = await self._open()  # says which extra to install when psycopg is missing
        import psycopg

        attempt = 0
        while True:
            attempt += 1
            try:
                async with pool.connection() as conn:
                    return await op(conn)
            except psycopg.OperationalError as exc:
                if attempt >= MAX_ATTEMPTS:
                    raise StorageError(
                        f"postgres: {scrub(str(exc), self.dsn)} (after {attempt} attempts)",
                        code=exc.sqlstate,
                    ) from exc
                await asyncio.sleep(random.uniform(0, 0.05 * 2**attempt))
            except psycopg.Error as exc:
                raise StorageError(
                    f"postgres: {scrub(str(exc), self.dsn)}", code=exc.sqlstate
                ) from exc
            except Exception as exc:
                if type(exc).__module__.startswith("psycopg_pool"):
                    raise StorageError(f"postgres pool: {scrub(str(exc), self.dsn)}") from exc
                raise

    def _migrations(self) -> tuple[Migration, ...]:
        return MIGRATIONS

    # -- the contract's hooks ---------------------------------------------------------------

    async def _read(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        result: T = await self._run(lambda conn: work(_Connection(conn, self.schema)))
        return result

    async def _writing(
        self, work: Callable[[Connection], Awaitable[T]], *, one_statement: bool
    ) -> T:
        async def transaction(conn: AsyncConnection[Any]) -> T:
            if one_statement:  # its own transaction (autocommit): no BEGIN, one round trip
                return await work(_Connection(conn, self.schema))
            async with conn.transaction():
                return await work(_Connection(conn, self.schema))

        result: T = await self._run(transaction)
        return result

    def _live_append_key(self, entry: LedgerEntry) -> str:
        # Fixed before the first attempt: a retry after a connection failure whose first
        # attempt had in fact committed is refused by the key, so it is stored once.
        return rows.append_key(entry)

    async def _insert(self, row: rows.EventRow, *, idempotent: bool) -> bool:
        await self._open()  # says which extra to install when psycopg is missing
        import psycopg

        params = rows.append_params(row)

        async def op(conn: AsyncConnection[Any]) -> bool:
            try:
                await conn.execute(self.queries.append, params)
            except psycopg.errors.UniqueViolation as exc:
                # Stored already (a retry whose first attempt committed, or a re-imported
                # line): the whole statement, summary included, was rolled back.
                if exc.diag.constraint_name != "ledger_events_append_key":
                    raise
                return False
            return True

        stored: bool = await self._run(op)
        return stored

    async def _follow_wake(self) -> tuple[PollSettings, Callable[[Poll], Awaitable[None]]]:
        """Followers woken by notifications when this adapter has a DSN and the server lets
        it listen; otherwise they poll (see :mod:`sandbox_ledger.postgres.listen`)."""
        if self.dsn is None:
            return await super()._follow_wake()
        await self._open()
        if self._listener is None:
            self._listener = Listener(self.dsn, self.schema)
        listener, polling = self._listener, self.follow_poll
        if not await listener.start():
            return await super()._follow_wake()
        waker = Waker()

        async def wait(step: Poll) -> None:
            await listener.wait(waker, step, polling)

        return listener.settings(polling), wait

    async def _between_batches(self, elapsed: float) -> None:
        # Each batch is one statement holding its rows' locks only: nothing to give way to.
        return


class _Connection:
    """A pooled connection as the SQL core uses it (a :class:`.connection.Connection`)."""

    def __init__(self, conn: AsyncConnection[Any], schema: str) -> None:
        self._conn = conn
        self._schema = schema

    async def rows(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None
    ) -> list[Any]:
        cursor = await self._conn.execute(sql, params)
        return list(await cursor.fetchall()) if cursor.description else []

    async def count(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        return int((await self._conn.execute(sql, params)).rowcount)

    async def many(self, sql: str, params: Sequence[Mapping[str, Any] | Sequence[Any]]) -> int:
        async with self._conn.cursor() as cursor:
            await cursor.executemany(sql, params)
            return int(cursor.rowcount)

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        async with self._conn.transaction():
            await self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(self._schema),))
            await self._conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._schema}"')
            yield

    async def apply(self, migration: Migration) -> None:
        await self._conn.execute(f'SET LOCAL search_path TO "{self._schema}"')
        await self._conn.execute(migration.sql.encode())
