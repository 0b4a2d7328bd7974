"""An embedded server on a moto that one adjustment no longer fits: it starts, says which
adjustment is off, and passes the DynamoDB contract suite with moto's own code
in that place."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from sandbox_ledger import local
from sandbox_ledger.dynamodb import DynamoDBAdapter
from sandbox_ledger.local.adjustments import queries
from sandbox_ledger.testing import StorageAdapterContract


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """This module's server, its Query adjustment's fingerprint not the installed moto's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(queries.KNOWN_SOURCES, "Table.query", frozenset({"0123456789abcdef"}))
        server = local.LocalDynamoDB()
        with pytest.warns(local.MotoAdjustmentWarning, match="'queries'") as caught:
            endpoint = server.start()
    assert len(caught) == 1
    assert server.adjustments_off == ("queries",)
    yield endpoint
    server.stop()


class TestDynamoDBAdapterWithoutOneAdjustment(StorageAdapterContract):
    @pytest.fixture
    async def adapter(self, moto_endpoint: str, sync_table: str) -> AsyncIterator[DynamoDBAdapter]:
        adapter = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
        yield adapter
        await adapter.close()
