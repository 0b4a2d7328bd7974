"""Contract tests written once, run against every adapter (see the package docstring)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from sandbox_ledger.errors import InvalidInputError, KeyTooLongError
from sandbox_ledger.models import (
    CheckpointInfo,
    EnvironmentRecord,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    SandboxStatus,
)
from sandbox_ledger.protocol import StorageAdapter
from sandbox_ledger.testing._build import entry, ids, session
from sandbox_ledger.testing.changes import ChangesContract
from sandbox_ledger.testing.cursors import CursorContract
from sandbox_ledger.testing.follow import FollowContract
from sandbox_ledger.testing.listings import ListingContract
from sandbox_ledger.testing.parity import StoreParityContract
from sandbox_ledger.testing.races import RaceContract
from sandbox_ledger.testing.transfer import TransferContract

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

EXOTIC_PAYLOADS: list[Any] = [
    {"nested": {"deep": [1, {"x": [None, True, False]}]}},
    [1, "two", 3.5, None, [], {}],
    "unicode ✓ 日本語 🚀 \u0000 \ud7ff",
    0.1,
    1e-300,
    -1.7976931348623157e308,
    2**63 + 12345,
    -(2**70),
    [None, None],
    "",
    {"": "empty key", " ": ""},
    {"big": 10**40, "small": 5e-324},
    True,
    0,
]


class StorageAdapterContract(
    StoreParityContract,
    CursorContract,
    TransferContract,
    FollowContract,
    ChangesContract,
    RaceContract,
    ListingContract,
):
    """Abstract contract tests of a :class:`~sandbox_ledger.protocol.TransferAdapter` (the
    storage contract and what moving a ledger needs); subclasses provide the ``adapter``
    fixture."""

    @pytest.fixture
    async def adapter(self) -> AsyncIterator[StorageAdapter]:
        raise NotImplementedError("override the adapter fixture")
        yield  # pragma: no cover

    # -- protocol and lifecycle -------------------------------------------------------------

    async def test_is_a_storage_adapter(self, adapter: StorageAdapter) -> None:
        assert isinstance(adapter, StorageAdapter)

    async def test_connect_and_close_are_idempotent(self, adapter: StorageAdapter) -> None:
        await adapter.connect()
        await adapter.connect()
        await adapter.append(entry("n", "s", LedgerEvent.SandboxCreated, 1))
        await adapter.close()
        await adapter.close()
        # Lazily reconnects after close.
        assert len(await adapter.read_all("n", "s")) == 1
        async with adapter as same:  # type: ignore[attr-defined]
            assert same is adapter
            assert await adapter.get_sandbox_details("n", "s") is not None

    async def test_works_without_explicit_connect(self, adapter: StorageAdapter) -> None:
        assert await adapter.list_all_sandbox_details() == []
        assert await adapter.list_environments() == []

    # -- append / read_all ------------------------------------------------------------------

    async def test_round_trips_the_wire_shape(self, adapter: StorageAdapter) -> None:
        wire = {
            "ts": 1700000000123,
            "name": "build",
            "sandboxId": "sb-1",
            "stepIndex": 3,
            "branch": 2,
            "event": "exec.failed",
            "payload": {"cmd": "make", "exitCode": 2},
            "error": "exit status 2",
        }
        await adapter.append(LedgerEntry.model_validate(wire))
        [back] = await adapter.read_all("build", "sb-1")
        assert back.model_dump(by_alias=True, exclude_none=True) == wire

    async def test_unknown_events_are_kept_verbatim(self, adapter: StorageAdapter) -> None:
        await adapter.append(entry("n", "s", "sandbox.hibernated.v2", 5, payload={"x": 1}))
        [back] = await adapter.read_all("n", "s")
        assert back.event == "sandbox.hibernated.v2"
        assert back.payload == {"x": 1}

    @pytest.mark.parametrize("index", range(len(EXOTIC_PAYLOADS)))
    async def test_exotic_payloads_round_trip_exactly(
        self, adapter: StorageAdapter, index: int
    ) -> None:
        payload = EXOTIC_PAYLOADS[index]
        await adapter.append(entry("n", "s", LedgerEvent.ExecComplete, 1, payload=payload))
        [back] = await adapter.read_all("n", "s")
        assert back.payload == payload
        assert type(back.payload) is type(payload)
        assert json.dumps(back.payload) == json.dumps(payload)

    async def test_absent_payload_stays_absent(self, adapter: StorageAdapter) -> None:
        await adapter.append(entry("n", "s", LedgerEvent.ExecStarted, 1))
        [back] = await adapter.read_all("n", "s")
        assert "payload" not in back.model_dump(by_alias=True, exclude_none=True)

    async def test_read_all_is_ascending_by_ts(self, adapter: StorageAdapter) -> None:
        for ts in [50, 10, 40, 20, 30]:
            await adapter.append(entry("n", "s", LedgerEvent.ExecStarted, ts))
        assert [e.ts for e in await adapter.read_all("n", "s")] == [10, 20, 30, 40, 50]

    async def test_equal_ts_keep_append_order_even_out_of_order(
        self, adapter: StorageAdapter
    ) -> None:
        appended = [(20, "a"), (10, "b"), (20, "c"), (10, "d"), (20, "e"), (15, "f"), (10, "g")]
        for ts, tag in appended:
            await adapter.append(entry("n", "s", LedgerEvent.ExecStarted, ts, payload=tag))
        got = [(e.ts, e.payload) for e in await adapter.read_all("n", "s")]
        assert got == [(10, "b"), (10, "d"), (10, "g"), (15, "f"), (20, "a"), (20, "c"), (20, "e")]

    async def test_identical_entries_appended_twice_are_both_kept(
        self, adapter: StorageAdapter
    ) -> None:
        e = entry("n", "s", LedgerEvent.ExecComplete, 7, payload={"same": True})
        await adapter.append(e)
        await adapter.append(e)
        assert len(await adapter.read_all("n", "s")) == 2

    async def test_read_all_of_unknown_session_is_empty(self, adapter: StorageAdapter) -> None:
        await adapter.append(entry("n", "s", LedgerEvent.SandboxCreated, 1))
        assert await adapter.read_all("n", "other") == []
        assert await adapter.read_all("other", "s") == []

    async def test_sessions_are_keyed_by_name_and_sandbox_id(self, adapter: StorageAdapter) -> None:
        await session(adapter, "alpha", "shared", 100, execs=1)
        await session(adapter, "beta", "shared", 200, execs=2, closed=300)
        assert len(await adapter.read_all("alpha", "shared")) == 3
        alpha = await adapter.get_sandbox_details("alpha", "shared")
        beta = await adapter.get_sandbox_details("beta", "shared")
        assert alpha is not None and beta is not None
        assert (alpha.exec_count, alpha.status) == (1, SandboxStatus.Running)
        assert (beta.exec_count, beta.status) == (2, SandboxStatus.Completed)

    @pytest.mark.parametrize(
        ("first", "second"),
        [
            (("a#b", "c"), ("a", "b#c")),
            (("a", "b#c"), ("a#b", "c")),
            (("x/y", "z"), ("x", "y/z")),
            (("a%23b", "c"), ("a#b", "c")),
            (("S#a", "b"), ("a", "b")),
            (("名前", "🚀#1"), ("名前#🚀", "1")),
        ],
    )
    async def test_separators_never_collide(
        self, adapter: StorageAdapter, first: tuple[str, str], second: tuple[str, str]
    ) -> None:
        await session(adapter, *first, 10, execs=1)
        await session(adapter, *second, 20, execs=2, closed=30)
        assert [e.sandbox_id for e in await adapter.read_all(*first)] == [first[1]] * 3
        assert len(await adapter.read_all(*second)) == 6
        assert ids(await adapter.list_sandbox_details(first[0])) == [first[1]]
        assert ids(await adapter.list_sandbox_details(second[0])) == [second[1]]
        a = await adapter.get_sandbox_details(*first)
        assert a is not None and (a.name, a.exec_count) == (first[0], 1)
        await adapter.delete_sandbox(*first)
        assert len(await adapter.read_all(*second)) == 6

    async def test_long_unicode_keys(self, adapter: StorageAdapter) -> None:
        name, sandbox_id = "n" * 1000, "s/#" + "x" * 996
        await session(adapter, name, sandbox_id, 1, execs=1, closed=2)
        assert len(await adapter.read_all(name, sandbox_id)) == 4
        [details] = await adapter.list_sandbox_details(name)
        assert (details.name, details.sandbox_id) == (name, sandbox_id)

    async def test_key_rule_accepts_a_pair_for_every_event_at_the_limit(
        self, adapter: StorageAdapter
    ) -> None:
        # The longest accepted name: "NS#completed#" + name fits DynamoDB's 2,048 bytes.
        name, sandbox_id = "n" * 2035, "s"
        await session(adapter, name, sandbox_id, 1, execs=1, closed=2)
        await adapter.append(
            entry(name, sandbox_id, LedgerEvent.CheckpointCreated, 3, payload={"snapshotId": "x"})
        )
        details = await adapter.get_sandbox_details(name, sandbox_id)
        assert details is not None and details.status == SandboxStatus.Completed
        assert len(await adapter.read_all(name, sandbox_id)) == 5

    @pytest.mark.parametrize(
        ("name", "sandbox_id"),
        [
            ("n" * 2036, "s"),  # fits while running, not once completed
            ("n" * 2037, "s"),
            ("n" * 1000, "s" * 1043),  # the session key itself
            ("é" * 1018, "s"),  # bytes, not characters
        ],
    )
    async def test_key_rule_refuses_a_pair_for_every_event(
        self, adapter: StorageAdapter, name: str, sandbox_id: str
    ) -> None:
        for event in LedgerEvent:
            with pytest.raises(KeyTooLongError):
                await adapter.append(entry(name, sandbox_id, event, 1))
        assert await adapter.list_all_sandbox_details() == []
        completed = ListSandboxOptions(status=SandboxStatus.Completed)
        assert await adapter.list_all_sandbox_details(completed) == []

    # -- details ----------------------------------------------------------------------------

    async def test_details_follow_the_events(self, adapter: StorageAdapter) -> None:
        await adapter.append(entry("n", "s", LedgerEvent.SandboxCreated, 100))
        await adapter.append(entry("n", "s", LedgerEvent.ExecStarted, 101, step=0))
        await adapter.append(entry("n", "s", LedgerEvent.ExecComplete, 102, step=0))
        await adapter.append(entry("n", "s", LedgerEvent.ExecFailed, 103, step=1))
        await adapter.append(entry("n", "s", "exec.complete.v2", 104, step=2))
        details = await adapter.get_sandbox_details("n", "s")
        assert details is not None
        assert details.model_dump(by_alias=True, exclude_none=True) == {
            "name": "n",
            "sandboxId": "s",
            "status": "running",
            "startedAt": 100,
            "execCount": 1,
        }
        await adapter.append(entry("n", "s", LedgerEvent.ExecComplete, 105, step=3))
        await adapter.append(entry("n", "s", LedgerEvent.SandboxClosed, 200))
        details = await adapter.get_sandbox_details("n", "s")
        assert details is not None
        assert (details.status, details.completed_at, details.exec_count) == (
            SandboxStatus.Completed,
            200,
            2,
        )

    async def test_first_created_and_first_closed_win(self, adapter: StorageAdapter) -> None:
        await adapter.append(entry("n", "s", LedgerEvent.SandboxClosed, 900))
        await adapter.append(entry("n", "s", LedgerEvent.SandboxCreated, 500))
        await adapter.append(entry("n", "s", LedgerEvent.SandboxCreated, 100))
        await adapter.append(entry("n", "s", LedgerEvent.SandboxClosed, 950))
        details = await adapter.get_sandbox_details("n", "s")
        assert details is not None
        assert (details.started_at, details.completed_at, details.status) == (
            500,
            900,
            SandboxStatus.Completed,
        )
        [listed] = await adapter.list_all_sandbox_details(
            ListSandboxOptions(status=SandboxStatus.Completed)
        )
        assert listed == details

    async def test_session_without_created_is_never_listed(self, adapter: StorageAdapter) -> None:
        await adapter.append(entry("n", "orphan", LedgerEvent.ExecComplete, 5))
        await adapter.append(entry("n", "orphan", LedgerEvent.SandboxClosed, 6))
        assert len(await adapter.read_all("n", "orphan")) == 2
        assert await adapter.get_sandbox_details("n", "orphan") is None
        assert await adapter.list_sandbox_details("n") == []
        assert await adapter.list_all_sandbox_details() == []
        completed = ListSandboxOptions(status=SandboxStatus.Completed)
        assert await adapter.list_all_sandbox_details(completed) == []
        # Once created arrives it is listed, with the events that came before it counted.
        await adapter.append(entry("n", "orphan", LedgerEvent.SandboxCreated, 1))
        # Closed before created: still completed, under every filter.
        assert ids(await adapter.list_all_sandbox_details(completed)) == ["orphan"]
        assert ids(await adapter.list_sandbox_details("n", completed)) == ["orphan"]
        running = ListSandboxOptions(status=SandboxStatus.Running)
        assert await adapter.list_all_sandbox_details(running) == []
        assert await adapter.list_sandbox_details("n", running) == []
        [details] = await adapter.list_all_sandbox_details()
        assert (details.status, details.exec_count, details.started_at) == (
            SandboxStatus.Completed,
            1,
            1,
        )

    async def test_get_details_of_unknown_session_is_none(self, adapter: StorageAdapter) -> None:
        assert await adapter.get_sandbox_details("nobody", "nothing") is None

    # -- listing ----------------------------------------------------------------------------

    async def test_lists_newest_first_across_names(self, adapter: StorageAdapter) -> None:
        await session(adapter, "a", "s1", 300)
        await session(adapter, "b", "s2", 100, closed=150)
        await session(adapter, "a", "s3", 200, closed=250)
        await session(adapter, "c", "s4", 400)
        assert ids(await adapter.list_all_sandbox_details()) == ["s4", "s1", "s3", "s2"]
        assert ids(await adapter.list_sandbox_details("a")) == ["s1", "s3"]
        assert await adapter.list_sandbox_details("zzz") == []

    async def test_list_filters(self, adapter: StorageAdapter) -> None:
        await session(adapter, "a", "r1", 100)
        await session(adapter, "a", "c1", 200, closed=210)
        await session(adapter, "a", "r2", 300)
        await session(adapter, "a", "c2", 400, closed=410)
        completed = ListSandboxOptions(status=SandboxStatus.Completed)
        running = ListSandboxOptions(status=SandboxStatus.Running)
        assert ids(await adapter.list_all_sandbox_details(completed)) == ["c2", "c1"]
        assert ids(await adapter.list_sandbox_details("a", running)) == ["r2", "r1"]
        before = ListSandboxOptions(before=300)
        assert ids(await adapter.list_all_sandbox_details(before)) == ["c1", "r1"]
        both = ListSandboxOptions(before=400, status=SandboxStatus.Running, limit=1)
        assert ids(await adapter.list_sandbox_details("a", both)) == ["r2"]

    async def test_before_is_strict_at_a_tie(self, adapter: StorageAdapter) -> None:
        await session(adapter, "a", "t1", 500)
        await session(adapter, "a", "t2", 500)
        await session(adapter, "a", "old", 499)
        got = await adapter.list_all_sandbox_details(ListSandboxOptions(before=500))
        assert ids(got) == ["old"]
        tied = await adapter.list_all_sandbox_details(ListSandboxOptions(before=501))
        assert sorted(ids(tied)[:2]) == ["t1", "t2"] and ids(tied)[2] == "old"

    async def test_limits(self, adapter: StorageAdapter) -> None:
        for i in range(5):
            await session(adapter, "a", f"s{i}", 100 + i)
        assert ids(await adapter.list_all_sandbox_details(ListSandboxOptions(limit=1))) == ["s4"]
        assert ids(await adapter.list_sandbox_details("a", ListSandboxOptions(limit=3))) == [
            "s4",
            "s3",
            "s2",
        ]
        # As in the reference, limit 0 is "no limit".
        assert len(await adapter.list_all_sandbox_details(ListSandboxOptions(limit=0))) == 5
        assert len(await adapter.list_all_sandbox_details(ListSandboxOptions(limit=50))) == 5

    async def test_options_accept_the_wire_shape(self, adapter: StorageAdapter) -> None:
        await session(adapter, "a", "s1", 100, closed=101)
        await session(adapter, "a", "s2", 200)
        opts = ListSandboxOptions.model_validate({"status": "completed", "before": 1000})
        assert ids(await adapter.list_sandbox_details("a", opts)) == ["s1"]

    async def test_many_non_matching_sessions_between_matching_ones(
        self, adapter: StorageAdapter
    ) -> None:
        ts = 1000
        expected_running: list[str] = []
        for block in range(3):
            for i in range(15):
                ts += 1
                await session(adapter, "a", f"done-{block}-{i}", ts, closed=ts + 1)
            ts += 1
            await session(adapter, "a", f"live-{block}", ts)
            expected_running.insert(0, f"live-{block}")
            for i in range(10):
                ts += 1
                await session(adapter, "b", f"other-{block}-{i}", ts)
        running = ListSandboxOptions(status=SandboxStatus.Running, limit=2)
        assert ids(await adapter.list_sandbox_details("a", running)) == expected_running[:2]
        all_running = ListSandboxOptions(status=SandboxStatus.Running)
        assert ids(await adapter.list_sandbox_details("a", all_running)) == expected_running
        completed = ListSandboxOptions(status=SandboxStatus.Completed, limit=3)
        assert ids(await adapter.list_sandbox_details("b", completed)) == []
        everything = await adapter.list_all_sandbox_details()
        assert len(everything) == 3 * 26
        assert [d.started_at for d in everything] == sorted(
            (d.started_at for d in everything), reverse=True
        )
        page = await adapter.list_all_sandbox_details(
            ListSandboxOptions(
                status=SandboxStatus.Running, before=everything[5].started_at, limit=4
            )
        )
        assert all(d.status == SandboxStatus.Running for d in page)
        assert len(page) == 4
        assert all(d.started_at < everything[5].started_at for d in page)

    # -- paging (an extension of the TypeScript contract) ------------------------------------

    async def _pages(
        self, adapter: StorageAdapter, name: str | None, **opts: Any
    ) -> list[list[str]]:
        pages: list[list[str]] = []
        cursor: str | None = None
        while True:
            options = ListSandboxOptions(cursor=cursor, **opts)
            if name is None:
                page = await adapter.list_all_sandbox_page(options)
                listed = await adapter.list_all_sandbox_details(options)
            else:
                page = await adapter.list_sandbox_page(name, options)
                listed = await adapter.list_sandbox_details(name, options)
            assert ids(listed) == ids(page.sessions)
            assert len(page.sessions) <= opts.get("limit", 0) or not opts.get("limit")
            pages.append(ids(page.sessions))
            if page.cursor is None:
                return pages
            assert isinstance(page.cursor, str)
            cursor = page.cursor
            assert len(pages) < 100, "paging does not end"

    async def test_paging_through_ties_yields_each_session_exactly_once(
        self, adapter: StorageAdapter
    ) -> None:
        started = [500, 500, 500, 400, 500, 300, 400, 500, 500, 200, 500]
        for i, ts in enumerate(started):
            await session(
                adapter, "a" if i % 3 else "b", f"s{i:02d}", ts, closed=ts + 1 if i % 2 else None
            )
        expected = sorted(range(len(started)), key=lambda i: -started[i])

        def sids(keep: Any) -> list[str]:
            return sorted(f"s{i:02d}" for i in expected if keep(i))

        for limit in (1, 3):
            pages = await self._pages(adapter, None, limit=limit)
            flat = [sid for page in pages for sid in page]
            assert sorted(flat) == sids(lambda i: True), (limit, pages)
            assert [started[int(sid[1:])] for sid in flat] == [started[i] for i in expected]
        by_name = await self._pages(adapter, "a", limit=2)
        assert sorted(sid for page in by_name for sid in page) == sids(lambda i: i % 3)
        completed = await self._pages(adapter, None, limit=2, status="completed")
        assert sorted(sid for page in completed for sid in page) == sids(lambda i: i % 2)
        running = await self._pages(adapter, "b", limit=1, status="running")
        assert sorted(sid for page in running for sid in page) == sids(
            lambda i: i % 2 == 0 and i % 3 == 0
        )
        # before keeps the seed's meaning (strictly less) and combines with the cursor.
        older = await self._pages(adapter, "a", limit=2, before=500)
        assert sorted(sid for page in older for sid in page) == sids(
            lambda i: i % 3 and started[i] < 500
        )

    async def test_three_tied_sessions_two_per_page(self, adapter: StorageAdapter) -> None:
        for sid in ("t1", "t2", "t3"):
            await session(adapter, "a", sid, 700)
        first = await adapter.list_all_sandbox_page(ListSandboxOptions(limit=2))
        assert len(first.sessions) == 2 and first.cursor is not None
        second = await adapter.list_all_sandbox_page(
            ListSandboxOptions(limit=2, cursor=first.cursor)
        )
        assert sorted(ids(first.sessions) + ids(second.sessions)) == ["t1", "t2", "t3"]
        if second.cursor is not None:
            third = await adapter.list_all_sandbox_page(
                ListSandboxOptions(limit=2, cursor=second.cursor)
            )
            assert third.sessions == [] and third.cursor is None

    async def test_a_page_without_limit_has_no_cursor(self, adapter: StorageAdapter) -> None:
        for i in range(3):
            await session(adapter, "a", f"s{i}", 100 + i)
        page = await adapter.list_sandbox_page("a")
        assert (ids(page.sessions), page.cursor) == (["s2", "s1", "s0"], None)
        page = await adapter.list_all_sandbox_page(ListSandboxOptions(limit=0))
        assert (len(page.sessions), page.cursor) == (3, None)
        empty = await adapter.list_all_sandbox_page(ListSandboxOptions(limit=5))
        assert empty.cursor is None

    async def test_bad_cursors_are_refused(self, adapter: StorageAdapter) -> None:
        for i in range(3):
            await session(adapter, "a", f"s{i}", 100 + i)
        for bad in ("%%%", "bm90IGEgY3Vyc29y", "e30", "W10"):
            with pytest.raises(InvalidInputError, match="cursor"):
                await adapter.list_all_sandbox_details(ListSandboxOptions(limit=1, cursor=bad))
        first = await adapter.list_all_sandbox_page(ListSandboxOptions(limit=1))
        assert first.cursor is not None
        with pytest.raises(InvalidInputError, match="cursor"):
            await adapter.list_sandbox_page(
                "a", ListSandboxOptions(limit=1, cursor=first.cursor[:-4])
            )

    # -- delete -----------------------------------------------------------------------------

    async def test_delete_sandbox(self, adapter: StorageAdapter) -> None:
        await session(adapter, "a", "gone", 100, execs=3, closed=200)
        await adapter.append(
            entry("a", "gone", LedgerEvent.CheckpointCreated, 150, payload={"snapshotId": "x"})
        )
        await session(adapter, "a", "kept", 300, execs=1)
        await adapter.delete_sandbox("a", "gone")
        assert await adapter.read_all("a", "gone") == []
        assert await adapter.get_sandbox_details("a", "gone") is None
        assert await adapter.list_checkpoints("a", "gone") == []
        assert await adapter.last_checkpoint("a", "gone") is None
        assert ids(await adapter.list_all_sandbox_details()) == ["kept"]
        assert len(await adapter.read_all("a", "kept")) == 3
        await adapter.delete_sandbox("a", "gone")
        await adapter.delete_sandbox("never", "existed")
        # A deleted session can start again from nothing.
        await session(adapter, "a", "gone", 500)
        details = await adapter.get_sandbox_details("a", "gone")
        assert details is not None and (details.exec_count, details.status) == (
            0,
            SandboxStatus.Running,
        )

    # -- checkpoints ------------------------------------------------------------------------

    async def test_checkpoints(self, adapter: StorageAdapter) -> None:
        assert await adapter.list_checkpoints("a", "s") == []
        assert await adapter.last_checkpoint("a", "s") is None
        await session(adapter, "a", "s", 100)
        await adapter.append(
            entry(
                "a",
                "s",
                LedgerEvent.CheckpointCreated,
                120,
                payload={"snapshotId": "snap-1", "name": "first"},
            )
        )
        await adapter.append(
            entry("a", "s", LedgerEvent.CheckpointCreated, 110, payload={"snapshotId": "snap-0"})
        )
        last = entry(
            "a",
            "s",
            LedgerEvent.CheckpointCreated,
            130,
            step=4,
            branch=1,
            payload={"snapshotId": "snap-2", "name": "third", "extra": [1, 2]},
        )
        await adapter.append(last)
        await adapter.append(entry("a", "s", LedgerEvent.ExecComplete, 140))
        assert await adapter.list_checkpoints("a", "s") == [
            CheckpointInfo(snapshot_id="snap-0", created_at=110),
            CheckpointInfo(snapshot_id="snap-1", tag="first", created_at=120),
            CheckpointInfo(snapshot_id="snap-2", tag="third", created_at=130),
        ]
        assert await adapter.last_checkpoint("a", "s") == last
        wire = (await adapter.list_checkpoints("a", "s"))[0].model_dump(
            by_alias=True, exclude_none=True
        )
        assert wire == {"snapshotId": "snap-0", "createdAt": 110}

    async def test_last_checkpoint_at_equal_ts_is_the_last_appended(
        self, adapter: StorageAdapter
    ) -> None:
        for tag in ["x", "y", "z"]:
            await adapter.append(
                entry(
                    "a",
                    "s",
                    LedgerEvent.CheckpointCreated,
                    50,
                    payload={"snapshotId": tag, "name": tag},
                )
            )
        last = await adapter.last_checkpoint("a", "s")
        assert last is not None and last.payload == {"snapshotId": "z", "name": "z"}
        assert [c.tag for c in await adapter.list_checkpoints("a", "s")] == ["x", "y", "z"]

    async def test_checkpoint_with_odd_payload(self, adapter: StorageAdapter) -> None:
        await adapter.append(entry("a", "s", LedgerEvent.CheckpointCreated, 5, payload=None))
        await adapter.append(
            entry("a", "s", LedgerEvent.CheckpointCreated, 6, payload={"snapshotId": 7})
        )
        assert await adapter.list_checkpoints("a", "s") == [
            CheckpointInfo(created_at=5),
            CheckpointInfo(created_at=6),
        ]

    # -- environments -----------------------------------------------------------------------

    async def test_environments(self, adapter: StorageAdapter) -> None:
        assert await adapter.get_environment("py") is None
        assert await adapter.list_environments() == []
        wire = {"name": "py", "builtAt": 100, "snapshotId": "snap-py", "spec": {"image": "x"}}
        await adapter.save_environment(EnvironmentRecord.model_validate(wire))
        got = await adapter.get_environment("py")
        assert got is not None and got.model_dump(by_alias=True) == wire
        await adapter.save_environment(EnvironmentRecord(name="node", built_at=300))
        await adapter.save_environment(EnvironmentRecord(name="rust", built_at=200))
        assert [e.name for e in await adapter.list_environments()] == ["node", "rust", "py"]
        # Upsert replaces the whole record.
        await adapter.save_environment(
            EnvironmentRecord.model_validate({"name": "py", "builtAt": 400, "hash": "h2"})
        )
        got = await adapter.get_environment("py")
        assert got is not None and got.model_dump(by_alias=True) == {
            "name": "py",
            "builtAt": 400,
            "hash": "h2",
        }
        assert [e.name for e in await adapter.list_environments()] == ["py", "node", "rust"]
        await adapter.delete_environment("node")
        await adapter.delete_environment("node")
        await adapter.delete_environment("never-built")
        assert [e.name for e in await adapter.list_environments()] == ["py", "rust"]
        assert await adapter.get_environment("node") is None

    async def test_environment_names_with_separators(self, adapter: StorageAdapter) -> None:
        await adapter.save_environment(EnvironmentRecord(name="a#b/c ✓", built_at=1))
        await adapter.save_environment(EnvironmentRecord(name="a", built_at=2))
        got = await adapter.get_environment("a#b/c ✓")
        assert got is not None and got.built_at == 1
        assert [e.name for e in await adapter.list_environments()] == ["a", "a#b/c ✓"]

    async def test_equal_built_at_list_in_first_saved_order(self, adapter: StorageAdapter) -> None:
        for name in ("zeta", "alpha", "mid"):
            await adapter.save_environment(EnvironmentRecord(name=name, built_at=5))
        await adapter.save_environment(EnvironmentRecord(name="new", built_at=9))
        assert [e.name for e in await adapter.list_environments()] == [
            "new",
            "zeta",
            "alpha",
            "mid",
        ]
        # An upsert keeps the first save's place (a JavaScript Map's set); delete forgets it.
        await adapter.save_environment(
            EnvironmentRecord.model_validate({"name": "zeta", "builtAt": 5, "v": 2})
        )
        await adapter.delete_environment("alpha")
        await adapter.save_environment(EnvironmentRecord(name="alpha", built_at=5))
        assert [e.name for e in await adapter.list_environments()] == [
            "new",
            "zeta",
            "mid",
            "alpha",
        ]

    async def test_entry_fields_of_a_newer_client_are_kept(self, adapter: StorageAdapter) -> None:
        """Fields this version does not know (a ``traceId``), null values, nested objects and
        a name spelt like one of ours in snake_case included, read back as given by every
        read, so ingestion from a newer writer neither stops nor loses them."""
        extras = {
            "traceId": "4bf92f3577b34da6",
            "span": {"id": 7, "parent": None, "tags": ["ü", 2**60]},
            "sampled": None,
            "sandbox_id": "not-the-key",
        }
        wire = {"ts": 5, "name": "n", "sandboxId": "s", "stepIndex": 0, "event": "exec.complete"}
        marker = {"ts": 6, "name": "n", "sandboxId": "s", "stepIndex": -1}
        marker.update(event=LedgerEvent.CheckpointCreated.value, payload={"snapshotId": "x"})
        await adapter.append(LedgerEntry.model_validate({**wire, **extras}))
        await adapter.append(LedgerEntry.model_validate({**marker, "traceId": "t2"}))
        await adapter.append(entry("n", "s", LedgerEvent.ExecComplete, 7))
        first, second, plain = await adapter.read_all("n", "s")
        assert first.wire() == {**wire, **extras}
        assert first.sandbox_id == "s" and first.model_extra == extras
        assert second.wire() == {**marker, "traceId": "t2"}
        assert plain.model_extra == {}
        last = await adapter.last_checkpoint("n", "s")
        assert last is not None and last.wire() == {**marker, "traceId": "t2"}
        details = await adapter.get_sandbox_details("n", "s")
        assert details is None  # no sandbox.created: the extras changed nothing of the summary

    async def test_environment_fields_with_null_are_kept(self, adapter: StorageAdapter) -> None:
        wire = {"name": "py", "builtAt": 1, "snapshotId": None, "spec": {"gpu": None}}
        await adapter.save_environment(EnvironmentRecord.model_validate(wire))
        got = await adapter.get_environment("py")
        assert got is not None and got.wire() == wire
        [listed] = await adapter.list_environments()
        assert listed.wire() == wire

    async def test_lone_surrogates_are_refused_before_any_write(
        self, adapter: StorageAdapter
    ) -> None:
        bad_entries = [
            entry("n", "s", LedgerEvent.SandboxCreated, 1, payload="\ud800"),
            entry("n", "s", LedgerEvent.SandboxCreated, 1, payload={"k\udfff": 1}),
            entry("n", "s", LedgerEvent.SandboxCreated, 1, payload=[{"x": ["ok", "\udc00"]}]),
            entry("n", "s", LedgerEvent.SandboxCreated, 1, traceId="\ud83d"),
        ]
        for bad in bad_entries:
            with pytest.raises(InvalidInputError, match="surrogate"):
                await adapter.append(bad)
        assert await adapter.read_all("n", "s") == []
        assert await adapter.list_all_sandbox_details() == []
        with pytest.raises(InvalidInputError, match="surrogate"):
            await adapter.save_environment(
                EnvironmentRecord.model_validate({"name": "py", "builtAt": 1, "x": "\ud800"})
            )
        assert await adapter.list_environments() == []
        for name, sandbox_id in (("n\ud800", "s"), ("n", "\udfff")):
            with pytest.raises(InvalidInputError, match="surrogate"):
                await adapter.read_all(name, sandbox_id)
        # Astral characters (valid surrogate pairs in JavaScript) are fine.
        await adapter.append(entry("n", "s", LedgerEvent.SandboxCreated, 1, payload="🚀"))
        assert [e.payload for e in await adapter.read_all("n", "s")] == ["🚀"]

    async def test_a_payload_changed_after_validation_is_refused_naming_it(
        self, adapter: StorageAdapter
    ) -> None:
        """An entry is frozen, its payload's contents are not: an integer grown in place past
        what any store can carry is refused naming its path, before any write."""
        grown = entry("n", "s", LedgerEvent.SandboxCreated, 1, payload={"n": 1})
        grown.payload["n"] = 10**4300
        with pytest.raises(InvalidInputError, match=r"entry\.payload\.n") as refused:
            await adapter.append(grown)
        assert "digits" in str(refused.value)
        assert await adapter.read_all("n", "s") == []

    # -- bad input --------------------------------------------------------------------------

    async def test_empty_keys_are_refused(self, adapter: StorageAdapter) -> None:
        with pytest.raises(ValueError, match="name"):
            await adapter.read_all("", "s")
        with pytest.raises(ValueError, match="sandbox"):
            await adapter.get_sandbox_details("n", "")
        with pytest.raises(ValueError, match="name"):
            await adapter.get_environment("")

    async def test_non_entries_are_refused_and_nothing_is_written(
        self, adapter: StorageAdapter
    ) -> None:
        with pytest.raises(ValueError, match="entry"):
            await adapter.append({"ts": 1, "name": "n"})  # type: ignore[arg-type]
        assert await adapter.list_all_sandbox_details() == []
