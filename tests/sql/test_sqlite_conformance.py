"""The shared contract suite against SQLiteAdapter on a database file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandbox_ledger.sqlite import SQLiteAdapter
from sandbox_ledger.testing import StorageAdapterContract


class TestSQLiteAdapter(StorageAdapterContract):
    @pytest.fixture
    async def adapter(self, tmp_path: Path) -> AsyncIterator[SQLiteAdapter]:
        adapter = SQLiteAdapter(tmp_path / "ledger.db")
        yield adapter
        await adapter.close()

    @pytest.fixture
    async def namesake(self, tmp_path: Path) -> AsyncIterator[SQLiteAdapter]:
        (tmp_path / "other").mkdir()
        other = SQLiteAdapter(tmp_path / "other" / "ledger.db")
        yield other
        await other.close()

    @pytest.fixture
    async def second_client(self, tmp_path: Path) -> AsyncIterator[SQLiteAdapter]:
        other = SQLiteAdapter(tmp_path / "ledger.db")
        yield other
        await other.close()
