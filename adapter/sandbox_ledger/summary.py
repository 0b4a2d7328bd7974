"""Deriving a session's summary from its events, and the listing rules, shared by adapters.

These are the reference semantics of the TypeScript in-memory example: status is completed iff
a ``sandbox.closed`` event exists; startedAt is the ts of the first ``sandbox.created`` appended,
completedAt that of the first ``sandbox.closed``; execCount counts ``exec.complete`` events; a
session without ``sandbox.created`` is never listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox_ledger._json import MAX_SAFE_INTEGER
from sandbox_ledger.cursor import bad_position, check_int, decode_cursor, encode_cursor
from sandbox_ledger.models import (
    CheckpointInfo,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    SandboxDetails,
    SandboxPage,
    SandboxStatus,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

_INT63 = 2**63 - 1


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


def session_listing(store: str, name: str | None, opts: ListSandboxOptions | None) -> list[Any]:
    """What a session listing's cursor is bound to (see :mod:`sandbox_ledger.cursor`): the
    store, the name filter (None: every name), ``status`` and ``before`` (falsy: none). Not
    ``limit``, which may change from page to page."""
    status = opts.status.value if opts is not None and opts.status else None
    before = opts.before if opts is not None and opts.before else None
    return [store, name, status, before]


def keyset_page(
    rows: Iterable[tuple[SandboxDetails, int]],
    opts: ListSandboxOptions | None,
    kind: str,
    listing: Sequence[Any] = (),
) -> SandboxPage:
    """One page of sessions in the total order (newest startedAt, then ascending ``tiebreak``).

    ``rows`` pairs each session with an integer unique among them and fixed for the
    session's life (an insertion sequence, a row id), from 0 to 2**63 - 1: the tie-break that
    makes the order total, so a cursor (the last row's startedAt and tie-break) resumes
    exactly after it, whatever sessions share its startedAt. Filters apply as in
    :func:`apply_list_options`; ``listing`` is :func:`session_listing`'s.
    """
    ordered = sorted(rows, key=lambda row: (-row[0].started_at, row[1]))
    if opts is not None and opts.status:
        ordered = [row for row in ordered if row[0].status == opts.status]
    if opts is not None and opts.before:
        before = opts.before
        ordered = [row for row in ordered if row[0].started_at < before]
    if opts is not None and opts.cursor is not None:
        after, tie = keyset_position(decode_cursor(kind, opts.cursor, listing), opts.before)
        ordered = [row for row in ordered if (-row[0].started_at, row[1]) > (-after, tie)]
    limit = opts.limit if opts is not None and opts.limit else None
    if limit is None or len(ordered) <= limit:
        return SandboxPage(sessions=[row[0] for row in ordered])
    last_details, last_tie = ordered[limit - 1]
    cursor = encode_cursor(kind, {"t": last_details.started_at, "q": last_tie}, listing)
    return SandboxPage(sessions=[row[0] for row in ordered[:limit]], cursor=cursor)


def keyset_position(state: dict[str, Any], before: int | None = None) -> tuple[int, int]:
    """The (startedAt, tie-break) of a keyset cursor's state: a timestamp (below ``before``,
    if given: the listing's own range) and an integer from 0 to 2**63 - 1 (what every store's
    tie-break and a SQL bind hold), nothing else.

    Raises:
        InvalidInputError: naming ``cursor``.
    """
    if set(state) != {"t", "q"}:
        raise bad_position()
    high = before - 1 if before else MAX_SAFE_INTEGER
    return check_int(state["t"], 0, high), check_int(state["q"], 0, _INT63)


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
