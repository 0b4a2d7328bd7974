"""The in-memory reference adapter: the semantics every other adapter must match."""

from __future__ import annotations

import bisect
import itertools
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from sandbox_ledger._bulk import append_each_once, read_each_stored
from sandbox_ledger.changes import Change, ChangeKind, ChangeLog, check_seq_state, start_changes
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.follow import (
    DEFAULT_POLL,
    Batch,
    Poll,
    PollSettings,
    Position,
    bad_after,
    drive_async,
    start,
)
from sandbox_ledger.keys import (
    check_component,
    check_environment_name,
    check_occurrence,
    check_retention,
    check_segments,
    check_session_key,
    ledger_expires_at,
)
from sandbox_ledger.models import (
    EnvironmentRecord,
    LedgerEntry,
    LedgerEvent,
    require_storable,
)
from sandbox_ledger.summary import (
    SessionSummary,
    checkpoint_info,
    keyset_page,
    session_listing,
    validate_list_options,
)
from sandbox_ledger.telemetry import instrumented

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Sequence
    from datetime import timedelta
    from types import TracebackType

    from sandbox_ledger.changes import ChangeBatch
    from sandbox_ledger.follow import FollowedEntry
    from sandbox_ledger.models import (
        CheckpointInfo,
        ListSandboxOptions,
        SandboxDetails,
        SandboxPage,
    )

_CURSOR_KIND = "memory-sessions"


@dataclass
class _Session:
    summary: SessionSummary
    # When the session began in this adapter: the tie-break of listings and their cursors.
    seq: int
    # (ts, append sequence, entry), kept sorted: ascending ts, equal ts in append order.
    events: list[tuple[int, int, LedgerEntry]] = field(default_factory=list)
    # The summary's TTL (Unix s): the latest of the entries that changed it; None: forever.
    expires: int | None = None
    # The import identities append_once stored: (content digest, occurrence).
    claims: set[tuple[str, int]] = field(default_factory=set)


def _require(value: str, field_name: str) -> str:
    return check_component(value, field_name)


def _storable(entry: object) -> tuple[str, str]:
    """The session key of an entry every store would accept."""
    if not isinstance(entry, LedgerEntry):
        raise InvalidInputError("entry", f"expected a LedgerEntry, got {type(entry).__name__}")
    key = check_session_key(entry.name, entry.sandbox_id)
    require_storable(entry)
    return key


@instrumented()
class MemoryAdapter:
    """Keeps everything in process memory, indexed by session; for tests and examples.

    Stores and returns copies, as every other store does: changing an entry or record after
    writing it, or what a read returned, never changes what the store holds.

    Unlike the TypeScript example, sessions are keyed by (name, sandboxId), never by
    sandboxId alone, so two names reusing one sandboxId stay distinct.

    ``retention`` (a positive ``timedelta``; None, the default: keep forever) hides entries
    and summaries as the DynamoDB adapter's TTL does (see docs/table-design.md, Ledger
    retention); the expired ones stay in memory until ``delete_sandbox``.
    """

    record_trace_ids: bool | None = None
    """Whether ``append`` records its span's trace and span ids into the entry (True, False),
    or as ``SANDBOX_LEDGER_RECORD_TRACE_IDS`` says (None: :func:`sandbox_ledger.telemetry.
    records_trace_ids`)."""

    consistent_listings: ClassVar[bool] = True
    """A listing shows every write made before it (see the DynamoDB adapter's)."""

    def __init__(self, *, retention: timedelta | None = None) -> None:
        self.retention = retention
        self._retention = check_retention(retention)
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._environments: dict[str, EnvironmentRecord] = {}
        self._seq = itertools.count()
        # Cursors name the store that made them: another MemoryAdapter refuses them.
        self._store = f"memory:{secrets.token_hex(8)}"
        self._changes = ChangeLog(self._store)

    async def connect(self) -> None:
        """Nothing to open; idempotent."""

    async def close(self) -> None:
        """Nothing to release; idempotent. The data stays."""

    async def __aenter__(self) -> MemoryAdapter:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def append(self, entry: LedgerEntry) -> None:
        """Store one entry (the pair must pass :func:`~sandbox_ledger.keys.check_session_key`)."""
        self._append(entry, _storable(entry))

    async def append_once(self, entry: LedgerEntry, occurrence: int) -> bool:
        """Append the ``occurrence``-th copy of this content in its session unless an earlier
        ``append_once`` stored it (the import identity, see :mod:`sandbox_ledger.transfer`):
        True if this call stored it. Atomic: nothing awaits between the check and the write."""
        from sandbox_ledger.transfer import content_digest  # it imports the DynamoDB layer

        occurrence = check_occurrence(occurrence)
        key = _storable(entry)
        claim = (content_digest(entry), occurrence)
        held = self._sessions.get(key)
        if held is not None and claim in held.claims:
            return False
        self._append(entry, key).claims.add(claim)
        return True

    def _append(self, entry: LedgerEntry, key: tuple[str, str]) -> _Session:
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = _Session(
                SessionSummary(entry.name, entry.sandbox_id), next(self._seq)
            )
        kind = _CHANGE_OF.get(entry.event)
        if kind is not None:
            self._record(kind, key, entry.ts)
        # A copy: the caller may change its entry's payload afterwards; the store must not.
        stored = _copy(entry)
        bisect.insort(session.events, (entry.ts, next(self._seq), stored), key=lambda t: t[:2])
        session.summary.apply(entry)
        expires = ledger_expires_at(entry.ts, self._retention)
        if entry.event in _SUMMARY_EVENTS and expires is not None:
            # The summary's expiry never moves back: an append out of ts order keeps it.
            session.expires = max(expires, session.expires or expires)
        return session

    def _live_events(self, session: _Session) -> list[tuple[int, int, LedgerEntry]]:
        if self._retention is None:
            return session.events
        now = int(time.time())
        return [t for t in session.events if t[0] // 1000 + self._retention > now]

    def _live_summary(self, session: _Session) -> SandboxDetails | None:
        if session.expires is not None and session.expires <= int(time.time()):
            return None
        return session.summary.details()

    async def read_all(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every event of the session, ascending ts, ties in append order."""
        session = self._sessions.get((_require(name, "name"), _require(sandbox_id, "sandboxId")))
        if session is None:
            return []
        return [_copy(e) for _, _, e in self._live_events(session)]

    async def ledger_retention(self) -> int | None:
        """The ledger retention appends use (seconds; None: keep forever): what an import
        checks entries against, so it never writes one already expired."""
        return self._retention

    async def read_stored(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every event still held, expired ones included (they stay in memory until
        ``delete_sandbox``): what an import reconciles a file against."""
        session = self._sessions.get((_require(name, "name"), _require(sandbox_id, "sandboxId")))
        if session is None:
            return []
        return [_copy(e) for _, _, e in session.events]

    async def read_stored_sessions(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]:
        """``read_stored`` of each session, in order."""
        return await read_each_stored(self.read_stored, sessions)

    async def append_once_many(
        self,
        items: Sequence[tuple[LedgerEntry, int]],
        *,
        digests: Sequence[str] | None = None,
    ) -> list[bool | InvalidInputError]:
        """``append_once`` of each item in order, a refused item's error as its outcome
        (``digests`` unused: this store keeps identities by content)."""
        return await append_each_once(self.append_once, items)

    async def read_sessions_in_append_order(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]:
        """``read_in_append_order`` of each session, in order."""
        return await read_each_stored(self.read_in_append_order, sessions)

    async def read_in_append_order(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry of the session in the order it was appended (what an export replays)."""
        session = self._sessions.get((_require(name, "name"), _require(sandbox_id, "sandboxId")))
        if session is None:
            return []
        return [_copy(e) for _, _, e in sorted(self._live_events(session), key=lambda t: t[1])]

    async def scan_sessions(
        self, name: str | None = None, *, segments: int | None = None
    ) -> list[tuple[str, str]]:
        """Every (name, sandboxId) with at least one entry, listed or not (sessions without
        ``sandbox.created`` included), sorted; for exports (``segments`` is checked and
        ignored)."""
        if name is not None:
            _require(name, "name")
        check_segments(segments)
        return sorted(
            key
            for key, session in self._sessions.items()
            if self._live_events(session) and (name is None or key[0] == name)
        )

    async def last_checkpoint(self, name: str, sandbox_id: str) -> LedgerEntry | None:
        """The last checkpoint entry in read_all order, or None."""
        checkpoints = [e for e in await self.read_all(name, sandbox_id) if _is_checkpoint(e)]
        return checkpoints[-1] if checkpoints else None

    async def list_sandbox_details(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of one name, newest first (ties in the order they began)."""
        return (await self.list_sandbox_page(name, opts)).sessions

    async def list_all_sandbox_details(
        self, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of every name, newest first (ties in the order they began)."""
        return (await self.list_all_sandbox_page(opts)).sessions

    async def list_sandbox_page(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> SandboxPage:
        """One page of :meth:`list_sandbox_details` and the cursor of the next."""
        _require(name, "name")
        rows = self._rows(lambda s: s.summary.name == name)
        o = validate_list_options(opts)
        return keyset_page(rows, o, _CURSOR_KIND, session_listing(self._store, name, o))

    async def list_all_sandbox_page(self, opts: ListSandboxOptions | None = None) -> SandboxPage:
        """One page of :meth:`list_all_sandbox_details` and the cursor of the next."""
        o = validate_list_options(opts)
        listing = session_listing(self._store, None, o)
        return keyset_page(self._rows(lambda s: True), o, _CURSOR_KIND, listing)

    async def get_sandbox_details(self, name: str, sandbox_id: str) -> SandboxDetails | None:
        """One session's summary, or None."""
        session = self._sessions.get((_require(name, "name"), _require(sandbox_id, "sandboxId")))
        return self._live_summary(session) if session else None

    async def delete_sandbox(self, name: str, sandbox_id: str) -> None:
        """Forget the session."""
        key = (_require(name, "name"), _require(sandbox_id, "sandboxId"))
        gone = self._sessions.pop(key, None)
        if gone is not None and _has_summary(gone.summary):
            self._record(ChangeKind.SESSION_DELETED, key, time.time_ns() // 1_000_000)

    def _record(self, kind: ChangeKind, key: tuple[str, str], at: int) -> None:
        change = Change(kind, "", at, name=key[0], sandbox_id=key[1])
        self._changes.add(change, time.time())

    async def list_checkpoints(self, name: str, sandbox_id: str) -> list[CheckpointInfo]:
        """Checkpoints in creation (read_all) order."""
        return [
            checkpoint_info(e) for e in await self.read_all(name, sandbox_id) if _is_checkpoint(e)
        ]

    async def get_environment(self, name: str) -> EnvironmentRecord | None:
        """The environment record, or None."""
        record = self._environments.get(check_environment_name(name))
        return record.model_copy(deep=True) if record else None

    async def save_environment(self, record: EnvironmentRecord) -> None:
        """Upsert by name."""
        if not isinstance(record, EnvironmentRecord):
            raise InvalidInputError(
                "record", f"expected an EnvironmentRecord, got {type(record).__name__}"
            )
        check_environment_name(record.name)  # the same rule on every store
        require_storable(record)
        self._environments[record.name] = record.model_copy(deep=True)

    async def delete_environment(self, name: str) -> None:
        """Remove the record if present."""
        self._environments.pop(check_environment_name(name), None)

    async def list_environments(self) -> list[EnvironmentRecord]:
        """Newest builtAt first; ties in first-saved order."""
        records = sorted(self._environments.values(), key=lambda r: -r.built_at)
        return [r.model_copy(deep=True) for r in records]

    follow_poll: PollSettings = DEFAULT_POLL
    """How often ``follow`` polls while idle (see :class:`~sandbox_ledger.follow.PollSettings`)."""

    def follow(
        self, name: str, sandbox_id: str, *, after: str | None = None, until_closed: bool = True
    ) -> AsyncGenerator[FollowedEntry, None]:
        """The session's entries in append order as they are appended (see
        :class:`~sandbox_ledger.protocol.FollowAdapter`); a poll reads this process's memory."""
        key = (_require(name, "name"), _require(sandbox_id, "sandboxId"))
        position = Position(self._store, *key)
        flow = start(
            position, after, _follow_state, until_closed=until_closed, settings=self.follow_poll
        )

        async def step(request: Poll) -> Batch:
            return self._follow_poll(key, request.state)

        traced = (self, "follow", {"sandbox.name": key[0], "sandbox.id": key[1]})
        return drive_async(flow, step, traced=traced)

    def _follow_poll(self, key: tuple[str, str], state: dict[str, Any] | None) -> Batch:
        session = self._sessions.get(key)
        if session is None or (state is not None and session.seq != state["s"]):
            # Deleted (and maybe begun again: another session); before it began, wait.
            return Batch([], gone=state is not None)
        last = -1 if state is None else state["q"]
        new = sorted((t for t in self._live_events(session) if t[1] > last), key=lambda t: t[1])
        return Batch([({"s": session.seq, "q": seq}, _copy(e)) for _, seq, e in new])

    def changes(self, *, after: str | None = None) -> AsyncGenerator[Change, None]:
        """The fleet's changes, the oldest kept first, then each new one (see
        :class:`~sandbox_ledger.protocol.ChangesAdapter`); a poll reads this process's memory."""
        flow = start_changes(self._store, after, check_seq_state, settings=self.follow_poll)

        async def step(request: Poll) -> ChangeBatch:
            return self._changes.after(request.state)

        return drive_async(flow, step, traced=(self, "changes", {}))

    def _rows(self, keep: Any) -> list[tuple[SandboxDetails, int]]:
        out = []
        for session in self._sessions.values():
            if keep(session):
                details = self._live_summary(session)
                if details is not None:
                    out.append((details, session.seq))
        return out


_SUMMARY_EVENTS = frozenset(
    {LedgerEvent.SandboxCreated, LedgerEvent.SandboxClosed, LedgerEvent.ExecComplete}
)


_CHANGE_OF: dict[str, ChangeKind] = {
    LedgerEvent.SandboxCreated: ChangeKind.SESSION_CREATED,
    LedgerEvent.SandboxClosed: ChangeKind.SESSION_CLOSED,
}


def _has_summary(summary: SessionSummary) -> bool:
    """Whether an event that makes a session's summary was appended (its delete is a change,
    as on DynamoDB, where such a session has a summary item)."""
    return (
        summary.started_at is not None
        or summary.completed_at is not None
        or bool(summary.exec_count)
    )


def _follow_state(state: dict[str, Any]) -> dict[str, Any]:
    if set(state) != {"s", "q"} or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in state.values()
    ):
        raise bad_after()
    return state


def _is_checkpoint(entry: LedgerEntry) -> bool:
    return entry.event == LedgerEvent.CheckpointCreated


def _copy(entry: LedgerEntry) -> LedgerEntry:
    return entry.model_copy(deep=True)
