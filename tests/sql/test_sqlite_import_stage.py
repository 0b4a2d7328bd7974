"""The SQLite import stage under odd conditions."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from sandbox_ledger import LedgerEvent
from sandbox_ledger.sqlite import SQLiteAdapter
from sql.sql_store import entry

E = LedgerEvent


def items(now_ms: int, sid: str = "a", n: int = 5) -> list:
    return [(entry(E.ExecComplete, now_ms + i, sandbox_id=sid), 1) for i in range(n)]


async def test_a_memory_database_imports(tmp_path: Path) -> None:
    now = time.time_ns() // 1_000_000
    async with SQLiteAdapter(":memory:") as ledger:
        assert await ledger.append_once_many(items(now)) == [True] * 5
        assert await ledger.append_once_many(items(now)) == [False] * 5
        assert len(await ledger.read_all("n", "a")) == 5


async def test_a_batch_after_the_temp_database_was_opened(tmp_path: Path) -> None:
    """A temp table (or anything that opens the temp database) on the connection: the
    batch's switch of temp_store must not refuse the import (inside BEGIN IMMEDIATE SQLite
    refuses it: "temporary storage cannot be changed from within a transaction"). Switched
    before the BEGIN, SQLite closes the temporary database instead (its tables go, as its
    documentation says; the library makes none)."""
    now = time.time_ns() // 1_000_000
    async with SQLiteAdapter(tmp_path / "l.db") as ledger:
        await ledger.append_once_many(items(now, "a"))
        db = await ledger._open()
        await db.execute("CREATE TEMP TABLE t (x)")
        assert await ledger.append_once_many(items(now, "b")) == [True] * 5


async def test_many_batches_keep_the_stage(tmp_path: Path) -> None:
    now = time.time_ns() // 1_000_000
    async with SQLiteAdapter(tmp_path / "l.db") as ledger:
        for i in range(30):
            assert await ledger.append_once_many(items(now, f"s{i}", 3)) == [True] * 3
    with sqlite3.connect(tmp_path / "l.db") as db:
        assert db.execute("SELECT count(*) FROM ledger_events").fetchone()[0] == 90
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master")]
        assert not [n for n in names if "stag" in n]


async def test_read_only_adapter_opens(tmp_path: Path) -> None:
    now = time.time_ns() // 1_000_000
    async with SQLiteAdapter(tmp_path / "l.db") as ledger:
        await ledger.append_once_many(items(now))
    async with SQLiteAdapter(tmp_path / "l.db", read_only=True) as ro:
        assert len(await ro.read_all("n", "a")) == 5


async def test_huge_payloads_leave_no_pages_in_the_stage(tmp_path: Path) -> None:
    now = time.time_ns() // 1_000_000
    big = "x" * 3_000_000
    async with SQLiteAdapter(tmp_path / "l.db") as ledger:
        batch = [
            (entry(E.ExecComplete, now + i, sandbox_id="big", payload={"d": big + str(i)}), 1)
            for i in range(8)
        ]
        assert await ledger.append_once_many(batch) == [True] * 8
        db = await ledger._open()
        async with db.execute("PRAGMA ledger_import.page_count") as c:
            (pages,) = await c.fetchone()
        async with db.execute("SELECT count(*) FROM ledger_import.staged_events") as c:
            (staged,) = await c.fetchone()
        assert staged == 0
        assert pages < 10, pages
        assert len(await ledger.read_all("n", "big")) == 8


async def test_odd_text_goes_through_the_stage_as_through_append(tmp_path: Path) -> None:
    now = time.time_ns() // 1_000_000
    odd = ["nul\x00inside", "é\u0301 𝄞 \u2028 \ufeff", "", "'; DROP TABLE x; --", "1e3", "0x10"]
    found = {}
    for how in ("append", "batch"):
        async with SQLiteAdapter(tmp_path / f"{how}.db") as ledger:
            items = []
            for i, t in enumerate(odd):
                try:
                    e = entry(
                        E.ExecFailed,
                        now + i,
                        sandbox_id="odd",
                        error=(t or None) if "\x00" not in t else "nul",
                        payload={"t": t, "n": i},
                    )
                except Exception:
                    continue
                items.append(e)
            if how == "append":
                for e in items:
                    await ledger.append(e)
            else:
                await ledger.append_once_many([(e, 1) for e in items])
            found[how] = [(e.error, e.payload) for e in await ledger.read_all("n", "odd")]
    assert found["batch"] == found["append"]


async def test_a_failed_batch_leaves_the_stage_empty_and_the_next_one_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_ledger.sql import bulk

    now = time.time_ns() // 1_000_000
    async with SQLiteAdapter(tmp_path / "l.db") as ledger:
        real = bulk._check_inserted
        calls = []

        def fail_once(inserted, ordered):  # type: ignore[no-untyped-def]
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("midway")
            real(inserted, ordered)

        monkeypatch.setattr(bulk, "_check_inserted", fail_once)
        with pytest.raises(RuntimeError):
            await ledger.append_once_many(items(now, "f"))
        assert await ledger.read_all("n", "f") == []
        assert await ledger.append_once_many(items(now, "f")) == [True] * 5
        assert len(await ledger.read_all("n", "f")) == 5
        db = await ledger._open()
        async with db.execute("SELECT count(*) FROM ledger_import.staged_events") as c:
            assert (await c.fetchone())[0] == 0


def _open_temp_files() -> list[str]:
    """SQLite's temporary files this process holds open (unix: named etilqs_*, unlinked)."""
    import os

    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "etilqs_" in target:
            found.append(target)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
async def test_a_batch_journals_its_statement_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch switches temp_store to MEMORY so that its insert's statement journal is not a
    temporary file: the switch must come before the transaction's BEGIN (a pager takes the
    journal's place when its write transaction begins; a switch inside the transaction is
    too late)."""
    import random

    from sandbox_ledger.sql import bulk

    rng = random.Random(3)
    now = 1_900_000_000_000

    def batch(tag: str, n: int) -> list:
        return [
            (
                entry(
                    E.ExecComplete,
                    now + rng.randrange(10**9),
                    sandbox_id=f"s{rng.randrange(3000)}",
                    step_index=i,
                    payload={"t": tag, "x": "y" * 100},
                ),
                1,
            )
            for i in range(n)
        ]

    async with SQLiteAdapter(tmp_path / "l.db") as ledger:
        for b in range(6):
            await ledger.append_once_many(batch(f"fill{b}", 5000))
        real = bulk._check_inserted
        seen: list[list[str]] = []

        def look(inserted, ordered):  # type: ignore[no-untyped-def]
            seen.append(_open_temp_files())
            real(inserted, ordered)

        monkeypatch.setattr(bulk, "_check_inserted", look)
        assert all(o is True for o in await ledger.append_once_many(batch("big", 20000)))
    assert seen == [[]]
