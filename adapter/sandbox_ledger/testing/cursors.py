"""Paging cursors, a part of the conformance suite: every damaged, altered or foreign cursor is
refused with ``InvalidInputError`` naming ``cursor`` (never a backend error, never a silent
skip), and a forged but well-formed one at worst starts at another position of its listing."""

from __future__ import annotations

import base64
import copy
import json
from typing import TYPE_CHECKING, Any

import pytest

from sandbox_ledger.cursor import seal, unseal
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.memory import MemoryAdapter
from sandbox_ledger.models import ListSandboxOptions, SandboxPage, SandboxStatus
from sandbox_ledger.testing._build import ids, session

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from sandbox_ledger.protocol import StorageAdapter

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


async def _sessions(adapter: StorageAdapter) -> None:
    """Sessions s0 to s4 (startedAt 100 to 104) of ``a``, ``a``, ``b``, ``a``, ``b``; s2 closed."""
    for i, name in enumerate("aabab"):
        await session(adapter, name, f"s{i}", 100 + i, closed=200 if i == 2 else None)


def state_paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from state_paths(item, (*path, key))


def with_value(state: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(state)
    *parents, last = path
    target = out
    for key in parents:
        target = target[key]
    target[last] = value
    return out


def wrong_types(value: Any) -> list[Any]:
    """Values of another type or shape than ``value`` (or out of any range), never a valid
    position: what an edited cursor carries."""
    if isinstance(value, bool) or value is None:
        return [5, "x", [], {}]
    if isinstance(value, int):
        return [str(value), value + 0.5, True, None, [], {}, -1, 2**64]
    if isinstance(value, str):
        numbers = ["abc", "1e3", "-1", "1.5", "9" * 40, " 1", "١٢"] if value.isdigit() else []
        return [5, [], {}, "", *numbers]
    if isinstance(value, dict):
        return [[], "x", 5, {**value, "extra": 1}, dict(list(value.items())[1:])]
    return [5, {}]


def valid_moves(value: Any) -> list[Any]:
    """Other values of the same kind a well-formed position could hold."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [0, value + 1, max(value - 1, 0)]
    if isinstance(value, str) and value.isdigit():
        return ["0", str(int(value) + 1)]
    return []


class CursorContract:
    """Cursor tests; :class:`~sandbox_ledger.testing.StorageAdapterContract` includes them.

    A store whose clients name it (a table, a schema, a file) overrides ``namesake`` with
    another store of the same name (another region, database or directory), and
    ``second_client`` with another client of the adapter's store.
    """

    @pytest.fixture
    async def namesake(self) -> AsyncIterator[StorageAdapter]:
        yield MemoryAdapter()

    @pytest.fixture
    async def second_client(self, adapter: StorageAdapter) -> AsyncIterator[StorageAdapter]:
        yield adapter

    async def _first(self, adapter: StorageAdapter, name: str | None, **opts: Any) -> SandboxPage:
        options = ListSandboxOptions(limit=1, **opts)
        if name is None:
            return await adapter.list_all_sandbox_page(options)
        return await adapter.list_sandbox_page(name, options)

    async def _refused(
        self, adapter: StorageAdapter, name: str | None, cursor: str, **opts: Any
    ) -> None:
        with pytest.raises(InvalidInputError, match="cursor") as info:
            await self._first(adapter, name, cursor=cursor, **opts)
        assert info.value.field == "cursor"

    async def test_damaged_cursors_are_refused(self, adapter: StorageAdapter) -> None:
        await _sessions(adapter)
        for name in (None, "a"):
            cursor = (await self._first(adapter, name)).cursor
            assert cursor is not None
            for i, char in enumerate(cursor):
                other = "A" if char != "A" else "B"
                await self._refused(adapter, name, cursor[:i] + other + cursor[i + 1 :])
            for bad in (cursor[:-1], cursor + "A", cursor + "==", f" {cursor}", cursor[1:]):
                await self._refused(adapter, name, bad)
            body = unseal(cursor)
            for digest in ("é", "", 5, None):
                raw_json = json.dumps({**body, "h": digest}).encode()
                spelled = base64.urlsafe_b64encode(raw_json).decode().rstrip("=")
                await self._refused(adapter, name, spelled)
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            for i in range(len(raw)):
                flipped = bytearray(raw)
                flipped[i] ^= 0x01
                encoded = base64.urlsafe_b64encode(bytes(flipped)).decode().rstrip("=")
                await self._refused(adapter, name, encoded)

    async def test_cursors_with_changed_types_are_refused(self, adapter: StorageAdapter) -> None:
        await _sessions(adapter)
        for name in (None, "a"):
            cursor = (await self._first(adapter, name)).cursor
            assert cursor is not None
            body = unseal(cursor)
            for path, value in state_paths(body["s"]):
                if not path:
                    continue
                for wrong in wrong_types(value):
                    forged = seal({**body, "s": with_value(body["s"], path, wrong)})
                    await self._refused(adapter, name, forged)
            for root in ({}, {"x": 1}, {**body["s"], "x": 1}):
                await self._refused(adapter, name, seal({**body, "s": root}))

    async def test_a_forged_well_formed_cursor_starts_at_a_position_of_its_listing(
        self, adapter: StorageAdapter
    ) -> None:
        await _sessions(adapter)
        for name in (None, "a"):
            everything = ids(
                await adapter.list_all_sandbox_details()
                if name is None
                else await adapter.list_sandbox_details(name)
            )
            cursor = (await self._first(adapter, name)).cursor
            assert cursor is not None
            body = unseal(cursor)
            for path, value in state_paths(body["s"]):
                for move in valid_moves(value) if path else []:
                    forged = seal({**body, "s": with_value(body["s"], path, move)})
                    page = await self._first(adapter, name, cursor=forged)
                    assert set(ids(page.sessions)) <= set(everything)

    async def test_a_forged_cursor_past_before_is_refused(self, adapter: StorageAdapter) -> None:
        # A position at or past ``before`` is outside the listing's own range (DynamoDB
        # refuses such an ExclusiveStartKey with a ValidationException; moto does not check).
        await _sessions(adapter)
        for name in (None, "a"):
            within = ids(
                await adapter.list_all_sandbox_details(ListSandboxOptions(before=104))
                if name is None
                else await adapter.list_sandbox_details(name, ListSandboxOptions(before=104))
            )
            cursor = (await self._first(adapter, name, before=104)).cursor
            assert cursor is not None
            body = unseal(cursor)
            # The position's startedAt (103, s3's), as a number or as DynamoDB's digits.
            paths = [path for path, value in state_paths(body["s"]) if value in (103, "103")]
            assert paths
            for path in paths:
                spell = type(dict(state_paths(body["s"]))[path])
                for past in (104, 500):
                    forged = seal({**body, "s": with_value(body["s"], path, spell(past))})
                    await self._refused(adapter, name, forged, before=104)
                for earlier in (0, 102):
                    forged = seal({**body, "s": with_value(body["s"], path, spell(earlier))})
                    page = await self._first(adapter, name, cursor=forged, before=104)
                    assert set(ids(page.sessions)) <= set(within)

    async def test_a_cursor_of_another_listing_is_refused(self, adapter: StorageAdapter) -> None:
        await _sessions(adapter)
        by_name = (await self._first(adapter, "a")).cursor
        assert by_name is not None
        await self._refused(adapter, "b", by_name)
        await self._refused(adapter, None, by_name)
        await self._refused(adapter, "a", by_name, status=SandboxStatus.Running)
        await self._refused(adapter, "a", by_name, before=104)
        # The limit may change from page to page: the listing is the same.
        rest = await adapter.list_sandbox_details("a", ListSandboxOptions(cursor=by_name))
        assert ids(rest) == ["s1", "s0"]
        running = (await self._first(adapter, None, status=SandboxStatus.Running)).cursor
        assert running is not None
        await self._refused(adapter, None, running)
        await self._refused(adapter, None, running, status=SandboxStatus.Completed)
        await self._refused(adapter, "a", running, status=SandboxStatus.Running)
        older = (await self._first(adapter, None, before=104)).cursor
        assert older is not None
        await self._refused(adapter, None, older, before=103)
        await self._refused(adapter, None, older)

    async def test_a_cursor_of_another_store_is_refused(self, adapter: StorageAdapter) -> None:
        await _sessions(adapter)
        other = MemoryAdapter()
        await _sessions(other)
        for name in (None, "a"):
            cursor = (await self._first(other, name)).cursor
            assert cursor is not None
            await self._refused(adapter, name, cursor)

    async def test_a_cursor_of_a_store_of_the_same_name_is_refused(
        self, adapter: StorageAdapter, namesake: StorageAdapter
    ) -> None:
        # Same table or schema name, another store: its sessions (startedAt 100 to 104 here)
        # would otherwise be silently skipped by a position taken from the other one.
        await _sessions(adapter)
        for i in range(3):
            await session(namesake, "a", f"y{i}", 2000 + i)
        for name in (None, "a"):
            for source, target in ((namesake, adapter), (adapter, namesake)):
                cursor = (await self._first(source, name)).cursor
                assert cursor is not None
                await self._refused(target, name, cursor)

    async def test_a_cursor_works_across_clients_of_one_store(
        self, adapter: StorageAdapter, second_client: StorageAdapter
    ) -> None:
        await _sessions(adapter)
        for name in (None, "a"):
            first = await self._first(adapter, name)
            assert first.cursor is not None
            options = ListSandboxOptions(cursor=first.cursor)
            rest = (
                await second_client.list_all_sandbox_details(options)
                if name is None
                else await second_client.list_sandbox_details(name, options)
            )
            everything = (
                await adapter.list_all_sandbox_details()
                if name is None
                else await adapter.list_sandbox_details(name)
            )
            assert ids(first.sessions) + ids(rest) == ids(everything)
