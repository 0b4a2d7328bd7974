"""The fleet's changes, a part of the conformance suite: ``changes`` behaves alike on every
store (:class:`~sandbox_ledger.protocol.ChangesAdapter`)."""

from __future__ import annotations

import asyncio
import base64
from typing import TYPE_CHECKING, Any

import pytest

from sandbox_ledger.changes import ChangeKind
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.protocol import ChangesAdapter
from sandbox_ledger.testing._build import entry

if TYPE_CHECKING:
    from sandbox_ledger.changes import Change

# Generous: a reader on a loaded machine must still finish; a hang fails the test.
_PATIENCE = 30.0

Seen = list[tuple[str, str | None, str | None]]


async def collect_changes(
    adapter: Any, count: int, *, after: str | None = None, only: bool = False
) -> list[Change]:
    """The first ``count`` distinct changes (repeats dropped by id, as a consumer does)
    from ``after``. With ``only``, also checks that no other change follows them: it creates
    a session named ``sentinel`` and the next distinct change must be its creation (no
    reader is cut off while it waits, so the sync twins' threads end too)."""
    out: list[Change] = []
    seen: dict[str, Change] = {}

    async def run(start: str | None, wanted: int) -> None:
        stream = adapter.changes(after=start)
        try:
            async for change in stream:
                if change.id in seen:
                    assert _what(seen[change.id]) == _what(change), "a repeat differs"
                    continue
                seen[change.id] = change
                out.append(change)
                if len(out) >= wanted:
                    return
        finally:
            await stream.aclose()

    if count:
        await asyncio.wait_for(run(after, count), _PATIENCE)
    if only:
        await adapter.append(entry("sentinel", "s", LedgerEvent.SandboxCreated, 1))
        await asyncio.wait_for(run(out[-1].position if out else after, count + 1), _PATIENCE)
        assert _what(out.pop()) == ("session.created", "sentinel", "s"), "more changes came"
    assert len(out) == count, [_what(c) for c in out]
    return out


def _what(change: Change) -> tuple[str, str | None, str | None]:
    return (change.kind.value, change.name, change.sandbox_id)


def _whats(changes: list[Change]) -> Seen:
    return [_what(c) for c in changes]


class ChangesContract:
    """Change-feed tests; :class:`~sandbox_ledger.testing.StorageAdapterContract` includes
    them. Each test starts from an empty store, so the feed holds only its own changes."""

    async def test_is_a_changes_adapter(self, adapter: Any) -> None:
        assert isinstance(adapter, ChangesAdapter)

    async def test_changes_created_closed_and_deleted_in_order(self, adapter: Any) -> None:
        await adapter.append(entry("w", "s", LedgerEvent.SandboxCreated, 1))
        await adapter.append(entry("w", "s", LedgerEvent.ExecStarted, 2, step=0))
        await adapter.append(entry("w", "s", LedgerEvent.ExecComplete, 3, step=0))
        await adapter.append(entry("w", "s", LedgerEvent.SandboxClosed, 4))
        await adapter.delete_sandbox("w", "s")
        await adapter.delete_sandbox("w", "never")  # nothing to delete: no change
        await adapter.append(entry("w", "bare", LedgerEvent.ExecStarted, 5, step=0))
        await adapter.delete_sandbox("w", "bare")  # no summary event: no session, no change
        changes = await collect_changes(adapter, 3, only=True)
        assert _whats(changes) == [
            ("session.created", "w", "s"),
            ("session.closed", "w", "s"),
            ("session.deleted", "w", "s"),
        ]
        assert [c.at for c in changes[:2]] == [1, 4]
        assert len({c.id for c in changes}) == 3
        assert len({c.position for c in changes}) == 3
        assert all(isinstance(c.position, str) and c.position for c in changes)
        assert all(isinstance(c.kind, ChangeKind) for c in changes)

    async def test_changes_a_waiting_reader_sees_new_ones(self, adapter: Any) -> None:
        reader = asyncio.create_task(collect_changes(adapter, 2))
        await asyncio.sleep(0.3)
        assert not reader.done()
        await adapter.append(entry("w", "late", LedgerEvent.SandboxCreated, 5))
        await adapter.append(entry("w", "late", LedgerEvent.SandboxClosed, 6))
        assert _whats(await reader) == [
            ("session.created", "w", "late"),
            ("session.closed", "w", "late"),
        ]

    async def test_changes_resume_just_after_every_position(self, adapter: Any) -> None:
        for sid in ("a", "b"):
            await adapter.append(entry("w", sid, LedgerEvent.SandboxCreated, 1))
            await adapter.append(entry("w", sid, LedgerEvent.SandboxClosed, 2))
        await adapter.delete_sandbox("w", "a")
        changes = await collect_changes(adapter, 5)
        for at, one in enumerate(changes):
            rest = await collect_changes(adapter, len(changes) - at - 1, after=one.position)
            assert [c.id for c in rest] == [c.id for c in changes[at + 1 :]]
            assert _whats(rest) == _whats(changes[at + 1 :])

    async def test_changes_a_resumed_reader_sees_what_came_meanwhile(self, adapter: Any) -> None:
        await adapter.append(entry("w", "s", LedgerEvent.SandboxCreated, 1))
        [first] = await collect_changes(adapter, 1)
        await adapter.append(entry("w", "s", LedgerEvent.SandboxClosed, 2))
        await adapter.append(entry("w", "t", LedgerEvent.SandboxCreated, 3))
        rest = await collect_changes(adapter, 2, after=first.position, only=True)
        assert _whats(rest) == [("session.closed", "w", "s"), ("session.created", "w", "t")]

    async def test_changes_concurrent_creators_each_appear_once(self, adapter: Any) -> None:
        async def creator(w: int) -> None:
            for i in range(5):
                await adapter.append(entry("w", f"{w}-{i}", LedgerEvent.SandboxCreated, 1))

        await asyncio.gather(*(creator(w) for w in range(4)))
        changes = await collect_changes(adapter, 20, only=True)
        assert sorted(c.sandbox_id or "" for c in changes) == sorted(
            f"{w}-{i}" for w in range(4) for i in range(5)
        )

    @pytest.mark.parametrize("bad", ["", "nonsense", "e30", 7, b"x"])
    async def test_changes_refuse_what_is_not_a_position(self, adapter: Any, bad: Any) -> None:
        with pytest.raises(InvalidInputError) as info:
            await collect_changes(adapter, 1, after=bad)
        assert info.value.field == "after"

    async def test_changes_refuse_an_altered_or_a_follow_position(self, adapter: Any) -> None:
        await adapter.append(entry("w", "s", LedgerEvent.SandboxCreated, 1))
        [first] = await collect_changes(adapter, 1)
        raw = bytearray(base64.urlsafe_b64decode(first.position + "=" * (-len(first.position) % 4)))
        raw[len(raw) // 2] ^= 1
        altered = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
        stream = adapter.follow("w", "s", until_closed=False)
        try:
            followed = await asyncio.wait_for(anext(stream), _PATIENCE)
        finally:
            await stream.aclose()
        for bad in (altered, followed.position):
            with pytest.raises(InvalidInputError) as info:
                await collect_changes(adapter, 1, after=bad)
            assert info.value.field == "after"
