"""The ledger contract on one SQLite database file: :class:`SQLiteAdapter` (async)."""

from sandbox_ledger.sqlite.adapter import SQLiteAdapter

__all__ = ["SQLiteAdapter"]
