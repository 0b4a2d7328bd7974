from collections.abc import AsyncIterator

import pytest

from sandbox_ledger import MemoryAdapter
from sandbox_ledger.testing import StorageAdapterContract


class TestMemoryAdapter(StorageAdapterContract):
    @pytest.fixture
    async def adapter(self) -> AsyncIterator[MemoryAdapter]:
        adapter = MemoryAdapter()
        yield adapter
        await adapter.close()
