"""The ledger contract on PostgreSQL: :class:`PostgresAdapter` (async, psycopg 3 with a pool)."""

from sandbox_ledger.postgres.adapter import PostgresAdapter

__all__ = ["PostgresAdapter"]
