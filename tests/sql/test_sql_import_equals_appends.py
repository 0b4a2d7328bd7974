"""An SQL import batch (the stage bound as ``row[:STAGED]``, the summary
folded in one pass) leaves the database row for row what ``append_once`` of each entry
leaves: every column of every table (keys, branches, steps, unknown fields, expiries under a
retention, the change feed), not only the columns tests/sql/test_sql_bulk_import.py reads."""

from __future__ import annotations

import random
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger.sqlite import SQLiteAdapter

E = LedgerEvent
EVENTS = [
    E.SandboxCreated,
    E.ExecStarted,
    E.ExecComplete,
    E.ExecFailed,
    E.SandboxClosed,
    E.CheckpointCreated,
    "custom.event",
]


def _entries(seed: int) -> list[tuple[LedgerEntry, int]]:
    rng = random.Random(seed)
    base = 1_700_000_000_000
    out: list[tuple[LedgerEntry, int]] = []
    for _ in range(300):
        wire: dict[str, Any] = {
            "ts": base + rng.choice([0, 999, 1000, 1001, 59_999, 60_000]) + rng.randrange(3) * 1000,
            "name": rng.choice(["a", "b"]),
            "sandboxId": rng.choice(["x", "y", "z\u00e9"]),
            "stepIndex": rng.randrange(-1, 4),
        }
        event = rng.choice(EVENTS)
        wire["event"] = event.value if isinstance(event, E) else event
        if rng.random() < 0.3:
            wire["branch"] = rng.randrange(3)
        if rng.random() < 0.3:
            wire["payload"] = {"snapshotId": f"s{rng.randrange(3)}", "k": [1, None, "x"]}
        if rng.random() < 0.2:
            wire["error"] = rng.choice(["", "boom"])
        if rng.random() < 0.2:
            wire["traceId"] = rng.choice([None, "t", {"z": 1, "a": 2}])
        out.append((LedgerEntry.model_validate(wire), rng.choice([1, 1, 2])))
    return out


def _dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table, a session named by (name, sandbox_id) rather than its id (a batch
    writes its sessions in key order: ids and seqs across sessions differ by design;
    within a session, seq order is compared), the append key without its session-id prefix,
    a change without written_at."""
    with sqlite3.connect(path) as db:
        out: dict[str, list[tuple[Any, ...]]] = {}
        out["sessions"] = list(
            db.execute(
                "SELECT name, sandbox_id, started_at, completed_at, status, exec_count, "
                "summary_expires_at, expires_at FROM ledger_sessions ORDER BY name, sandbox_id"
            )
        )
        cols = [r[1] for r in db.execute("PRAGMA table_info(ledger_events)")]
        rest = [c for c in cols if c not in ("session_id", "append_key", "seq")]
        out["events"] = list(
            db.execute(
                f"SELECT s.name, s.sandbox_id, substr(e.append_key, instr(e.append_key, ':')), "
                f"{', '.join('e.' + c for c in rest)} FROM ledger_events AS e "
                "JOIN ledger_sessions AS s ON s.id = e.session_id "
                "ORDER BY s.name, s.sandbox_id, e.seq"
            )
        )
        out["changes"] = list(
            db.execute(
                "SELECT kind, name, sandbox_id, at FROM ledger_changes "
                "ORDER BY name, sandbox_id, kind, at"
            )
        )
        return out


@pytest.mark.parametrize("retention", [None, timedelta(days=30)], ids=["forever", "30d"])
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_sqlite_batches_leave_every_row_as_append_once_does(
    seed: int, retention: timedelta | None, tmp_path: Path
) -> None:
    items = _entries(seed)
    one, many = tmp_path / "one.db", tmp_path / "many.db"
    async with SQLiteAdapter(one, retention=retention) as ledger:
        for item, n in items:
            await ledger.append_once(item, n)
    async with SQLiteAdapter(many, retention=retention) as ledger:
        for start in range(0, len(items), 37):
            await ledger.append_once_many(items[start : start + 37])
    a, b = _dump(one), _dump(many)
    assert a.keys() == b.keys()
    for table in a:
        assert b[table] == a[table], table


def _state(store: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Both dialects: sessions by key, each session's entries in seq order (the append key
    without any session prefix), the change feed's rows by session."""
    sessions = store.query(
        "SELECT name, sandbox_id, started_at, completed_at, status, exec_count, "
        "summary_expires_at, expires_at FROM ledger_sessions ORDER BY name, sandbox_id"
    )
    events = store.query(
        "SELECT s.name, s.sandbox_id, e.append_key, e.ts, e.step_index, e.branch, e.event, "
        "e.payload, e.error, e.extra, e.expires_at FROM ledger_events AS e "
        "JOIN ledger_sessions AS s ON s.id = e.session_id ORDER BY s.name, s.sandbox_id, e.seq"
    )
    events = [(n, s, k.rsplit(":", 1)[-1], *rest) for n, s, k, *rest in events]
    changes = store.query(
        "SELECT kind, name, sandbox_id, at FROM ledger_changes ORDER BY name, sandbox_id, kind, at"
    )
    return {"sessions": sessions, "events": events, "changes": changes}


@pytest.mark.parametrize("retention", [None, timedelta(days=30)], ids=["forever", "30d"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_batches_leave_every_row_as_append_once_does_both_dialects(
    kind: str, retention: timedelta | None, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from sql.sql_store import Store

    items = _entries(4)
    (tmp_path / "one").mkdir()
    (tmp_path / "many").mkdir()
    one = Store(kind, tmp_path / "one", request)
    many = Store(kind, tmp_path / "many", request)
    if kind == "postgres":
        many.schema = one.schema + "_many"
    async with one.opened(retention) as ledger:
        for item, n in items:
            await ledger.append_once(item, n)
    async with many.opened(retention) as ledger:
        for start in range(0, len(items), 41):
            await ledger.append_once_many(items[start : start + 41])
    a, b = _state(one), _state(many)
    assert len(a["events"]) > 200 and len(a["sessions"]) == 6 and a["changes"]
    for table in a:
        assert b[table] == a[table], table
