"""The shared contract suite against PostgresAdapter on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.testing import StorageAdapterContract


class TestPostgresAdapter(StorageAdapterContract):
    @pytest.fixture
    async def adapter(self, postgres_dsn: str, pg_schema: str) -> AsyncIterator[PostgresAdapter]:
        adapter = PostgresAdapter(postgres_dsn, schema=pg_schema, max_size=4)
        yield adapter
        await adapter.close()
