"""``sandbox-ledger watch``: the fleet's changes as real processes print them, one flushed
line per change in every --output, and a clean end on Ctrl-C and on a closed pipe that says
where to resume (a DynamoDB table on the moto server: its stream is the feed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.testing._build import entry


@pytest.fixture
def ledger(moto_endpoint: str, sync_table: str) -> Iterator[SyncDynamoDBAdapter]:
    with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as adapter:
        yield adapter


Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn(moto_endpoint: str, sync_table: str) -> Iterator[Spawn]:
    started: list[subprocess.Popen[str]] = []

    def run(*args: str) -> subprocess.Popen[str]:
        where = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
        env = {
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", "/tmp"),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "sandbox_ledger.cli", *where, "watch", *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                # As a terminal starts it (a background run passes SIGINT on ignored).
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
        )
        return started[-1]

    yield run
    for proc in started:  # a watcher never outlives its test
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _position(stderr: str) -> str:
    [line] = [x for x in stderr.splitlines() if x.startswith("position: ")]
    return line.removeprefix("position: ")


def test_ctrl_c_prints_where_to_resume(ledger: SyncDynamoDBAdapter, spawn: Spawn) -> None:
    ledger.append(entry("job", "sb 1", LedgerEvent.SandboxCreated, 1))
    proc = spawn("--output", "json")
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    assert first["kind"] == "session.created" and first["sandboxId"] == "sb 1"
    ledger.append(entry("job", "sb 1", LedgerEvent.SandboxClosed, 2))
    second = json.loads(proc.stdout.readline())  # printed while it runs: flushed
    assert (second["kind"], second["at"]) == ("session.closed", 2)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert _position(stderr) == second["position"]
    assert f"watch --after {second['position']}" in stderr
    # Resuming there prints only what came after.
    ledger.delete_sandbox("job", "sb 1")
    again = spawn("--output", "json", "--after", f" {second['position']}\n")
    assert again.stdout is not None
    third = json.loads(again.stdout.readline())
    assert third["kind"] == "session.deleted"
    again.send_signal(signal.SIGINT)
    again.communicate(timeout=30)


def test_a_closed_pipe_ends_it_with_the_position(ledger: SyncDynamoDBAdapter, spawn: Spawn) -> None:
    ledger.append(entry("job", "a", LedgerEvent.SandboxCreated, 1))
    proc = spawn("--output", "text")
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    assert line.split("\t")[1:4] == ["session.created", "job", "a"]
    proc.stdout.close()  # the reader goes away (| head -1)
    for i in range(5):  # enough further lines that one write meets the closed pipe
        ledger.append(entry("job", f"b{i}", LedgerEvent.SandboxCreated, 2))
    proc.wait(timeout=30)
    stderr = proc.stderr.read()
    assert proc.returncode == 141, stderr
    assert "position: " in stderr and "Traceback" not in stderr


def test_table_output_has_one_header_and_a_row_per_change(
    ledger: SyncDynamoDBAdapter,
    spawn: Spawn,
) -> None:
    ledger.append(entry("job", "t", LedgerEvent.SandboxCreated, 1))
    proc = spawn("--output", "table")
    assert proc.stdout is not None
    header, row = proc.stdout.readline(), proc.stdout.readline()
    assert header.split() == ["AT", "KIND", "NAME", "SANDBOX/RECORD", "ID"]
    assert row.split()[1:4] == ["session.created", "job", "t"]
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 130


def test_a_bad_position_is_a_usage_error(spawn: Spawn) -> None:
    proc = spawn("--after", "nonsense")
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr
    assert "after: not a position" in stderr and "Traceback" not in stderr


def test_watch_refuses_a_store_nothing_else_can_write() -> None:
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    command = [sys.executable, "-m", "sandbox_ledger.cli", "--store", "memory://", "watch"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "watch waits for what other programs write" in done.stderr
