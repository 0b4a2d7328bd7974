"""Deriving a session's summary from its events, and the listing rules, shared by adapters.

These are the reference semantics of the TypeScript in-memory example: status is completed iff
a ``sandbox.closed`` event exists; startedAt is the ts of the first ``sandbox.created`` appended,
completedAt that of the first ``sandbox.closed``; execCount counts ``exec.complete`` events; a
session without ``sandbox.created`` is never listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox_ledger.models import (
    CheckpointInfo,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    SandboxDetails,
    SandboxStatus,
)

if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass
class SessionSummary:
    """The running summary of one (name, sandboxId) session."""

    name: str
    sandbox_id: str
    started_at: int | None = None
    completed_at: int | None = None
    exec_count: int = 0

    def apply(self, entry: LedgerEntry) -> None:
        """Fold one appended entry into the summary (append order matters for firsts)."""
        if entry.event == LedgerEvent.SandboxCreated and self.started_at is None:
            self.started_at = entry.ts
        elif entry.event == LedgerEvent.SandboxClosed and self.completed_at is None:
            self.completed_at = entry.ts
        elif entry.event == LedgerEvent.ExecComplete:
            self.exec_count += 1

    def details(self) -> SandboxDetails | None:
        """The listed view, or None while no ``sandbox.created`` has been seen."""
        if self.started_at is None:
            return None
        return SandboxDetails(
            name=self.name,
            sandbox_id=self.sandbox_id,
            status=SandboxStatus.Completed
            if self.completed_at is not None
            else SandboxStatus.Running,
            started_at=self.started_at,
            completed_at=self.completed_at,
            exec_count=self.exec_count,
        )


def apply_list_options(
    details: Iterable[SandboxDetails], opts: ListSandboxOptions | None
) -> list[SandboxDetails]:
    """Newest first by startedAt (stable for ties), then status, then ``before``, then ``limit``.

    Falsy options filter nothing, as in the reference (``limit=0`` means no limit).
    """
    out = sorted(details, key=lambda d: -d.started_at)
    if opts is None:
        return out
    if opts.status:
        out = [d for d in out if d.status == opts.status]
    if opts.before:
        before = opts.before
        out = [d for d in out if d.started_at < before]
    if opts.limit:
        out = out[: opts.limit]
    return out


def checkpoint_info(entry: LedgerEntry) -> CheckpointInfo:
    """The checkpoint view of a ``sandbox.checkpoint_created`` entry.

    ``snapshotId`` and ``tag`` are the payload's ``snapshotId`` and ``name`` when they are
    strings, None otherwise.
    """
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    snapshot_id = payload.get("snapshotId")
    tag = payload.get("name")
    return CheckpointInfo(
        snapshot_id=snapshot_id if isinstance(snapshot_id, str) else None,
        tag=tag if isinstance(tag, str) else None,
        created_at=entry.ts,
    )


def validate_list_options(opts: ListSandboxOptions | None) -> ListSandboxOptions | None:
    """Accept a ListSandboxOptions, a camelCase/snake_case dict, or None."""
    if opts is None or isinstance(opts, ListSandboxOptions):
        return opts
    return ListSandboxOptions.model_validate(opts)
