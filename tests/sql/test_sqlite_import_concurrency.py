"""Concurrent SQLite importers (processes) of one file, racing appends."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger.sqlite import SQLiteAdapter

E = LedgerEvent
NOW = 1_900_000_000_000


def workload() -> list[LedgerEntry]:
    out = []
    for s in range(40):
        sid = f"s{s:02d}"
        out.append(
            LedgerEntry(
                ts=NOW + s * 10 + 5, name="n", sandbox_id=sid, step_index=-1, event=E.SandboxCreated
            )
        )
        for i in range(6):
            out.append(
                LedgerEntry(
                    ts=NOW + s * 10 + i,
                    name="n",
                    sandbox_id=sid,
                    step_index=i,
                    event=E.ExecComplete if i % 2 else E.ExecStarted,
                )
            )
        out.append(
            LedgerEntry(
                ts=NOW + s * 10 + 3, name="n", sandbox_id=sid, step_index=-1, event=E.SandboxClosed
            )
        )
    return out


SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[3])
    from test_sqlite_import_concurrency import workload
    from sandbox_ledger.sqlite import SQLiteAdapter
    async def main():
        entries = workload()
        if sys.argv[2] == "reverse":
            entries = entries[::-1]
        async with SQLiteAdapter(sys.argv[1]) as a:
            if sys.argv[2] == "append":
                for e in entries:
                    await a.append(e)
                return
            for i in range(0, len(entries), 37):
                await a.append_once_many([(e, 1) for e in entries[i:i + 37]])
    asyncio.run(main())
    """
)


def state(path: Path) -> tuple[list, list]:
    with sqlite3.connect(path) as db:
        s = list(
            db.execute(
                "SELECT sandbox_id, started_at, completed_at, status, exec_count "
                "FROM ledger_sessions ORDER BY sandbox_id"
            )
        )
        e = list(
            db.execute(
                "SELECT s.sandbox_id, e.ts, e.step_index, e.event FROM ledger_events e "
                "JOIN ledger_sessions s ON s.id = e.session_id ORDER BY 1, 2, 3, 4"
            )
        )
        return s, e


async def _replay(path: Path) -> None:
    async with SQLiteAdapter(path) as a:
        await a.append(workload()[0])  # as _init: a plain append is not an import's claim
        for e in workload():
            await a.append(e)


def test_processes_importing_one_file_store_each_entry_once(tmp_path: Path) -> None:
    target = tmp_path / "t.db"
    asyncio.run(_init(target))
    here = str(Path(__file__).parent)
    procs = [
        subprocess.Popen([sys.executable, "-c", SCRIPT, str(target), mode, here])
        for mode in ("forward", "forward", "reverse", "forward")
    ]
    assert [p.wait(timeout=240) for p in procs] == [0, 0, 0, 0]
    asyncio.run(_replay(tmp_path / "r.db"))
    got, want = state(target), state(tmp_path / "r.db")
    assert got[0] == want[0]
    assert got[1] == want[1]


async def _init(path: Path) -> None:
    async with SQLiteAdapter(path) as a:
        await a.append(workload()[0])  # a session the target holds already (with a summary)


def extra() -> list[LedgerEntry]:
    return [
        LedgerEntry(
            ts=NOW + s * 10 + 7,
            name="n",
            sandbox_id=f"s{s:02d}",
            step_index=99,
            event=E.ExecComplete,
            payload={"x": s},
        )
        for s in range(40)
    ]


def test_adapters_in_one_process_import_and_append_at_once(tmp_path: Path) -> None:
    target = tmp_path / "t.db"

    async def importer(order: list[LedgerEntry], size: int) -> None:
        async with SQLiteAdapter(target) as a:
            for i in range(0, len(order), size):
                await a.append_once_many([(e, 1) for e in order[i : i + size]])

    async def appender() -> None:
        async with SQLiteAdapter(target) as a:
            for e in extra():
                await a.append(e)
                await asyncio.sleep(0)

    async def main() -> None:
        entries = workload()
        await asyncio.gather(
            importer(entries, 50), importer(entries[::-1], 13), appender(), importer(entries, 1000)
        )

    async def replay() -> None:
        async with SQLiteAdapter(tmp_path / "r.db") as a:
            for e in workload() + extra():
                await a.append(e)

    asyncio.run(main())
    asyncio.run(replay())
    got, want = state(target), state(tmp_path / "r.db")
    assert got == want
