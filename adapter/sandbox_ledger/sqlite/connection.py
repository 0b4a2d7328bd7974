"""The aiosqlite connection as the SQL core uses it (a
:class:`sandbox_ledger.sql.connection.Connection`), and the in-memory database an import
batch stages its entries in."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from sandbox_ledger.sqlite.queries import STAGE, STAGED_EVENTS, split_statements

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence

    import aiosqlite

    from sandbox_ledger.sql.schema import Migration

__all__ = ["SQLiteConnection", "attach_stage"]


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
