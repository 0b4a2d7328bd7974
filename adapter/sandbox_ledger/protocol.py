"""The storage contract every adapter implements (the TypeScript ``IStorageAdapter``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sandbox_ledger.models import (
        CheckpointInfo,
        EnvironmentRecord,
        LedgerEntry,
        ListSandboxOptions,
        SandboxDetails,
    )


@runtime_checkable
class StorageAdapter(Protocol):
    """Async storage for sandbox ledgers and environment records.

    Adapters connect lazily on first use; ``connect`` and ``close`` are idempotent, and every
    adapter works as ``async with adapter:``. Reference semantics: :class:`MemoryAdapter`.
    """

    async def connect(self) -> None:
        """Open connections; called lazily, safe to call more than once."""

    async def close(self) -> None:
        """Release connections; safe to call more than once."""

    async def append(self, entry: LedgerEntry) -> None:
        """Persist one ledger event exactly once."""

    async def read_all(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every event of a session, ascending by ts, equal ts in append order."""
        ...

    async def last_checkpoint(self, name: str, sandbox_id: str) -> LedgerEntry | None:
        """The session's most recent ``sandbox.checkpoint_created`` entry, or None."""
        ...

    async def list_sandbox_details(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions with this name, newest first, filtered by ``opts``."""
        ...

    async def list_all_sandbox_details(
        self, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of every name, newest first, filtered by ``opts``."""
        ...

    async def get_sandbox_details(self, name: str, sandbox_id: str) -> SandboxDetails | None:
        """One session's summary, or None when it has no ``sandbox.created`` event."""
        ...

    async def delete_sandbox(self, name: str, sandbox_id: str) -> None:
        """Delete every event of a session; unknown sessions are not an error."""

    async def list_checkpoints(self, name: str, sandbox_id: str) -> list[CheckpointInfo]:
        """Every checkpoint of a session in creation order."""
        ...

    async def get_environment(self, name: str) -> EnvironmentRecord | None:
        """The environment record with this name, or None."""
        ...

    async def save_environment(self, record: EnvironmentRecord) -> None:
        """Create or replace the environment record with ``record.name``."""

    async def delete_environment(self, name: str) -> None:
        """Remove an environment record; unknown names are not an error."""

    async def list_environments(self) -> list[EnvironmentRecord]:
        """Every environment record, newest ``builtAt`` first."""
        ...
