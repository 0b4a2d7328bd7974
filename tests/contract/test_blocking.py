"""The synchronous twin of the async stores: the contract through BlockingAdapter, threads,
errors, interruption and closing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dynamodb.test_dynamodb_conformance import AsyncOverSync
from sandbox_ledger import InvalidInputError, LedgerEntry, ListSandboxOptions
from sandbox_ledger.blocking import BlockingAdapter, open_blocking_store
from sandbox_ledger.memory import MemoryAdapter
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.sqlite import SQLiteAdapter
from sandbox_ledger.testing import StorageAdapterContract


class TestBlockingSQLite(StorageAdapterContract):
    """Every case of the contract, each call through the facade from a worker thread."""

    @pytest.fixture
    async def adapter(self, tmp_path: Path) -> AsyncIterator[AsyncOverSync]:
        adapter = AsyncOverSync(BlockingAdapter(SQLiteAdapter(tmp_path / "ledger.db")))
        yield adapter
        await adapter.close()

    @pytest.fixture
    async def second_client(self, tmp_path: Path) -> AsyncIterator[AsyncOverSync]:
        other = AsyncOverSync(BlockingAdapter(SQLiteAdapter(tmp_path / "ledger.db")))
        yield other
        await other.close()


def created(sandbox_id: str, ts: int, name: str = "job") -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name=name, sandbox_id=sandbox_id, step_index=-1, event="sandbox.created"
    )


def exec_complete(sandbox_id: str, ts: int, step: int) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name="job", sandbox_id=sandbox_id, step_index=step, event="exec.complete"
    )


def test_many_threads_on_postgres(postgres_dsn: str, pg_schema: str) -> None:
    """Sixteen threads append at once through one facade over a pooled PostgreSQL adapter:
    nothing lost, nothing doubled, every summary counting its own entries."""
    with BlockingAdapter(PostgresAdapter(postgres_dsn, schema=pg_schema, max_size=4)) as ledger:

        def session(i: int) -> None:
            ledger.append(created(f"s{i:02}", 1_000 + i))
            for step in range(5):
                ledger.append(exec_complete(f"s{i:02}", 2_000 + step, step))

        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(session, range(16)))
        listed = ledger.list_sandbox_details("job", ListSandboxOptions(limit=100))
        assert sorted(d.sandbox_id for d in listed) == [f"s{i:02}" for i in range(16)]
        assert {d.exec_count for d in listed} == {5}
        assert all(len(ledger.read_all("job", d.sandbox_id)) == 6 for d in listed)


def test_errors_are_the_adapters_and_nothing_is_written(tmp_path: Path) -> None:
    with open_blocking_store(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        with pytest.raises(InvalidInputError, match="surrogate"):
            ledger.append(created("sb", 1).model_copy(update={"payload": "\ud800"}))
        assert ledger.list_all_sandbox_details() == []
        ledger.append(created("sb", 1))
        assert ledger.get_sandbox_details("job", "sb") is not None
    ledger.close()  # idempotent
    again = SQLiteAdapter(tmp_path / "ledger.db")
    assert [e.sandbox_id for e in asyncio.run(_read(again))] == ["sb"]


async def _read(adapter: SQLiteAdapter) -> list[LedgerEntry]:
    async with adapter:
        return await adapter.read_all("job", "sb")


def test_called_from_its_own_loop_it_refuses_instead_of_deadlocking(tmp_path: Path) -> None:
    ledger = BlockingAdapter(SQLiteAdapter(tmp_path / "ledger.db"))
    try:

        async def inside() -> None:
            ledger.append(created("sb", 1))

        with pytest.raises(RuntimeError, match="own event loop"):
            asyncio.run_coroutine_threadsafe(inside(), ledger._running_loop()).result(timeout=30)
    finally:
        ledger.close()


INTERRUPTED = """
import asyncio, os, signal, sys, threading
from sandbox_ledger.blocking import BlockingAdapter

seen = []

class Slow:
    async def connect(self): pass
    async def close(self): pass
    async def read_all(self, name, sandbox_id):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

ledger = BlockingAdapter(Slow())
threading.Timer(0.5, os.kill, [os.getpid(), signal.SIGINT]).start()  # as Ctrl-C does
try:
    ledger.read_all("job", "sb")
except KeyboardInterrupt:
    pass
ledger.close()
print(seen)
"""


def test_an_interrupted_call_cancels_its_task_and_the_process_exits() -> None:
    """Ctrl-C in the calling thread cancels the call's task on the loop; a facade left open
    does not keep the process alive."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(INTERRUPTED)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['cancelled']"
    left_open = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sandbox_ledger.blocking import BlockingAdapter\n"
            "from sandbox_ledger.memory import MemoryAdapter\n"
            "ledger = BlockingAdapter(MemoryAdapter())\n"
            "print(ledger.list_environments())\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert left_open.returncode == 0 and left_open.stdout.strip() == "[]", left_open.stderr


def test_the_facade_is_a_sync_transfer_adapter_over_every_store(tmp_path: Path) -> None:
    """Import and export take a SyncTransferAdapter: the facade declares every method of it,
    over the memory store too (which gained append_once), each reaching the adapter; any
    other name is an AttributeError, never a method that fails when called."""
    from sandbox_ledger.protocol import SyncTransferAdapter

    sqlite = BlockingAdapter(SQLiteAdapter(tmp_path / "ledger.db"))
    memory = BlockingAdapter(MemoryAdapter())
    for ledger in (sqlite, memory):
        assert isinstance(ledger, SyncTransferAdapter)
        assert not hasattr(ledger, "no_such_method")
        with ledger:
            assert ledger.append_once(created("sb", 1), 1) is True
            assert ledger.append_once(created("sb", 1), 1) is False
            assert ledger.scan_sessions(segments=2) == [("job", "sb")]
            assert ledger.read_stored("job", "sb") == ledger.read_in_append_order("job", "sb")
            assert ledger.ledger_retention() is None


def test_imports_at_once_through_the_facade_store_each_entry_once(tmp_path: Path) -> None:
    """Two threads import one file through one facade over SQLite: its append_once reaches the
    importer, so the entries both find missing are stored once (plain appends stored them
    twice), and the report counts each line once as new across the two."""
    from sandbox_ledger.transfer import entry_line, import_entries, parse_lines

    entries = [created("sb", 1)] + [exec_complete("sb", 10 + i, i) for i in range(30)]
    parsed = parse_lines(entry_line(e).encode() + b"\n" for e in entries)
    with BlockingAdapter(SQLiteAdapter(tmp_path / "ledger.db")) as ledger:
        with ThreadPoolExecutor(max_workers=2) as pool:
            reports = list(pool.map(lambda _: import_entries(ledger, parsed), range(2)))
        assert sum(r.new for r in reports) == len(entries)
        assert all(r.new + r.present == len(entries) and not r.failed for r in reports)
        assert len(ledger.read_all("job", "sb")) == len(entries)
        details = ledger.get_sandbox_details("job", "sb")
        assert details is not None and details.exec_count == 30
