"""The shared contract suite against PostgresAdapter on a real PostgreSQL server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest

from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.testing import StorageAdapterContract


class TestPostgresAdapter(StorageAdapterContract):
    @pytest.fixture
    async def adapter(self, postgres_dsn: str, pg_schema: str) -> AsyncIterator[PostgresAdapter]:
        adapter = PostgresAdapter(postgres_dsn, schema=pg_schema, max_size=4)
        yield adapter
        await adapter.close()

    @pytest.fixture
    async def namesake(self, postgres_dsn: str, pg_schema: str) -> AsyncIterator[PostgresAdapter]:
        """The same schema name in another database of the same server."""
        database = f"n_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {database}")
        other = PostgresAdapter(
            f"{postgres_dsn.rsplit('/', 1)[0]}/{database}", schema=pg_schema, max_size=2
        )
        yield other
        await other.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {database}")

    @pytest.fixture
    async def second_client(
        self, postgres_dsn: str, pg_schema: str
    ) -> AsyncIterator[PostgresAdapter]:
        other = PostgresAdapter(postgres_dsn, schema=pg_schema, max_size=2)
        yield other
        await other.close()
