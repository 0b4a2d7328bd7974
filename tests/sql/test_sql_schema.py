"""Schema versions on both SQL dialects: an older schema is migrated forward on connect(), a
failed migration changes nothing, and a schema newer than the library is refused."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sandbox_ledger import (
    EnvironmentRecord,
    LedgerEvent,
    SchemaVersionError,
    StorageError,
)
from sandbox_ledger.sql.schema import Migration
from sql.sql_store import Store, entry

# A next schema version as a later library would ship it (its title, its DDL), and what
# reads back what it wrote.
NEWER = {
    "sqlite": (
        "environment_notes",
        "ALTER TABLE ledger_environments ADD COLUMN note TEXT;\n"
        "UPDATE ledger_environments SET note = 'migrated';\n",
        "SELECT note FROM ledger_environments",
    ),
    "postgres": (
        "session_labels",
        "ALTER TABLE ledger_sessions ADD COLUMN label text;\n"
        "UPDATE ledger_sessions SET label = 'migrated';\n",
        "SELECT label FROM ledger_sessions",
    ),
}


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return Store(request.param, tmp_path, request)


async def test_newer_library_migrates_an_older_schema_forward(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with store.opened() as adapter:
        await adapter.append(entry(LedgerEvent.SandboxCreated, 1))
        await adapter.save_environment(EnvironmentRecord(name="py", built_at=5))
    title, ddl, read_back = NEWER[store.kind]
    newer = Migration(store.module.SCHEMA_VERSION + 1, title, ddl)
    monkeypatch.setattr(store.module, "MIGRATIONS", (*store.module.MIGRATIONS, newer))
    caplog.set_level(logging.INFO, logger="sandbox_ledger.schema")
    async with store.opened() as adapter:
        assert len(await adapter.read_all("n", "s")) == 1
        assert (await adapter.get_environment("py")) == EnvironmentRecord(name="py", built_at=5)
    assert f"from version {newer.version - 1} to {newer.version}" in caplog.text
    assert store.query("SELECT version FROM ledger_schema") == [(newer.version,)]
    assert store.query(read_back) == [("migrated",)]
    caplog.clear()
    async with store.opened() as adapter:  # already current: nothing to do, nothing said
        await adapter.list_environments()
    assert "migrated" not in caplog.text


async def test_failed_migration_changes_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with store.opened() as adapter:
        await adapter.append(entry(LedgerEvent.SandboxCreated, 1))
    broken = Migration(
        store.module.SCHEMA_VERSION + 1,
        "broken",
        "ALTER TABLE ledger_events ADD COLUMN later_column text;\nSELECT * FROM no_such_table;\n",
    )
    monkeypatch.setattr(store.module, "MIGRATIONS", (*store.module.MIGRATIONS, broken))
    with pytest.raises(StorageError, match="no_such_table"):
        await store.adapter().connect()
    assert store.query("SELECT version FROM ledger_schema") == [(store.module.SCHEMA_VERSION,)]
    assert "later_column" not in store.columns("ledger_events")


async def test_older_library_refuses_a_newer_schema(store: Store) -> None:
    async with store.opened() as adapter:
        await adapter.append(entry(LedgerEvent.SandboxCreated, 1))
    store.query("UPDATE ledger_schema SET version = version + 1")
    adapter = store.adapter()
    with pytest.raises(SchemaVersionError, match="newer than this library") as caught:
        await adapter.read_all("n", "s")
    assert caught.value.found == store.module.SCHEMA_VERSION + 1
    assert caught.value.supported == store.module.SCHEMA_VERSION
    await adapter.close()
