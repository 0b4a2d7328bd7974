"""The operator's first hour (issue 25), as real processes: what the process does with its
exit code, its files, its signals and its stdout is the behaviour under test."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandbox_ledger._import_stream import BATCH_ENTRIES

if TYPE_CHECKING:
    from collections.abc import Callable

COMMAND = Path(sys.executable).parent / "sandbox-ledger"
ROOT = Path(__file__).resolve().parents[2]


def bare_env(**extra: str) -> dict[str, str]:
    """A shell with AWS credentials and a region but no table or store configured."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SANDBOX_LEDGER_", "AWS_", "PG"))
    }
    return {
        **env,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        **extra,
    }


def run(
    argv: list[str], env: dict[str, str], *, cwd: Path | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COMMAND), *argv],
        env=env,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# -- 1. no throwaway default but the demo --------------------------------------------------

EVERY_COMMAND_BUT_DEMO_AND_LOCAL = [
    ["ls"],
    ["show", "job", "sb-1"],
    ["checkpoints", "job", "sb-1"],
    ["envs"],
    ["rm", "job", "sb-1", "--yes"],
    ["export"],
    ["export", "-o", "backup.jsonl"],
    ["import", "-"],
    ["table", "create"],
    ["resources", "ls"],
    ["resources", "show", "0b7f6f4e-2f7a-4c55-9a59-3f1d7c2f8e10"],
    ["resources", "sweep"],
    ["resources", "sweep", "--dry-run"],
    ["resources", "import", "records"],
    ["resources", "export", "out"],
]


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


# -- 4. sandbox-ledger local ----------------------------------------------------------------


class Local:
    """``sandbox-ledger local`` as a child process, with the environment its lines set."""

    def __init__(self, *argv: str, cwd: Path) -> None:
        self.process = subprocess.Popen(
            [str(COMMAND), "local", "--port", "0", *argv],
            env=bare_env(),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.lines: list[str] = []
        while not (line := self.process.stdout.readline()).startswith("export SANDBOX_LEDGER"):
            assert line, self.process.stderr.read() if self.process.stderr else ""
            self.lines.append(line.rstrip("\n"))
        self.lines.append(line.rstrip("\n"))

    def env(self) -> dict[str, str]:
        """A bare shell after pasting the lines: only what they set."""
        shell = subprocess.run(
            ["bash", "-c", "\n".join([*self.lines, "env -0"])],
            env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")},
            capture_output=True,
            text=True,
            check=True,
        )
        return dict(item.split("=", 1) for item in shell.stdout.split("\0") if item)

    def stop(self, number: int = signal.SIGTERM) -> tuple[int, str]:
        self.process.send_signal(number)
        _, stderr = self.process.communicate(timeout=30)
        return self.process.returncode, stderr


def test_local_serves_until_a_signal_and_keeps_its_data(tmp_path: Path) -> None:
    from resources.resource_fixtures import record
    from sandbox_ledger.resources.files import record_file_text

    records = tmp_path / "records"
    records.mkdir()
    kept = record()
    (records / f"{kept.id}.json").write_text(record_file_text(kept))
    server = Local("--data", "dev.jsonl", "--save-every", "0.5", cwd=tmp_path)
    env = server.env()
    assert env["SANDBOX_LEDGER_TABLE"] == "sandbox-ledger" and "AWS_PROFILE" not in env
    imported = run(["import", str(ROOT / "examples" / "ledger.jsonl")], env)
    assert imported.returncode == 0, imported.stderr
    loaded = run(["resources", "import", str(records)], env)
    assert loaded.returncode == 0, loaded.stderr
    # The table has a complete descriptor: the sweeper runs with no flags.
    swept = run(["resources", "sweep", "--dry-run"], env)
    assert swept.returncode == 0, swept.stderr
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    assert "SIGTERM: stopped; saved 6 entries" in stderr and "1 resource record(s)" in stderr

    again = Local("--data", "dev.jsonl", cwd=tmp_path)
    env = again.env()
    listed = run(["ls", "--json"], env)
    assert listed.returncode == 0, (listed.stderr, again.process.poll())
    assert len(json.loads(listed.stdout)["sessions"]) == 2
    assert run(["resources", "show", kept.id], env).returncode == 0
    code, stderr = again.stop(signal.SIGINT)
    assert code == 0 and "SIGINT: stopped" in stderr


def test_local_killed_loses_at_most_the_last_seconds_never_the_file(tmp_path: Path) -> None:
    server = Local("--data", "dev.jsonl", "--save-every", "0.5", cwd=tmp_path)
    env = server.env()
    assert run(["import", str(ROOT / "examples" / "ledger.jsonl")], env).returncode == 0
    data = tmp_path / "dev.jsonl"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (data.exists() and data.read_text().count("\n") == 6):
        time.sleep(0.1)  # saved within the interval
    server.process.kill()
    server.process.wait()
    assert len((tmp_path / "dev.jsonl").read_text().splitlines()) == 6
    assert [p.name for p in tmp_path.iterdir()] == ["dev.jsonl"]  # no temporary file left


def test_the_readme_library_sample_runs_with_what_local_prints(tmp_path: Path) -> None:
    """The README says: run `sandbox-ledger local` and paste its lines; nothing else set."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [sample] = [
        b
        for b in re.findall(r"```python\n(.*?)```", readme, re.S)
        if "async with DynamoDBAdapter(" in b
    ]
    server = Local(cwd=tmp_path)
    try:
        done = subprocess.run(
            [sys.executable, "-c", sample],
            env=server.env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert "('build', 'sb-1', 'running')" in done.stdout


def test_the_cli_extra_brings_sqlite_support() -> None:
    """docs/cli.md's examples use sqlite:///: the `make demo` environment (the cli extra)
    must run them."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert "sandbox-ledger-dynamodb[sqlite]" in extras["cli"]
    assert any(r.startswith("aiosqlite") for r in extras["sqlite"])


def test_local_on_a_taken_port_says_so_in_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run(["local", "--port", str(port)], bare_env(), cwd=tmp_path)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert f"127.0.0.1:{port}" in line and "--port N" in line


# -- 5. fast, quiet failures ------------------------------------------------------------------


def closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again: connections are refused


@pytest.mark.parametrize("argv", EVERY_COMMAND_BUT_DEMO_AND_LOCAL, ids=" ".join)
def test_an_unreachable_dynamodb_fails_fast_in_one_line(argv: list[str], tmp_path: Path) -> None:
    from resources.resource_fixtures import record
    from sandbox_ledger.resources.files import record_file_text

    (tmp_path / "records").mkdir()
    one = record()
    (tmp_path / "records" / f"{one.id}.json").write_text(record_file_text(one))
    endpoint = f"http://127.0.0.1:{closed_port()}"
    started = time.monotonic()
    done = run(["--table", "ledger", "--endpoint-url", endpoint, *argv], bare_env(), cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert endpoint in line
    assert elapsed < 10


@pytest.mark.parametrize("argv", [["ls"], ["import", str(ROOT / "examples" / "ledger.jsonl")]])
def test_a_dead_postgres_fails_fast_in_one_line(argv: list[str]) -> None:
    store = f"postgresql://ledger@127.0.0.1:{closed_port()}/ledger"
    started = time.monotonic()
    done = run(["--store", store, *argv], bare_env())
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()  # no pool warnings
    assert store.split("/ledger")[0] in line
    assert elapsed < 10


# -- 6. Ctrl-C and SIGTERM ----------------------------------------------------------------------


def big_file(path: Path, sessions: int = 60, each: int = 100) -> Path:
    with path.open("w") as out:
        for s in range(sessions):
            for i in range(each):
                line = {"ts": 1796119200000 + i, "name": "job", "sandboxId": f"sb-{s}"}
                out.write(json.dumps({**line, "stepIndex": i, "event": "exec.complete"}) + "\n")
    return path


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def stored(db: Path) -> int:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM ledger_events").fetchone()[0])
    except sqlite3.OperationalError:
        return 0  # not created yet


@pytest.mark.parametrize(("number", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_import_says_how_far_it_got_and_resumes(
    number: int, code: int, tmp_path: Path
) -> None:
    # 60 batches: the signal lands while batches are still being written, however loaded
    # the machine (about 3 s of import on an idle one; the signal follows the first batch).
    source = big_file(tmp_path / "big.jsonl", sessions=60 * BATCH_ENTRIES // 100)
    lines = 60 * BATCH_ENTRIES
    db = tmp_path / "ledger.db"
    argv = [str(COMMAND), "--store", f"sqlite:///{db}", "import", str(source)]
    process = subprocess.Popen(argv, env=bare_env(), stderr=subprocess.PIPE, text=True)
    wait_for(lambda: stored(db) >= BATCH_ENTRIES, "the first batch")
    process.send_signal(number)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    [line] = stderr.splitlines() if len(stderr.splitlines()) == 1 else [stderr]
    name = signal.Signals(number).name
    found = re.fullmatch(
        rf"interrupted by {name}: (\d+) line\(s\) read; written so far: (\d+) new, (\d+) "
        r"already present, 0 expired, 0 failed; re-running the same import resumes without "
        r"duplicates \(what is stored is recognised, not written again\)",
        line,
    )
    assert found, line
    read, new, present = (int(x) for x in found.groups())
    assert present == 0 and BATCH_ENTRIES <= new <= read < lines
    kept = stored(db)
    assert new <= kept <= new + BATCH_ENTRIES  # a batch may commit as the signal arrives
    again = run(["--store", f"sqlite:///{db}", "import", str(source), "--json"], bare_env())
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["new"] + report["present"] == lines and report["present"] == kept
    assert stored(db) == lines  # no duplicates


def test_an_interrupted_export_leaves_the_file_and_says_so(tmp_path: Path) -> None:
    source = big_file(tmp_path / "big.jsonl", sessions=30)
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run(["--store", store, "import", str(source)], bare_env()).returncode == 0
    backup = tmp_path / "backup.jsonl"
    backup.write_text("old\n")
    argv = [str(COMMAND), "--store", store, "export", "-o", str(backup)]
    process = subprocess.Popen(argv, env=bare_env(), stderr=subprocess.PIPE, text=True)
    wait_for(lambda: any(tmp_path.glob(".backup.jsonl.*.partial")), "the temporary file")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr
    assert stderr.splitlines() == [
        "interrupted by SIGTERM: nothing was changed; an -o FILE is left as it was (stdout "
        "may hold part of the export)"
    ]
    assert backup.read_text() == "old\n"
    assert not any(tmp_path.glob(".backup.jsonl.*"))


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
    process = subprocess.Popen(
        [str(COMMAND), *argv],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env={**bare_env(), "TERM": "xterm", "COLUMNS": "200"},
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
