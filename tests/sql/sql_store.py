"""One SQL database of either dialect for the tests that run on both: adapters on it, raw reads."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

from sandbox_ledger import LedgerEntry
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.postgres import adapter as pg_module
from sandbox_ledger.sqlite import SQLiteAdapter
from sandbox_ledger.sqlite import adapter as sqlite_module


def entry(
    event: str,
    ts: int,
    *,
    name: str = "n",
    sandbox_id: str = "s",
    step_index: int = -1,
    **kw: Any,
) -> LedgerEntry:
    """An entry of session (``name``, ``sandbox_id``), by default ("n", "s")."""
    return LedgerEntry(
        ts=ts, name=name, sandbox_id=sandbox_id, step_index=step_index, event=event, **kw
    )


class Store:
    """One SQL database, opened by adapters with any retention, and read raw."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        if kind == "sqlite":
            self.path = tmp_path / "ledger.db"
        else:
            self.dsn = request.getfixturevalue("postgres_dsn")
            self.schema = request.getfixturevalue("pg_schema")

    def adapter(self, retention: timedelta | None = None, *, read_only: bool = False) -> Any:
        if self.kind == "sqlite":
            return SQLiteAdapter(self.path, retention=retention, read_only=read_only)
        return PostgresAdapter(
            self.dsn, schema=self.schema, retention=retention, max_size=2, read_only=read_only
        )

    @asynccontextmanager
    async def opened(self, retention: timedelta | None = None) -> AsyncIterator[Any]:
        async with self.adapter(retention) as adapter:
            yield adapter

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run ``sql`` (tables unqualified, ``?`` placeholders) on the database directly."""
        if self.kind == "sqlite":
            with sqlite3.connect(self.path) as db:
                return list(db.execute(sql, params))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {self.schema}")
            cursor = conn.execute(sql.replace("?", "%s").encode(), params)
            return list(cursor.fetchall()) if cursor.description else []

    def stored_retention(self) -> int | None:
        [(seconds,)] = self.query("SELECT retention_seconds FROM ledger_settings")
        return None if seconds is None else int(seconds)

    @property
    def module(self) -> ModuleType:
        """The dialect's adapter module (its ``MIGRATIONS`` and ``SCHEMA_VERSION``)."""
        return sqlite_module if self.kind == "sqlite" else pg_module

    def columns(self, table: str) -> list[str]:
        """The names of ``table``'s columns."""
        if self.kind == "sqlite":
            return [r[1] for r in self.query(f"PRAGMA table_info({table})")]
        found = self.query(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = ? AND table_name = ?",
            self.schema,
            table,
        )
        return [r[0] for r in found]
