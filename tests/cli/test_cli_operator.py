"""The operator's first hour (issue 25), as real processes: no throwaway store but the demo's,
and a read never creates or changes a store."""

from __future__ import annotations

from pathlib import Path

import pytest

from .processes import EVERY_COMMAND_BUT_DEMO_AND_LOCAL, bare_env, run

# -- 1. no throwaway default but the demo --------------------------------------------------


@pytest.mark.parametrize("argv", EVERY_COMMAND_BUT_DEMO_AND_LOCAL, ids=" ".join)
def test_without_a_table_or_store_every_command_says_how_to_name_one(
    argv: list[str], tmp_path: Path
) -> None:
    backup = tmp_path / "backup.jsonl"
    backup.write_text('{"an": "old backup"}\n')
    done = run(argv, bare_env(), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    for hint in ("--table", "--store", "SANDBOX_LEDGER_TABLE", "SANDBOX_LEDGER_STORE"):
        assert hint in line
    assert "`sandbox-ledger local`" in line
    assert done.stdout == ""
    assert backup.read_text() == '{"an": "old backup"}\n'  # the backup is as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]


def test_an_export_that_finds_nothing_exits_3_and_keeps_the_file(tmp_path: Path) -> None:
    backup = tmp_path / "backup.jsonl"
    backup.write_text('{"an": "old backup"}\n')
    store = f"sqlite:///{tmp_path / 'empty.db'}"
    assert run(["--store", store, "import", "-"], bare_env(), stdin="").returncode == 0
    done = run(["--store", store, "export", "-o", str(backup)], bare_env())
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.splitlines()
    assert "nothing to export" in line and f"{backup} is unchanged" in line
    assert backup.read_text() == '{"an": "old backup"}\n'
    to_stdout = run(["--store", store, "export"], bare_env())
    assert (to_stdout.returncode, to_stdout.stdout) == (3, "")


# -- 2. read commands never create or change a store ------------------------------------------

READS = [
    ["ls"],
    ["show", "job", "sb-1"],
    ["checkpoints", "job", "sb-1"],
    ["envs"],
    ["export"],
    ["export", "--name", "job"],
]


@pytest.mark.parametrize("argv", READS, ids=" ".join)
def test_a_read_of_a_missing_sqlite_file_is_not_found_and_creates_nothing(
    argv: list[str], tmp_path: Path
) -> None:
    done = run(["--store", "sqlite:///typo.db", *argv], bare_env(), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.splitlines()
    assert "typo.db does not exist" in line and "a read never creates one" in line
    assert list(tmp_path.iterdir()) == []


def test_a_read_of_a_missing_postgres_schema_is_not_found_and_creates_nothing(
    postgres_dsn: str, pg_schema: str
) -> None:
    import psycopg

    done = run(["--store", f"{postgres_dsn}?schema={pg_schema}", "ls"], bare_env())
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.splitlines()
    assert f"postgres schema {pg_schema} holds no ledger" in line
    with psycopg.connect(postgres_dsn) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (pg_schema,))
        assert found.fetchall() == []


def test_a_read_records_no_retention(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "d.db"
    assert run(["--store", f"sqlite:///{db}", "import", "-"], bare_env()).returncode == 0
    done = run(["--store", f"sqlite:///{db}?retention_days=1", "ls", "--json"], bare_env())
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT retention_seconds FROM ledger_settings").fetchall() == [(None,)]
