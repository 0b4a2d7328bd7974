"""The CLI for scripts and people: help, version, completion, --json, exit codes, times with
their zone, closed pipes, errors that say where and what next, progress only on a terminal.
Through typer's runner, and as subprocesses where the process itself matters."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any, get_args

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from resources.resource_fixtures import observed_earlier, record
from sandbox_ledger import EnvironmentRecord, LedgerEntry, LedgerEvent
from sandbox_ledger.cli import app
from sandbox_ledger.cli.output import ExitCode, parse_time, when
from sandbox_ledger.cli.resource_commands import PhaseChoice
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.resources import SyncResourceRecordStore
from sandbox_ledger.resources.models import Phase

from .processes import COMMAND, popen, run

ROOT = Path(__file__).resolve().parents[2]
WINDOWS = ["--stale-after", "900", "--retain-failed", "0"]


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("SANDBOX_LEDGER_TABLE", "SANDBOX_LEDGER_STORE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


@pytest.fixture
def args(moto_endpoint: str, sync_table: str) -> list[str]:
    return ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]


def entry(sid: str, event: str, ts: int, step: int = -1, **kw: Any) -> LedgerEntry:
    return LedgerEntry(ts=ts, name="job", sandbox_id=sid, step_index=step, event=event, **kw)


@pytest.fixture
def ledger(
    moto_endpoint: str, sync_table: str, wait_for_indexes: Callable[[], None]
) -> SyncDynamoDBAdapter:
    """The ledger the tests read, settled: its listings show every session (index lag waited
    out)."""
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    # sb-1 started 2026-12-01T10:00:00.000Z, sb-2 one hour and 1 ms later.
    start = 1_796_119_200_000
    for sid, ts in (("sb-1", start), ("sb-2", start + 3_600_001)):
        adapter.append(entry(sid, LedgerEvent.SandboxCreated, ts))
        adapter.append(entry(sid, LedgerEvent.ExecComplete, ts + 5, step=0))
        adapter.append(
            entry(sid, LedgerEvent.CheckpointCreated, ts + 7, payload={"snapshotId": f"s-{sid}"})
        )
    adapter.append(entry("sb-1", LedgerEvent.SandboxClosed, start + 10))
    adapter.save_environment(
        EnvironmentRecord.model_validate({"name": "py", "builtAt": 5, "snapshotId": "s-py"})
    )
    wait_for_indexes()
    return adapter


def env_for(moto_endpoint: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_LEDGER_")}
    return {**env, "AWS_ENDPOINT_URL": moto_endpoint, "AWS_REGION": "us-east-1", **extra}


# --- help, version, completion -------------------------------------------------------------


def commands() -> list[tuple[list[str], Any]]:
    """Every command of the tree with its path of names (the root included)."""
    found: list[tuple[list[str], Any]] = []

    def walk(path: list[str], command: Any) -> None:
        found.append((path, command))
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk([*path, name], sub)

    walk([], get_command(app))
    return found


ENV_VARS = {
    "--table": ["SANDBOX_LEDGER_TABLE"],
    "--store": ["SANDBOX_LEDGER_STORE"],
    "--endpoint-url": ["AWS_ENDPOINT_URL"],
    "--region": ["AWS_REGION", "AWS_DEFAULT_REGION"],
    "--profile": ["AWS_PROFILE"],
}


@pytest.mark.parametrize(
    ("path", "command"), [pytest.param(p, c, id=" ".join(p) or "root") for p, c in commands()]
)
def test_every_option_shows_its_meaning_and_variable(
    runner: CliRunner, path: list[str], command: Any
) -> None:
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # help wraps lines
    assert "<bool>" not in text
    for param in command.params:
        name = param.opts[0]
        assert param.help, f"{' '.join(path)} {name}: no help"
        first_words = " ".join(param.help.split()[:3])
        assert first_words in text, f"{' '.join(path)} {name}: help not shown"
        if param.param_type_name == "option" and path == []:
            expected = ENV_VARS.get(name, [])
            envvar = [param.envvar] if isinstance(param.envvar, str) else param.envvar or []
            assert list(envvar) == expected, name
            if expected:
                assert f"env var: {', '.join(expected)}" in text, name
    if path == ["resources", "ls"]:
        assert "cleanup-failed|allocation-uncertain" in text


def test_phase_choices_are_the_seeds_phases() -> None:
    assert [p.value for p in PhaseChoice] == list(get_args(Phase))


def test_version_is_the_installed_packages(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"sandbox-ledger {version('sandbox-ledger-dynamodb')}\n"


def test_completion_is_offered_and_completes(tmp_path: Path) -> None:
    # typer detects the shell from the parent processes: under `make` that is sh, which it
    # does not support. Its own switch turns detection off, so the shell is named explicitly.
    explicit = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    shown = subprocess.run(
        [COMMAND, "--show-completion", "bash"],
        capture_output=True,
        text=True,
        timeout=60,
        env=explicit,
    )
    assert shown.returncode == 0 and "_SANDBOX_LEDGER_COMPLETE" in shown.stdout
    helped = subprocess.run([COMMAND, "--help"], capture_output=True, text=True, timeout=60)
    assert "--install-completion" in helped.stdout and "--show-completion" in helped.stdout
    env = {
        **os.environ,
        "_SANDBOX_LEDGER_COMPLETE": "complete_bash",
        "COMP_WORDS": "sandbox-ledger resources sw",
        "COMP_CWORD": "2",
    }
    done = subprocess.run([COMMAND], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["sweep"]


def test_help_loads_no_sdk_rich_or_pydantic() -> None:
    probe = (
        "import sys\n"
        "sys.argv = ['sandbox-ledger', '--help']\n"
        "from sandbox_ledger.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = {'boto3', 'botocore', 'aioboto3', 'aiobotocore', 'pydantic', 'rich', 'moto',"
        " 'asyncio', 'werkzeug', 'aws_lambda_powertools'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stderr.strip() == "[]"
    assert "Usage: sandbox-ledger" in done.stdout


# --- --json in the wire shape ----------------------------------------------------------------


def as_json(runner: CliRunner, argv: list[str], code: int = 0) -> Any:
    result = runner.invoke(app, [*argv, "--json"])
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def test_json_of_ledger_commands_is_the_wire_shape(
    runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter
) -> None:
    listed = as_json(runner, [*args, "ls"])
    assert listed == {
        "sessions": [d.wire() for d in ledger.list_all_sandbox_details()],
        "cursor": None,
    }
    assert set(listed["sessions"][1]) == {
        "name", "sandboxId", "status", "startedAt", "completedAt", "execCount"
    }  # fmt: skip
    page = as_json(runner, [*args, "ls", "--limit", "1"])
    assert [s["sandboxId"] for s in page["sessions"]] == ["sb-2"] and page["cursor"]
    rest = as_json(runner, [*args, "ls", "--limit", "1", "--cursor", page["cursor"]])
    assert [s["sandboxId"] for s in rest["sessions"]] == ["sb-1"]
    pasted = as_json(runner, [*args, "ls", "--limit", "1", "--cursor", f" {page['cursor']}\n"])
    assert pasted == rest  # a pasted line's whitespace is no part of the cursor
    assert as_json(runner, [*args, "checkpoints", "job", "sb-1"]) == [
        c.wire() for c in ledger.list_checkpoints("job", "sb-1")
    ]
    assert as_json(runner, [*args, "envs"]) == [{"name": "py", "builtAt": 5, "snapshotId": "s-py"}]
    removed = as_json(runner, [*args, "rm", "job", "sb-2", "--yes"])
    assert removed == {"name": "job", "sandboxId": "sb-2", "deleted": True}
    assert ledger.read_all("job", "sb-2") == []


def test_json_of_table_import_and_resources(
    runner: CliRunner,
    args: list[str],
    moto_endpoint: str,
    sync_table: str,
    table_name: str,
    tmp_path: Path,
    wait_for_indexes: Callable[[], None],
) -> None:
    other = ["--table", f"{table_name}-2", "--endpoint-url", moto_endpoint]
    assert as_json(runner, [*other, "table", "create"]) == {
        "table": f"{table_name}-2",
        "created": True,
        "sweep": {"eventBus": "default", "staleAfterSeconds": 900, "retainFailedSeconds": 604800},
    }
    assert as_json(runner, [*other, "table", "create"])["created"] is False
    lines = tmp_path / "in.jsonl"
    good = {"ts": 1, "name": "j", "sandboxId": "s", "stepIndex": -1, "event": "sandbox.created"}
    lines.write_text(json.dumps(good) + "\n{broken\n")
    imported = as_json(runner, [*other, "import", str(lines)], code=ExitCode.PARTIAL)
    assert imported["new"] == 1 and imported["present"] == 0
    assert [f["line"] for f in imported["failed"]] == [2]
    assert imported["environments"] == {"new": 0, "updated": 0, "present": 0, "kept": 0}

    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    stored = store.put(record(age=timedelta(hours=1)))
    stale = stored.record
    observed_earlier(store, stored, timedelta(minutes=16))  # by an earlier sweep
    wait_for_indexes()  # settled listings (index lag waited out)
    listed = as_json(runner, [*args, "resources", "ls"])
    assert listed == {"records": [stale.wire()], "unreadable": [], "cursor": None}
    assert "sandboxProvider" in listed["records"][0]
    swept = as_json(
        runner, [*args, "resources", "sweep", "--dry-run", "--event-bus", "default", *WINDOWS]
    )
    assert swept["expired"] == [stale.id] and swept["dryRun"] is True
    assert swept["eventBus"] == "default"
    exported = as_json(runner, [*args, "resources", "export", str(tmp_path / "out")])
    assert exported == {
        "directory": str(tmp_path / "out"),
        "files": [f"{stale.id}.json"],
        "unreadable": {},
    }
    again = as_json(runner, [*args, "resources", "import", str(tmp_path / "out")])
    assert again == {"written": [], "unchanged": [f"{stale.id}.json"], "failed": {}}


def test_demo_json(runner: CliRunner) -> None:
    report = as_json(runner, ["demo", "--sandboxes", "3", "--execs", "2", "--concurrency", "3"])
    assert report["operations"]["append"]["count"] == report["entries"] > 0
    assert report["operations"]["append"]["requestsPerOp"] >= 1
    assert sum(report["sessions"].values()) == 3
    assert report["sweptBy"] == "sandbox_ledger.handlers.expire_stale_resources"
    assert report["sweepClockAdvancedSeconds"] == 900
    for expired in report["expired"].values():
        assert expired["provider"] in ("docker", "vercel", "firecracker")
        assert expired["phase"] in ("ready", "cleanup-failed") and expired["reason"]


# --- exit codes --------------------------------------------------------------------------------


def documented_exit_codes() -> dict[int, str]:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    return {int(code): name for code, name in re.findall(r"^\| (\d+) \| `(\w+)` \|", text, re.M)}


def test_exit_codes_are_documented() -> None:
    assert documented_exit_codes() == {int(c): c.name for c in ExitCode}


def test_each_exit_code(
    runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter, tmp_path: Path
) -> None:
    assert runner.invoke(app, [*args, "ls"]).exit_code == ExitCode.OK
    closed = ["--table", "ledger", "--endpoint-url", "http://127.0.0.1:9", "envs"]
    assert runner.invoke(app, closed).exit_code == ExitCode.FAILED
    assert runner.invoke(app, [*args, "ls", "--limit", "x"]).exit_code == ExitCode.USAGE
    assert runner.invoke(app, [*args, "ls", "--before", "soon"]).exit_code == ExitCode.USAGE
    assert runner.invoke(app, [*args, "show", "job", "nope"]).exit_code == ExitCode.NOT_FOUND
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{nope\n")
    assert runner.invoke(app, [*args, "import", str(bad)]).exit_code == ExitCode.PARTIAL
    # CLOSED_PIPE: test_a_closed_pipe_ends_quietly, as a real process.


def test_an_unexpected_error_is_a_failure_not_a_usage_error(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare ValueError from the library (a read racing a delete: 'missing part 2 of 3') or
    any other exception is exit code 1, one line; 2 stays for the command line's own faults."""
    from sandbox_ledger.memory import MemoryAdapter

    async def broken(self: object, name: str, sandbox_id: str) -> list[LedgerEntry]:
        raise ValueError("entry 'E#0001' is missing part 2 of 3")

    for method in ("read_all", "read_stored", "read_in_append_order"):
        monkeypatch.setattr(MemoryAdapter, method, broken, raising=False)
    store = ["--store", "memory://"]
    for argv in (["show", "job", "sb-1"], ["export", "--name", "job", "--sandbox-id", "sb-1"]):
        done = runner.invoke(app, [*store, *argv])
        assert done.exit_code == ExitCode.FAILED, done.output
        assert done.stderr == (
            "error: entry 'E#0001' is missing part 2 of 3 (ValueError; --debug shows the "
            "traceback)\n"
        )
        debug = runner.invoke(app, ["--debug", *store, *argv])
        assert isinstance(debug.exception, ValueError)  # --debug: the traceback

    async def crashing(self: object, *args: object) -> list[LedgerEntry]:
        raise KeyError("sessions")

    monkeypatch.setattr(MemoryAdapter, "list_environments", crashing)
    done = runner.invoke(app, [*store, "envs"])
    assert done.exit_code == ExitCode.FAILED
    assert done.stderr == "error: 'sessions' (KeyError; --debug shows the traceback)\n"
    # Our own input checks stay usage errors.
    usage = runner.invoke(app, [*store, "export", "--sandbox-id", "sb-1"])
    assert usage.exit_code == ExitCode.USAGE and usage.stderr.startswith("error: --sandbox-id:")
    both = runner.invoke(app, [*store, "--table", "t", "ls"])
    assert both.exit_code == ExitCode.USAGE and "give one, not both" in both.stderr


# --- times -------------------------------------------------------------------------------------


def test_times_print_with_their_zone_and_read_back(
    runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter
) -> None:
    listed = runner.invoke(app, [*args, "ls"])
    assert "2026-12-01T11:00:00.001Z" in listed.stdout  # sb-2's start, UTC, with its zone
    assert "2026-12-01T10:00:00.000Z" in listed.stdout
    shown = runner.invoke(app, [*args, "show", "job", "sb-1"])
    assert "2026-12-01T10:00:00.005Z" in shown.stdout
    # A printed time pasted back into --before: strictly before it.
    for before, expected in [
        ("2026-12-01T11:00:00.001Z", ["sb-1"]),
        ("2026-12-01T11:00:00.002Z", ["sb-2", "sb-1"]),
        ("2026-12-01T13:00:00.002+02:00", ["sb-2", "sb-1"]),  # the same instant
        ("2026-12-01T13:00:00.001+02:00", ["sb-1"]),
        ("1796122800001", ["sb-1"]),  # Unix milliseconds still work
        ("2026-12-01T10:00:00Z", []),
    ]:
        got = as_json(runner, [*args, "ls", "--before", before])
        assert [s["sandboxId"] for s in got["sessions"]] == expected, before
    naive = runner.invoke(app, [*args, "ls", "--before", "2026-12-01T11:00:00"])
    assert naive.exit_code == ExitCode.USAGE
    assert naive.stderr.strip() == (
        "error: --before: '2026-12-01T11:00:00' has no time zone; add Z for UTC or an offset "
        "such as +02:00"
    )


def test_time_conversions() -> None:
    assert when(0) == "1970-01-01T00:00:00.000Z"
    assert when(1_796_119_200_123) == "2026-12-01T10:00:00.123Z"
    assert when(None) == "-"
    for ms in (0, 1, 999, 1_796_119_200_123, 253_402_300_799_999):
        assert parse_time(when(ms)) == ms
    assert parse_time("2026-12-01T10:00:00.0001Z") == 1_796_119_200_001  # rounds up: strict <
    moment = datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert parse_time(moment.isoformat()) == 1_796_119_200_000
    with pytest.raises(ValueError, match="--before: '2026-12-01' has no time zone"):
        parse_time("2026-12-01")


# --- errors: where, and what next --------------------------------------------------------------


def test_errors_name_the_place_and_the_next_command(
    runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter, moto_endpoint: str
) -> None:
    table = args[1]
    missing = runner.invoke(app, [*args, "show", "job", "nope"])
    assert missing.stderr.strip().splitlines() == [
        f"error: no session job/nope in table {table} in region us-east-1 at endpoint "
        f"{moto_endpoint}; list the sessions of job with "
        f"`sandbox-ledger --table {table} ls --name job`"
    ]
    unknown = runner.invoke(
        app, [*args, "resources", "show", "0b8f5a8e-3c1e-4b8e-9f53-000000000000"]
    )
    assert unknown.exit_code == ExitCode.NOT_FOUND
    assert f"table {table} in region us-east-1" in unknown.stderr
    assert f"`sandbox-ledger --table {table} resources ls`" in unknown.stderr
    # Not a record id at all: bad input (exit 2) naming the field, not "no such record".
    not_an_id = runner.invoke(app, [*args, "resources", "show", "nope"])
    assert not_an_id.exit_code == ExitCode.USAGE
    assert "id: 'nope' is not a UUID in canonical form" in not_an_id.stderr


def test_a_bad_table_variable_is_named(
    runner: CliRunner, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_LEDGER_TABLE", "ab")
    result = runner.invoke(app, ["--endpoint-url", moto_endpoint, "ls"])
    assert result.exit_code == ExitCode.USAGE
    assert result.stderr.strip() == (
        "error: SANDBOX_LEDGER_TABLE: must be a string of 3 to 255 characters"
    )
    flag = runner.invoke(app, ["--endpoint-url", moto_endpoint, "--table", "ab", "ls"])
    assert flag.stderr.strip().startswith("error: --table: ")


def test_a_missing_table_from_the_variable_suggests_table_create(
    runner: CliRunner, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_LEDGER_TABLE", "no-such-table")
    result = runner.invoke(app, ["--endpoint-url", moto_endpoint, "--region", "eu-west-1", "ls"])
    assert result.exit_code == ExitCode.NOT_FOUND
    assert result.stderr.strip() == (
        f"error: table no-such-table not found in region eu-west-1 at endpoint {moto_endpoint}; "
        "create it with `sandbox-ledger table create` (or deploy the stack)"
    )


def test_a_missing_event_bus_is_named_as_such(
    runner: CliRunner, args: list[str], moto_endpoint: str, sync_table: str
) -> None:
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    stale = store.put(record(age=timedelta(hours=1))).record
    result = runner.invoke(
        app,
        [*args, "resources", "sweep", "--event-bus", "no-such-bus", *WINDOWS],
    )
    assert result.exit_code == ExitCode.NOT_FOUND
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(
        f"error: event bus no-such-bus not found in region us-east-1 at endpoint {moto_endpoint}"
    )
    assert "table" not in line.split(":", 2)[1] and "--event-bus NAME" in line
    assert store.get_versioned(stale.id).expiring is None  # nothing claimed


# --- processes: pipes, stderr, progress --------------------------------------------------------


def test_a_closed_pipe_ends_quietly(
    moto_endpoint: str, sync_table: str, ledger: SyncDynamoDBAdapter
) -> None:
    # An export several times larger than a pipe's buffer (64 KiB on Linux), so that the
    # writer is still writing when `head` leaves: 40 entries of 5 KB (300 entries without a
    # payload were about 30 KB, which a pipe could take whole).
    for i in range(40):
        command = f"{i:03d} " + "x" * 5_000
        ledger.append(
            entry(
                "sb-1",
                LedgerEvent.ExecStarted,
                2_000_000_000_000 + i,
                step=i,
                payload={"command": command},
            )
        )
    exported = "".join(json.dumps(e.wire()) + "\n" for e in ledger.read_all("job", "sb-1"))
    assert len(exported.encode()) > 3 * 65536
    env = env_for(moto_endpoint, SANDBOX_LEDGER_TABLE=sync_table)
    for argv in (["ls"], ["export"], ["show", "job", "sb-1", "--json"], ["--help"]):
        process = popen(argv, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        process.stdout.close()  # type: ignore[union-attr]  # the reader is gone (`| head`)
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == ExitCode.CLOSED_PIPE, (argv, stderr)
        assert stderr == b"", argv
    # The exit statuses of both sides of the pipe, on stderr's last line: the export's is
    # CLOSED_PIPE (it was still writing when head left), head's is 0.
    head = subprocess.run(
        ["bash", "-c", f'{COMMAND} export | head -1; echo "${{PIPESTATUS[@]}}" >&2'],
        env=env,
        capture_output=True,
        timeout=120,
    )
    statuses = head.stderr.decode().splitlines()[-1]
    assert statuses == f"{ExitCode.CLOSED_PIPE} 0", head.stderr
    assert head.returncode == 0 and head.stdout.count(b"\n") == 1
    assert b"Traceback" not in head.stderr and b"Broken pipe" not in head.stderr


def test_as_a_process_json_parses_and_an_error_is_one_line(
    moto_endpoint: str, sync_table: str, ledger: SyncDynamoDBAdapter
) -> None:
    env = env_for(moto_endpoint, SANDBOX_LEDGER_TABLE=sync_table)
    for argv in (["ls", "--json"], ["envs", "--json"], ["checkpoints", "job", "sb-1", "--json"]):
        done = run(argv, env, text=False, timeout=120)
        assert done.returncode == 0 and done.stderr == b"", argv
        json.loads(done.stdout)
    shown = run(["show", "job", "sb-1", "--json"], env, text=False, timeout=120)
    assert [json.loads(x)["ts"] for x in shown.stdout.splitlines()] == [
        e.ts for e in ledger.read_all("job", "sb-1")
    ]
    missing = run(["show", "job", "nope", "--json"], env)
    assert missing.returncode == ExitCode.NOT_FOUND and missing.stdout == ""
    [line] = missing.stderr.splitlines()
    assert line.startswith("error: no session job/nope in table ")
    usage = run(["ls", "--limit", "lots"], env)
    assert usage.returncode == ExitCode.USAGE and "Traceback" not in usage.stderr


def on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str, bytes]:
    """Run with stderr on a pseudo-terminal (stdout piped): exit code, stderr, stdout."""
    leader, follower = pty.openpty()
    process = popen(
        argv, {**env, "TERM": "xterm", "COLUMNS": "120"},
        stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(follower)
    seen = bytearray()
    stdout = bytearray()
    streams = [leader, process.stdout.fileno()]  # type: ignore[union-attr]
    while streams:
        ready, _, _ = select.select(streams, [], [], 120)
        assert ready, "no output for 120 s"
        for fd in ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the terminal closed
                chunk = b""
            if not chunk:
                streams.remove(fd)
            elif fd == leader:
                seen += chunk
            else:
                stdout += chunk
    os.close(leader)
    return process.wait(timeout=60), seen.decode("utf-8", "replace"), bytes(stdout)


def test_progress_only_on_a_terminal(
    moto_endpoint: str,
    sync_table: str,
    ledger: SyncDynamoDBAdapter,
    tmp_path: Path,
    event_bus: str,
    runner: CliRunner,
    args: list[str],
) -> None:
    for i in range(60):  # a session with more than one batch of items to delete
        ledger.append(entry("sb-2", LedgerEvent.ExecStarted, 2_000_000_000_000 + i, step=i))
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    observed_earlier(store, store.put(record(age=timedelta(hours=1))), timedelta(minutes=16))
    env = env_for(moto_endpoint, SANDBOX_LEDGER_TABLE=sync_table)
    sweep = ["resources", "sweep", "--event-bus", event_bus, *WINDOWS]
    cases = [
        (["export", "-o", str(tmp_path / "x.jsonl")], "exporting", "exported 67 entries"),
        (["rm", "job", "sb-2", "--yes"], "deleting job/sb-2", "items deleted"),
        (sweep, "sweeping", "1 records examined, 1 deleted"),
    ]
    for argv, progress, summary in cases:
        code, terminal, _ = on_a_terminal(argv, env)
        assert code == 0, terminal
        assert progress in terminal, (argv, terminal)
        assert summary in terminal, (argv, terminal)
        if argv[0] == "rm":  # the count as the last refresh shows it: every entry at least
            counts = re.findall(r"(\d+) items deleted", terminal)
            assert max(map(int, counts)) >= 63, counts
    # Not a terminal (typer's runner: its stderr is no terminal, and no process is needed to
    # show that): the same commands print no progress, only their summary line.
    ledger.append(entry("sb-3", LedgerEvent.SandboxCreated, 5))
    for argv, progress, _ in cases:
        if argv[0] == "rm":
            argv = ["rm", "job", "sb-3", "--yes"]
        done = runner.invoke(app, [*args, *argv])
        assert done.exit_code == 0, done.stderr
        assert progress not in done.stderr and "\x1b" not in done.stderr, (argv, done.stderr)
        assert len(done.stderr.splitlines()) <= 1


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("AccessDeniedException", "the credentials' IAM policy must allow it"),
        ("ProvisionedThroughputExceededException", "throttled after retries"),
    ],
)
def test_store_failures_name_the_place(
    runner: CliRunner,
    args: list[str],
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    code: str,
    expected: str,
) -> None:
    """DynamoDB refusing a call: one line naming the table, region and endpoint, exit 1."""
    from botocore.client import BaseClient
    from botocore.exceptions import ClientError

    real = BaseClient._make_api_call

    def refuse(self: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        if operation == "GetItem":
            raise ClientError({"Error": {"Code": code, "Message": "no"}}, operation)
        return real(self, operation, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", refuse)
    result = runner.invoke(app, [*args, "rm", "job", "sb-1", "--yes"])
    assert result.exit_code == ExitCode.FAILED
    [line] = result.stderr.strip().splitlines()
    assert expected in line
    assert f"table {args[1]} in region us-east-1 at endpoint {moto_endpoint}" in line


def test_record_directories_show_progress_on_a_terminal(
    moto_endpoint: str, sync_table: str, tmp_path: Path, runner: CliRunner, args: list[str]
) -> None:
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    for _ in range(3):
        store.put(record())
    env = env_for(moto_endpoint, SANDBOX_LEDGER_TABLE=sync_table)
    out = str(tmp_path / "records")
    for argv, progress, done_shown in [
        (["resources", "export", out], "exporting records", "3 files"),  # a count
        (["resources", "import", out], "importing records", "100%"),  # a bar over the files
    ]:
        code, terminal, _ = on_a_terminal(argv, env)
        assert code == 0 and progress in terminal and done_shown in terminal, terminal
        done = runner.invoke(app, [*args, *argv])  # not a terminal
        assert done.exit_code == 0 and progress not in done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr
