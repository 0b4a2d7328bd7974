"""The aiosqlite connection as the SQL core uses it (a
:class:`sandbox_ledger.sql.connection.Connection`), and the in-memory database an import
batch stages its entries in."""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import TYPE_CHECKING, Any

from sandbox_ledger.sqlite.queries import STAGE, STAGED_EVENTS, split_statements

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence

    import aiosqlite

    from sandbox_ledger.sql.schema import Migration

__all__ = ["SQLiteConnection", "attach_stage", "open_connection"]


def open_connection(location: str, **options: Any) -> aiosqlite.Connection:
    """``aiosqlite.connect(location, **options)``, but each call it runs in its thread runs
    in a copy of the caller's context, and each statement through a cursor of the
    connection: what sqlite3 does then belongs to the caller's current span (the library's
    operation span), and the sqlite3 instrumentation of OpenTelemetry, which traces cursors
    (not the connection's ``execute`` shortcuts aiosqlite calls), sees every statement as
    that span's child. ``Connection.execute`` is itself a cursor and its ``execute``: the
    statements run as they did."""
    import sqlite3

    def connector() -> sqlite3.Connection:
        made: sqlite3.Connection = sqlite3.connect(location, **options)
        return made

    connection: aiosqlite.Connection = _carrying()(connector, 64)
    return connection


_SHORTCUTS = frozenset({"execute", "executemany", "executescript"})


def _through_cursor(connection: Any, method: str, *args: Any) -> Any:
    cursor = connection.cursor()
    getattr(cursor, method)(*args)
    return cursor


@functools.cache
def _carrying() -> type[aiosqlite.Connection]:
    import sqlite3

    import aiosqlite

    class CarryingConnection(aiosqlite.Connection):
        async def _execute(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
            name = getattr(fn, "__name__", "")
            if name in _SHORTCUTS and isinstance(getattr(fn, "__self__", None), sqlite3.Connection):
                fn = functools.partial(_through_cursor, self._conn, name)
            run = contextvars.copy_context().run
            return await super()._execute(run, fn, *args, **kwargs)  # type: ignore[no-untyped-call]

        def _execute_fetchall(self, sql: str, parameters: Any) -> Any:
            return _through_cursor(self._conn, "execute", sql, parameters).fetchall()

        def _execute_insert(self, sql: str, parameters: Any) -> Any:
            cursor = _through_cursor(self._conn, "execute", sql, parameters)
            cursor.execute("SELECT last_insert_rowid()")
            return cursor.fetchone()

    return CarryingConnection


async def attach_stage(db: aiosqlite.Connection) -> None:
    """Attach the connection's private in-memory database that an import batch stages its
    entries in (:data:`~sandbox_ledger.sqlite.queries.STAGE`), once: nothing of it is ever
    written to the file. A database of its own rather than a temporary table: a batch
    switches ``temp_store``, which drops the temporary database and its tables."""
    async with db.execute("PRAGMA database_list") as cursor:
        attached = {row[1] for row in await cursor.fetchall()}
    if STAGE not in attached:
        await db.execute(f"ATTACH DATABASE ':memory:' AS {STAGE}")
        # Pages a batch emptied are given back at its commit: a batch of large entries does
        # not leave the connection holding their size.
        await db.execute(f"PRAGMA {STAGE}.auto_vacuum = FULL")
    await db.execute(STAGED_EVENTS)


class SQLiteConnection:
    """One aiosqlite connection, as the SQL core runs statements on it."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    async def rows(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None
    ) -> list[Any]:
        async with self._db.execute(sql, params or {}) as cursor:
            return list(await cursor.fetchall())

    async def count(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        return int((await self._db.execute(sql, params or {})).rowcount)

    async def many(self, sql: str, params: Sequence[Mapping[str, Any] | Sequence[Any]]) -> int:
        return int((await self._db.executemany(sql, params)).rowcount)

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        await self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
            await self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                await self._db.execute("ROLLBACK")
            raise

    async def apply(self, migration: Migration) -> None:
        for statement in split_statements(migration.sql):
            await self._db.execute(statement)
