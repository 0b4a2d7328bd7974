"""The storage contract every adapter implements (the TypeScript ``IStorageAdapter``).

Extensions of the TypeScript contract (additive: a client of the seed's methods sees nothing
new):

* **The key rule.** ``append`` refuses a (name, sandboxId) pair that fails
  :func:`sandbox_ledger.keys.check_session_key`, whatever the event, before writing anything.
* **Paging cursors.** ``list_sandbox_page`` / ``list_all_sandbox_page`` return a
  :class:`~sandbox_ledger.models.SandboxPage`: the sessions (exactly what the ``list_*_details``
  method returns for the same arguments) and ``cursor``, the position after the page's last
  session. The cursor contract, for an adapter author:

  - Sessions are listed newest ``startedAt`` first in an order the adapter makes total by a
    tie-break of its own that never changes while a session exists (an insertion sequence,
    a row id, an index position). ``before`` keeps the seed's meaning (strictly less).
  - ``opts.cursor`` set to a previous page's ``cursor`` (same method, same name, same
    ``status`` and ``before``) returns, at most ``limit``, the sessions strictly after that
    page's last one in that order. Paging from no cursor until ``cursor`` is None yields
    every session that exists and keeps its status throughout exactly once, however many
    share a ``startedAt``; sessions that appear meanwhile are listed at most once.
  - ``cursor`` is None when no session is left; a non-None cursor may lead to an empty page.
    With no ``limit`` (None or 0) the page holds every remaining session and ``cursor`` is None.
  - Cursors are opaque URL-safe strings (:mod:`sandbox_ledger.cursor` builds and seals
    them, bound to the store and the listing's name, ``status`` and ``before``); a damaged or
    altered one, or one from another listing or store, raises ``InvalidInputError`` (field
    ``cursor``) before any request, and the adapter validates the decoded state's types and
    shapes, so a forged one can at worst start at another position of the same listing.
    ``list_*_details`` honour ``opts.cursor`` the same way.

  :func:`sandbox_ledger.summary.keyset_page` implements it for an adapter that can hand over
  (details, tie-break) rows.
* **Moving a ledger.** :class:`TransferAdapter` declares what ``sandbox-ledger export``
  and ``import`` (:mod:`sandbox_ledger.transfer`) need beyond the contract: sessions found
  by scanning rather than listing, entries in append order and as stored, the import
  identity (``append_once``), its batched forms (``read_stored_sessions``,
  ``append_once_many``: what the streaming import writes through) and the retention. Every
  adapter of this library implements it; :class:`SyncStorageAdapter` and
  :class:`SyncTransferAdapter` are the same contracts without ``await``
  (``SyncDynamoDBAdapter``, and :class:`~sandbox_ledger.blocking.BlockingAdapter` over any
  async adapter).
* **Following a session.** :class:`FollowAdapter` (and :class:`SyncFollowAdapter`) declare
  ``follow``: a session's entries as they are appended, each with a position to resume from
  (see :mod:`sandbox_ledger.follow` and docs/live.md). Every adapter of this library
  implements it.
* **The fleet's changes.** :class:`ChangesAdapter` (and :class:`SyncChangesAdapter`) declare
  ``changes``: sessions created, closed, deleted and expired, resource records expired, each
  with a position to resume from and an id to drop repeats (see :mod:`sandbox_ledger.changes`
  and docs/live.md). Every adapter of this library implements it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Generator, Sequence

    from sandbox_ledger.changes import Change
    from sandbox_ledger.errors import InvalidInputError
    from sandbox_ledger.follow import FollowedEntry
    from sandbox_ledger.models import (
        CheckpointInfo,
        EnvironmentRecord,
        LedgerEntry,
        ListSandboxOptions,
        SandboxDetails,
        SandboxPage,
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
        """Persist one ledger event exactly once.

        Raises:
            KeyTooLongError: the (name, sandboxId) pair fails
                :func:`sandbox_ledger.keys.check_session_key` (the same rule on every adapter,
                checked before anything is written, whatever the event).
        """

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

    async def list_sandbox_page(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> SandboxPage:
        """One page of ``list_sandbox_details`` and the cursor of the next (see the module)."""
        ...

    async def list_all_sandbox_page(self, opts: ListSandboxOptions | None = None) -> SandboxPage:
        """One page of ``list_all_sandbox_details`` and the cursor of the next."""
        ...

    async def get_sandbox_details(self, name: str, sandbox_id: str) -> SandboxDetails | None:
        """One session's summary, or None when it has no ``sandbox.created`` event."""
        ...

    async def delete_sandbox(self, name: str, sandbox_id: str) -> None:
        """Delete every event of a session; unknown sessions are not an error.

        Under a concurrent writer, an append either lands before the delete (and is deleted)
        or after it (a new session whose summary counts exactly its own entries): the summary
        never disagrees with the entries that exist.
        """

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


@runtime_checkable
class TransferAdapter(StorageAdapter, Protocol):
    """The contract and what export and import need to move a ledger completely and exactly
    once (every adapter of this library; the conformance suite checks it)."""

    async def scan_sessions(
        self, name: str | None = None, *, segments: int | None = None
    ) -> list[tuple[str, str]]:
        """Every (name, sandboxId) with at least one visible entry (of ``name`` if given),
        sorted, sessions without ``sandbox.created`` included.

        ``segments`` is a hint for a store that scans in parallel (DynamoDB: the number of
        Scan segments, default 4); a store that does not checks it and ignores it.

        Raises:
            InvalidInputError: ``segments`` is not None or an integer from 1 to 64.
        """
        ...

    async def read_in_append_order(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every visible entry of the session in the order it was appended (what an export
        writes, so that replaying it rebuilds every summary), whole as the session was at
        one moment, or none while a ``delete_sandbox`` of it runs: racing appends, a prefix
        of them in append order (never a later entry without an earlier one, never part of
        an entry); racing a delete, never the rest of the deleted session."""
        ...

    async def read_sessions_in_append_order(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]:
        """``read_in_append_order`` of each (name, sandboxId), in the order given: what an
        export reads a run of sessions with (a SQL store reads them in one query)."""
        ...

    async def read_stored(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry the store still holds for the session, ascending ts, those past the
        retention included until the store removes them (what an import reconciles against)."""
        ...

    async def append_once(self, entry: LedgerEntry, occurrence: int) -> bool:
        """Append the ``occurrence``-th copy (1-based) of this content in its session unless
        an earlier ``append_once`` stored it, atomically: True if this call stored it.

        Raises:
            InvalidInputError: ``occurrence`` is not an integer from 1 to 999999, or the
                entry is one ``append`` refuses (nothing is written).
        """
        ...

    async def read_stored_sessions(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]:
        """``read_stored`` of each (name, sandboxId), in the order given: what an import
        reconciles a batch of sessions against (a SQL store reads them in one query)."""
        ...

    async def append_once_many(
        self,
        items: Sequence[tuple[LedgerEntry, int]],
        *,
        digests: Sequence[str] | None = None,
    ) -> list[bool | InvalidInputError]:
        """``append_once`` of each (entry, occurrence), in order, with each item's outcome:
        True if this call stored it, False if an earlier ``append_once`` had, or the
        ``InvalidInputError`` that ``append_once`` would raise for it (nothing written for
        that item; the others are written). A SQL store writes the batch in one transaction
        with each session's summary updated once; every store keeps each identity's
        exactly-once under concurrent calls.

        ``digests``: each item's :func:`~sandbox_ledger.transfer.content_digest`, when the
        caller computed it already (the importer reconciles by it), so that it is not
        computed again; taken as given (a wrong one stores the entry under that identity).

        Raises:
            DeploymentMismatchError: the client disagrees with the store (nothing more is
                written; what was written stays, each item exactly once).
        """
        ...

    async def ledger_retention(self) -> int | None:
        """The ledger retention appends write with, in seconds (None: kept forever)."""
        ...


@runtime_checkable
class SyncStorageAdapter(Protocol):
    """:class:`StorageAdapter` without ``await``, with the same results and errors."""

    def connect(self) -> None: ...

    def close(self) -> None: ...

    def append(self, entry: LedgerEntry) -> None: ...

    def read_all(self, name: str, sandbox_id: str) -> list[LedgerEntry]: ...

    def last_checkpoint(self, name: str, sandbox_id: str) -> LedgerEntry | None: ...

    def list_sandbox_details(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]: ...

    def list_all_sandbox_details(
        self, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]: ...

    def list_sandbox_page(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> SandboxPage: ...

    def list_all_sandbox_page(self, opts: ListSandboxOptions | None = None) -> SandboxPage: ...

    def get_sandbox_details(self, name: str, sandbox_id: str) -> SandboxDetails | None: ...

    def delete_sandbox(self, name: str, sandbox_id: str) -> None: ...

    def list_checkpoints(self, name: str, sandbox_id: str) -> list[CheckpointInfo]: ...

    def get_environment(self, name: str) -> EnvironmentRecord | None: ...

    def save_environment(self, record: EnvironmentRecord) -> None: ...

    def delete_environment(self, name: str) -> None: ...

    def list_environments(self) -> list[EnvironmentRecord]: ...


@runtime_checkable
class SyncTransferAdapter(SyncStorageAdapter, Protocol):
    """:class:`TransferAdapter` without ``await``: what the importer and exporter take."""

    def scan_sessions(
        self, name: str | None = None, *, segments: int | None = None
    ) -> list[tuple[str, str]]: ...

    def read_in_append_order(self, name: str, sandbox_id: str) -> list[LedgerEntry]: ...

    def read_sessions_in_append_order(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]: ...

    def read_stored(self, name: str, sandbox_id: str) -> list[LedgerEntry]: ...

    def append_once(self, entry: LedgerEntry, occurrence: int) -> bool: ...

    def read_stored_sessions(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]: ...

    def append_once_many(
        self,
        items: Sequence[tuple[LedgerEntry, int]],
        *,
        digests: Sequence[str] | None = None,
    ) -> list[bool | InvalidInputError]: ...

    def ledger_retention(self) -> int | None: ...


@runtime_checkable
class FollowAdapter(Protocol):
    """A store that hands out a session's entries as they are appended."""

    def follow(
        self, name: str, sandbox_id: str, *, after: str | None = None, until_closed: bool = True
    ) -> AsyncGenerator[FollowedEntry, None]:
        """Every entry of the session in the store's append order, those stored first, then
        each new one once it is stored whole, each exactly once, with its position.

        ``after`` (a position ``follow`` handed out for this session) starts just after that
        entry. Ends after ``sandbox.closed`` (unless ``until_closed`` is False) and once the
        session is deleted; otherwise waits for more.

        Raises:
            InvalidInputError: ``after`` is not a position of this session in this store
                (field ``after``), or name/sandboxId are invalid; raised on first iteration.
        """
        ...


@runtime_checkable
class SyncFollowAdapter(Protocol):
    """:class:`FollowAdapter` without ``await``: ``follow`` is a plain iterator."""

    def follow(
        self, name: str, sandbox_id: str, *, after: str | None = None, until_closed: bool = True
    ) -> Generator[FollowedEntry, None, None]: ...


@runtime_checkable
class ChangesAdapter(Protocol):
    """A store that hands out the fleet's changes as they happen."""

    def changes(self, *, after: str | None = None) -> AsyncGenerator[Change, None]:
        """Every change the store keeps, oldest first, then each new one, at least once (a
        repeat carries the same ``id``); never ends on its own.

        ``after`` (a position ``changes`` handed out by this store) starts just after that
        change.

        Raises:
            InvalidInputError: ``after`` is not a position of this store (field ``after``);
                raised on first iteration.
            ChangesTrimmedError: ``after`` is older than what the store keeps.
        """
        ...


@runtime_checkable
class SyncChangesAdapter(Protocol):
    """:class:`ChangesAdapter` without ``await``: ``changes`` is a plain iterator."""

    def changes(self, *, after: str | None = None) -> Generator[Change, None, None]: ...
