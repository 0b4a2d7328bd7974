"""Entry fields of a newer client (a ``traceId``): kept and returned unchanged by every store
(as the seed's own adapter keeps them), by an import and an export between stores too, and
by a SQL database migrated from before the ``extra`` column (schema version 5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sandbox_ledger import LedgerEntry, MemoryAdapter
from sandbox_ledger.cli import app
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.postgres import PostgresAdapter
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


async def test_sqlite_keeps_them(tmp_path: Path) -> None:
    async with SQLiteAdapter(tmp_path / "l.db") as adapter:
        await _round_trip(adapter)


async def test_postgres_keeps_them(postgres_dsn: str, pg_schema: str) -> None:
    async with PostgresAdapter(postgres_dsn, schema=pg_schema) as adapter:
        await _round_trip(adapter)


def test_they_move_from_dynamodb_to_sqlite_and_back_out_unchanged(
    moto_endpoint: str, sync_table: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The move the third red team found broken: SQLite refused every line with a newer
    client's field. Exported from DynamoDB, imported into SQLite, exported again: the same
    bytes."""
    monkeypatch.delenv("SANDBOX_LEDGER_TABLE", raising=False)
    SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint).append(
        LedgerEntry.model_validate(WIRE)
    )
    source = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    target = ["--store", f"sqlite:///{tmp_path / 'l.db'}"]
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    runner = CliRunner()
    for args in ([*source, "export", "-o", str(first)], [*target, "import", str(first)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    assert "1 new" in result.output
    result = runner.invoke(app, [*target, "export", "-o", str(second)])
    assert result.exit_code == 0, result.output
    assert second.read_bytes() == first.read_bytes()
    assert [json.loads(line) for line in first.read_text(encoding="utf-8").splitlines()] == [WIRE]


def test_a_null_field_of_a_newer_client_keeps_its_place() -> None:
    """Fourth red team: the wire shape put a null unknown field after the others."""
    given = {**WIRE, "traceId": None, "big": 1, "tiny": {"a": None}}
    assert list(LedgerEntry.model_validate(given).wire()) == list(given)
