"""Races, a part of the conformance suite: ``delete_sandbox`` racing appends, and an
export's read racing appends and a delete, on every store."""

from __future__ import annotations

import asyncio
import secrets
from typing import TYPE_CHECKING, Any

import pytest

from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.testing._build import entry

if TYPE_CHECKING:
    from sandbox_ledger.models import LedgerEntry
    from sandbox_ledger.protocol import TransferAdapter


def _appends(name: str, sandbox_id: str, first_ts: int, count: int) -> list[LedgerEntry]:
    """A session's entries in ascending ts: created, then execs started and completed, one
    started with a payload of 400 KB that does not compress (DynamoDB stores it as a head
    and a part, written one after the other)."""
    out = [entry(name, sandbox_id, LedgerEvent.SandboxCreated, first_ts)]
    for i in range(1, count):
        event = LedgerEvent.ExecStarted if i % 2 else LedgerEvent.ExecComplete
        payload = secrets.token_urlsafe(300_000) if i == count // 2 else {"i": i}
        out.append(entry(name, sandbox_id, event, first_ts + i, step=i // 2, payload=payload))
    return out


def _wires(entries: list[LedgerEntry]) -> list[dict[str, Any]]:
    return [e.wire() for e in entries]


class RaceContract:
    """Race tests; :class:`~sandbox_ledger.testing.StorageAdapterContract` includes them."""

    @pytest.mark.parametrize("after", [3, 9])
    async def test_a_delete_racing_appends_leaves_the_later_ones_whole(
        self, adapter: TransferAdapter, after: int
    ) -> None:
        """One writer appends while ``delete_sandbox`` runs once the first ``after`` have
        returned: what the session holds afterwards is whole entries, the appends from some
        point on (never an earlier one without a later one, never part of one), every append
        that began after the delete returned among them and none that returned before it
        began; its summary counts exactly the entries it holds."""
        appended = _appends("race", "del", 1000, 16)
        began = returned = 0

        async def write() -> None:
            nonlocal began, returned
            for item in appended:
                began += 1
                await adapter.append(item)
                returned += 1
                await asyncio.sleep(0)

        async def delete() -> tuple[int, int]:
            while returned < after:
                await asyncio.sleep(0.001)
            done_before = returned
            await adapter.delete_sandbox("race", "del")
            return done_before, began

        _, (done_before, began_after) = await asyncio.gather(write(), delete())
        held = await adapter.read_all("race", "del")
        first = len(appended) - len(held)
        assert _wires(held) == _wires(appended[first:])
        assert done_before <= first <= began_after
        details = await adapter.get_sandbox_details("race", "del")
        if any(x.event == LedgerEvent.SandboxCreated for x in held):
            assert details is not None
            assert details.exec_count == sum(x.event == LedgerEvent.ExecComplete for x in held)
        else:
            assert details is None

    async def test_an_export_read_racing_appends_and_a_delete_is_a_prefix_or_nothing(
        self, adapter: TransferAdapter
    ) -> None:
        """While a writer appends a session, deletes it and begins it again, each export read
        of it holds the entries appended up to one moment of one of the two sessions (in
        append order), or nothing: never a later entry without an earlier one, never part of
        an entry, never the rest of a deleted session."""
        before = _appends("race", "exp", 1000, 12)
        again = _appends("race", "exp", 5000, 6)
        finished = False

        async def write() -> None:
            nonlocal finished
            for item in before:
                await adapter.append(item)
                await asyncio.sleep(0)
            await adapter.delete_sandbox("race", "exp")
            for item in again:
                await adapter.append(item)
                await asyncio.sleep(0)
            finished = True

        async def read() -> list[list[LedgerEntry]]:
            reads: list[list[LedgerEntry]] = []
            while True:
                last = finished
                [many] = await adapter.read_sessions_in_append_order([("race", "exp")])
                reads += [many, await adapter.read_in_append_order("race", "exp")]
                if last:
                    return reads
                await asyncio.sleep(0)

        _, reads = await asyncio.gather(write(), read())
        for got in reads:
            assert _wires(got) in (_wires(before[: len(got)]), _wires(again[: len(got)]))
        assert _wires(reads[-1]) == _wires(again)
