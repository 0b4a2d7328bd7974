"""Moving a ledger, a part of the conformance suite: the methods export and import use
(:class:`~sandbox_ledger.protocol.TransferAdapter`) behave alike on every store."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from sandbox_ledger.errors import InvalidInputError, KeyTooLongError
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.protocol import TransferAdapter
from sandbox_ledger.testing._build import entry

if TYPE_CHECKING:
    from sandbox_ledger.models import LedgerEntry

_BAD_OCCURRENCES: list[Any] = [0, -1, 1_000_000, True, 1.0, "1", None]
_BAD_SEGMENTS: list[Any] = [0, -1, 65, True, 2.0, "2"]


def _wires(entries: list[LedgerEntry]) -> list[dict[str, Any]]:
    return [e.wire() for e in entries]


class TransferContract:
    """Transfer tests; :class:`~sandbox_ledger.testing.StorageAdapterContract` includes them."""

    async def test_is_a_transfer_adapter(self, adapter: TransferAdapter) -> None:
        assert isinstance(adapter, TransferAdapter)

    async def test_append_once_stores_each_occurrence_once(self, adapter: TransferAdapter) -> None:
        created = entry("n", "s", LedgerEvent.SandboxCreated, 1)
        done = entry("n", "s", LedgerEvent.ExecComplete, 2, step=0, payload={"x": 1})
        assert await adapter.append_once(created, 1) is True
        assert await adapter.append_once(done, 1) is True
        assert await adapter.append_once(done, 1) is False  # the same identity: stored already
        assert await adapter.append_once(done, 2) is True  # a second identical copy
        assert await adapter.append_once(done, 999_999) is True
        assert _wires(await adapter.read_all("n", "s")) == _wires([created, done, done, done])
        details = await adapter.get_sandbox_details("n", "s")
        assert details is not None and details.exec_count == 3

    async def test_append_once_identities_are_per_session_and_apart_from_append(
        self, adapter: TransferAdapter
    ) -> None:
        one = entry("n", "s1", LedgerEvent.ExecStarted, 5, step=0)
        other = entry("n", "s2", LedgerEvent.ExecStarted, 5, step=0)
        await adapter.append(one)  # a live append carries no import identity
        assert await adapter.append_once(one, 1) is True
        assert await adapter.append_once(other, 1) is True  # same content, other session
        assert len(await adapter.read_all("n", "s1")) == 2
        assert len(await adapter.read_all("n", "s2")) == 1

    async def test_append_once_at_once_stores_one_copy(self, adapter: TransferAdapter) -> None:
        done = entry("n", "s", LedgerEvent.ExecComplete, 2, step=0)
        stored = await asyncio.gather(*(adapter.append_once(done, 1) for _ in range(4)))
        assert sorted(stored) == [False, False, False, True]
        assert len(await adapter.read_all("n", "s")) == 1

    @pytest.mark.parametrize("occurrence", _BAD_OCCURRENCES, ids=repr)
    async def test_append_once_refuses_a_bad_occurrence_and_writes_nothing(
        self, adapter: TransferAdapter, occurrence: Any
    ) -> None:
        with pytest.raises(InvalidInputError) as caught:
            await adapter.append_once(entry("n", "s", LedgerEvent.SandboxCreated, 1), occurrence)
        assert caught.value.field == "occurrence"
        assert await adapter.scan_sessions() == []

    async def test_append_once_refuses_what_append_refuses(self, adapter: TransferAdapter) -> None:
        for event in (LedgerEvent.SandboxCreated, LedgerEvent.ExecStarted):
            with pytest.raises(KeyTooLongError):  # the key rule, before anything is written
                await adapter.append_once(entry("n" * 2036, "s", event, 1), 1)
        with pytest.raises(InvalidInputError) as caught:
            await adapter.append_once("not an entry", 1)  # type: ignore[arg-type]
        assert caught.value.field == "entry"
        assert await adapter.scan_sessions() == []

    async def test_read_in_append_order(self, adapter: TransferAdapter) -> None:
        appended = [entry("n", "s", LedgerEvent.ExecStarted, ts, step=ts) for ts in (30, 10, 20)]
        for e in appended:
            await adapter.append(e)
        assert _wires(await adapter.read_in_append_order("n", "s")) == _wires(appended)
        assert [e.ts for e in await adapter.read_all("n", "s")] == [10, 20, 30]
        assert await adapter.read_in_append_order("n", "unknown") == []

    async def test_read_stored_without_retention_is_read_all(
        self, adapter: TransferAdapter
    ) -> None:
        for ts in (30, 10, 20, 10):
            await adapter.append(entry("n", "s", LedgerEvent.ExecStarted, ts, step=ts))
        assert _wires(await adapter.read_stored("n", "s")) == _wires(
            await adapter.read_all("n", "s")
        )
        assert await adapter.read_stored("n", "unknown") == []
        assert await adapter.ledger_retention() is None

    async def test_scan_sessions_finds_every_session_with_entries(
        self, adapter: TransferAdapter
    ) -> None:
        await adapter.append(entry("b", "s2", LedgerEvent.SandboxCreated, 1))
        await adapter.append(entry("a", "s9", LedgerEvent.ExecStarted, 2, step=0))  # never created
        await adapter.append(entry("b", "s1", LedgerEvent.SandboxCreated, 3))
        await adapter.append(entry("c", "gone", LedgerEvent.SandboxCreated, 4))
        await adapter.delete_sandbox("c", "gone")
        every = [("a", "s9"), ("b", "s1"), ("b", "s2")]
        assert await adapter.scan_sessions() == every
        assert await adapter.scan_sessions("b") == every[1:]
        assert await adapter.scan_sessions("c") == []
        for segments in (1, 2, 64, None):
            assert await adapter.scan_sessions(segments=segments) == every

    @pytest.mark.parametrize("segments", _BAD_SEGMENTS, ids=repr)
    async def test_scan_sessions_refuses_bad_segments(
        self, adapter: TransferAdapter, segments: Any
    ) -> None:
        with pytest.raises(InvalidInputError) as caught:
            await adapter.scan_sessions(segments=segments)
        assert caught.value.field == "segments"

    async def test_scan_sessions_refuses_an_empty_name(self, adapter: TransferAdapter) -> None:
        with pytest.raises(InvalidInputError):
            await adapter.scan_sessions("")

    async def test_append_once_many_stores_each_identity_once_with_the_summary_of_one_by_one(
        self, adapter: TransferAdapter
    ) -> None:
        created = entry("n", "s", LedgerEvent.SandboxCreated, 5)
        done = entry("n", "s", LedgerEvent.ExecComplete, 7, step=0, payload={"x": 1})
        closed = entry("n", "s", LedgerEvent.SandboxClosed, 9)
        later = entry("n", "s", LedgerEvent.SandboxCreated, 8)  # not the first created
        other = entry("m", "t", LedgerEvent.SandboxCreated, 3)
        assert await adapter.append_once(done, 1) is True  # stored before the batch
        items = [(created, 1), (done, 1), (done, 2), (later, 1), (closed, 1), (other, 1)]
        assert await adapter.append_once_many(items) == [True, False, True, True, True, True]
        assert await adapter.append_once_many(items) == [False] * 6  # a re-run stores nothing
        assert _wires(await adapter.read_all("n", "s")) == _wires(
            [created, done, done, later, closed]
        )
        details = await adapter.get_sandbox_details("n", "s")
        assert details is not None
        assert (details.started_at, details.completed_at, details.exec_count) == (5, 9, 2)
        assert details.status == "completed"
        assert await adapter.get_sandbox_details("m", "t") is not None
        assert await adapter.append_once(done, 2) is False  # the batch's identities are claims
        assert await adapter.append_once_many([]) == []

    async def test_append_once_many_with_the_digests_given_keeps_the_same_identities(
        self, adapter: TransferAdapter
    ) -> None:
        """The importer passes the digests it reconciled by: the identities are those
        ``append_once`` computes, so either path finds what the other stored."""
        from sandbox_ledger.transfer import content_digest

        first = entry("n", "d", LedgerEvent.SandboxCreated, 1)
        second = entry("n", "d", LedgerEvent.ExecComplete, 2, step=0, payload={"x": 1})
        assert await adapter.append_once(second, 1) is True
        items = [(first, 1), (second, 1), (second, 2)]
        digests = [content_digest(e) for e, _ in items]
        assert await adapter.append_once_many(items, digests=digests) == [True, False, True]
        assert await adapter.append_once(first, 1) is False
        assert await adapter.append_once(second, 2) is False
        assert len(await adapter.read_all("n", "d")) == 3

    async def test_append_once_many_refuses_an_item_and_stores_the_others(
        self, adapter: TransferAdapter
    ) -> None:
        good = entry("n", "s", LedgerEvent.SandboxCreated, 1)
        too_long = entry("n" * 2036, "s", LedgerEvent.ExecStarted, 2, step=0)
        also = entry("n", "s", LedgerEvent.ExecStarted, 3, step=0)
        outcomes = await adapter.append_once_many(
            [(good, 1), (too_long, 1), (also, 0), ("no", 1), (also, 1)]  # type: ignore[list-item]
        )
        assert outcomes[0] is True and outcomes[4] is True
        assert isinstance(outcomes[1], KeyTooLongError)
        assert isinstance(outcomes[2], InvalidInputError) and outcomes[2].field == "occurrence"
        assert isinstance(outcomes[3], InvalidInputError) and outcomes[3].field == "entry"
        assert await adapter.scan_sessions() == [("n", "s")]
        assert _wires(await adapter.read_all("n", "s")) == _wires([good, also])

    async def test_append_once_many_at_once_stores_each_identity_once(
        self, adapter: TransferAdapter
    ) -> None:
        items = [
            (entry("n", f"s{i % 3}", LedgerEvent.ExecComplete, i, step=i), 1) for i in range(9)
        ]
        results = await asyncio.gather(*(adapter.append_once_many(items) for _ in range(3)))
        assert [sum(r[i] is True for r in results) for i in range(9)] == [1] * 9
        for i in range(3):
            assert len(await adapter.read_all("n", f"s{i}")) == 3
            await adapter.append_once(entry("n", f"s{i}", LedgerEvent.SandboxCreated, 0), 1)
            details = await adapter.get_sandbox_details("n", f"s{i}")
            assert details is not None and details.exec_count == 3

    async def test_the_batched_reads_are_the_single_reads_of_each(
        self, adapter: TransferAdapter
    ) -> None:
        """``read_stored_sessions`` is ``read_stored`` of each session (ascending ts), and
        ``read_sessions_in_append_order`` is ``read_in_append_order`` of each, in the order
        given, repeats and unknown sessions included."""
        for sid, ts in (("a", 3), ("b", 1), ("a", 2)):
            await adapter.append(entry("n", sid, LedgerEvent.ExecStarted, ts, step=ts))
        keys = [("n", "b"), ("n", "none"), ("n", "a"), ("n", "b")]
        reads = (
            (adapter.read_stored_sessions, adapter.read_stored, [[1], [], [2, 3], [1]]),
            (
                adapter.read_sessions_in_append_order,
                adapter.read_in_append_order,
                [[1], [], [3, 2], [1]],
            ),
        )
        for many, one, order in reads:
            found = await many(keys)
            expected = [await one(name, sid) for name, sid in keys]
            assert [_wires(f) for f in found] == [_wires(x) for x in expected]
            assert [[e.ts for e in f] for f in found] == order
            assert await many([]) == []
