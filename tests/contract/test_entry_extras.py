"""Entry fields of a newer client (a ``traceId``): kept and returned unchanged by the memory
and DynamoDB stores (as the seed's own adapter keeps them), refused explicitly by the SQL
stores, whose tables have no column for them yet; never dropped silently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox_ledger import InvalidInputError, LedgerEntry, MemoryAdapter
from sandbox_ledger.dynamodb import DynamoDBAdapter
from sandbox_ledger.sqlite import SQLiteAdapter

WIRE: dict[str, Any] = {
    "ts": 5,
    "name": "n",
    "sandboxId": "s",
    "stepIndex": 0,
    "event": "exec.complete",
    "traceId": "4bf92f3577b34da6",
    "span": {"id": 7, "parent": None},
    "sampled": None,
}


async def _round_trip(adapter: Any) -> None:
    await adapter.append(LedgerEntry.model_validate(WIRE))
    [back] = await adapter.read_all("n", "s")
    assert back.wire() == WIRE
    assert back.model_extra == {
        "traceId": "4bf92f3577b34da6",
        "span": {"id": 7, "parent": None},
        "sampled": None,
    }


async def test_memory_keeps_fields_of_a_newer_client() -> None:
    await _round_trip(MemoryAdapter())


async def test_dynamodb_keeps_fields_of_a_newer_client(moto_endpoint: str, sync_table: str) -> None:
    async with DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as adapter:
        await _round_trip(adapter)


async def test_sqlite_refuses_them_instead_of_dropping_them(tmp_path: Path) -> None:
    async with SQLiteAdapter(tmp_path / "l.db") as adapter:
        with pytest.raises(InvalidInputError, match="traceId"):
            await adapter.append(LedgerEntry.model_validate(WIRE))
        assert await adapter.read_all("n", "s") == []
