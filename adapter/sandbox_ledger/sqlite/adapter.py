"""The ledger contract on one SQLite file (or ``:memory:``), over aiosqlite.

Concurrency: one connection per adapter, one operation at a time on it; several adapters,
threads or processes may share one file. WAL mode lets readers run beside the writer; every
write is one ``BEGIN IMMEDIATE`` transaction that waits ``busy_timeout`` for the file's write
lock and is retried with backoff while SQLite reports SQLITE_BUSY, so concurrent writers
lose nothing and, since a busy transaction never commits, duplicate nothing.
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
from typing import TYPE_CHECKING, Any

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

    import aiosqlite

    from sandbox_ledger.models import (
        CheckpointInfo,
        EnvironmentRecord,
        LedgerEntry,
        ListSandboxOptions,
        SandboxDetails,
        SandboxPage,
    )

MIGRATIONS: tuple[Migration, ...] = load_migrations("sandbox_ledger.sqlite")
"""The schema files shipped with this library, oldest first."""
SCHEMA_VERSION = MIGRATIONS[-1].version
"""The schema version this library writes."""

_CHECKPOINT = LedgerEvent.CheckpointCreated.value

_SESSION_ID_SQL = "SELECT id FROM ledger_sessions WHERE name = ? AND sandbox_id = ?"
_RETENTION = ret.retention_of("ledger_settings")
_LATER_SUMMARY_EXPIRY = ret.later_summary_expiry(
    "ledger_sessions.summary_expires_at", "excluded.summary_expires_at"
)


class Queries:
    """The SQL text the adapter runs (for DBAs and EXPLAIN); names as in the PostgreSQL adapter."""

    upsert_session = f"""
INSERT INTO ledger_sessions (name, sandbox_id, started_at, completed_at, status, exec_count,
                             summary_expires_at, expires_at)
VALUES (:name, :sandbox_id, :started_at, :completed_at,
        CASE WHEN :completed_at IS NULL THEN 'running' ELSE 'completed' END, :exec_delta,
        CASE WHEN :summarizes THEN :ts_s + {_RETENTION} END, :ts_s + {_RETENTION})
ON CONFLICT (name, sandbox_id) DO UPDATE SET
    started_at = coalesce(ledger_sessions.started_at, excluded.started_at),
    completed_at = coalesce(ledger_sessions.completed_at, excluded.completed_at),
    status = CASE WHEN coalesce(ledger_sessions.completed_at, excluded.completed_at) IS NULL
                  THEN 'running' ELSE 'completed' END,
    exec_count = ledger_sessions.exec_count + excluded.exec_count,
    summary_expires_at = CASE WHEN :summarizes THEN {_LATER_SUMMARY_EXPIRY}
                              ELSE ledger_sessions.summary_expires_at END,
    expires_at = {ret.latest_expiry("ledger_sessions.expires_at", "excluded.expires_at")}
RETURNING id
"""
    insert_event = f"""
INSERT INTO ledger_events (session_id, ts, step_index, branch, event, payload, error, append_key,
                           expires_at)
VALUES (:session_id, :ts, :step_index, :branch, :event, :payload, :error, :append_key,
        :ts_s + {_RETENTION})
"""
    session_id = _SESSION_ID_SQL
    read_all = f"""
SELECT e.ts, e.step_index, e.branch, e.event, e.payload, e.error
FROM ledger_events AS e
WHERE e.session_id = ({_SESSION_ID_SQL}) AND {ret.live("e.expires_at", "?")}
ORDER BY e.ts, e.seq
"""
    read_in_append_order = f"""
SELECT e.ts, e.step_index, e.branch, e.event, e.payload, e.error
FROM ledger_events AS e
WHERE e.session_id = ({_SESSION_ID_SQL}) AND {ret.live("e.expires_at", "?")}
ORDER BY e.seq
"""
    sessions_with_entries = f"""
SELECT s.name, s.sandbox_id FROM ledger_sessions AS s
WHERE (:name IS NULL OR s.name = :name)
  AND EXISTS (SELECT 1 FROM ledger_events AS e
              WHERE e.session_id = s.id AND {ret.live("e.expires_at", ":now")})
"""
    checkpoints = f"""
SELECT e.ts, e.payload FROM ledger_events AS e
WHERE e.session_id = ({_SESSION_ID_SQL}) AND e.event = '{_CHECKPOINT}'
  AND {ret.live("e.expires_at", "?")}
ORDER BY e.ts, e.seq
"""
    last_checkpoint = f"""
SELECT e.ts, e.step_index, e.branch, e.event, e.payload, e.error
FROM ledger_events AS e
WHERE e.session_id = ({_SESSION_ID_SQL}) AND e.event = '{_CHECKPOINT}'
  AND {ret.live("e.expires_at", "?")}
ORDER BY e.ts DESC, e.seq DESC
LIMIT 1
"""
    details = f"""
SELECT name, sandbox_id, started_at, completed_at, exec_count FROM ledger_sessions
WHERE name = ? AND sandbox_id = ? AND started_at IS NOT NULL
  AND {ret.live("summary_expires_at", "?")}
"""
    save_environment = """
INSERT INTO ledger_environments (name, built_at, record) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET built_at = excluded.built_at, record = excluded.record
"""
    retention = "SELECT retention_seconds FROM ledger_settings WHERE id = 1"
    record_retention = (
        "UPDATE ledger_settings SET retention_seconds = ? "
        "WHERE id = 1 AND retention_seconds IS NULL"
    )
    # One bounded batch each, oldest expiry first, through the partial indexes on expires_at.
    purge_events = """
DELETE FROM ledger_events WHERE seq IN (
    SELECT seq FROM ledger_events WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)
"""
    purge_sessions = """
DELETE FROM ledger_sessions WHERE id IN (
    SELECT s.id FROM ledger_sessions AS s
    WHERE s.expires_at <= ?
      AND NOT EXISTS (SELECT 1 FROM ledger_events AS e WHERE e.session_id = s.id)
    ORDER BY s.expires_at LIMIT ?)
"""
    version_table = """
CREATE TABLE IF NOT EXISTS ledger_schema (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
)
"""

    def list_sessions(self, query: rows.ListQuery, now: int | None = None) -> tuple[str, list[Any]]:
        """The listing SELECT and its parameters (``now``: Unix s, default the clock's)."""
        return rows.list_sql(query, _now() if now is None else now)


def split_statements(script: str) -> list[str]:
    """The statements of a DDL file, so they can run inside one transaction."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not all(
        part.strip().startswith("--") or not part.strip() for part in buffer.splitlines()
    ):
        raise ValueError(f"incomplete SQL statement at the end of a schema file: {buffer!r}")
    return statements


def _now() -> int:
    """The reader's clock in Unix seconds: what expiries are compared with."""
    return int(time.time())


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


class SQLiteAdapter:
    """The ledger contract on one SQLite database file.

    Args:
        path: the database file (created with its schema on first use), or ``":memory:"``
            for a private in-memory database that lives until :meth:`close`.
        busy_timeout: seconds one attempt waits for another writer's lock.
        max_wait: seconds a write keeps retrying SQLITE_BUSY before raising StorageError.
        retention: how long ledger entries are kept (a positive ``timedelta``), recorded in
            the database on :meth:`connect` if it has none yet; None (the default) uses the
            database's (keep forever unless an adapter recorded one). A retention other than
            the database's raises ``DeploymentMismatchError`` naming both on :meth:`connect`.
            Reads hide what has expired; :meth:`purge_expired` deletes it. See
            docs/table-design.md, Ledger retention.

    The file is put in WAL mode. Safe to share between processes and threads (each with its
    own adapter); one adapter serializes its own operations.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout: float = 5.0,
        max_wait: float = 60.0,
        retention: timedelta | None = None,
    ) -> None:
        if isinstance(path, Path):
            path = str(path)
        if not isinstance(path, str) or not path:
            raise ValueError("path: must be a file path or ':memory:'")
        self.path = path
        self.busy_timeout = busy_timeout
        self.max_wait = max_wait
        self._retention = check_retention(retention)
        self.retention = retention
        self.queries = Queries()
        # What cursors are bound to: the database file, so another file refuses them.
        private = path == ":memory:"
        self._store = f"sqlite:{secrets.token_hex(8) if private else os.path.realpath(path)}"
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

    async def __aenter__(self) -> SQLiteAdapter:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _open(self) -> aiosqlite.Connection:
        if self._db is not None:
            return self._db
        try:
            import aiosqlite
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
        try:
            db = await aiosqlite.connect(location, timeout=self.busy_timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise StorageError(f"sqlite: cannot open {self.path}: {exc}") from exc
        try:
            await self._retry(lambda: self._prepare(db), db)
        except BaseException:
            await db.close()
            raise
        self._db = db
        return db

    async def _prepare(self, db: aiosqlite.Connection) -> None:
        await db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        if self.path != ":memory:":
            async with db.execute("PRAGMA journal_mode = WAL") as cursor:
                row = await cursor.fetchone()
            if row is None or str(row[0]).lower() != "wal":
                raise StorageError(f"sqlite: {self.path} cannot use WAL mode (got {row})")
        await db.execute("PRAGMA foreign_keys = ON")
        await self._migrate(db, MIGRATIONS)
        await self._agree_retention(db)

    async def _agree_retention(self, db: aiosqlite.Connection) -> None:
        where = f"ledger_settings of sqlite {self.path}"
        stored = await self._stored_retention(db)
        if stored is None and self._retention is not None:
            # Only a database without a retention takes one (one statement: atomic; a
            # concurrent connect may record another first, which agree() then reports).
            cursor = await db.execute(self.queries.record_retention, (self._retention,))
            if cursor.rowcount:
                ret.log_recorded(where, self._retention)
            stored = await self._stored_retention(db)
        ret.agree(stored, self._retention, where)

    async def _stored_retention(self, db: aiosqlite.Connection) -> int | None:
        async with db.execute(self.queries.retention) as cursor:
            row = await cursor.fetchone()
        return None if row is None or row[0] is None else int(row[0])

    async def _migrate(self, db: aiosqlite.Connection, migrations: tuple[Migration, ...]) -> None:
        # The usual case (schema current) only reads, so it never waits for a writer.
        current = await self._schema_version(db)
        if pending(current, migrations, where=f"sqlite {self.path}") == ():
            return
        await db.execute("BEGIN IMMEDIATE")
        try:
            await db.execute(self.queries.version_table)
            current = await self._schema_version(db)  # another process may have migrated
            todo = pending(current, migrations, where=f"sqlite {self.path}")
            for migration in todo:
                for statement in split_statements(migration.sql):
                    await db.execute(statement)
            if todo:
                await db.execute(
                    "INSERT INTO ledger_schema (id, version) VALUES (1, ?) "
                    "ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                    (todo[-1].version,),
                )
            await db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                await db.execute("ROLLBACK")
            raise
        log_migration(f"sqlite {self.path}", current, todo)

    @staticmethod
    async def _schema_version(db: aiosqlite.Connection) -> int | None:
        async with db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger_schema'"
        ) as cursor:
            if await cursor.fetchone() is None:
                return None
        async with db.execute("SELECT version FROM ledger_schema WHERE id = 1") as cursor:
            row = await cursor.fetchone()
        return int(row[0]) if row else None

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
            return await self._retry(lambda: op(db), db)

    async def _write(self, op: Callable[[aiosqlite.Connection], Awaitable[Any]]) -> Any:
        """One write transaction: BEGIN IMMEDIATE, ``op``, COMMIT; rolled back on any error."""

        async def transaction(db: aiosqlite.Connection) -> Any:
            if self._releasing is not None:
                # An earlier write cancelled twice left its release running: wait for it, so
                # this BEGIN comes after that ROLLBACK on the connection.
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._releasing)
                self._releasing = None
            try:
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
                raise
            return result

        return await self._run(transaction)

    # -- ledger -----------------------------------------------------------------------------

    async def append(self, entry: LedgerEntry) -> None:
        """Store one entry and fold it into its session's summary, in one transaction."""
        await self._append(rows.encode_entry(entry, key=""), idempotent=False)

    async def append_at(self, entry: LedgerEntry, position: int) -> None:
        """Append idempotently at a caller-chosen position (e.g. a line number on import):
        the same entry at the same position is stored once however often it is appended."""
        key = rows.append_key(rows.check_entry(entry), position)
        await self._append(rows.encode_entry(entry, key=key), idempotent=True)

    async def append_once(self, entry: LedgerEntry, occurrence: int) -> bool:
        """Append occurrence ``occurrence`` of this content in its session unless it is
        stored (what an import writes, see :mod:`sandbox_ledger.transfer`); False, writing
        nothing, when another write stored it first, so imports running at once store it
        once."""
        key = rows.claim_key(rows.check_entry(entry), occurrence)
        return await self._append(rows.encode_entry(entry, key=key), idempotent=True)

    async def _append(self, row: rows.EventRow, *, idempotent: bool) -> bool:
        params = rows.append_params(row)
        params["append_key"] = row.append_key or None

        async def op(db: aiosqlite.Connection) -> bool:
            if idempotent:
                async with db.execute(
                    "SELECT 1 FROM ledger_events WHERE append_key = ?", (row.append_key,)
                ) as cursor:
                    if await cursor.fetchone() is not None:
                        return False
            async with db.execute(self.queries.upsert_session, params) as cursor:
                found = await cursor.fetchone()
            assert found is not None
            await db.execute(self.queries.insert_event, {**params, "session_id": found[0]})
            return True

        stored: bool = await self._write(op)
        return stored

    async def _fetchall(self, sql: str, params: Any) -> list[Any]:
        async def op(db: aiosqlite.Connection) -> list[Any]:
            async with db.execute(sql, params) as cursor:
                return list(await cursor.fetchall())

        result: list[Any] = await self._run(op)
        return result

    async def read_all(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry of the session, ascending ts, ties in append order (one query)."""
        key = self._key(name, sandbox_id)
        found = await self._fetchall(self.queries.read_all, (*key, _now()))
        return [rows.decode_entry(name, sandbox_id, *r) for r in found]

    async def ledger_retention(self) -> int | None:
        """The ledger retention appends use (seconds; None: keep forever): what an import
        checks entries against, so it never writes one already expired.
        The database's, whatever this adapter was given."""
        [(seconds,)] = await self._fetchall(self.queries.retention, ())
        return None if seconds is None else int(seconds)

    async def read_stored(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry still stored, expired ones included until a purge removes them (what
        an import reconciles a file against, so that a re-import writes nothing twice)."""
        key = self._key(name, sandbox_id)
        found = await self._fetchall(self.queries.read_all, (*key, ret.EVERYTHING))
        return [rows.decode_entry(name, sandbox_id, *r) for r in found]

    async def read_in_append_order(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry of the session in the order it was appended (what an export replays)."""
        key = self._key(name, sandbox_id)
        found = await self._fetchall(self.queries.read_in_append_order, (*key, _now()))
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
        key = self._key(name, sandbox_id)
        found = await self._fetchall(self.queries.last_checkpoint, (*key, _now()))
        return rows.decode_entry(name, sandbox_id, *found[0]) if found else None

    async def list_checkpoints(self, name: str, sandbox_id: str) -> list[CheckpointInfo]:
        """Checkpoints in creation order (only checkpoint rows are read)."""
        key = self._key(name, sandbox_id)
        return [
            rows.row_checkpoint(ts, p)
            for ts, p in await self._fetchall(self.queries.checkpoints, (*key, _now()))
        ]

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
        key = self._key(name, sandbox_id)
        found = await self._fetchall(self.queries.details, (*key, _now()))
        return rows.decode_details(*found[0]) if found else None

    async def delete_sandbox(self, name: str, sandbox_id: str) -> None:
        """Delete the session's entries and summary in one transaction."""
        key = self._key(name, sandbox_id)

        async def op(db: aiosqlite.Connection) -> None:
            await db.execute(
                f"DELETE FROM ledger_events WHERE session_id = ({_SESSION_ID_SQL})", key
            )
            await db.execute("DELETE FROM ledger_sessions WHERE name = ? AND sandbox_id = ?", key)

        await self._write(op)

    async def purge_expired(self, *, batch_size: int = 1000) -> int:
        """Delete the entries, and then the session rows, that expired by now; return how
        many rows went (entries and sessions).

        Each batch of at most ``batch_size`` rows is one short transaction found through the
        partial indexes on ``expires_at``; after each full batch the purge pauses as long as
        the batch took, so waiting writers get the file's write lock in between. A session
        row goes once every entry ever appended to it has expired (its summary with it).
        Nothing expires, and nothing is purged, on a database without a retention.
        """
        size = ret.check_batch_size(batch_size)
        now = _now()

        async def batch(sql: str) -> int:
            async def op(db: aiosqlite.Connection) -> int:
                return int((await db.execute(sql, (now, size))).rowcount)

            start = time.monotonic()
            deleted: int = await self._write(op)
            if deleted == size:
                # More to come: step aside as long as the batch held the file's write lock,
                # so writers polling for it (SQLite's busy handler sleeps) get it first.
                await asyncio.sleep(time.monotonic() - start)
            return deleted

        statements = (self.queries.purge_events, self.queries.purge_sessions)
        return await ret.purge_in_batches(batch, statements, size)

    @staticmethod
    def _key(name: str, sandbox_id: str) -> tuple[str, str]:
        return rows.check_text(name, "name"), rows.check_text(sandbox_id, "sandboxId")

    # -- environments -----------------------------------------------------------------------

    async def get_environment(self, name: str) -> EnvironmentRecord | None:
        """The environment record, or None."""
        found = await self._fetchall(
            "SELECT record FROM ledger_environments WHERE name = ?",
            (check_environment_name(name),),
        )
        return rows.decode_environment(found[0][0]) if found else None

    async def save_environment(self, record: EnvironmentRecord) -> None:
        """Create or replace the record with ``record.name``."""
        values = rows.encode_environment(record)

        async def op(db: aiosqlite.Connection) -> None:
            await db.execute(self.queries.save_environment, values)

        await self._write(op)

    async def delete_environment(self, name: str) -> None:
        """Remove the record if present."""
        key = (check_environment_name(name),)

        async def op(db: aiosqlite.Connection) -> None:
            await db.execute("DELETE FROM ledger_environments WHERE name = ?", key)

        await self._write(op)

    async def list_environments(self) -> list[EnvironmentRecord]:
        """Every record, newest builtAt first, ties in first-saved order."""
        found = await self._fetchall(
            "SELECT record FROM ledger_environments ORDER BY built_at DESC, id", ()
        )
        return [rows.decode_environment(r[0]) for r in found]
