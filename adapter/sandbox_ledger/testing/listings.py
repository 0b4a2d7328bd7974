"""Listings under index lag, a part of the conformance suite.

A store declares how fresh its listings are with ``consistent_listings`` (a class attribute;
absent: True). True: a listing shows every write made before it. False (DynamoDB, whose
session indexes are eventually consistent): once the store's indexes have a write, every
listing shows it; until then a listing may miss what changed, and nothing else goes wrong:

- every session it lists is one the store holds, with its details as they now are, matching
  the listing's filters, in the listing's order (newest first): the reference listing with
  some sessions left out, never another;
- no session twice, on one page or across the pages of one walk;
- once the indexes have caught up, exactly the reference listing (never missing for good).

The suite's other tests check listings' settled state: for a store with eventually consistent
listings, each listing they make waits first until the store's indexes have every write made
so far (:meth:`ListingContract.listings_caught_up`, which that store's test class provides:
the DynamoDB tests wait for the strict embedded server's indexes, which lag as DynamoDB's do).
The tests here list at once, while the indexes lag, and check the promises above.
"""

from __future__ import annotations

import functools
import random
from typing import TYPE_CHECKING, Any

import pytest

from sandbox_ledger.memory import MemoryAdapter
from sandbox_ledger.models import LedgerEvent, ListSandboxOptions, SandboxStatus
from sandbox_ledger.testing._build import entry

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sandbox_ledger.models import SandboxDetails, SandboxPage
    from sandbox_ledger.protocol import StorageAdapter

_LISTINGS = (
    "list_sandbox_details",
    "list_all_sandbox_details",
    "list_sandbox_page",
    "list_all_sandbox_page",
)
_CLIENTS = ("adapter", "second_client", "namesake")


def during_lag(test: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """Mark a test whose listings are made at once, while the store's indexes lag."""
    test.during_lag = True  # type: ignore[attr-defined]
    return test


def consistent(store: Any) -> bool:
    """Whether ``store`` declares listings that show every write made before them."""
    return bool(getattr(store, "consistent_listings", True))


class ListingContract:
    """Listing-consistency tests; :class:`~sandbox_ledger.testing.StorageAdapterContract`
    includes them. A store with ``consistent_listings = False`` overrides
    :meth:`listings_caught_up`."""

    async def listings_caught_up(self, adapter: StorageAdapter) -> None:
        """Return once ``adapter``'s listings show every write made so far. A store whose
        listings are eventually consistent overrides it (a wait, never a shortcut: the store's
        indexes must catch up by themselves)."""
        raise NotImplementedError(
            f"{type(adapter).__name__} declares consistent_listings = False: its test class "
            "overrides listings_caught_up"
        )

    @pytest.fixture(autouse=True)
    def _settled_listings(self, request: pytest.FixtureRequest) -> None:
        """Each listing of a test not marked :func:`during_lag` first waits for the store's
        indexes, on a store whose listings are eventually consistent."""
        if getattr(request.function, "during_lag", False):
            return
        for name in _CLIENTS:
            if name not in request.fixturenames:
                continue
            store = request.getfixturevalue(name)
            if consistent(store):
                continue
            for method in _LISTINGS:
                if hasattr(store, method):
                    setattr(store, method, self._after_catching_up(store, getattr(store, method)))

    def _after_catching_up(
        self, store: StorageAdapter, method: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(method)
        async def listed(*args: Any, **kwargs: Any) -> Any:
            await self.listings_caught_up(store)
            return await method(*args, **kwargs)

        return listed

    # -- the tests ------------------------------------------------------------------------

    @during_lag
    async def test_a_listing_while_indexes_lag_is_the_reference_with_sessions_left_out(
        self, adapter: StorageAdapter
    ) -> None:
        model = MemoryAdapter()
        rng = random.Random(4401)
        live: list[tuple[str, str]] = []
        for step in range(24):
            name = "ab"[step % 2]
            roll = rng.random()
            if live and roll < 0.25:
                key = live.pop(rng.randrange(len(live)))
                for store in (adapter, model):
                    await store.delete_sandbox(*key)
            elif live and roll < 0.5:
                key = live[rng.randrange(len(live))]
                closed = entry(*key, LedgerEvent.SandboxClosed, 10_000 + step)
                for store in (adapter, model):
                    await store.append(closed)
            else:
                key = (name, f"s{step}")
                live.append(key)
                created = entry(*key, LedgerEvent.SandboxCreated, 1_000 + (step * 7) % 24)
                for store in (adapter, model):
                    await store.append(created)
            for options in _OPTIONS:
                await _check_listing(adapter, model, "a", options)
                await _check_listing(adapter, model, None, options)
        await self._settle(adapter)
        for options in _OPTIONS:
            for listed in ("a", "b", None):
                assert await _listed(adapter, listed, options) == await _listed(
                    model, listed, options
                ), (listed, options)

    @during_lag
    async def test_a_walk_of_pages_while_indexes_lag_never_repeats_a_session(
        self, adapter: StorageAdapter
    ) -> None:
        model = MemoryAdapter()
        for i in range(12):
            created = entry("w", f"s{i:02d}", LedgerEvent.SandboxCreated, 500 + i)
            for store in (adapter, model):
                await store.append(created)
        seen: list[tuple[str, str]] = []
        started: list[int] = []
        options = ListSandboxOptions(limit=2)
        more = 0
        while True:
            page = await adapter.list_all_sandbox_page(options)
            assert len(page.sessions) <= 2
            expected = await model.list_all_sandbox_details()
            _assert_left_out(page.sessions, expected)
            seen.extend((d.name, d.sandbox_id) for d in page.sessions)
            started.extend(d.started_at for d in page.sessions)
            if page.cursor is None:
                break
            # Sessions keep coming while the walk runs (newer: before the walk's position).
            late = entry("w", f"late{more}", LedgerEvent.SandboxCreated, 900 + more)
            more += 1
            for store in (adapter, model):
                await store.append(late)
            options = ListSandboxOptions(limit=2, cursor=page.cursor)
        assert len(seen) == len(set(seen)), seen
        # Newest first across the pages too: a later page never lists a session newer than
        # one an earlier page listed (the walk went past its place).
        assert started == sorted(started, reverse=True), list(zip(seen, started, strict=True))
        if consistent(adapter):
            assert seen == [("w", f"s{i:02d}") for i in reversed(range(12))]
        await self._settle(adapter)
        walked = await _walk(adapter, ListSandboxOptions(limit=2))
        assert walked == await model.list_all_sandbox_details()

    @during_lag
    async def test_a_walk_while_indexes_lag_lists_a_session_created_again_once_in_order(
        self, adapter: StorageAdapter
    ) -> None:
        # A session deleted and created again, earlier, just before the walk: while the
        # indexes lag, its first page may still find it at its old place; a later page (once
        # they caught up) finds it at its new one. Listed once, and the walk in order.
        model = MemoryAdapter()
        for sandbox_id, ts in [("s1", 3000), ("x", 2000), ("s2", 1500), ("s3", 1200)]:
            for store in (adapter, model):
                await store.append(entry("g", sandbox_id, LedgerEvent.SandboxCreated, ts))
        await self._settle(adapter)
        for store in (adapter, model):
            await store.delete_sandbox("g", "x")
            await store.append(entry("g", "x", LedgerEvent.SandboxCreated, 1000))
        expected = await model.list_all_sandbox_details()
        for name in ("g", None):
            options = ListSandboxOptions(limit=2)
            page = await _page(adapter, name, options)
            walked = list(page.sessions)
            await self._settle(adapter)
            while page.cursor is not None:
                page = await _page(adapter, name, ListSandboxOptions(limit=2, cursor=page.cursor))
                walked.extend(page.sessions)
            _assert_left_out(walked, expected)
            if consistent(adapter):
                assert walked == expected

    async def _settle(self, adapter: StorageAdapter) -> None:
        if not consistent(adapter):
            await self.listings_caught_up(adapter)


_OPTIONS = [
    None,
    ListSandboxOptions(status=SandboxStatus.Running),
    ListSandboxOptions(status=SandboxStatus.Completed),
    ListSandboxOptions(before=1_012),
    ListSandboxOptions(limit=3),
]


async def _listed(
    store: StorageAdapter, name: str | None, options: ListSandboxOptions | None
) -> list[SandboxDetails]:
    if name is None:
        return await store.list_all_sandbox_details(options)
    return await store.list_sandbox_details(name, options)


async def _page(
    store: StorageAdapter, name: str | None, options: ListSandboxOptions
) -> SandboxPage:
    if name is None:
        return await store.list_all_sandbox_page(options)
    return await store.list_sandbox_page(name, options)


async def _walk(store: StorageAdapter, options: ListSandboxOptions) -> list[SandboxDetails]:
    out: list[SandboxDetails] = []
    while True:
        page = await store.list_all_sandbox_page(options)
        out.extend(page.sessions)
        if page.cursor is None:
            return out
        options = ListSandboxOptions(limit=options.limit, cursor=page.cursor)


async def _check_listing(
    adapter: StorageAdapter,
    model: StorageAdapter,
    name: str | None,
    options: ListSandboxOptions | None,
) -> None:
    got = await _listed(adapter, name, options)
    unlimited = options.model_copy(update={"limit": None}) if options else None
    expected = await _listed(model, name, unlimited)
    if options is not None and options.limit:
        assert len(got) <= options.limit
    _assert_left_out(got, expected)
    if consistent(adapter):
        assert got == expected[: options.limit if options and options.limit else None]


def _assert_left_out(got: list[SandboxDetails], expected: list[SandboxDetails]) -> None:
    """``got`` is ``expected`` with sessions left out: in its order, each as it now is, none
    twice."""
    keys = [(d.name, d.sandbox_id) for d in got]
    assert len(keys) == len(set(keys)), f"a session listed twice: {keys}"
    position = 0
    for details in got:
        while position < len(expected) and expected[position] != details:
            position += 1
        assert position < len(expected), (
            f"listed but not in the reference listing (in its order, as it now is): {details}"
        )
        position += 1
