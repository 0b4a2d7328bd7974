"""A PostgreSQL server restarted under a store: what it committed is kept, and a store
that was connected keeps working once the server is back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_ledger import LedgerEvent
from sandbox_ledger.errors import StorageError
from sandbox_ledger.local.postgres import LocalPostgres
from sandbox_ledger.postgres import PostgresAdapter
from sql.sql_store import entry


@pytest.fixture
def server() -> Iterator[LocalPostgres]:
    server = LocalPostgres()
    server.start()
    yield server
    server.stop()


async def _append_until_it_works(adapter: PostgresAdapter, n: int) -> int:
    """Append entry ``n`` of session s, once the store answers; the failed tries."""
    failed = 0
    for _ in range(5):
        try:
            await adapter.append(entry(LedgerEvent.ExecStarted, 1000 + n, step_index=n))
            return failed
        except StorageError:
            failed += 1
    raise AssertionError("the store did not recover from the server's restart")


@pytest.mark.parametrize("crash", [True, False], ids=["immediate", "fast"])
async def test_a_restart_keeps_what_was_committed_and_the_store_reconnects(
    server: LocalPostgres, crash: bool
) -> None:
    adapter = PostgresAdapter(server.dsn, max_size=2)
    try:
        await adapter.append(entry(LedgerEvent.SandboxCreated, 1001, step_index=1))
        for step in range(2, 21):
            await adapter.append(entry(LedgerEvent.ExecStarted, 1000 + step, step_index=step))
        server.restart(crash=crash)
        # Pooled connections the restart cut are found out and replaced: at most a try
        # per pooled connection fails, then the store works again.
        assert await _append_until_it_works(adapter, 21) <= 2
        fresh = PostgresAdapter(server.dsn)
        try:
            stored = await fresh.read_in_append_order("n", "s")
        finally:
            await fresh.close()
        assert [e.step_index for e in stored] == list(range(1, 22))
    finally:
        await adapter.close()


def test_a_restart_of_a_server_not_started_is_refused() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        LocalPostgres().restart()
