"""Every listing query of the SQL adapters is served by an index on a 100,000-event database.

The database is seeded with one bulk statement per table (5,000 sessions of 20 events), then
each query the adapter runs is EXPLAINed. SQLite: every table is searched or scanned through an
index, with no sort step (the index gives the order). PostgreSQL: the events table is only
ever read through an index, and every per-session query and every page of a listing (a
limit) reads through indexes; an unlimited listing may read the sessions table whole.
A purge batch (half of the events carry an expiry) finds its rows through the partial
indexes on expires_at, on both.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sandbox_ledger.models import SandboxStatus
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.sql.rows import ListQuery
from sandbox_ledger.sql.statements import Statements
from sandbox_ledger.sqlite import SQLiteAdapter

SESSIONS, EVENTS_PER_SESSION = 5_000, 20
NOW = 1_095  # Unix s: the seeded expiries of entries run from 1,086 to 1,105
KEY = {"name": "name-7", "sandbox_id": "sb-1007", "now": NOW}

LISTINGS = [
    ListQuery(name, status, before, limit)
    for name in (None, "name-7")
    for status in (None, SandboxStatus.Running, SandboxStatus.Completed)
    for before in (None, 1_002_500)
    for limit in (None, 50)
]
# A later page: the cursor of the 1,500th newest session (a page reads from there on, in the
# index's order, and stops after its limit).
LISTINGS += [
    ListQuery(name, status, before, 50, (1_003_500, 3_500))
    for name in (None, "name-7")
    for status in (None, SandboxStatus.Running)
    for before in (None, 1_004_000)
]


def _ids(listing: ListQuery) -> str:
    after = "" if listing.after is None else f",after={listing.after[1]}"
    return (
        f"name={listing.name},status={listing.status},before={listing.before},limit={listing.limit}"
        + after
    )


# -- SQLite ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import asyncio

    path = tmp_path_factory.mktemp("indexes") / "big.db"

    async def create() -> None:
        async with SQLiteAdapter(path) as adapter:
            await adapter.list_environments()

    asyncio.run(create())
    with sqlite3.connect(path) as db:
        db.execute(
            """
            WITH RECURSIVE i(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM i WHERE x < ?)
            INSERT INTO ledger_sessions (name, sandbox_id, started_at, completed_at, status,
                                         exec_count)
            SELECT 'name-' || (x % 50), 'sb-' || x, 1000000 + x,
                   CASE WHEN x % 3 = 0 THEN 1000000 + x + 10 END,
                   CASE WHEN x % 3 = 0 THEN 'completed' ELSE 'running' END, 18
            FROM i
            """,
            (SESSIONS,),
        )
        db.execute(
            """
            WITH RECURSIVE j(y) AS (SELECT 0 UNION ALL SELECT y + 1 FROM j WHERE y < ?)
            INSERT INTO ledger_events (session_id, ts, step_index, event, payload)
            SELECT s.id, s.started_at + y, y,
                   CASE WHEN y = 0 THEN 'sandbox.created'
                        WHEN y % 7 = 0 THEN 'sandbox.checkpoint_created'
                        ELSE 'exec.complete' END,
                   '{"snapshotId":"x"}'
            FROM ledger_sessions AS s, j
            """,
            (EVENTS_PER_SESSION - 1,),
        )
        db.execute(_SEED_EXPIRY.format(schema="main"))
        db.execute(_SEED_SESSION_EXPIRY.format(schema="main"))
        db.execute("ANALYZE")
        assert db.execute("SELECT count(*) FROM ledger_events").fetchone() == (100_000,)
    return path


# Half of the sessions were written under a retention; some of those have expired by NOW.
_SEED_EXPIRY = """
UPDATE {schema}.ledger_events SET expires_at = ts / 1000 + 86 + (session_id % 40) / 2
WHERE session_id % 2 = 0
"""
_SEED_SESSION_EXPIRY = """
UPDATE {schema}.ledger_sessions SET expires_at = started_at / 1000 + 106,
       summary_expires_at = started_at / 1000 + 106
WHERE id % 2 = 0
"""


def _sqlite_plan(path: Path, sql: str, params: Any) -> list[str]:
    with sqlite3.connect(path) as db:
        return [row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", params)]


def _assert_sqlite_indexed(plan: list[str]) -> None:
    for step in plan:
        if step.startswith(("SCAN", "SEARCH")):
            assert "USING" in step and ("INDEX" in step or "PRIMARY KEY" in step), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan


def _queries(q: Statements) -> list[tuple[str, str, Any]]:
    """Each query the adapter runs, with its parameters, in one dialect's spelling."""
    purge = {"now": NOW, "limit": 1000}
    cases: list[tuple[str, str, Any]] = [
        ("read_all", q.read_all, KEY),
        ("list_checkpoints", q.checkpoints, KEY),
        ("last_checkpoint", q.last_checkpoint, KEY),
        ("get_sandbox_details", q.details, KEY),
        ("list_environments", q.list_environments, ()),
        ("purge_expired entries", q.purge_events, purge),
        ("purge_expired sessions", q.purge_sessions, purge),
    ]
    for listing in LISTINGS:
        sql, params = q.list_sessions(listing, NOW)
        cases.append((_ids(listing), sql, params))
    return cases


@pytest.mark.parametrize(
    ("what", "sql", "params"),
    _queries(SQLiteAdapter(":memory:").queries),
    ids=lambda v: v if isinstance(v, str) and len(v) < 80 else "",
)
def test_sqlite_query_uses_an_index(sqlite_db: Path, what: str, sql: str, params: Any) -> None:
    plan = _sqlite_plan(sqlite_db, sql, params)
    _assert_sqlite_indexed(plan)
    if what.startswith("purge_expired"):
        table = "ledger_events" if what.endswith("entries") else "ledger_sessions"
        index = re.compile(rf"USING (COVERING )?INDEX {table}_expires \(expires_at<\?\)")
        assert any(index.search(step) for step in plan), plan


def test_sqlite_import_batch_inserts_from_its_stage_through_the_session_key(
    sqlite_db: Path,
) -> None:
    """An import batch's one insert reads its stage in order (the outer loop: no sort for
    the ORDER BY) and finds each entry's session through the session key's index."""
    from sandbox_ledger.sqlite.queries import STAGE, STAGED_EVENTS

    q = SQLiteAdapter(":memory:").queries
    assert q.insert_staged_events is not None
    with sqlite3.connect(sqlite_db) as db:
        db.execute(f"ATTACH DATABASE ':memory:' AS {STAGE}")
        db.execute(STAGED_EVENTS)
        plan = [row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {q.insert_staged_events}")]
    assert plan[0] == "SCAN k", plan  # the stage, whole: it is the batch
    session = [step for step in plan if step.startswith("SEARCH s ")]
    assert session and "(name=? AND sandbox_id=?)" in session[0], plan
    _assert_sqlite_indexed(plan[1:])


# -- PostgreSQL -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_big(postgres_dsn: str) -> tuple[str, str]:
    seed_postgres(postgres_dsn, "explain_100k")
    return postgres_dsn, "explain_100k"


def seed_postgres(postgres_dsn: str, schema: str) -> None:
    import asyncio

    async def create() -> None:
        async with PostgresAdapter(postgres_dsn, schema=schema) as adapter:
            await adapter.list_environments()

    asyncio.run(create())
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            f"""
            INSERT INTO {schema}.ledger_sessions (name, sandbox_id, started_at, completed_at,
                                                  status, exec_count)
            SELECT 'name-' || (x %% 50), 'sb-' || x, 1000000 + x,
                   CASE WHEN x %% 3 = 0 THEN 1000000 + x + 10 END,
                   CASE WHEN x %% 3 = 0 THEN 'completed' ELSE 'running' END, 18
            FROM generate_series(1, %s) AS x
            """,
            (SESSIONS,),
        )
        conn.execute(
            f"""
            INSERT INTO {schema}.ledger_events (session_id, ts, step_index, event, payload,
                                                append_key)
            SELECT s.id, s.started_at + y, y,
                   CASE WHEN y = 0 THEN 'sandbox.created'
                        WHEN y %% 7 = 0 THEN 'sandbox.checkpoint_created'
                        ELSE 'exec.complete' END,
                   '{{"snapshotId":"x"}}', s.id || '-' || y
            FROM {schema}.ledger_sessions AS s, generate_series(0, %s) AS y
            """,
            (EVENTS_PER_SESSION - 1,),
        )
        conn.execute(_SEED_EXPIRY.format(schema=schema))
        conn.execute(_SEED_SESSION_EXPIRY.format(schema=schema))
        conn.execute(f"ANALYZE {schema}.ledger_sessions")
        conn.execute(f"ANALYZE {schema}.ledger_events")
        [(count,)] = conn.execute(f"SELECT count(*) FROM {schema}.ledger_events").fetchall()
        assert count == 100_000


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _nodes(child)
    return out


@pytest.mark.parametrize(
    ("what", "sql", "params"),
    _queries(PostgresAdapter("postgresql://unused", schema="explain_100k").queries),
    ids=lambda v: v if isinstance(v, str) and len(v) < 80 else "",
)
def test_postgres_query_uses_an_index(
    pg_big: tuple[str, str], what: str, sql: str, params: Any
) -> None:
    dsn, _ = pg_big
    with psycopg.connect(dsn, autocommit=True) as conn:
        [(plan,)] = conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchall()
    text = json.dumps(plan, indent=1)
    scans = [
        n
        for n in _nodes(plan[0]["Plan"])
        if "Relation Name" in n and n["Node Type"] != "ModifyTable"  # a DELETE's target
    ]
    assert scans, text
    index_kinds = {"Index Scan", "Index Only Scan", "Bitmap Heap Scan"}
    for scan in scans:
        if scan["Relation Name"] == "ledger_events":
            assert scan["Node Type"] in index_kinds, text
    if what.startswith("purge_expired"):
        table = "ledger_events" if what.endswith("entries") else "ledger_sessions"
        used = {n.get("Index Name") for n in _nodes(plan[0]["Plan"])}
        assert f"{table}_expires" in used, text
    if "after=" in what:
        # A later page starts where the cursor points: its bound is an index condition, not a
        # filter over every newer session read from the top of the index.
        conds = [n.get("Index Cond", "") for n in _nodes(plan[0]["Plan"])]
        assert any("started_at <=" in c for c in conds), text
    if "limit=None" in what and what.startswith("name="):
        # A listing without a limit returns a large share of the sessions: the planner may
        # read the (small) sessions table whole; the events table is never touched.
        assert all(s["Relation Name"] == "ledger_sessions" for s in scans), text
    else:
        assert all(s["Node Type"] in index_kinds for s in scans), text


def _batch_statements(q: Statements, size: int) -> list[tuple[str, str, Any]]:
    """An import batch's statements that take arrays (PostgreSQL), over ``size`` sessions of
    the seeded database (the last one unknown) and one entry each."""
    names = [f"name-{x % 50}" for x in range(1, size)] + ["name-0"]
    ids = [f"sb-{x}" for x in range(1, size)] + ["sb-unknown"]
    assert q.stored_claims and q.stored_entries_of and q.visible_entries_of
    assert q.insert_keyed_events and q.fold_sessions
    arrays = {
        "name": names,
        "sandbox_id": ids,
        "ts": [2_000_000] * size,
        "ts_s": [2_000] * size,
        "step_index": [0] * size,
        "branch": [None] * size,
        "event": ["exec.complete"] * size,
        "payload": [None] * size,
        "error": [None] * size,
        "extra": [None] * size,
        "append_key": [f"new-{x}" for x in range(size)],
    }
    return [
        ("stored_claims", q.stored_claims, {"keys": [f"{x}-3" for x in range(1, size + 1)]}),
        ("stored_entries_of", q.stored_entries_of, {"name": names, "sandbox_id": ids}),
        (
            "visible_entries_of",
            q.visible_entries_of,
            {"name": names, "sandbox_id": ids, "now": NOW},
        ),
        ("insert_keyed_events", q.insert_keyed_events, arrays),
    ]


@pytest.mark.parametrize("size", [10, 2_000])
def test_postgres_import_batches_read_entries_only_through_indexes(
    pg_big: tuple[str, str], size: int
) -> None:
    """An import batch's reads (its claims, the stored entries of its sessions, its sessions'
    ids) take arrays whatever the batch's size; as for every query here, the events table is
    read only through an index (the claims through the unique append key's), while the
    planner may read the sessions table whole for a batch that is a large share of it."""
    dsn, schema = pg_big
    queries = PostgresAdapter("postgresql://unused", schema=schema).queries
    kinds = {"Index Scan", "Index Only Scan", "Bitmap Heap Scan"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for what, sql, params in _batch_statements(queries, size):
            [(plan,)] = conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchall()
            nodes = _nodes(plan[0]["Plan"])
            scans = [n for n in nodes if "Relation Name" in n and n["Node Type"] != "ModifyTable"]
            assert scans, (what, plan)
            events = [n for n in scans if n["Relation Name"] == "ledger_events"]
            assert all(n["Node Type"] in kinds for n in events), (what, plan)
            if what == "stored_claims":
                used = {n.get("Index Name") for n in nodes}
                assert "ledger_events_append_key" in used, plan
