"""The shared contract suite against both DynamoDB twins on a moto server."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.testing import StorageAdapterContract


class AsyncOverSync:
    """Presents the sync twin through the async contract (each call in a worker thread)."""

    def __init__(self, sync: SyncDynamoDBAdapter) -> None:
        self.sync = sync

    @property
    def consistent_listings(self) -> bool:
        return self.sync.consistent_listings

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.sync, name)

        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)

        return call

    async def connect(self) -> None:
        await asyncio.to_thread(self.sync.connect)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def append(self, entry: Any) -> None:
        await asyncio.to_thread(self.sync.append, entry)

    async def read_all(self, name: str, sandbox_id: str) -> Any:
        return await asyncio.to_thread(self.sync.read_all, name, sandbox_id)

    async def last_checkpoint(self, name: str, sandbox_id: str) -> Any:
        return await asyncio.to_thread(self.sync.last_checkpoint, name, sandbox_id)

    async def list_sandbox_details(self, name: str, opts: Any = None) -> Any:
        return await asyncio.to_thread(self.sync.list_sandbox_details, name, opts)

    async def list_all_sandbox_details(self, opts: Any = None) -> Any:
        return await asyncio.to_thread(self.sync.list_all_sandbox_details, opts)

    async def list_sandbox_page(self, name: str, opts: Any = None) -> Any:
        return await asyncio.to_thread(self.sync.list_sandbox_page, name, opts)

    async def list_all_sandbox_page(self, opts: Any = None) -> Any:
        return await asyncio.to_thread(self.sync.list_all_sandbox_page, opts)

    async def get_sandbox_details(self, name: str, sandbox_id: str) -> Any:
        return await asyncio.to_thread(self.sync.get_sandbox_details, name, sandbox_id)

    async def delete_sandbox(self, name: str, sandbox_id: str) -> None:
        await asyncio.to_thread(self.sync.delete_sandbox, name, sandbox_id)

    async def list_checkpoints(self, name: str, sandbox_id: str) -> Any:
        return await asyncio.to_thread(self.sync.list_checkpoints, name, sandbox_id)

    async def get_environment(self, name: str) -> Any:
        return await asyncio.to_thread(self.sync.get_environment, name)

    async def save_environment(self, record: Any) -> None:
        await asyncio.to_thread(self.sync.save_environment, record)

    async def delete_environment(self, name: str) -> None:
        await asyncio.to_thread(self.sync.delete_environment, name)

    async def list_environments(self) -> Any:
        return await asyncio.to_thread(self.sync.list_environments)

    def follow(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """The sync twin's iterator, each step in a worker thread."""
        return _steps(self.sync.follow(*args, **kwargs))

    def changes(self, *, after: Any = None) -> AsyncIterator[Any]:
        """The sync twin's iterator, each step in a worker thread."""
        return _steps(self.sync.changes(after=after))

    async def __aenter__(self) -> AsyncOverSync:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _steps(stream: Any) -> AsyncIterator[Any]:
    """A sync iterator stepped in worker threads, as an async iterator."""

    async def steps() -> AsyncIterator[Any]:
        try:
            while (found := await asyncio.to_thread(next, stream, None)) is not None:
                yield found
        finally:
            await asyncio.to_thread(stream.close)

    return steps()


@contextlib.asynccontextmanager
async def _namesake(
    table: str, endpoint: str, shard_count: int | None = None
) -> AsyncIterator[DynamoDBAdapter]:
    """A table of the same name in another region (as in another account); none in one-table
    mode (``make test-aws``: a second table is a second resource to pay for and clean up)."""
    if os.environ.get("SANDBOX_LEDGER_TEST_TABLE"):
        pytest.skip("one-table mode: needs a second table of the same name")
    other = DynamoDBAdapter(
        table, endpoint_url=endpoint, region_name="eu-west-1", shard_count=shard_count
    )
    async with other:
        await other.create_table()
        yield other


class _IndexesLag(StorageAdapterContract):
    """The contract on the session's server, whose global secondary indexes lag as DynamoDB's
    do (tests/conftest.py ``TEST_PROFILE``: 50-100 ms): the ``during_lag`` tests list while
    they lag, the others check a listing's settled state once they have caught up;
    tests/dynamodb/test_listing_lag_redteam.py runs the ``during_lag`` tests on a server
    lagging longer."""

    @pytest.fixture(autouse=True)
    def _caught_up(self, indexes_caught_up: Callable[[str | None], Awaitable[None]]) -> None:
        self._indexes_caught_up = indexes_caught_up

    async def listings_caught_up(self, adapter: Any) -> None:
        await self._indexes_caught_up(None)


class TestDynamoDBAdapter(_IndexesLag):
    @pytest.fixture
    async def adapter(self, moto_endpoint: str, sync_table: str) -> AsyncIterator[DynamoDBAdapter]:
        adapter = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
        yield adapter
        await adapter.close()

    @pytest.fixture
    async def namesake(self, moto_endpoint: str, sync_table: str) -> AsyncIterator[DynamoDBAdapter]:
        async with _namesake(sync_table, moto_endpoint) as other:
            yield other

    @pytest.fixture
    async def second_client(
        self, moto_endpoint: str, sync_table: str
    ) -> AsyncIterator[DynamoDBAdapter]:
        async with DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as other:
            yield other


class TestSyncDynamoDBAdapter(_IndexesLag):
    @pytest.fixture
    async def adapter(self, moto_endpoint: str, sync_table: str) -> AsyncIterator[AsyncOverSync]:
        adapter = AsyncOverSync(SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint))
        yield adapter
        await adapter.close()

    @pytest.fixture
    async def namesake(self, moto_endpoint: str, sync_table: str) -> AsyncIterator[AsyncOverSync]:
        if os.environ.get("SANDBOX_LEDGER_TEST_TABLE"):
            pytest.skip("one-table mode: needs a second table of the same name")
        other = AsyncOverSync(
            SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint, region_name="eu-west-1")
        )
        await other.create_table()
        yield other
        await other.close()

    @pytest.fixture
    async def second_client(
        self, moto_endpoint: str, sync_table: str
    ) -> AsyncIterator[AsyncOverSync]:
        other = AsyncOverSync(SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint))
        yield other
        await other.close()


@pytest.mark.variant  # CI and make test-all run it; make test runs the default shard count
class TestShardedOne(_IndexesLag):
    """The contract holds whatever the shard count (here: one shard, no merge)."""

    @pytest.fixture
    async def adapter(self, moto_endpoint: str, table_name: str) -> AsyncIterator[DynamoDBAdapter]:
        adapter = DynamoDBAdapter(table_name, endpoint_url=moto_endpoint, shard_count=1)
        await adapter.create_table()  # a one-shard table: its descriptor says 1
        yield adapter
        await adapter.close()

    @pytest.fixture
    async def namesake(self, moto_endpoint: str, table_name: str) -> AsyncIterator[DynamoDBAdapter]:
        async with _namesake(table_name, moto_endpoint, shard_count=1) as other:
            yield other

    @pytest.fixture
    async def second_client(
        self, moto_endpoint: str, table_name: str
    ) -> AsyncIterator[DynamoDBAdapter]:
        # No shard count given: the table's.
        async with DynamoDBAdapter(table_name, endpoint_url=moto_endpoint) as other:
            yield other


class _BotocoreParsing:
    """Reads parsed by botocore alone (``SANDBOX_LEDGER_WIRE_DECODING=0``): the contract holds
    both ways (make test runs the default, reads decoded from the wire: sdk/wire.py)."""

    @pytest.fixture(autouse=True)
    def _botocore_parsing(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SANDBOX_LEDGER_WIRE_DECODING", "0")


@pytest.mark.variant
class TestBotocoreParsing(_BotocoreParsing, TestDynamoDBAdapter):
    pass


@pytest.mark.variant
class TestSyncBotocoreParsing(_BotocoreParsing, TestSyncDynamoDBAdapter):
    pass
