"""An embedded server on a moto that one adjustment no longer fits: it starts, says which
adjustment is off, and passes the DynamoDB contract suite with moto's own code
in that place."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator, Iterator

import pytest

from sandbox_ledger import local
from sandbox_ledger.dynamodb import DynamoDBAdapter
from sandbox_ledger.local import adjustments
from sandbox_ledger.local.adjustments import queries
from sandbox_ledger.testing import StorageAdapterContract

# CI (and make test-all, make test-newest-moto) runs it; make test runs the server as shipped.
pytestmark = pytest.mark.variant


@pytest.fixture(scope="module")
def degraded_server() -> Iterator[local.LocalDynamoDB]:
    """This module's server, its Query adjustment's fingerprint not the installed moto's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", local.MotoAdjustmentWarning)
        already = set(adjustments.prepare()[1])  # none on the moto it was written for
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(queries.KNOWN_SOURCES, "Table.query", frozenset({"0123456789abcdef"}))
        server = local.LocalDynamoDB()
        with pytest.warns(local.MotoAdjustmentWarning) as caught:
            endpoint = server.start()
    off = already | {"queries"}
    assert server.adjustments_off == tuple(
        a.name for a in adjustments.all_adjustments() if a.name in off
    )
    assert [str(w.message).count("'queries'") for w in caught].count(1) == 1
    assert len(caught) == len(off)
    assert endpoint == server.endpoint_url
    yield server
    server.stop()


@pytest.fixture(scope="module")
def moto_endpoint(degraded_server: local.LocalDynamoDB) -> str:
    return degraded_server.endpoint_url


class TestDynamoDBAdapterWithoutOneAdjustment(StorageAdapterContract):
    @pytest.fixture(autouse=True)
    def _server(self, degraded_server: local.LocalDynamoDB) -> None:
        self.server = degraded_server

    async def listings_caught_up(self, adapter: object) -> None:
        await asyncio.to_thread(self.server.wait_for_indexes)

    @pytest.fixture
    async def adapter(self, moto_endpoint: str, sync_table: str) -> AsyncIterator[DynamoDBAdapter]:
        adapter = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
        yield adapter
        await adapter.close()
