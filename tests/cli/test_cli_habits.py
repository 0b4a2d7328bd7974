"""AWS CLI habits (issue 25), as real processes: output formats on a terminal and a pipe,
--query, errors in flags, shell hints, and an older schema migrated by `table create`."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from .processes import COMMAND, ROOT, bare_env, popen, run

# -- 7. AWS CLI habits --------------------------------------------------------------------------


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = run(["--store", url, "import", str(ROOT / "examples" / "ledger.jsonl")], bare_env())
    assert done.returncode == 0, done.stderr
    return url


def stdout_on_a_terminal(argv: list[str]) -> tuple[int, str]:
    """Run with stdout on a pseudo-terminal: exit code, what the terminal showed."""
    import pty
    import select

    leader, follower = pty.openpty()
    process = popen(
        argv,
        {**bare_env(), "TERM": "xterm", "COLUMNS": "200"},
        stdout=follower,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    os.close(follower)
    seen = bytearray()
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        assert ready, "no output for 60 s"
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    return process.wait(timeout=60), seen.decode("utf-8", "replace")


def test_a_table_on_a_terminal_and_tab_separated_text_when_piped(sqlite_store: str) -> None:
    code, shown = stdout_on_a_terminal(["--store", sqlite_store, "ls"])
    assert code == 0 and "┏━" in shown and "2 session(s)" in shown
    piped = run(["--store", sqlite_store, "ls"], bare_env())
    assert piped.returncode == 0
    assert [line.split("\t")[:3] for line in piped.stdout.splitlines()] == [
        ["build", "sb-2", "running"],
        ["build", "sb-1", "completed"],
    ]
    assert piped.stderr.splitlines() == ["2 session(s)"]  # summaries off stdout
    code, asked = stdout_on_a_terminal(["--store", sqlite_store, "ls", "--output", "text"])
    assert code == 0 and "┃" not in asked and "build\tsb-2\trunning" in asked
    as_table = run(["--store", sqlite_store, "ls", "--output", "table"], bare_env())
    assert "┃ name" in as_table.stdout


def test_query_selects_from_the_json_shape(sqlite_store: str) -> None:
    base = ["--store", sqlite_store]
    ids = run([*base, "ls", "--query", "sessions[].sandboxId", "--output", "json"], bare_env())
    assert json.loads(ids.stdout) == ["sb-2", "sb-1"]
    text = run([*base, "ls", "--query", "sessions[?status=='running'].sandboxId"], bare_env())
    assert text.stdout == "sb-2\n"
    tags = run([*base, "checkpoints", "build", "sb-1", "--query", "[0].tag", "--json"], bare_env())
    assert json.loads(tags.stdout) == "after-tests"
    bad = run([*base, "ls", "--query", "sessions[?"], bare_env())
    assert bad.returncode == 2
    [line] = bad.stderr.splitlines()
    assert line.startswith("error: --query: 'sessions[?' is not a JMESPath expression")


def test_checkpoints_and_envs_of_something_missing_exit_3(sqlite_store: str) -> None:
    base = ["--store", sqlite_store]
    missing = run([*base, "checkpoints", "build", "sb-9"], bare_env())
    assert missing.returncode == 3 and "no session build/sb-9" in missing.stderr
    none = run([*base, "envs", "nope"], bare_env())
    assert none.returncode == 3 and "no environment record nope" in none.stderr


def test_errors_speak_in_flags_and_name_what_is_there(sqlite_store: str, tmp_path: Path) -> None:
    no_region = {k: v for k, v in bare_env(HOME=str(tmp_path)).items() if k != "AWS_REGION"}
    region = run(["--table", "ledger", "ls"], no_region)
    assert region.returncode == 1
    [line] = region.stderr.splitlines()
    assert "--region REGION" in line and "region_name" not in line
    huge = run(["--store", sqlite_store, "ls", "--before", "99" * 10], bare_env())
    assert huge.returncode == 2
    [line] = huge.stderr.splitlines()
    assert line.startswith("error: --before: ") and "pydantic" not in line
    for argv, what in (
        (["resources", "export", "/etc/passwd"], "/etc/passwd is a file, not a directory"),
        (["resources", "import", "/etc/passwd"], "/etc/passwd is a file, not a directory"),
        (["import", str(ROOT / "examples")], "examples: is a directory, not a file"),
    ):
        done = run(["--table", "ledger", "--endpoint-url", "http://127.0.0.1:9", *argv], bare_env())
        assert done.returncode == 2, done.stderr
        assert what in done.stderr and "Errno" not in done.stderr


def test_shell_hints_are_quoted_for_a_shell() -> None:
    from sandbox_ledger.cli.context import Target

    odd = Target(table="my table's", endpoint_url=None, region="us-east-1", profile=None)
    assert odd.command("table create") == "sandbox-ledger --table 'my table'\"'\"'s' table create"
    store = Target(
        table=None, endpoint_url=None, region=None, profile=None, store="sqlite:///a b.db"
    )
    assert store.command("ls") == "sandbox-ledger --store 'sqlite:///a b.db' ls"


def test_a_printed_hint_runs_as_printed_in_a_shell(tmp_path: Path) -> None:
    """The hint of a missing session, for a store path and a name that need quoting, pasted
    into a shell, runs the command it names (it was only unit-tested)."""
    folder = tmp_path / "my dir's"
    folder.mkdir()
    store = f"sqlite:///{folder / 'x.db'}"
    loaded = run(["--store", store, "import", str(ROOT / "examples" / "ledger.jsonl")], bare_env())
    assert loaded.returncode == 0, loaded.stderr
    missing = run(["--store", store, "show", "my job; rm -rf", "x"], bare_env())
    assert missing.returncode == 3
    hint = re.search(r"`(sandbox-ledger [^`]*)`", missing.stderr)
    assert hint, missing.stderr
    shell = f"{shlex.quote(str(COMMAND))}{hint.group(1).removeprefix('sandbox-ledger')}"
    pasted = subprocess.run(
        ["/bin/sh", "-c", shell], env=bare_env(), capture_output=True, text=True, timeout=60
    )
    assert pasted.returncode == 0, pasted.stderr
    assert pasted.stderr.splitlines() == ["0 session(s)"]  # no session of that name, and no rm
    assert folder.is_dir() and (folder / "x.db").is_file()


def test_export_query_selects_from_each_line(sqlite_store: str, tmp_path: Path) -> None:
    base = ["--store", sqlite_store, "export"]
    everything = run(base, bare_env()).stdout.splitlines()
    done = run([*base, "--query", "event == 'exec.complete' && @"], bare_env())
    assert done.returncode == 0, done.stderr
    complete = [line for line in everything if json.loads(line).get("event") == "exec.complete"]
    assert complete and done.stdout.splitlines() == complete  # as exported, byte for byte
    assert done.stderr.rstrip().endswith(f"; --query kept {len(complete)} line(s)")
    ids = run([*base, "--query", "sandboxId", "-o", str(tmp_path / "ids.jsonl")], bare_env())
    assert ids.returncode == 0, ids.stderr
    expected = [json.loads(line).get("sandboxId") for line in everything]
    written = (tmp_path / "ids.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in written] == [x for x in expected if x is not None]
    # A bad expression is refused before anything is written: a backup keeps its contents.
    backup = tmp_path / "backup.jsonl"
    backup.write_text("old\n")
    bad = run([*base, "--query", "sessions[?", "-o", str(backup)], bare_env())
    assert bad.returncode == 2 and backup.read_text() == "old\n"
    [line] = bad.stderr.splitlines()
    assert line.startswith("error: --query: 'sessions[?' is not a JMESPath expression")


DATA_COMMANDS = [
    ["ls"],
    ["show"],
    ["checkpoints"],
    ["envs"],
    ["rm"],
    ["import"],
    ["table", "create"],
    ["demo"],
    ["resources", "ls"],
    ["resources", "show"],
    ["resources", "sweep"],
    ["resources", "import"],
    ["resources", "export"],
]


@pytest.mark.parametrize("path", DATA_COMMANDS, ids=" ".join)
def test_every_command_that_prints_data_takes_output_and_query(path: list[str]) -> None:
    from typer.testing import CliRunner

    from sandbox_ledger.cli import app

    shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert re.search(r"--output [<[]json\|text\|table[>\]]", shown.output), shown.output
    assert "--query" in shown.output and "--json" in shown.output


def test_export_query_refuses_what_json_cannot_carry_and_names_the_line(
    sqlite_store: str, tmp_path: Path
) -> None:
    """Fourth red team: a query giving Infinity wrote lines that are not JSON (exit 0); one
    failing on a line's values was an internal error (exit 1) quoting the whole entry."""
    backup = tmp_path / "backup.jsonl"
    backup.write_text("old\n")
    for query, said in (
        ("`1e999`", "line 1"),
        ("abs(name)", "line 1: In function abs(), invalid type"),
    ):
        done = run(
            ["--store", sqlite_store, "export", "--query", query, "-o", str(backup)], bare_env()
        )
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith(f"error: --query: {query!r} fails on exported {said}"), line
        assert len(line) < 400 and backup.read_text() == "old\n"


def test_a_database_of_an_older_schema_is_migrated_by_table_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fourth red team: after an upgrade every read command failed on an older SQLite
    database with a message in library terms, and `table create`, which docs/cli.md said
    migrates a store, refused SQL stores (exit 2)."""
    import asyncio
    import sqlite3

    from sandbox_ledger import sqlite as sqlite_module
    from sandbox_ledger.sqlite import SQLiteAdapter

    db = tmp_path / "old.db"
    monkeypatch.setattr(sqlite_module.adapter, "MIGRATIONS", sqlite_module.adapter.MIGRATIONS[:4])

    async def old_version() -> None:
        async with SQLiteAdapter(db) as old:  # schema version 4, as the last release made it
            await old.list_environments()

    asyncio.run(old_version())
    with sqlite3.connect(db) as conn:  # one session, as that release stored it
        conn.execute(
            "INSERT INTO ledger_sessions (id, name, sandbox_id, started_at) "
            "VALUES (1, 'job', 'a', 1)"
        )
        conn.execute(
            "INSERT INTO ledger_events (session_id, ts, step_index, event) "
            "VALUES (1, 1, -1, 'sandbox.created')"
        )
    store = ["--store", f"sqlite:///{db}"]
    read = run([*store, "ls"], bare_env())
    assert read.returncode == 1
    [line] = read.stderr.splitlines()
    assert "at version 4, older" in line and "sandbox-ledger --store URL table create" in line
    refused = run([*store, "table", "create", "--stale-after", "5"], bare_env())
    assert refused.returncode == 2 and "--stale-after" in refused.stderr
    done = run([*store, "table", "create", "--json"], bare_env())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "store": f"sqlite:///{db}",
        "state": "migrated",
        "migratedFrom": 4,
    }
    listed = run([*store, "ls", "--query", "sessions[].sandboxId", "--output", "json"], bare_env())
    assert json.loads(listed.stdout) == ["a"]  # migrated, the entry kept
    again = run([*store, "table", "create", "--json"], bare_env())
    assert json.loads(again.stdout)["state"] == "already current"
    fresh = run(["--store", f"sqlite:///{tmp_path / 'new.db'}", "table", "create"], bare_env())
    assert fresh.returncode == 0 and "created" in fresh.stderr + fresh.stdout
