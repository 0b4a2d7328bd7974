"""Red team: session listings while the global secondary indexes lag (docs/table-design.md,
"Listings and index lag"), on servers of this module whose indexes lag a fixed ``DELAY``.

Each attack builds a state the index has not caught up with, lists at once, then lets the
index catch up (``LocalDynamoDB.wait_for_indexes``) and goes on. A listing made during the
lag is checked against the memory store's listing of the same sessions: the reference with
sessions left out, in its order, each as it now is, none twice; a walk of pages is checked
the same way as a whole. A listing the machine makes too slowly to fall within the lag is
still checked (the promises hold then too); the attack is then only weaker.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from sandbox_ledger import keys as k
from sandbox_ledger.cursor import encode_cursor, seal, unseal
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter, _ops
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.local import LocalDynamoDB
from sandbox_ledger.local.strict import StrictProfile
from sandbox_ledger.memory import MemoryAdapter
from sandbox_ledger.models import (
    LedgerEvent,
    ListSandboxOptions,
    SandboxDetails,
    SandboxStatus,
)
from sandbox_ledger.sdk.steps import Call
from sandbox_ledger.summary import session_listing
from sandbox_ledger.testing._build import entry
from sandbox_ledger.testing.listings import ListingContract, during_lag

from .test_dynamodb_conformance import AsyncOverSync
from .test_sdk_steps import drive

DELAY = 0.5
"""How long each write takes to reach an index (fixed: a listing right after the writes falls
within it on any machine not stalled for half a second)."""


@pytest.fixture(scope="module")
def lagging() -> Iterator[LocalDynamoDB]:
    server = LocalDynamoDB(strict=StrictProfile(conflict_hold=0, index_delay=(DELAY, DELAY)))
    server.start()
    yield server
    server.stop()


class Stores:
    """The store under attack (either twin), the memory reference fed the same writes, and
    the server whose lag a test waits out."""

    def __init__(self, adapter: Any, server: LocalDynamoDB, shards: int) -> None:
        self.adapter, self.server, self.shards = adapter, server, shards
        self.model = MemoryAdapter()

    async def append(self, name: str, sandbox_id: str, event: LedgerEvent, ts: int) -> None:
        for store in (self.adapter, self.model):
            await store.append(entry(name, sandbox_id, event, ts))

    async def create(self, name: str, sandbox_id: str, ts: int) -> None:
        await self.append(name, sandbox_id, LedgerEvent.SandboxCreated, ts)

    async def close(self, name: str, sandbox_id: str, ts: int) -> None:
        await self.append(name, sandbox_id, LedgerEvent.SandboxClosed, ts)

    async def delete(self, name: str, sandbox_id: str) -> None:
        for store in (self.adapter, self.model):
            await store.delete_sandbox(name, sandbox_id)

    async def settle(self) -> None:
        await asyncio.to_thread(self.server.wait_for_indexes)

    def in_shard(self, name: str, shard: int, stem: str) -> str:
        """A sandbox id beginning with ``stem`` whose session lies in ``shard``."""
        for n in range(10_000):
            sandbox_id = f"{stem}{n}"
            if k.shard_of(k.session_pk(name, sandbox_id), self.shards) == shard:
                return sandbox_id
        raise AssertionError("no such id")


# The async twin on four shards by default; the sync twin (the same operations, driven in
# threads) and one shard (no merge) as slow tests.
@pytest.fixture(params=["async", pytest.param("sync", marks=pytest.mark.slow)])
def twin(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[pytest.param(1, marks=pytest.mark.slow), 4], ids=["1shard", "4shards"])
async def stores(lagging: LocalDynamoDB, twin: str, request: pytest.FixtureRequest) -> Any:
    shards = int(request.param)
    table = f"lagrt-{uuid.uuid4().hex[:10]}"
    endpoint = lagging.endpoint_url
    adapter: Any
    if twin == "async":
        adapter = DynamoDBAdapter(table, endpoint_url=endpoint, shard_count=shards)
    else:
        adapter = AsyncOverSync(
            SyncDynamoDBAdapter(table, endpoint_url=endpoint, shard_count=shards)
        )
    await adapter.create_table()
    yield Stores(adapter, lagging, shards)
    await adapter.close()


def keys_of(sessions: list[SandboxDetails]) -> list[tuple[str, str]]:
    return [(d.name, d.sandbox_id) for d in sessions]


def assert_left_out(got: list[SandboxDetails], expected: list[SandboxDetails]) -> None:
    """``got`` is ``expected`` with sessions left out: in its order, each as it now is (or as
    it was when listed, for a walk: ``expected`` is then checked page by page too), none
    twice."""
    listed = keys_of(got)
    assert len(listed) == len(set(listed)), f"a session listed twice: {listed}"
    position = 0
    for details in got:
        while position < len(expected) and expected[position] != details:
            position += 1
        assert position < len(expected), (
            f"{details} is not in the reference listing (in its order, as it now is):"
            f" {listed} against {keys_of(expected)}"
        )
        position += 1


async def page_of(
    store: Any, name: str | None, options: ListSandboxOptions
) -> tuple[list[SandboxDetails], str | None]:
    if name is None:
        page = await store.list_all_sandbox_page(options)
    else:
        page = await store.list_sandbox_page(name, options)
    return page.sessions, page.cursor


async def reference(stores: Stores, name: str | None, options: ListSandboxOptions) -> Any:
    unlimited = options.model_copy(update={"limit": None, "cursor": None})
    if name is None:
        return await stores.model.list_all_sandbox_details(unlimited)
    return await stores.model.list_sandbox_details(name, unlimited)


# -- a session deleted and created again with another startedAt, during the lag ---------------


@pytest.mark.parametrize("name", ["r", None], ids=["byName", "all"])
@pytest.mark.parametrize("status", [None, SandboxStatus.Running], ids=["any", "running"])
async def test_a_walk_lists_a_session_created_again_once_and_in_order(
    stores: Stores, name: str | None, status: SandboxStatus | None
) -> None:
    """The index still holds the session's entry at its old startedAt (2000) when the walk's
    first page is read; the walk's later pages, read once the index caught up, find it at its
    new one (1000). The session was re-created before the walk began: it is listed at most
    once, and the walk is in the listing's order (it was listed at 2000's place with 1000)."""
    for sandbox_id, ts in [("s1", 3000), ("x", 2000), ("s2", 1500), ("s3", 1200)]:
        await stores.create("r", sandbox_id, ts)
    await stores.settle()
    await stores.delete("r", "x")
    await stores.create("r", "x", 1000)
    options = ListSandboxOptions(limit=2, status=status)
    expected = await reference(stores, name, options)
    walked, cursor = await page_of(stores.adapter, name, options)
    assert_left_out(walked, expected)
    await stores.settle()
    while cursor is not None:
        page, cursor = await page_of(
            stores.adapter, name, options.model_copy(update={"cursor": cursor})
        )
        assert_left_out(page, expected)
        walked += page
    assert_left_out(walked, expected)
    # Settled, a walk lists exactly the reference.
    assert await walk(stores.adapter, name, options) == expected


@pytest.mark.parametrize("earlier", [True, False], ids=["earlier", "later"])
async def test_a_before_filter_reads_a_changed_startedat_as_it_now_is(
    stores: Stores, earlier: bool
) -> None:
    """``before`` filters the index by the startedAt it holds; a session created again on the
    other side of ``before`` is listed only if it now falls below it."""
    old, new = (2000, 1000) if earlier else (1000, 2000)
    for sandbox_id, ts in [("s1", 1700), ("x", old), ("s2", 1100), ("s3", 900)]:
        await stores.create("b", sandbox_id, ts)
    await stores.settle()
    await stores.delete("b", "x")
    await stores.create("b", "x", new)
    for limit in (None, 1, 2):
        options = ListSandboxOptions(before=1800, limit=limit)
        expected = await reference(stores, "b", options)
        for name in ("b", None):
            got = await walk(stores.adapter, name, options)
            assert_left_out(got, expected)
    await stores.settle()
    for name in ("b", None):
        assert await walk(stores.adapter, name, ListSandboxOptions(before=1800, limit=1)) == (
            await reference(stores, "b", ListSandboxOptions(before=1800))
        )


# -- entries the index shows late, in a shard the walk has not taken from yet -----------------


async def test_a_walk_stays_in_order_when_an_entry_shows_late_in_a_shard_not_yet_taken(
    lagging: LocalDynamoDB, twin: str
) -> None:
    """Four shards: the first page takes two sessions of shard A (3000, 2950) and none of shard
    B, whose only entry the index showed then (1000) was older. A session of shard B created
    just before the walk (2990) shows in the index after the first page: the walk's next page
    must not list it after 2950 (the walk has gone past it: it may be left out)."""
    table = f"lagrt-{uuid.uuid4().hex[:10]}"
    adapter: Any = (
        DynamoDBAdapter(table, endpoint_url=lagging.endpoint_url, shard_count=4)
        if twin == "async"
        else AsyncOverSync(
            SyncDynamoDBAdapter(table, endpoint_url=lagging.endpoint_url, shard_count=4)
        )
    )
    await adapter.create_table()
    try:
        stores = Stores(adapter, lagging, 4)
        a = [stores.in_shard("o", 0, "a"), stores.in_shard("o", 0, "aa")]
        b = [stores.in_shard("o", 1, "b"), stores.in_shard("o", 1, "bb")]
        await stores.create("o", a[0], 3000)
        await stores.create("o", a[1], 2950)
        await stores.create("o", b[0], 1000)
        await stores.settle()
        await stores.create("o", b[1], 2990)
        options = ListSandboxOptions(limit=2)
        expected = await reference(stores, None, options)
        walked, cursor = await page_of(adapter, None, options)
        await stores.settle()
        while cursor is not None:
            page, cursor = await page_of(
                adapter, None, options.model_copy(update={"cursor": cursor})
            )
            walked += page
        assert_left_out(walked, expected)
        assert await walk(adapter, None, options) == expected
    finally:
        await adapter.close()


async def test_a_walk_never_lists_a_session_started_after_it_went_past_that_place(
    lagging: LocalDynamoDB,
) -> None:
    """Not lag alone: a session created during a walk (newest of all), in a shard no page has
    taken from yet, once the index has it. A later page read that shard from its top: it
    listed the new session after older ones. The walk has gone past its place: left out."""
    table = f"lagrt-{uuid.uuid4().hex[:10]}"
    async with DynamoDBAdapter(table, endpoint_url=lagging.endpoint_url, shard_count=4) as a:
        await a.create_table()
        stores = Stores(a, lagging, 4)
        await stores.create("l", stores.in_shard("l", 0, "a"), 3000)
        await stores.create("l", stores.in_shard("l", 0, "aa"), 2950)
        await stores.create("l", stores.in_shard("l", 1, "b"), 1000)
        await stores.settle()
        options = ListSandboxOptions(limit=2)
        walked, cursor = await page_of(a, None, options)
        await stores.create("l", stores.in_shard("l", 1, "bb"), 5000)
        await stores.settle()
        walked += await walk(a, None, options.model_copy(update={"cursor": cursor}))
        assert [d.started_at for d in walked] == [3000, 2950, 1000]


async def test_a_walk_keeps_the_index_order_of_ties_when_one_shows_late(
    lagging: LocalDynamoDB,
) -> None:
    """Two sessions share a startedAt in shards 0 and 1: the listing's order puts shard 0's
    first (ties in the index's order: the shards in turn). The first page takes shard 1's
    while the index does not show shard 0's yet; a later page must not list it after shard
    1's (the walk has gone past its place): the walk is the settled listing with sessions
    left out."""
    table = f"lagrt-{uuid.uuid4().hex[:10]}"
    async with DynamoDBAdapter(table, endpoint_url=lagging.endpoint_url, shard_count=4) as a:
        await a.create_table()
        stores = Stores(a, lagging, 4)
        await stores.create("t", stores.in_shard("t", 1, "c"), 3000)
        await stores.create("t", stores.in_shard("t", 1, "b"), 2000)
        await stores.create("t", stores.in_shard("t", 2, "d"), 1000)
        await stores.create("t", stores.in_shard("t", 0, "e"), 500)  # shard 0 not drained
        await stores.settle()
        await stores.create("t", stores.in_shard("t", 0, "a"), 2000)
        options = ListSandboxOptions(limit=2)
        walked, cursor = await page_of(a, None, options)
        await stores.settle()
        walked += await walk(a, None, options.model_copy(update={"cursor": cursor}))
        settled = await a.list_all_sandbox_details()
        assert [d.sandbox_id[0] for d in settled] == ["c", "a", "b", "d", "e"]
        assert_left_out(walked, settled)


# -- sessions closed while a walk with a status filter is in progress --------------------------


@pytest.mark.parametrize("status", list(SandboxStatus))
async def test_a_status_walk_while_sessions_close(stores: Stores, status: SandboxStatus) -> None:
    """Sessions move from the running partition to the completed one between the pages of a
    walk (and the index shows it late): each page lists sessions as they now are, the walk
    none twice, in order."""
    ids = [f"c{i}" for i in range(8)]
    for i, sandbox_id in enumerate(ids):
        await stores.create("c", sandbox_id, 5000 - 100 * i)
    await stores.close("c", ids[5], 6000)
    await stores.settle()
    for name in ("c", None):
        options = ListSandboxOptions(limit=2, status=status)
        walked: list[SandboxDetails] = []
        cursor: str | None = None
        closing = iter([ids[0], ids[3], ids[6], ids[7]] if name == "c" else [ids[1], ids[2]])
        while True:
            current = options.model_copy(update={"cursor": cursor})
            page, cursor = await page_of(stores.adapter, name, current)
            assert_left_out(page, await reference(stores, "c", options))
            walked += page
            if cursor is None:
                break
            closes = next(closing, None)
            if closes is not None and closes not in {d.sandbox_id for d in walked}:
                # (a session a page listed and closed since would be listed as it was then)
                await stores.close("c", closes, 7000)
        listed = keys_of(walked)
        assert len(listed) == len(set(listed)), listed
        started = [d.started_at for d in walked]
        assert started == sorted(started, reverse=True), walked
    await stores.settle()
    options = ListSandboxOptions(limit=3, status=status)
    assert await walk(stores.adapter, None, options) == await reference(stores, "c", options)


# -- many index entries pointing at deleted sessions ------------------------------------------


async def test_a_walk_over_entries_of_deleted_sessions_ends_and_lists_none_of_them(
    stores: Stores,
) -> None:
    """Pages whose index keys point at deleted sessions come back short (or empty) with a
    cursor; the walk still ends, never loops, never lists a deleted session."""
    ids = [f"d{i:02d}" for i in range(24)]
    for i, sandbox_id in enumerate(ids):
        await stores.create("d", sandbox_id, 9000 - i)
    await stores.settle()
    for sandbox_id in ids[:20]:
        await stores.delete("d", sandbox_id)
    for name in ("d", None):
        options = ListSandboxOptions(limit=3)
        expected = await reference(stores, "d", options)
        walked: list[SandboxDetails] = []
        cursors: list[str] = []
        cursor: str | None = None
        while True:
            page, cursor = await page_of(
                stores.adapter, name, options.model_copy(update={"cursor": cursor})
            )
            assert len(page) <= 3
            walked += page
            if cursor is None:
                break
            assert cursor not in cursors, "the walk came back to a cursor it had"
            cursors.append(cursor)
            assert len(cursors) < 40, "the walk does not end"
        assert_left_out(walked, expected)
    await stores.settle()
    assert await walk(stores.adapter, None, ListSandboxOptions(limit=3)) == (
        await reference(stores, None, ListSandboxOptions())
    )


# -- a session whose sandbox.created arrives after an exec (sparse index) ----------------------


async def test_a_session_created_after_its_execs_is_listed_once_settled(stores: Stores) -> None:
    """The summary exists (an exec wrote it) before ``sandbox.created`` gives it a startedAt
    and index keys; a listing shows it as it now is, or leaves it out, until the index has it."""
    await stores.create("e", "old", 100)
    await stores.append("e", "late", LedgerEvent.ExecComplete, 400)
    await stores.append("e", "late", LedgerEvent.ExecComplete, 401)
    await stores.settle()
    for name in ("e", None):
        assert keys_of(await walk(stores.adapter, name, ListSandboxOptions(limit=1))) == [
            ("e", "old")
        ]
    await stores.append("e", "late", LedgerEvent.SandboxCreated, 300)
    await stores.append("e", "late", LedgerEvent.ExecComplete, 402)
    for options in (ListSandboxOptions(), ListSandboxOptions(limit=1)):
        expected = await reference(stores, "e", options)
        for name in ("e", None):
            assert_left_out(await walk(stores.adapter, name, options), expected)
    await stores.settle()
    listed = await walk(stores.adapter, None, ListSandboxOptions(limit=1))
    assert listed == await reference(stores, "e", ListSandboxOptions())
    assert listed[0].exec_count == 3


async def walk(store: Any, name: str | None, options: ListSandboxOptions) -> list[SandboxDetails]:
    """The sessions of a walk of pages from ``options`` (its cursor, if any) to its end."""
    out: list[SandboxDetails] = []
    cursor = options.cursor
    while True:
        page, cursor = await page_of(store, name, options.model_copy(update={"cursor": cursor}))
        out += page
        if cursor is None or not options.limit:
            return out


# -- wait_for_indexes --------------------------------------------------------------------------


def test_wait_for_indexes_waits_out_the_lag_and_never_shortens_it(lagging: LocalDynamoDB) -> None:
    """Right after a write, the index does not have it, and wait_for_indexes returns no
    sooner than the write's delay after it was sent; then the index has it."""

    async def scenario() -> None:
        table = f"lagrt-{uuid.uuid4().hex[:10]}"
        async with DynamoDBAdapter(table, endpoint_url=lagging.endpoint_url, shard_count=1) as a:
            await a.create_table()
            await asyncio.to_thread(lagging.wait_for_indexes)
            sent = time.monotonic()
            await a.append(entry("w", "s", LedgerEvent.SandboxCreated, 1))
            listed = await a.list_all_sandbox_details()
            if time.monotonic() - sent < DELAY:
                assert listed == []
            lagging.wait_for_indexes(table)
            assert time.monotonic() - sent >= DELAY
            assert keys_of(await a.list_all_sandbox_details()) == [("w", "s")]

    asyncio.run(scenario())


# -- the conformance suite's listing tests, on a server whose indexes lag ----------------------


class TestListingContractWhileIndexesLag(ListingContract):
    """The contract's ``during_lag`` tests on this module's server, lagging longer than the
    session's (tests/conftest.py ``TEST_PROFILE``: 50-100 ms), and a check that the contract's
    autouse fixture leaves their listings alone."""

    @pytest.fixture(params=["async", "sync"])
    async def adapter(
        self, lagging: LocalDynamoDB, request: pytest.FixtureRequest
    ) -> AsyncIterator[Any]:
        table = f"lagrt-{uuid.uuid4().hex[:10]}"
        store: Any
        if request.param == "async":
            store = DynamoDBAdapter(table, endpoint_url=lagging.endpoint_url)
        else:
            store = AsyncOverSync(SyncDynamoDBAdapter(table, endpoint_url=lagging.endpoint_url))
        await store.create_table()
        self._server = lagging
        yield store
        await store.close()

    async def listings_caught_up(self, adapter: Any) -> None:
        await asyncio.to_thread(self._server.wait_for_indexes)

    @during_lag
    async def test_the_settling_fixture_leaves_a_during_lag_test_alone(self, adapter: Any) -> None:
        for method in (
            "list_sandbox_details",
            "list_all_sandbox_details",
            "list_sandbox_page",
            "list_all_sandbox_page",
        ):
            assert method not in vars(adapter), method
        sent = time.monotonic()
        await adapter.append(entry("f", "s", LedgerEvent.SandboxCreated, 1))
        listed = await adapter.list_all_sandbox_details()
        if time.monotonic() - sent < DELAY:  # read within the lag: not caught up first
            assert listed == []

    async def test_the_settling_fixture_waits_in_other_tests(self, adapter: Any) -> None:
        await adapter.append(entry("f", "s", LedgerEvent.SandboxCreated, 1))
        assert keys_of(await adapter.list_all_sandbox_details()) == [("f", "s")]


# -- the walk's frontier in the cursor ----------------------------------------------------------


def restated(cursor: str, **state: Any) -> str:
    """``cursor`` with its state's fields replaced (None: removed), sealed again."""
    body = unseal(cursor)
    body["s"] = {key: value for key, value in {**body["s"], **state}.items() if value is not None}
    return seal(body)


async def test_a_cursor_of_an_earlier_version_without_a_frontier_pages_on(stores: Stores) -> None:
    for i in range(5):
        await stores.create("v", f"v{i}", 100 + i)
    await stores.settle()
    options = ListSandboxOptions(limit=2)
    first, cursor = await page_of(stores.adapter, None, options)
    assert cursor is not None and "f" in unseal(cursor)["s"]
    rest = await walk(
        stores.adapter, None, options.model_copy(update={"cursor": restated(cursor, f=None)})
    )
    assert first + rest == await reference(stores, None, ListSandboxOptions())


@pytest.mark.parametrize(
    "frontier",
    [
        104,
        [104],
        [104, 0, 0],
        [-1, 0],
        ["104", 0],
        [True, 0],
        [1.5, 0],
        [2**53, 0],
        [104, -1],
        [104, 4],
        [104, "0"],
        {"g": 104},
    ],
)
async def test_a_cursor_whose_frontier_is_no_position_is_refused(
    stores: Stores, frontier: Any
) -> None:
    for i in range(3):
        await stores.create("v", f"v{i}", 100 + i)
    await stores.settle()
    _, cursor = await page_of(stores.adapter, None, ListSandboxOptions(limit=1))
    assert cursor is not None
    for bad in (restated(cursor, f=frontier), restated(cursor, x=1)):
        with pytest.raises(InvalidInputError) as refused:
            await page_of(stores.adapter, None, ListSandboxOptions(limit=1, cursor=bad))
        assert refused.value.field == "cursor"


# -- one page's queries, driven by hand: the index changes between two of them ------------------


def test_a_page_asks_batchgetitem_for_a_session_once_when_the_index_moves_it_between_queries() -> (
    None
):
    """A page's partition is read again when the walk's frontier stepped over what it returned
    (keys above the frontier). Between the two Queries, the index shows a session taken by the
    first at its new place (deleted and created again, earlier): the second returns it again.
    BatchGetItem refuses a request naming a key twice (a ValidationException on DynamoDB): the
    page asks for it once and lists it once, as it now is."""
    options = ListSandboxOptions(limit=2)
    partition = k.all_pk(0)
    listing = session_listing("store", None, options)
    cursor = encode_cursor("dynamodb-sessions", {"p": {partition: None}, "f": [100, 0]}, listing)
    pk = {sid: k.session_pk("q", sid) for sid in ("x", "y")}

    def key(sid: str, gsk: int) -> dict[str, Any]:
        return {
            k.PARTITION_KEY: {"S": pk[sid]},
            k.SORT_KEY: {"S": k.SUMMARY_SK},
            k.ALL.partition_key: {"S": partition},
            k.ALL.sort_key: {"N": str(gsk)},
        }

    def answer(call: Call) -> dict[str, Any]:
        if call.operation == "query":
            if "ExclusiveStartKey" not in call.params:  # y above the frontier, x below it
                return {"Items": [key("y", 300), key("x", 95)], "LastEvaluatedKey": key("x", 95)}
            return {"Items": [key("x", 50)]}  # x, created again at 50, now shows there
        assert call.operation == "batch_get_item", call
        asked = [item[k.PARTITION_KEY]["S"] for item in call.params["RequestItems"]["t"]["Keys"]]
        assert len(asked) == len(set(asked)), f"BatchGetItem refuses duplicate keys: {asked}"
        summary = {
            **key("x", 50),
            "name": {"S": "q"},
            "sandboxId": {"S": "x"},
            "startedAt": {"N": "50"},
        }
        return {"Responses": {"t": [summary]}}

    opts = options.model_copy(update={"cursor": cursor})
    page, _ = drive(
        _ops.list_details("t", name=None, opts=opts, shard_count=1, store="store"), answer
    )
    assert [(d.sandbox_id, d.started_at) for d in page.sessions] == [("x", 50)]


# -- what no store promises: a session deleted and created again while a walk is in progress ---


async def test_a_session_created_again_during_a_walk_is_a_new_one_a_later_page_may_list(
    stores: Stores,
) -> None:
    """Deleted and created again (earlier) between two pages of a walk, the session is a new
    one under the same id: a later page may list it again at its new place, in every store (a
    cursor is a position, not a record of what the walk listed: the memory store's walk lists
    it twice here). docs/table-design.md says so."""
    for sandbox_id, ts in [("s1", 3000), ("x", 2000), ("s2", 1500)]:
        await stores.create("n", sandbox_id, ts)
    await stores.settle()
    options = ListSandboxOptions(limit=2)
    firsts = [await page_of(store, None, options) for store in (stores.adapter, stores.model)]
    for first, _ in firsts:
        assert [(d.sandbox_id, d.started_at) for d in first] == [("s1", 3000), ("x", 2000)]
    await stores.delete("n", "x")
    await stores.create("n", "x", 1000)
    await stores.settle()
    rests = [
        await walk(store, None, options.model_copy(update={"cursor": cursor}))
        for store, (_, cursor) in zip((stores.adapter, stores.model), firsts, strict=True)
    ]
    assert [(d.sandbox_id, d.started_at) for d in rests[1]] == [("s2", 1500), ("x", 1000)]
    # DynamoDB: as the memory store, or with x left out (its shard was drained by then).
    assert_left_out(rests[0], rests[1])
    assert ("n", "s2") in keys_of(rests[0])


# -- walks among random writes --------------------------------------------------------------------


@pytest.mark.parametrize(
    "seed", [7, pytest.param(8, marks=pytest.mark.slow), pytest.param(9, marks=pytest.mark.slow)]
)
async def test_walks_among_random_writes_while_indexes_lag(stores: Stores, seed: int) -> None:
    """Walks of pages (every listing, filter and a limit of 1 to 3) while sessions are
    created, given execs, closed, deleted and created again between the pages, the index
    catching up now and then: each page is the reference as it now is with sessions left out,
    a walk's startedAts never rise, and it lists a session twice only if the session was
    created again during the walk (a new session under the same id)."""
    rng = random.Random(seed)
    live: dict[str, bool] = {}  # sandbox id -> closed
    clock = iter(range(10_000, 0, -7))

    async def mutate() -> str | None:
        roll = rng.random()
        ids = sorted(live)
        if not ids or roll < 0.3:
            sandbox_id = f"z{rng.randrange(12)}"
            if sandbox_id in live:
                return None
            await stores.create(rng.choice("pq"), sandbox_id, rng.randrange(1000, 1100) * 10)
            live[sandbox_id] = False
            return sandbox_id
        sandbox_id = rng.choice(ids)
        name = await name_of(sandbox_id)
        if roll < 0.45 and not live[sandbox_id]:
            await stores.close(name, sandbox_id, next(clock))
            live[sandbox_id] = True
        elif roll < 0.6:
            await stores.append(name, sandbox_id, LedgerEvent.ExecComplete, next(clock))
        elif roll < 0.8:
            await stores.delete(name, sandbox_id)
            del live[sandbox_id]
        else:  # deleted and created again, at another startedAt
            await stores.delete(name, sandbox_id)
            await stores.create(name, sandbox_id, rng.randrange(1000, 1100) * 10 + 1)
            live[sandbox_id] = False
            return sandbox_id
        return None

    async def name_of(sandbox_id: str) -> str:
        for name in "pq":
            if await stores.model.get_sandbox_details(name, sandbox_id) is not None:
                return name
        raise AssertionError(sandbox_id)

    for _ in range(10):
        await mutate()
    await stores.settle()
    for _walk in range(10):
        for _write in range(3):  # just before the walk: its first page reads them lagging
            await mutate()
        name = rng.choice(["p", None])
        options = ListSandboxOptions(
            limit=rng.randint(1, 3),
            status=rng.choice([None, *SandboxStatus]),
            before=rng.choice([None, 10_500]),
        )
        walked: list[SandboxDetails] = []
        again: set[str] = set()
        cursor: str | None = None
        for _page in range(40):
            page, cursor = await page_of(
                stores.adapter, name, options.model_copy(update={"cursor": cursor})
            )
            assert_left_out(page, await reference(stores, name, options))
            walked += page
            if cursor is None:
                break
            for _write in range(rng.randint(0, 2)):
                created = await mutate()
                if created is not None and created in {d.sandbox_id for d in walked}:
                    again.add(created)
            if rng.random() < 0.5:
                await stores.settle()
        else:
            raise AssertionError("the walk does not end")
        started = [d.started_at for d in walked]
        assert started == sorted(started, reverse=True), walked
        listed = [d.sandbox_id for d in walked if d.sandbox_id not in again]
        assert len(listed) == len(set(listed)), walked
    await stores.settle()
    for name in ("p", None):
        options = ListSandboxOptions(limit=2)
        assert await walk(stores.adapter, name, options) == await reference(stores, name, options)
