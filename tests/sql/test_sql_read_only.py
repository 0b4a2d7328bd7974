"""A SQL store opened ``read_only`` (what the CLI's read commands open) creates, migrates and
records nothing, on both dialects (issue 25, item 2)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from sandbox_ledger import LedgerEvent, StorageError, StoreNotFoundError
from sandbox_ledger.sql.schema import Migration
from sql.sql_store import Store, entry


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return Store(request.param, tmp_path, request)


def exists(store: Store) -> bool:
    if store.kind == "sqlite":
        return store.path.exists()
    found = store.query("SELECT 1 FROM pg_namespace WHERE nspname = ?", store.schema)
    return found != []


async def test_a_missing_store_is_not_found_and_not_created(store: Store) -> None:
    adapter = store.adapter(read_only=True)
    with pytest.raises(StoreNotFoundError, match="a read never creates one"):
        await adapter.list_all_sandbox_details()
    await adapter.close()
    assert not exists(store)


async def test_a_read_records_no_retention(store: Store) -> None:
    async with store.opened() as adapter:
        await adapter.append(entry(LedgerEvent.SandboxCreated, 1))
    async with store.adapter(timedelta(days=1), read_only=True) as reader:
        assert len(await reader.read_all("n", "s")) == 1
    assert store.stored_retention() is None


async def test_a_read_applies_no_migration(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    async with store.opened() as adapter:
        await adapter.append(entry(LedgerEvent.SandboxCreated, 1))
    version = store.module.SCHEMA_VERSION
    newer = Migration(version + 1, "later", "CREATE TABLE later_thing (x integer);\n")
    monkeypatch.setattr(store.module, "MIGRATIONS", (*store.module.MIGRATIONS, newer))
    reader = store.adapter(read_only=True)
    with pytest.raises(StorageError, match=f"at version {version}, older .* does not migrate"):
        await reader.read_all("n", "s")
    await reader.close()
    assert store.query("SELECT version FROM ledger_schema") == [(version,)]


async def test_a_read_only_adapter_refuses_writes(store: Store) -> None:
    async with store.opened() as adapter:
        await adapter.append(entry(LedgerEvent.SandboxCreated, 1))
    async with store.adapter(read_only=True) as reader:
        with pytest.raises(StorageError, match="read_only"):
            await reader.append(entry(LedgerEvent.ExecComplete, 2, step_index=0))
        with pytest.raises(StorageError, match="read_only"):
            await reader.delete_sandbox("n", "s")
        assert len(await reader.read_all("n", "s")) == 1
