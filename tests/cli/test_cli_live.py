"""``sandbox-ledger tail``: the timeline, --follow as it grows, JSON lines, resuming, and a
clean end on Ctrl-C and on a closed pipe that says where to resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sandbox_ledger.blocking import open_blocking_store
from sandbox_ledger.cli import app
from sandbox_ledger.models import LedgerEntry


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("COLUMNS", "200")
    return CliRunner()


def _append(db: Path, *events: str, start: int = 0) -> None:
    with open_blocking_store(f"sqlite:///{db}") as ledger:
        for i, event in enumerate(events, start=start):
            step = -1 if event.startswith("sandbox.") else i
            ledger.append(
                LedgerEntry(
                    ts=1_700_000_000_000 + i,
                    name="job",
                    sandbox_id="sb 1",
                    step_index=step,
                    event=event,
                    payload={"i": i},
                )
            )


def _store(db: Path) -> list[str]:
    return ["--store", f"sqlite:///{db}"]


def test_tail_prints_the_timeline(runner: CliRunner, tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    _append(db, "sandbox.created", "exec.started")
    result = runner.invoke(app, [*_store(db), "tail", "job", "sb 1"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[2] for line in lines] == ["sandbox.created", "exec.started"]
    missing = runner.invoke(app, [*_store(db), "tail", "job", "nope"])
    assert missing.exit_code == 3


def test_follow_ends_after_closed_and_resumes_after(runner: CliRunner, tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    _append(db, "sandbox.created", "exec.started", "exec.complete", "sandbox.closed")
    result = runner.invoke(app, [*_store(db), "tail", "job", "sb 1", "--follow", "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["payload"]["i"] for line in lines] == [0, 1, 2, 3]
    assert lines[0]["sandboxId"] == "sb 1"


def test_a_bad_position_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    _append(db, "sandbox.created")
    result = runner.invoke(app, [*_store(db), "tail", "job", "sb 1", "--after", "garbage"])
    assert result.exit_code == 2
    assert "after" in result.stderr
    bad = runner.invoke(app, [*_store(db), "tail", "job", "sb 1", "--output", "yaml"])
    assert bad.exit_code == 2 and "--output" in bad.stderr


@pytest.fixture(autouse=True)
def _no_follower_left(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Whatever a test asserts, no follower it started outlives it."""
    started: list[subprocess.Popen[str]] = []
    popen = subprocess.Popen

    def spawn(*args: Any, **kwargs: Any) -> subprocess.Popen[str]:
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", spawn)
    yield
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _spawn(db: Path, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "sandbox_ledger.cli", *_store(db), "tail", "job", "sb 1"]
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.Popen(
        [*command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # As a terminal starts it: a run launched in the background (`make test &`) would
        # pass SIGINT on ignored, and Python then never raises KeyboardInterrupt.
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _resume_position(stderr: str) -> str:
    [line] = [x for x in stderr.splitlines() if x.startswith("position: ")]
    return line.removeprefix("position: ")


def test_ctrl_c_prints_where_to_resume(runner: CliRunner, tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    _append(db, "sandbox.created", "exec.started")
    proc = _spawn(db, "--follow", "--json")
    assert proc.stdout is not None
    seen = [proc.stdout.readline(), proc.stdout.readline()]
    assert [json.loads(x)["payload"]["i"] for x in seen] == [0, 1]
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "resume with: sandbox-ledger --store" in stderr
    assert "Traceback" not in stderr
    # Resuming there prints only what came after.
    _append(db, "exec.complete", "sandbox.closed", start=2)
    after = _resume_position(stderr)
    pasted = f" {after}\n"  # as copied from a terminal line
    result = runner.invoke(app, [*_store(db), "tail", "job", "sb 1", "--after", pasted, "--json"])
    assert result.exit_code == 0, result.output
    assert [json.loads(x)["payload"]["i"] for x in result.stdout.splitlines()] == [2, 3]


def test_a_closed_pipe_ends_it_with_the_position(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    _append(db, "sandbox.created")
    proc = _spawn(db, "--follow")
    assert proc.stdout is not None and proc.stderr is not None
    assert "sandbox.created" in proc.stdout.readline()
    proc.stdout.close()  # the reader goes away (| head -1)
    # Enough further lines that one write meets the closed pipe.
    _append(db, *["exec.started"] * 5, start=1)
    proc.wait(timeout=30)
    stderr = proc.stderr.read()
    assert proc.returncode == 141, stderr
    assert "position: " in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("where", [[], ["--store", "memory://"]])
def test_follow_refuses_a_store_nothing_else_can_write(
    runner: CliRunner, where: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("SANDBOX_LEDGER_TABLE", "SANDBOX_LEDGER_STORE"):
        monkeypatch.delenv(variable, raising=False)
    result = runner.invoke(app, [*where, "tail", "job", "sb", "--follow"])
    assert result.exit_code == 2, result.output
    assert "--table NAME" in result.stderr
