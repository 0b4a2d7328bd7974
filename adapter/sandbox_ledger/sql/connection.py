"""What the SQL core needs of one dialect's connection: statements run, a schema transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from contextlib import AbstractAsyncContextManager

    from sandbox_ledger.sql.schema import Migration

__all__ = ["Connection"]


class Connection(Protocol):
    """One connection of a dialect, as the contract and ``connect()`` use it."""

    async def rows(
        self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None
    ) -> list[Any]:
        """Run one statement; the rows it returns (none for a statement without result)."""

    async def count(self, sql: str, params: Mapping[str, Any] | None = None) -> int:
        """Run one statement; how many rows it changed."""

    async def many(self, sql: str, params: Sequence[Mapping[str, Any] | Sequence[Any]]) -> int:
        """Run one statement once per parameter set (the driver's ``executemany``; named, or
        by position for a statement with positional placeholders); how many rows they
        changed in all (a trigger's rows not counted)."""

    def exclusive(self) -> AbstractAsyncContextManager[None]:
        """One transaction that holds the database's schema lock, committed at its end."""

    async def apply(self, migration: Migration) -> None:
        """Run one migration's DDL inside :meth:`exclusive`."""
