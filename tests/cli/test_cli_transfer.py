"""``export --segments`` and the import's progress line: on a terminal (a pseudo-terminal
here) lines/s, the share of a regular file and the time left; nothing on a pipe."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sandbox_ledger.cli import app
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter, _ops
from sandbox_ledger.models import LedgerEntry, LedgerEvent

COMMAND = Path(sys.executable).parent / "sandbox-ledger"


def write_lines(path: Path, sessions: int) -> int:
    """An export-like file of ``sessions`` sessions of 6 entries; returns the line count."""
    with path.open("w") as out:
        for s in range(sessions):
            for i, event in enumerate(["sandbox.created", "exec.started", "exec.complete"] * 2):
                entry = {
                    "ts": 1000 + i,
                    "name": "job",
                    "sandboxId": f"sb-{s:06d}",
                    "stepIndex": i // 3 if event != "sandbox.created" else -1,
                    "event": event,
                    "payload": {"i": i},
                }
                out.write(json.dumps(entry) + "\n")
    return sessions * 6


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("SANDBOX_LEDGER_TABLE", "SANDBOX_LEDGER_STORE"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


def test_export_scans_with_the_segments_asked_for(
    runner: CliRunner,
    moto_endpoint: str,
    sync_table: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    for s in range(5):
        ledger.append(
            LedgerEntry(
                ts=1,
                name="job",
                sandbox_id=f"s{s}",
                step_index=-1,
                event=LedgerEvent.SandboxCreated,
            )
        )
    totals: list[int] = []
    scan = _ops.scan_sessions

    def spied(table: str, *, name: str | None, segments: int) -> Any:
        totals.append(segments)
        return scan(table, name=name, segments=segments)

    monkeypatch.setattr(_ops, "scan_sessions", spied)
    args = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    for segments, expected in ((["--segments", "7"], 7), ([], 4)):
        totals.clear()
        output = tmp_path / f"out{expected}.jsonl"
        done = runner.invoke(app, [*args, "export", "-o", str(output), *segments])
        assert done.exit_code == 0, done.output
        assert totals == [expected]
        assert len(output.read_text().splitlines()) == 5


@pytest.mark.parametrize("value", ["0", "65", "many", "-1"])
def test_bad_segments_are_a_usage_error_naming_the_flag(
    runner: CliRunner, tmp_path: Path, value: str
) -> None:
    output = tmp_path / "out.jsonl"
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = runner.invoke(app, ["--store", store, "export", "-o", str(output), "--segments", value])
    assert done.exit_code == 2
    assert "--segments" in done.output
    assert not output.exists()


def _clean_env(tmp_path: Path) -> dict[str, str]:
    return {
        "HOME": str(tmp_path),
        "PATH": os.environ["PATH"],
        "TERM": "xterm-256color",
        "COLUMNS": "120",
    }


def test_import_progress_on_a_terminal(tmp_path: Path) -> None:
    """stderr a pseudo-terminal: the progress line shows lines, lines/s, the share of the
    file and the time left while it runs, and the summary at the end."""
    source = tmp_path / "ledger.jsonl"
    lines = write_lines(source, 4_000)
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [COMMAND, "--store", store, "import", str(source)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=secondary,
        env=_clean_env(tmp_path),
    )
    os.close(secondary)
    shown = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([primary], [], [], 1)
        if ready:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        elif process.poll() is not None:
            break
    os.close(primary)
    assert process.wait(timeout=60) == 0
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", shown.decode(errors="replace"))
    assert f"{lines} new, 0 already present" in text
    progress = re.findall(r"(\d+)%.*?([\d,]+) lines, ([\d,]+)/s", text)
    assert progress, text
    assert re.search(r"\d+:\d\d:\d\d|-:--:--", text), text  # the time left


def test_no_progress_on_a_pipe(tmp_path: Path) -> None:
    source = tmp_path / "ledger.jsonl"
    lines = write_lines(source, 1_000)
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = subprocess.run(
        [COMMAND, "--store", store, "import", str(source)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=_clean_env(tmp_path),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode().strip() == (
        f"imported {source}: {lines} new, 0 already present, 0 expired, 0 failed"
    )


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_a_batch_is_written_is_counted_exactly(number: int) -> None:
    """The interrupted import's line says what was written: a signal that lands after a
    batch was stored but before it was counted (it once said 796 new of 1,000 stored) waits
    for the count; a second signal stops at once."""
    from sandbox_ledger.blocking import BlockingAdapter
    from sandbox_ledger.cli.interrupt import Terminated, held, raise_on_sigterm
    from sandbox_ledger.memory import MemoryAdapter
    from sandbox_ledger.transfer import ImportReport, import_lines

    class SignalledAfterWriting(BlockingAdapter):
        signals = 1

        def append_once_many(self, *args: Any, **kwargs: Any) -> Any:
            done = super().append_once_many(*args, **kwargs)  # stored
            for _ in range(self.signals):
                os.kill(os.getpid(), number)  # handled here, before anything is counted
            return done

    entries = [
        LedgerEntry(ts=i, name="job", sandbox_id=f"sb-{i // 10}", step_index=i, event="e")
        for i in range(40)
    ]
    raw = [json.dumps(x.wire()).encode() + b"\n" for x in entries]
    previous = signal.getsignal(signal.SIGTERM)
    raise_on_sigterm()
    try:
        for signals, guard in ((1, held), (2, held), (1, None)):
            target = SignalledAfterWriting(MemoryAdapter())
            target.signals = signals
            report = ImportReport()
            with pytest.raises((KeyboardInterrupt, Terminated)):
                import_lines(target, raw, report=report, guard=guard)
            stored = sum(len(target.read_all("job", f"sb-{s}")) for s in range(4))
            assert stored == 40  # one batch: the whole file
            if signals == 1 and guard is held:
                assert (report.new, report.present) == (40, 0)  # exact
            else:
                assert report.new == 0  # stopped inside the batch: not counted
            target.close()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_storage_failure_part_way_says_how_far_the_import_got(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store failing after some batches were written: the one error line says what was
    written and that a re-run resumes (it said only the failure, as if nothing were stored)."""
    from sandbox_ledger.blocking import BlockingAdapter
    from sandbox_ledger.errors import StorageError
    from sandbox_ledger.sql.adapter import SQLAdapter
    from sandbox_ledger.sqlite import SQLiteAdapter

    source = tmp_path / "big.jsonl"
    lines = write_lines(source, 700)  # 4,200 lines: more than one batch
    real = SQLAdapter.append_once_many
    calls = 0

    async def failing_second(self: Any, items: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise StorageError("disk I/O error", code="SQLITE_IOERR")
        return await real(self, items, **kwargs)

    monkeypatch.setattr(SQLAdapter, "append_once_many", failing_second)
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = runner.invoke(app, ["--store", store, "import", str(source)])
    assert done.exit_code == 1, done.output
    with BlockingAdapter(SQLiteAdapter(tmp_path / "ledger.db")) as ledger:
        written = sum(len(ledger.read_all("job", f"sb-{s:06d}")) for s in range(700))
    assert 0 < written < lines
    [line] = done.stderr.splitlines()
    assert line.startswith("error: disk I/O error; ")
    assert f"; written so far: {written} new, 0 already present, 0 expired, 0 failed; " in line
    assert line.endswith(
        "re-running the same import resumes without duplicates (what is "
        "stored is recognised, not written again)"
    )
    # Failing before anything was written, the line is the failure alone.
    calls = 1
    again = runner.invoke(
        app, ["--store", f"sqlite:///{tmp_path / 'other.db'}", "import", str(source)]
    )
    assert again.exit_code == 1 and again.stderr == "error: disk I/O error\n"
