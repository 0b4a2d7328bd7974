"""SQLiteAdapter beyond the contract: files, processes, sizes, bad input, schema versions."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from sandbox_ledger import (
    InvalidInputError,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    StorageError,
)
from sandbox_ledger.cursor import seal, unseal
from sandbox_ledger.sqlite import SQLiteAdapter
from sandbox_ledger.sqlite import adapter as sqlite_module
from sandbox_ledger.sqlite.adapter import MAX_CACHE_MB
from sandbox_ledger.sqlite.queries import split_statements
from sql.sql_store import entry as _entry


async def test_creates_file_with_schema_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with SQLiteAdapter(path) as adapter:
        await adapter.append(_entry(LedgerEvent.SandboxCreated, 1))
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("SELECT version FROM ledger_schema").fetchone() == (
            sqlite_module.SCHEMA_VERSION,
        )
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"ledger_sessions", "ledger_events", "ledger_environments"} <= tables


async def test_the_page_cache_is_set_per_connection(tmp_path: Path) -> None:
    """32 MiB by default (an import into a large ledger reads and spills index pages with
    SQLite's 2 MiB), another size when given; a size that is not a positive whole number
    of MiB is refused naming the argument."""
    async with SQLiteAdapter(tmp_path / "a.db") as adapter:
        assert await adapter._fetchall("PRAGMA cache_size", []) == [(-32 * 1024,)]
    async with SQLiteAdapter(tmp_path / "b.db", cache_mb=8) as adapter:
        assert await adapter._fetchall("PRAGMA cache_size", []) == [(-8 * 1024,)]
    async with SQLiteAdapter(tmp_path / "d.db", cache_mb=MAX_CACHE_MB) as adapter:
        assert await adapter._fetchall("PRAGMA cache_size", []) == [(-MAX_CACHE_MB * 1024,)]
    # Past the largest size SQLite holds, it silently kept its 2 MiB default.
    for bad in (0, -1, 1.5, True, MAX_CACHE_MB + 1, 2**40):
        with pytest.raises(InvalidInputError, match=r"^cache_mb: "):
            SQLiteAdapter(tmp_path / "c.db", cache_mb=bad)  # type: ignore[arg-type]


async def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    adapter = SQLiteAdapter(tmp_path / "nope" / "x.db")
    with pytest.raises(StorageError, match="does not exist"):
        await adapter.list_environments()


async def test_memory_database_lives_until_close() -> None:
    adapter = SQLiteAdapter(":memory:")
    await adapter.append(_entry(LedgerEvent.SandboxCreated, 1))
    assert len(await adapter.read_all("n", "s")) == 1
    other = SQLiteAdapter(":memory:")
    assert await other.read_all("n", "s") == []
    await adapter.close()
    assert await adapter.read_all("n", "s") == []
    await adapter.close()
    await other.close()


async def test_ten_megabyte_payload_round_trips_byte_exact(tmp_path: Path) -> None:
    payload = {"blob": "x" * (10 * 1024 * 1024), "unicode": "✓ 日本語 🚀", "n": 10**40}
    async with SQLiteAdapter(tmp_path / "big.db") as adapter:
        await adapter.append(_entry(LedgerEvent.ExecComplete, 1, payload=payload))
        [back] = await adapter.read_all("n", "s")
    assert json.dumps(back.payload) == json.dumps(payload)
    with sqlite3.connect(tmp_path / "big.db") as db:
        (stored,) = db.execute("SELECT payload FROM ledger_events").fetchone()
    assert stored == json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        (_entry("e", 1, step_index=2**63), "stepIndex"),
        (_entry("e", 1, branch=-(2**63) - 1), "branch"),
        (_entry("e", 1, payload={"x": "\udfff"}), "payload"),
    ],
)
async def test_bad_entries_are_refused_and_nothing_is_written(
    tmp_path: Path, entry: LedgerEntry, field: str
) -> None:
    async with SQLiteAdapter(tmp_path / "bad.db") as adapter:
        with pytest.raises(InvalidInputError, match=field):
            await adapter.append(entry)
        assert await adapter.read_all("n", "s") == []
        with pytest.raises(InvalidInputError, match="record"):
            await adapter.save_environment({"name": "x"})  # type: ignore[arg-type]
        assert await adapter.list_environments() == []


async def test_listing_limits_and_cursors_beyond_64_bits(tmp_path: Path) -> None:
    """A limit past what SQLite binds lists everything as the memory store does (it raised
    OverflowError); a cursor carrying such an integer is a bad cursor, as any other."""
    async with SQLiteAdapter(tmp_path / "limits.db") as adapter:
        await adapter.append(_entry(LedgerEvent.SandboxCreated, 1))
        for limit in (2**63 - 1, 2**63, 2**70):
            page = await adapter.list_all_sandbox_page(ListSandboxOptions(limit=limit))
            assert (len(page.sessions), page.cursor) == (1, None)
            by_name = await adapter.list_sandbox_details("n", ListSandboxOptions(limit=limit))
            assert len(by_name) == 1
        await adapter.append(_entry(LedgerEvent.SandboxCreated, 2, sandbox_id="s2"))
        real = (await adapter.list_all_sandbox_page(ListSandboxOptions(limit=1))).cursor
        body = unseal(real)
        for state in ({"t": 2**70, "q": 1}, {"t": 1, "q": -(2**63) - 1}, {"t": True, "q": 1}):
            # Sealed as the listing's own: what its state validation alone must refuse.
            forged = seal({**body, "s": state})
            with pytest.raises(InvalidInputError, match="cursor"):
                await adapter.list_all_sandbox_details(ListSandboxOptions(limit=1, cursor=forged))


async def test_append_at_is_idempotent(tmp_path: Path) -> None:
    async with SQLiteAdapter(tmp_path / "imp.db") as adapter:
        created = _entry(LedgerEvent.SandboxCreated, 1)
        done = _entry(LedgerEvent.ExecComplete, 2)
        for _ in range(3):
            await adapter.append_at(created, 1)
            await adapter.append_at(done, 2)
        # The same entry at another position is another line: stored.
        await adapter.append_at(done, 3)
        assert [e.ts for e in await adapter.read_all("n", "s")] == [1, 2, 2]
        details = await adapter.get_sandbox_details("n", "s")
        assert details is not None and details.exec_count == 2
        with pytest.raises(InvalidInputError, match="position"):
            await adapter.append_at(done, -1)


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from sandbox_ledger import LedgerEntry
    from sandbox_ledger.sqlite import SQLiteAdapter

    async def main(path, worker, count):
        async with SQLiteAdapter(path, busy_timeout=0.05) as adapter:
            await adapter.append(LedgerEntry(ts=worker, name="own", sandbox_id=f"w{worker}",
                                             step_index=-1, event="sandbox.created"))
            for i in range(count):
                for sandbox_id in ("shared", f"w{worker}"):
                    await adapter.append(LedgerEntry(
                        ts=i, name="own" if sandbox_id != "shared" else "all",
                        sandbox_id=sandbox_id, step_index=i, event="exec.complete",
                        payload={"worker": worker, "i": i}))

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    """
)


async def test_several_processes_writing_one_file_lose_and_double_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.db"
    workers, count = 4, 120
    async with SQLiteAdapter(path) as adapter:
        await adapter.append(_entry(LedgerEvent.SandboxCreated, 0, name="all", sandbox_id="shared"))
    # A tiny busy timeout makes SQLITE_BUSY frequent, so the retry path is exercised.
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(w), str(count)])
        for w in range(workers)
    ]
    assert [p.wait(timeout=240) for p in procs] == [0] * workers
    async with SQLiteAdapter(path) as adapter:
        shared = await adapter.read_all("all", "shared")
        got = sorted((e.payload["worker"], e.payload["i"]) for e in shared[1:])
        assert got == [(w, i) for w in range(workers) for i in range(count)]
        details = await adapter.get_sandbox_details("all", "shared")
        assert details is not None and details.exec_count == workers * count
        for w in range(workers):
            own = await adapter.get_sandbox_details("own", f"w{w}")
            assert own is not None and own.exec_count == count
            assert len(await adapter.read_all("own", f"w{w}")) == count + 1


async def test_busy_beyond_max_wait_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    async with SQLiteAdapter(path) as adapter:
        await adapter.append(_entry(LedgerEvent.SandboxCreated, 1))
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        adapter = SQLiteAdapter(path, busy_timeout=0.01, max_wait=0.3)
        with pytest.raises(StorageError, match="busy") as caught:
            await adapter.append(_entry(LedgerEvent.ExecComplete, 2))
        assert caught.value.code == "SQLITE_BUSY"
        # Readers are not blocked by a writer (WAL).
        assert len(await adapter.read_all("n", "s")) == 1
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    await adapter.append(_entry(LedgerEvent.ExecComplete, 2))
    details = await adapter.get_sandbox_details("n", "s")
    assert details is not None and details.exec_count == 1
    await adapter.close()


async def test_a_write_cancelled_while_waiting_for_the_lock_leaves_no_lock_held(
    tmp_path: Path,
) -> None:
    """A timeout cancels an append whose BEGIN IMMEDIATE waits for another writer: the
    statement still runs in aiosqlite's thread and takes the lock once it is free, and the
    adapter must not keep that transaction open (locking every other writer out)."""
    path = tmp_path / "cancel.db"
    adapter = SQLiteAdapter(path, busy_timeout=5.0)
    await adapter.append(_entry(LedgerEvent.SandboxCreated, 1))
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    # The other writer finishes while the cancelled BEGIN IMMEDIATE still waits for its lock.
    release = threading.Timer(0.5, blocker.execute, ["ROLLBACK"])
    release.start()
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(adapter.append(_entry(LedgerEvent.ExecComplete, 2)), 0.2)
    finally:
        release.join()
    # Queued behind the abandoned BEGIN in aiosqlite's thread: it raised "cannot start a
    # transaction within a transaction" before the fix, and every later write did too.
    await adapter.append(_entry(LedgerEvent.ExecComplete, 3))
    await _holds_no_lock_and_kept(adapter, path, blocker, timeout=3.0)


async def _holds_no_lock_and_kept(
    adapter: SQLiteAdapter, path: Path, blocker: sqlite3.Connection, *, timeout: float
) -> None:
    """Another connection can take the write lock (the adapter holds none), and the session
    holds the entries of ts 1 and 3 only (the cancelled append of ts 2 wrote nothing)."""
    other = sqlite3.connect(path, isolation_level=None, timeout=timeout)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()
        blocker.close()
    assert [e.ts for e in await adapter.read_all("n", "s")] == [1, 3]
    await adapter.close()


async def test_a_write_cancelled_twice_still_releases_the_lock(tmp_path: Path) -> None:
    """A second cancellation while the first one's cleanup waits (a second Ctrl-C, a shutdown
    cancelling every task) must not abandon that cleanup: the cancelled BEGIN takes the lock
    once the other writer is done, and its ROLLBACK must still run. Before the fix the lock
    stayed held ('database is locked' for every other writer) and the adapter's next write
    failed with 'cannot start a transaction within a transaction'."""
    path = tmp_path / "cancel2.db"
    adapter = SQLiteAdapter(path, busy_timeout=1.0)
    await adapter.append(_entry(LedgerEvent.SandboxCreated, 1))
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    task = asyncio.create_task(adapter.append(_entry(LedgerEvent.ExecComplete, 2)))
    await asyncio.sleep(0.2)
    task.cancel()
    await asyncio.sleep(0.05)
    task.cancel()  # while the first cancellation's cleanup waits behind the BEGIN
    await asyncio.sleep(0.1)
    blocker.execute("ROLLBACK")  # the abandoned BEGIN now takes the lock
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(adapter.append(_entry(LedgerEvent.ExecComplete, 3)), 5)
    await _holds_no_lock_and_kept(adapter, path, blocker, timeout=0.5)


# -- schema versions (migrations, on both dialects: test_sql_schema.py) ---------------------


def test_schema_files_are_package_data() -> None:
    [first, *_] = sqlite_module.MIGRATIONS
    assert first.version == 1 and "CREATE TABLE ledger_events" in first.sql
    assert split_statements(first.sql)[0].startswith("--")
