"""The ledger contract on PostgreSQL, over psycopg 3 and a psycopg_pool connection pool.

Every method is one statement (one round trip), except ``connect()`` the first time. An
append inserts the entry and upserts its session's summary in one statement: the summary
is computed by the database, under the session row's lock, never read and rewritten from
Python, so concurrent appends from any number of processes lose nothing. Each append carries
a key fixed before its first attempt; when a connection fails, the append is retried and a
retry whose first attempt had in fact committed is recognised and stored once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import re
import time
from typing import TYPE_CHECKING, Any

from sandbox_ledger._redact import ScrubbingFilter, redact_url, scrub
from sandbox_ledger.errors import ConfigurationError, StorageError
from sandbox_ledger.keys import check_environment_name, check_retention
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.sql import retention as ret
from sandbox_ledger.sql import rows
from sandbox_ledger.sql.schema import Migration, load_migrations, log_migration, pending

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from datetime import timedelta
    from types import TracebackType

    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

    from sandbox_ledger.models import (
        CheckpointInfo,
        EnvironmentRecord,
        LedgerEntry,
        ListSandboxOptions,
        SandboxDetails,
        SandboxPage,
    )

MIGRATIONS: tuple[Migration, ...] = load_migrations("sandbox_ledger.postgres")
"""The schema files shipped with this library, oldest first."""
SCHEMA_VERSION = MIGRATIONS[-1].version
"""The schema version this library writes."""

DEFAULT_SCHEMA = "sandbox_ledger"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_CHECKPOINT = LedgerEvent.CheckpointCreated.value
# Connection failures are retried this many times (the append key keeps that exactly-once).
MAX_ATTEMPTS = 4


class Queries:
    """The SQL text the adapter runs, with the schema filled in (for DBAs and EXPLAIN)."""

    def __init__(self, schema: str) -> None:
        s = f'"{schema}"'
        self.schema = s
        self.sessions = f"{s}.ledger_sessions"
        retention = ret.retention_of(f"{s}.ledger_settings")
        live = ret.live("expires_at", "%(now)s")
        later_summary = ret.later_summary_expiry(
            "cur.summary_expires_at", "excluded.summary_expires_at"
        )
        session = (
            f"SELECT id FROM {s}.ledger_sessions WHERE name = %(name)s "
            "AND sandbox_id = %(sandbox_id)s"
        )
        self.append = f"""
WITH session AS (
    INSERT INTO {s}.ledger_sessions AS cur
        (name, sandbox_id, started_at, completed_at, status, exec_count,
         summary_expires_at, expires_at)
    VALUES (%(name)s, %(sandbox_id)s, %(started_at)s, %(completed_at)s,
            CASE WHEN %(completed_at)s::bigint IS NULL THEN 'running' ELSE 'completed' END,
            %(exec_delta)s,
            CASE WHEN %(summarizes)s THEN %(ts_s)s::bigint + {retention} END,
            %(ts_s)s::bigint + {retention})
    ON CONFLICT (name, sandbox_id) DO UPDATE SET
        started_at = coalesce(cur.started_at, excluded.started_at),
        completed_at = coalesce(cur.completed_at, excluded.completed_at),
        status = CASE WHEN coalesce(cur.completed_at, excluded.completed_at) IS NULL
                      THEN 'running' ELSE 'completed' END,
        exec_count = cur.exec_count + excluded.exec_count,
        summary_expires_at = CASE WHEN %(summarizes)s THEN {later_summary}
                                  ELSE cur.summary_expires_at END,
        expires_at = {ret.latest_expiry("cur.expires_at", "excluded.expires_at")}
    RETURNING id
)
INSERT INTO {s}.ledger_events
    (session_id, ts, step_index, branch, event, payload, error, append_key, expires_at)
SELECT id, %(ts)s, %(step_index)s, %(branch)s, %(event)s, %(payload)s, %(error)s,
       %(append_key)s, %(ts_s)s::bigint + {retention}
FROM session
"""
        self.read_all = f"""
SELECT ts, step_index, branch, event, payload, error FROM {s}.ledger_events
WHERE session_id = ({session}) AND {live}
ORDER BY ts, seq
"""
        self.read_in_append_order = f"""
SELECT ts, step_index, branch, event, payload, error FROM {s}.ledger_events
WHERE session_id = ({session}) AND {live}
ORDER BY seq
"""
        self.sessions_with_entries = f"""
SELECT s.name, s.sandbox_id FROM {s}.ledger_sessions AS s
WHERE (%(name)s::text IS NULL OR s.name = %(name)s)
  AND EXISTS (SELECT 1 FROM {s}.ledger_events AS e
              WHERE e.session_id = s.id AND {ret.live("e.expires_at", "%(now)s")})
"""
        self.checkpoints = f"""
SELECT ts, payload FROM {s}.ledger_events
WHERE session_id = ({session}) AND event = '{_CHECKPOINT}' AND {live}
ORDER BY ts, seq
"""
        self.last_checkpoint = f"""
SELECT ts, step_index, branch, event, payload, error FROM {s}.ledger_events
WHERE session_id = ({session}) AND event = '{_CHECKPOINT}' AND {live}
ORDER BY ts DESC, seq DESC
LIMIT 1
"""
        self.details = f"""
SELECT name, sandbox_id, started_at, completed_at, exec_count FROM {s}.ledger_sessions
WHERE name = %(name)s AND sandbox_id = %(sandbox_id)s AND started_at IS NOT NULL
  AND {ret.live("summary_expires_at", "%(now)s")}
"""
        # The events go with their session (ON DELETE CASCADE), in this one statement.
        self.delete_sandbox = (
            f"DELETE FROM {s}.ledger_sessions WHERE name = %(name)s AND sandbox_id = %(sandbox_id)s"
        )
        self.get_environment = f"SELECT record FROM {s}.ledger_environments WHERE name = %s"
        self.save_environment = f"""
INSERT INTO {s}.ledger_environments (name, built_at, record) VALUES (%s, %s, %s)
ON CONFLICT (name) DO UPDATE SET built_at = excluded.built_at, record = excluded.record
"""
        self.delete_environment = f"DELETE FROM {s}.ledger_environments WHERE name = %s"
        self.list_environments = (
            f"SELECT record FROM {s}.ledger_environments ORDER BY built_at DESC, id"
        )
        self.retention = f"SELECT retention_seconds FROM {s}.ledger_settings WHERE id = 1"
        self.record_retention = (
            f"UPDATE {s}.ledger_settings SET retention_seconds = %s "
            "WHERE id = 1 AND retention_seconds IS NULL"
        )
        # One bounded batch each, oldest expiry first, through the partial indexes on
        # expires_at; the batch's keys as an array, so the rows are then found by primary
        # key (an IN (subquery) may be planned as a hash join over the whole table). A
        # session goes only if it is still expired when its row is locked (PostgreSQL
        # re-checks the DELETE's own conditions on a row updated meanwhile): an append that
        # made it live again wins, and the cascade takes no live entry.
        self.purge_events = f"""
DELETE FROM {s}.ledger_events WHERE seq = ANY (ARRAY(
    SELECT seq FROM {s}.ledger_events WHERE expires_at <= %(now)s
    ORDER BY expires_at LIMIT %(limit)s))
"""
        self.purge_sessions = f"""
DELETE FROM {s}.ledger_sessions AS d
WHERE d.expires_at <= %(now)s AND d.id = ANY (ARRAY(
    SELECT s.id FROM {s}.ledger_sessions AS s
    WHERE s.expires_at <= %(now)s
      AND NOT EXISTS (SELECT 1 FROM {s}.ledger_events AS e WHERE e.session_id = s.id)
    ORDER BY s.expires_at LIMIT %(limit)s))
"""
        self.version_table = f"""
CREATE TABLE IF NOT EXISTS {s}.ledger_schema (
    id      integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL
)
"""
        self.version = f"SELECT version FROM {s}.ledger_schema WHERE id = 1"
        self.set_version = f"""
INSERT INTO {s}.ledger_schema (id, version) VALUES (1, %s)
ON CONFLICT (id) DO UPDATE SET version = excluded.version
"""

    def list_sessions(self, query: rows.ListQuery, now: int | None = None) -> tuple[str, list[Any]]:
        """The listing SELECT and its parameters (``now``: Unix s, default the clock's)."""
        return rows.list_sql(query, _now() if now is None else now, table=self.sessions, param="%s")


def _now() -> int:
    """The reader's clock in Unix seconds: what expiries are compared with."""
    return int(time.time())


def _lock_key(schema: str) -> int:
    """The advisory lock that serializes schema changes of one schema across processes."""
    digest = hashlib.sha256(f"sandbox_ledger:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresAdapter:
    """The ledger contract on PostgreSQL.

    Args:
        dsn: a libpq connection string or ``postgresql://`` URL; the adapter owns its pool.
        pool: an existing ``psycopg_pool.AsyncConnectionPool`` instead of ``dsn`` (opened by
            the caller; ``close()`` leaves it open).
        schema: the PostgreSQL schema holding the ledger tables (created if absent).
        min_size, max_size: the size of the pool the adapter creates from ``dsn``.
        timeout: seconds to wait for a connection from the pool.
        retention: how long ledger entries are kept (a positive ``timedelta``), recorded in
            the database on :meth:`connect` if it has none yet; None (the default) uses the
            database's (keep forever unless an adapter recorded one). A retention other than
            the database's raises ``DeploymentMismatchError`` naming both on :meth:`connect`.
            Reads hide what has expired; :meth:`purge_expired` deletes it. See
            docs/table-design.md, Ledger retention.
    """

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
    ) -> None:
        if (dsn is None) == (pool is None):
            raise ValueError("dsn, pool: give exactly one")
        if dsn is not None and (not isinstance(dsn, str) or not dsn):
            raise ValueError("dsn: must be a non-empty connection string")
        if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
            raise ValueError(
                f"schema: {schema!r} is not a plain lowercase identifier ([a-z_][a-z0-9_]*)"
            )
        self._retention = check_retention(retention)
        self.retention = retention
        self.dsn = dsn
        self.schema = schema
        self.queries = Queries(schema)
        # What cursors are bound to: the schema (the DSN may hold a password; not the server,
        # which only a query could name), so a cursor of another schema is refused.
        self._store = f"postgres:{schema}"
        self._given_pool = pool
        self._pool: AsyncConnectionPool[Any] | None = None
        self._sizes = (min_size, max_size)
        self._timeout = timeout
        self._lock = asyncio.Lock()
        self._log_filter: ScrubbingFilter | None = None

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
        async with self._lock:
            pool, self._pool = self._pool, None
            if pool is not None and pool is not self._given_pool:
                await pool.close()
            if self._log_filter is not None:
                logging.getLogger("psycopg.pool").removeFilter(self._log_filter)
                self._log_filter = None

    async def __aenter__(self) -> PostgresAdapter:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _open(self) -> AsyncConnectionPool[Any]:
        if self._pool is not None:
            return self._pool
        async with self._lock:
            if self._pool is not None:
                return self._pool
            pool = self._given_pool or await self._new_pool()
            try:
                await self._migrate(pool, MIGRATIONS)
                await self._agree_retention(pool)
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
            raise StorageError(
                f"postgres: cannot connect to {redact_url(self.dsn or '')}: "
                f"{scrub(str(exc), self.dsn)}"
            ) from exc
        return pool

    async def _migrate(
        self, pool: AsyncConnectionPool[Any], migrations: tuple[Migration, ...]
    ) -> None:
        q = self.queries
        where = f"postgres schema {self.schema}"
        async with pool.connection() as conn:
            # The usual case (schema current) takes no lock.
            cursor = await conn.execute(
                "SELECT to_regclass(%s)", (f'"{self.schema}".ledger_schema',)
            )
            found = await cursor.fetchone()
            current = None
            if found and found[0] is not None:
                row = await (await conn.execute(q.version)).fetchone()
                current = int(row[0]) if row else None
            if pending(current, migrations, where=where) == ():
                return
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(self.schema),))
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {q.schema}")
                await conn.execute(q.version_table)
                row = await (await conn.execute(q.version)).fetchone()
                current = int(row[0]) if row else None  # another process may have migrated
                todo = pending(current, migrations, where=where)
                if todo:
                    await conn.execute(f"SET LOCAL search_path TO {q.schema}")
                    for migration in todo:
                        await conn.execute(migration.sql.encode())
                    await conn.execute(q.set_version, (todo[-1].version,))
        log_migration(where, current, todo)

    async def _agree_retention(self, pool: AsyncConnectionPool[Any]) -> None:
        where = f"ledger_settings of postgres schema {self.schema}"
        async with pool.connection() as conn:
            row = await (await conn.execute(self.queries.retention)).fetchone()
            if (row is None or row[0] is None) and self._retention is not None:
                # Only a database without a retention takes one (one statement: atomic; a
                # concurrent connect may record another first, which agree() then reports).
                cursor = await conn.execute(self.queries.record_retention, (self._retention,))
                if cursor.rowcount:
                    ret.log_recorded(where, self._retention)
                row = await (await conn.execute(self.queries.retention)).fetchone()
        ret.agree(None if row is None else row[0], self._retention, where)

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

    async def _fetchall(self, sql: str, params: Any) -> list[Any]:
        if _holds_nul(params):
            return []

        async def op(conn: AsyncConnection[Any]) -> list[Any]:
            cursor = await conn.execute(sql, params)
            return list(await cursor.fetchall())

        result: list[Any] = await self._run(op)
        return result

    async def _execute(self, sql: str, params: Any) -> None:
        if _holds_nul(params):
            return

        async def op(conn: AsyncConnection[Any]) -> None:
            await conn.execute(sql, params)

        await self._run(op)

    # -- ledger -----------------------------------------------------------------------------

    async def append(self, entry: LedgerEntry) -> None:
        """Store one entry and fold it into its session's summary (one statement)."""
        key = rows.append_key(rows.check_entry(entry))
        await self._append(rows.encode_entry(entry, key=key, nul_ok=False))

    async def append_at(self, entry: LedgerEntry, position: int) -> None:
        """Append idempotently at a caller-chosen position (e.g. a line number on import):
        the same entry at the same position is stored once however often it is appended."""
        key = rows.append_key(rows.check_entry(entry), position)
        await self._append(rows.encode_entry(entry, key=key, nul_ok=False))

    async def append_once(self, entry: LedgerEntry, occurrence: int) -> bool:
        """Append occurrence ``occurrence`` of this content in its session unless it is
        stored (what an import writes, see :mod:`sandbox_ledger.transfer`); False, writing
        nothing, when another write stored it first, so imports running at once store it
        once."""
        key = rows.claim_key(rows.check_entry(entry), occurrence)
        return await self._append(rows.encode_entry(entry, key=key, nul_ok=False))

    async def _append(self, row: rows.EventRow) -> bool:
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

    def _key(self, name: str, sandbox_id: str) -> dict[str, Any]:
        """The session's key, and the time (Unix s) reads compare expiries with."""
        return {
            "name": rows.check_text(name, "name"),
            "sandbox_id": rows.check_text(sandbox_id, "sandboxId"),
            "now": _now(),
        }

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
        return sorted((n, sid) for n, sid in found)

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
        return await self._list(rows.list_query(name, opts, self._store))

    async def list_all_sandbox_details(
        self, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of every name, newest first (one indexed query)."""
        return await self._list(rows.list_query(None, opts, self._store))

    async def list_sandbox_page(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> SandboxPage:
        """One page of sessions of one name and the cursor of the next (keyset on
        (startedAt, session id), one indexed query)."""
        rows.check_text(name, "name")
        return await self._page(rows.list_query(name, opts, self._store))

    async def list_all_sandbox_page(self, opts: ListSandboxOptions | None = None) -> SandboxPage:
        """One page of sessions of every name and the cursor of the next."""
        return await self._page(rows.list_query(None, opts, self._store))

    async def _list(self, query: rows.ListQuery) -> list[SandboxDetails]:
        return (await self._page(query)).sessions

    async def _page(self, query: rows.ListQuery) -> SandboxPage:
        sql, params = self.queries.list_sessions(query, _now())
        return rows.page_of(await self._fetchall(sql, params), query)

    async def get_sandbox_details(self, name: str, sandbox_id: str) -> SandboxDetails | None:
        """One session's summary (one row), or None."""
        found = await self._fetchall(self.queries.details, self._key(name, sandbox_id))
        return rows.decode_details(*found[0]) if found else None

    async def delete_sandbox(self, name: str, sandbox_id: str) -> None:
        """Delete the session with its entries (one statement)."""
        await self._execute(self.queries.delete_sandbox, self._key(name, sandbox_id))

    async def purge_expired(self, *, batch_size: int = 1000) -> int:
        """Delete the entries, and then the session rows, that expired by now; return how
        many rows went (entries and sessions).

        Each batch of at most ``batch_size`` rows is one statement (its own transaction)
        found through the partial indexes on ``expires_at``, so no lock is held for long. A
        session row goes once every entry ever appended to it has expired (its summary with
        it). Nothing expires, and nothing is purged, on a database without a retention.
        """
        size = ret.check_batch_size(batch_size)
        params = {"now": _now(), "limit": size}

        async def batch(sql: str) -> int:
            async def op(conn: AsyncConnection[Any]) -> int:
                return int((await conn.execute(sql, params)).rowcount)

            deleted: int = await self._run(op)
            return deleted

        statements = (self.queries.purge_events, self.queries.purge_sessions)
        return await ret.purge_in_batches(batch, statements, size)

    # -- environments -----------------------------------------------------------------------

    async def get_environment(self, name: str) -> EnvironmentRecord | None:
        """The environment record, or None."""
        key = (check_environment_name(name),)
        found = await self._fetchall(self.queries.get_environment, key)
        return rows.decode_environment(found[0][0]) if found else None

    async def save_environment(self, record: EnvironmentRecord) -> None:
        """Create or replace the record with ``record.name``."""
        await self._execute(
            self.queries.save_environment, rows.encode_environment(record, nul_ok=False)
        )

    async def delete_environment(self, name: str) -> None:
        """Remove the record if present."""
        await self._execute(self.queries.delete_environment, (check_environment_name(name),))

    async def list_environments(self) -> list[EnvironmentRecord]:
        """Every record, newest builtAt first, ties in first-saved order."""
        found = await self._fetchall(self.queries.list_environments, ())
        return [rows.decode_environment(r[0]) for r in found]


def _holds_nul(params: Any) -> bool:
    """Whether a text parameter holds NUL. PostgreSQL text cannot, so every write refuses it
    (``nul_ok=False``) and nothing stored equals it: the reads and deletes run through
    :meth:`PostgresAdapter._fetchall` and ``_execute`` (lookups by equality) answer as for no
    row, as the other stores do, instead of sending what the server refuses."""
    values = params.values() if isinstance(params, dict) else params
    return any(isinstance(v, str) and "\x00" in v for v in values)
