"""The DynamoDB adapters: :class:`DynamoDBAdapter` (async) and :class:`SyncDynamoDBAdapter`.

Both run the same operations from :mod:`._ops`; only the I/O differs.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from sandbox_ledger import _json
from sandbox_ledger import keys as k
from sandbox_ledger.ddb.client import AsyncClientOwner, SyncClientOwner
from sandbox_ledger.dynamodb import _ops
from sandbox_ledger.dynamodb._items import order_ids
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.models import EnvironmentRecord, LedgerEntry
from sandbox_ledger.summary import validate_list_options

if TYPE_CHECKING:
    from botocore.config import Config

    from sandbox_ledger.ddb.steps import Op
    from sandbox_ledger.models import (
        CheckpointInfo,
        ListSandboxOptions,
        SandboxDetails,
    )


def _entry(entry: object) -> LedgerEntry:
    if not isinstance(entry, LedgerEntry):
        raise InvalidInputError("entry", f"expected a LedgerEntry, got {type(entry).__name__}")
    return entry


def _record(record: object) -> EnvironmentRecord:
    if not isinstance(record, EnvironmentRecord):
        raise InvalidInputError(
            "record", f"expected an EnvironmentRecord, got {type(record).__name__}"
        )
    return record


class _Base:
    def __init__(self, table_name: str, shard_count: int) -> None:
        self.table_name = k.check_table_name(table_name)
        self.shard_count = k.check_shard_count(shard_count)

    # Each method returns the operation to run; the twins run it.
    def _append(self, entry: LedgerEntry) -> Op[None]:
        return _ops.append(self.table_name, _entry(entry), order_ids.next(), self.shard_count)

    def _append_at(self, entry: LedgerEntry, position: int) -> Op[None]:
        if not isinstance(position, int) or not 0 <= position < 10**20:
            raise InvalidInputError("position", "must be an integer from 0 to 10**20 - 1")
        digest = hashlib.sha256(_json.dumps(_entry(entry).wire())).hexdigest()[:8]
        return _ops.append(self.table_name, entry, f"{position:020d}{digest}", self.shard_count)

    def _list(self, name: str | None, opts: Any) -> Op[list[SandboxDetails]]:
        if name is not None:
            k.by_name_pk(name)
        return _ops.list_details(
            self.table_name,
            name=name,
            opts=validate_list_options(opts),
            shard_count=self.shard_count,
        )


class DynamoDBAdapter(_Base, AsyncClientOwner):
    """The ledger contract on one DynamoDB table, with aioboto3.

    Args:
        table_name: the table (``create_table()`` or the CDK stack makes it).
        endpoint_url: a local endpoint (moto); default from the environment.
        region_name: AWS region; default from the environment.
        session: an ``aioboto3.Session`` (credentials, profile).
        config: a ``botocore.config.Config`` merged over the defaults (standard retries).
        shard_count: shards of the list-all index key; every reader and writer of one table
            must use the same value.
    """

    def __init__(
        self,
        table_name: str,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        session: Any | None = None,
        config: Config | None = None,
        shard_count: int = k.DEFAULT_SHARD_COUNT,
    ) -> None:
        super().__init__(table_name, shard_count)
        self._open(
            endpoint_url=endpoint_url, region_name=region_name, session=session, config=config
        )

    async def create_table(self) -> bool:
        """Create the table as the CDK stack provisions it, if absent; wait until ACTIVE.

        Returns True if this call created it.
        """
        return await self.run(_ops.create_table(self.table_name, self.shard_count))

    async def append(self, entry: LedgerEntry) -> None:
        """Persist one entry exactly once (one round trip; more only for entries over 350 KB)."""
        await self.run(self._append(entry))

    async def append_at(self, entry: LedgerEntry, position: int) -> None:
        """Append idempotently at a caller-chosen position (e.g. a line number on import):
        the same entry at the same position is stored once however often it is appended.
        Among equal ts, positions sort before entries appended live."""
        await self.run(self._append_at(entry, position))

    async def read_all(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry of the session, ascending ts, ties in append order."""
        return await self.run(_ops.read_all(self.table_name, name, sandbox_id))

    async def last_checkpoint(self, name: str, sandbox_id: str) -> LedgerEntry | None:
        """The last checkpoint entry (two requests), or None."""
        return await self.run(_ops.last_checkpoint(self.table_name, name, sandbox_id))

    async def list_sandbox_details(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of one name, newest first (one query and one batch get per page)."""
        return await self.run(self._list(name, opts))

    async def list_all_sandbox_details(
        self, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of every name, newest first (one query per shard and one batch get)."""
        return await self.run(self._list(None, opts))

    async def get_sandbox_details(self, name: str, sandbox_id: str) -> SandboxDetails | None:
        """One session's summary (one strongly consistent read), or None."""
        return await self.run(_ops.get_sandbox_details(self.table_name, name, sandbox_id))

    async def delete_sandbox(self, name: str, sandbox_id: str) -> None:
        """Delete the session's summary, entries and checkpoints."""
        await self.run(_ops.delete_partition(self.table_name, k.session_pk(name, sandbox_id)))

    async def list_checkpoints(self, name: str, sandbox_id: str) -> list[CheckpointInfo]:
        """Checkpoints in creation order, from their markers (entries are not read)."""
        return await self.run(_ops.list_checkpoints(self.table_name, name, sandbox_id))

    async def get_environment(self, name: str) -> EnvironmentRecord | None:
        """The environment record, or None."""
        return await self.run(_ops.get_environment(self.table_name, name))

    async def save_environment(self, record: EnvironmentRecord) -> None:
        """Create or replace the record."""
        await self.run(_ops.save_environment(self.table_name, _record(record)))

    async def delete_environment(self, name: str) -> None:
        """Remove the record if present."""
        await self.run(_ops.delete_environment(self.table_name, name))

    async def list_environments(self) -> list[EnvironmentRecord]:
        """Every environment record, newest builtAt first."""
        return await self.run(_ops.list_environments(self.table_name))


class SyncDynamoDBAdapter(_Base, SyncClientOwner):
    """:class:`DynamoDBAdapter` without await, on boto3; safe to share across threads."""

    def __init__(
        self,
        table_name: str,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        session: Any | None = None,
        config: Config | None = None,
        shard_count: int = k.DEFAULT_SHARD_COUNT,
    ) -> None:
        super().__init__(table_name, shard_count)
        self._open(
            endpoint_url=endpoint_url, region_name=region_name, session=session, config=config
        )

    def create_table(self) -> bool:
        """Create the table as the CDK stack provisions it, if absent; wait until ACTIVE."""
        return self.run(_ops.create_table(self.table_name, self.shard_count))

    def append(self, entry: LedgerEntry) -> None:
        """Persist one entry exactly once."""
        self.run(self._append(entry))

    def append_at(self, entry: LedgerEntry, position: int) -> None:
        """Append idempotently at a caller-chosen position (see DynamoDBAdapter.append_at)."""
        self.run(self._append_at(entry, position))

    def read_all(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry of the session, ascending ts, ties in append order."""
        return self.run(_ops.read_all(self.table_name, name, sandbox_id))

    def last_checkpoint(self, name: str, sandbox_id: str) -> LedgerEntry | None:
        """The last checkpoint entry, or None."""
        return self.run(_ops.last_checkpoint(self.table_name, name, sandbox_id))

    def list_sandbox_details(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of one name, newest first."""
        return self.run(self._list(name, opts))

    def list_all_sandbox_details(
        self, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of every name, newest first."""
        return self.run(self._list(None, opts))

    def get_sandbox_details(self, name: str, sandbox_id: str) -> SandboxDetails | None:
        """One session's summary, or None."""
        return self.run(_ops.get_sandbox_details(self.table_name, name, sandbox_id))

    def delete_sandbox(self, name: str, sandbox_id: str) -> None:
        """Delete the session's summary, entries and checkpoints."""
        self.run(_ops.delete_partition(self.table_name, k.session_pk(name, sandbox_id)))

    def list_checkpoints(self, name: str, sandbox_id: str) -> list[CheckpointInfo]:
        """Checkpoints in creation order."""
        return self.run(_ops.list_checkpoints(self.table_name, name, sandbox_id))

    def get_environment(self, name: str) -> EnvironmentRecord | None:
        """The environment record, or None."""
        return self.run(_ops.get_environment(self.table_name, name))

    def save_environment(self, record: EnvironmentRecord) -> None:
        """Create or replace the record."""
        self.run(_ops.save_environment(self.table_name, _record(record)))

    def delete_environment(self, name: str) -> None:
        """Remove the record if present."""
        self.run(_ops.delete_environment(self.table_name, name))

    def list_environments(self) -> list[EnvironmentRecord]:
        """Every environment record, newest builtAt first."""
        return self.run(_ops.list_environments(self.table_name))
