"""Following a session, a part of the conformance suite: ``follow`` behaves alike on every
store (:class:`~sandbox_ledger.protocol.FollowAdapter`)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.protocol import FollowAdapter
from sandbox_ledger.testing._build import entry

if TYPE_CHECKING:
    from sandbox_ledger.follow import FollowedEntry
    from sandbox_ledger.models import LedgerEntry

# Generous: a follower on a loaded machine must still finish; a hang fails the test.
_PATIENCE = 30.0


def _wires(entries: list[LedgerEntry]) -> list[dict[str, Any]]:
    return [e.wire() for e in entries]


async def collect(
    adapter: Any,
    name: str,
    sandbox_id: str,
    *,
    limit: int | None = None,
    arrived: asyncio.Event | None = None,
    **kwargs: Any,
) -> list[FollowedEntry]:
    """What ``follow`` hands out until it ends (or ``limit`` entries), within a deadline;
    ``arrived`` is set at the first entry handed out."""

    async def run() -> list[FollowedEntry]:
        out: list[FollowedEntry] = []
        stream = adapter.follow(name, sandbox_id, **kwargs)
        try:
            async for followed in stream:
                out.append(followed)
                if arrived is not None:
                    arrived.set()
                if limit is not None and len(out) >= limit:
                    break
        finally:
            await stream.aclose()
        return out

    return await asyncio.wait_for(run(), _PATIENCE)


class FollowContract:
    """Follow tests; :class:`~sandbox_ledger.testing.StorageAdapterContract` includes them."""

    follows_append_order: ClassVar[bool] = True
    """True where ``follow`` hands entries out in append order (``read_in_append_order``);
    a store that follows in ``read_all`` order (DynamoDB: by its sort key, see docs/live.md)
    sets it False."""

    async def _order(self, adapter: Any, name: str, sandbox_id: str) -> list[LedgerEntry]:
        if self.follows_append_order:
            return list(await adapter.read_in_append_order(name, sandbox_id))
        return list(await adapter.read_all(name, sandbox_id))

    async def test_is_a_follow_adapter(self, adapter: Any) -> None:
        assert isinstance(adapter, FollowAdapter)

    async def test_stored_entries_first_then_new_ones_until_closed(self, adapter: Any) -> None:
        await adapter.append(entry("f", "s", LedgerEvent.SandboxCreated, 1))
        await adapter.append(entry("f", "s", LedgerEvent.ExecStarted, 2, step=0))
        follower = asyncio.create_task(collect(adapter, "f", "s"))
        await asyncio.sleep(0.2)
        assert not follower.done()
        await adapter.append(entry("f", "s", LedgerEvent.ExecComplete, 3, step=0, payload={"x": 1}))
        await adapter.append(entry("f", "s", LedgerEvent.SandboxClosed, 4))
        followed = await follower
        assert _wires([f.entry for f in followed]) == _wires(await adapter.read_all("f", "s"))
        assert len({f.position for f in followed}) == 4
        assert all(isinstance(f.position, str) and f.position for f in followed)

    async def test_keeps_following_after_closed_when_asked(self, adapter: Any) -> None:
        await adapter.append(entry("f", "s", LedgerEvent.SandboxCreated, 1))
        await adapter.append(entry("f", "s", LedgerEvent.SandboxClosed, 2))
        follower = asyncio.create_task(collect(adapter, "f", "s", limit=3, until_closed=False))
        await asyncio.sleep(0.2)
        await adapter.append(entry("f", "s", LedgerEvent.ExecFailed, 3, step=0))
        followed = await follower
        assert [f.entry.event for f in followed] == [
            LedgerEvent.SandboxCreated,
            LedgerEvent.SandboxClosed,
            LedgerEvent.ExecFailed,
        ]

    async def test_waits_for_a_session_not_begun_yet(self, adapter: Any) -> None:
        follower = asyncio.create_task(collect(adapter, "f", "later"))
        await asyncio.sleep(0.2)
        await adapter.append(entry("f", "later", LedgerEvent.SandboxCreated, 1))
        await adapter.append(entry("f", "later", LedgerEvent.SandboxClosed, 2))
        assert len(await follower) == 2

    async def test_resumes_just_after_every_position(self, adapter: Any) -> None:
        await adapter.append(entry("f", "s", LedgerEvent.SandboxCreated, 1))
        for step in range(3):
            await adapter.append(entry("f", "s", LedgerEvent.ExecComplete, 2 + step, step=step))
        await adapter.append(entry("f", "s", LedgerEvent.SandboxClosed, 9))
        followed = await collect(adapter, "f", "s")
        wires = _wires([f.entry for f in followed])
        assert wires == _wires(await self._order(adapter, "f", "s"))
        for at, one in enumerate(followed):
            rest = await collect(adapter, "f", "s", after=one.position)
            assert _wires([f.entry for f in rest]) == wires[at + 1 :]
            assert [f.position for f in rest] == [f.position for f in followed[at + 1 :]]

    async def test_resumed_follower_sees_what_came_meanwhile(self, adapter: Any) -> None:
        await adapter.append(entry("f", "s", LedgerEvent.SandboxCreated, 1))
        [first] = await collect(adapter, "f", "s", limit=1)
        await adapter.append(entry("f", "s", LedgerEvent.ExecStarted, 2, step=0))
        await adapter.append(entry("f", "s", LedgerEvent.SandboxClosed, 3))
        rest = await collect(adapter, "f", "s", after=first.position)
        assert [f.entry.ts for f in rest] == [2, 3]

    async def test_appends_out_of_ts_order_follow_in_append_order(self, adapter: Any) -> None:
        if not self.follows_append_order:
            pytest.skip("this store follows in read_all order (see docs/live.md)")
        await adapter.append(entry("f", "s", LedgerEvent.SandboxCreated, 50))
        follower = asyncio.create_task(collect(adapter, "f", "s"))
        await asyncio.sleep(0.2)
        for ts in (40, 30, 60, 10):
            await adapter.append(entry("f", "s", LedgerEvent.ExecStarted, ts, step=0))
            await asyncio.sleep(0.05)
        await adapter.append(entry("f", "s", LedgerEvent.SandboxClosed, 5))
        assert [f.entry.ts for f in await follower] == [50, 40, 30, 60, 10, 5]

    async def test_concurrent_appenders_are_followed_once_each(self, adapter: Any) -> None:
        """Four writers append at once (ts from the clock, as the client stamps them) while
        two followers run: each follower sees every entry exactly once, in the store's order."""
        await adapter.append(entry("f", "c", LedgerEvent.SandboxCreated, _now_ms()))
        followers = [
            asyncio.create_task(collect(adapter, "f", "c", until_closed=False, limit=81))
            for _ in range(2)
        ]

        async def writer(w: int) -> None:
            for i in range(20):
                await adapter.append(
                    entry("f", "c", LedgerEvent.ExecStarted, _now_ms(), step=i, payload=[w, i])
                )

        await asyncio.gather(*(writer(w) for w in range(4)))
        seen = await asyncio.gather(*followers)
        expected = _wires(await self._order(adapter, "f", "c"))
        assert len(expected) == 81
        for one in seen:
            assert _wires([f.entry for f in one]) == expected

    async def test_a_large_entry_is_followed_once_whole(self, adapter: Any) -> None:
        # About 1 MB that compresses poorly: DynamoDB stores it as a head and parts.
        big = {"blob": "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(30_000))}
        await adapter.append(entry("f", "big", LedgerEvent.SandboxCreated, 1))
        follower = asyncio.create_task(collect(adapter, "f", "big"))
        await adapter.append(entry("f", "big", LedgerEvent.ExecComplete, 2, step=0, payload=big))
        await adapter.append(entry("f", "big", LedgerEvent.SandboxClosed, 3))
        followed = await follower
        assert [f.entry.ts for f in followed] == [1, 2, 3]
        assert followed[1].entry.payload == big

    async def test_a_deleted_session_ends_the_follower(self, adapter: Any) -> None:
        await adapter.append(entry("f", "d", LedgerEvent.SandboxCreated, 1))
        arrived = asyncio.Event()
        follower = asyncio.create_task(
            collect(adapter, "f", "d", until_closed=False, arrived=arrived)
        )
        # Deleted once followed: a follower that starts after the delete waits for the
        # session to begin (test_waits_for_a_session_not_begun_yet), as it should.
        await asyncio.wait_for(arrived.wait(), _PATIENCE)
        await adapter.delete_sandbox("f", "d")
        followed = await follower
        assert [f.entry.ts for f in followed] == [1]

    async def test_a_position_of_a_deleted_session_ends_at_once(self, adapter: Any) -> None:
        await adapter.append(entry("f", "d", LedgerEvent.SandboxCreated, 1))
        [first] = await collect(adapter, "f", "d", limit=1)
        await adapter.delete_sandbox("f", "d")
        await adapter.append(entry("f", "d", LedgerEvent.SandboxCreated, 2))
        assert await collect(adapter, "f", "d", after=first.position, until_closed=False) == []

    async def test_a_position_never_resumes_inside_a_session_begun_again(
        self, adapter: Any
    ) -> None:
        """A session deleted and begun again under its name and sandboxId is another session:
        a position of the deleted one ends the follower, or follows the new one from its start;
        never from its middle (a store that hands out ids again must not take the old
        position for one of the new session)."""
        await adapter.append(entry("f", "again", LedgerEvent.SandboxCreated, 1))
        for step in range(4):
            await adapter.append(
                entry("f", "again", LedgerEvent.ExecStarted, 2 + step, step=step, payload="old")
            )
        old = await collect(adapter, "f", "again", limit=5)
        await adapter.delete_sandbox("f", "again")
        await adapter.append(entry("f", "again", LedgerEvent.SandboxCreated, 11))
        for step in range(5):
            await adapter.append(
                entry("f", "again", LedgerEvent.ExecStarted, 12 + step, step=step, payload="new")
            )
        await adapter.append(entry("f", "again", LedgerEvent.SandboxClosed, 20))
        new = _wires(await self._order(adapter, "f", "again"))
        for one in old:
            resumed = await collect(adapter, "f", "again", after=one.position)
            assert _wires([f.entry for f in resumed]) in ([], new), one.entry.ts

    @pytest.mark.parametrize("bad", ["", "nonsense", "e30", 7, b"x"])
    async def test_refuses_what_is_not_a_position(self, adapter: Any, bad: Any) -> None:
        with pytest.raises(InvalidInputError) as info:
            await collect(adapter, "f", "s", after=bad)
        assert info.value.field == "after"

    async def test_refuses_an_altered_or_foreign_position(self, adapter: Any) -> None:
        await adapter.append(entry("f", "s", LedgerEvent.SandboxCreated, 1))
        await adapter.append(entry("f", "other", LedgerEvent.SandboxCreated, 1))
        [first] = await collect(adapter, "f", "s", limit=1)
        raw = bytearray(base64.urlsafe_b64decode(first.position + "=" * (-len(first.position) % 4)))
        raw[len(raw) // 2] ^= 1
        altered = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
        for bad, name, sandbox_id in ((altered, "f", "s"), (first.position, "f", "other")):
            with pytest.raises(InvalidInputError) as info:
                await collect(adapter, name, sandbox_id, after=bad)
            assert info.value.field == "after"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
