"""After an import batch cancelled once, twice or three times (its
transaction's rollback still running after the second), a read sees none of the batch (it
read the rolled-back rows from inside that transaction before the fix), temp_store is back
to DEFAULT, and the next write and batch land."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from sandbox_ledger import LedgerEvent
from sandbox_ledger.sqlite import SQLiteAdapter
from sql.sql_store import entry

E = LedgerEvent


def items(now_ms: int, sid: str, n: int = 5) -> list:
    return [(entry(E.ExecComplete, now_ms + i, sandbox_id=sid), 1) for i in range(n)]


async def _temp_store(ledger: SQLiteAdapter) -> int:
    db = await ledger._open()
    async with db.execute("PRAGMA temp_store") as cursor:
        return int((await cursor.fetchone())[0])


@pytest.mark.parametrize("temp_table", [False, True])
@pytest.mark.parametrize("cancels", [1, 2, 3])
@pytest.mark.parametrize("spins", [0, 1, 2, 3])
async def test_temp_store_is_default_after_a_cancelled_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, temp_table: bool, cancels: int, spins: int
) -> None:
    from sandbox_ledger.sql import bulk

    now = time.time_ns() // 1_000_000
    async with SQLiteAdapter(tmp_path / "l.db") as ledger:
        await ledger.append_once_many(items(now, "a"))
        if temp_table:
            db = await ledger._open()
            await db.execute("CREATE TEMP TABLE t (x)")
        real = bulk._write
        inside = asyncio.Event()

        async def stuck(adapter, conn, batch):  # type: ignore[no-untyped-def]
            await real(adapter, conn, batch)
            inside.set()
            await asyncio.Event().wait()

        monkeypatch.setattr(bulk, "_write", stuck)
        task = asyncio.ensure_future(ledger.append_once_many(items(now, "b")))
        await inside.wait()
        for _ in range(cancels):
            task.cancel()
            for _ in range(spins):
                await asyncio.sleep(0)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        monkeypatch.setattr(bulk, "_write", real)
        assert await ledger.read_all("n", "b") == []
        assert await _temp_store(ledger) == 0
        await ledger.append(entry(E.ExecComplete, now, sandbox_id="c"))
        assert await _temp_store(ledger) == 0
        assert await ledger.append_once_many(items(now, "b")) == [True] * 5
        assert await _temp_store(ledger) == 0
        assert len(await ledger.read_all("n", "b")) == 5
