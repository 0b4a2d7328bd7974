"""`sandbox-ledger local` (issue 25) as real processes: it serves until a signal, keeps its
data, and says in one line why it cannot start."""

from __future__ import annotations

import json
import os
import pty
import queue
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from .processes import ROOT, bare_env, free_port, popen, run

# -- 4. sandbox-ledger local ----------------------------------------------------------------


class Local:
    """``sandbox-ledger local`` as a child process, with the environment its lines set."""

    def __init__(self, *argv: str, cwd: Path) -> None:
        self.process = popen(
            ["local", "--port", "0", *argv],
            bare_env(),
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


_LOCAL_LINES = ('"kind":"localSequences"', '"kind":"localItems"')
"""The local server's own lines in its data file: its sessions' sequences and order ids, and
the items their entries do not rebuild (a deleted session's spent marks)."""


def _not_local(lines: list[str]) -> list[str]:
    """The ledger and record lines among a data file's lines (not the local server's own)."""
    return [line for line in lines if not any(local in line for local in _LOCAL_LINES)]


def _file_lines(data: Path) -> int:
    """The ledger and record lines of a data file written whole (it ends with a line naming
    its sessions' sequences and order ids)."""
    lines = data.read_text().splitlines()
    assert lines and json.loads(lines[-1])["kind"] == "localSequences", lines[-1:]
    return len(_not_local(lines))


def _saved_lines(data: Path) -> int | None:
    """:func:`_file_lines` of a data file a save may be writing now; None until one is
    written whole."""
    if not data.exists():
        return None
    lines = data.read_text().splitlines()
    try:
        whole = bool(lines) and json.loads(lines[-1]).get("kind") == "localSequences"
    except ValueError:  # its last line is being written
        return None
    return len(_not_local(lines)) if whole else None


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
    while time.monotonic() < deadline and _saved_lines(data) != 6:
        time.sleep(0.1)  # saved within the interval
    server.process.kill()
    server.process.wait()
    assert _file_lines(tmp_path / "dev.jsonl") == 6
    # A killed server's lock file stays, its lock free at once: the next server takes it, and
    # removes it when it stops. The kill may cut a whole write of the stream's sidecar: its
    # temporary file is then left, and the next server removes it too.
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".dev.jsonl.stream.tmp") == [
        ".dev.jsonl.lock",
        ".dev.jsonl.stream",  # its table's stream (local/streamfile.py)
        "dev.jsonl",
    ]
    again = Local("--data", "dev.jsonl", cwd=tmp_path)
    assert again.stop(signal.SIGINT)[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".dev.jsonl.stream", "dev.jsonl"]


def test_a_start_removes_the_stream_s_temporary_files_a_killed_server_left(
    tmp_path: Path,
) -> None:
    """A kill during a whole write of the sidecar left `.dev.jsonl.stream.1838.tmp` for good
    (named by the killed process's id, never written again): the next server removes the
    temporary files of its FILE's sidecar, and no other file."""
    server = Local("--data", "dev.jsonl", cwd=tmp_path)
    assert run(["import", str(ROOT / "examples" / "ledger.jsonl")], server.env()).returncode == 0
    assert server.stop(signal.SIGTERM)[0] == 0
    left = [".dev.jsonl.stream.tmp", ".dev.jsonl.stream.1838.tmp"]
    others = [".dev.jsonl.stream.x.tmp", ".other.jsonl.stream.tmp", "dev.jsonl.stream.tmp"]
    for name in left + others:
        (tmp_path / name).write_text('{"kind": "cut"')
    again = Local("--data", "dev.jsonl", cwd=tmp_path)
    listed = run(["ls", "--json"], again.env())
    assert listed.returncode == 0 and len(json.loads(listed.stdout)["sessions"]) == 2
    assert again.stop(signal.SIGINT)[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".dev.jsonl.stream", "dev.jsonl", *others]
    )


def test_a_start_refused_for_a_busy_port_leaves_nothing(tmp_path: Path) -> None:
    """A `local` refused because its port is taken left `.other.jsonl.lock` behind (issue
    43); a server stopped as usual leaves its data file alone."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = str(busy.getsockname()[1])
        done = run(["local", "--port", port, "--data", "other.jsonl"], bare_env(), cwd=tmp_path)
    assert done.returncode == 1 and "cannot listen on 127.0.0.1:" in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []
    server = Local("--data", "dev.jsonl", cwd=tmp_path)
    assert server.stop(signal.SIGTERM)[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".dev.jsonl.stream", "dev.jsonl"]


def test_a_lock_file_removed_while_it_was_being_taken_is_taken_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Server B opens the lock file, server A (stopping) removes it and lets go, B locks the
    removed file: B must see that the name leads elsewhere and take the new file, or a third
    server would create and lock another and both would serve the one data file."""
    from sandbox_ledger.cli import local_command

    opened: list[int] = []
    real_open = os.open

    def open_then_removed(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
        descriptor = real_open(path, flags, mode)
        if not opened:
            os.unlink(path)  # A's removal, between B's open and B's lock
        opened.append(descriptor)
        return descriptor

    monkeypatch.setattr(os, "open", open_then_removed)
    data = tmp_path / "dev.jsonl"
    with local_command._held(data):
        lock = tmp_path / ".dev.jsonl.lock"
        assert len(opened) == 2 and lock.exists()
        assert os.stat(lock).st_ino == os.fstat(opened[1]).st_ino
    assert not lock.exists()


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
    assert "('hello', 'hello-1', 'running')" in done.stdout  # its own session, not the examples'


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


_STOP_BY_ANOTHER_THREAD = """
import os, signal, threading, time
from sandbox_ledger.cli.interrupt import StopSignals

def send():
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=send).start()
# As in `local`, the signal is taken by another thread (here always: the main thread blocks
# it), so the main thread's wait is not interrupted by it.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
with StopSignals() as stop:
    started = time.monotonic()
    rounds = 0
    while not stop.wait(30.0):
        rounds += 1
    print(stop.received, rounds, time.monotonic() - started)
"""


def test_a_signal_another_thread_takes_ends_the_wait_at_once() -> None:
    """`local` hung for good on SIGTERM now and then (a CI run of the test above): its handler
    set a threading.Event, whose lock the main thread's Event.wait held when the handler ran.
    The wait is now woken by the signal itself, whichever thread takes it: here in well under
    its 30 s (an Event's wait would sleep to its end, if it did not deadlock)."""
    done = subprocess.run(
        [sys.executable, "-c", _STOP_BY_ANOTHER_THREAD],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    number, rounds, elapsed = done.stdout.split()
    assert (int(number), int(rounds)) == (signal.SIGTERM, 0)
    assert float(elapsed) < 10


def test_stop_signals_puts_back_what_it_replaced() -> None:
    from sandbox_ledger.cli.interrupt import StopSignals

    before = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
    with StopSignals() as stop:
        assert not stop.wait(0.01) and stop.received is None
        signal.raise_signal(signal.SIGINT)  # handled: no KeyboardInterrupt
        assert stop.wait(5) and stop.received == signal.SIGINT
    assert {n: signal.getsignal(n) for n in before} == before
    assert signal.set_wakeup_fd(-1) == -1  # the wake-up socket is unset again


def test_a_second_local_on_the_same_data_file_is_refused(tmp_path: Path) -> None:
    """Two servers on one --data file would each save over the other's every few seconds
    (tried: two servers, one import each, the file kept only the last saver's entry)."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "link.jsonl").symlink_to(tmp_path / "dev.jsonl")
    first = Local("--data", "dev.jsonl", "--save-every", "0.5", cwd=tmp_path)
    try:
        env = first.env()
        assert run(["import", str(ROOT / "examples" / "ledger.jsonl")], env).returncode == 0
        for cwd, name in ((tmp_path, "dev.jsonl"), (tmp_path / "elsewhere", "link.jsonl")):
            second = run(["local", "--port", "0", "--data", name], bare_env(), cwd=cwd)
            assert second.returncode == 1, second.stderr
            [line] = second.stderr.splitlines()
            assert line == (
                f"error: --data: {name} is in use by another sandbox-ledger local "
                f"(pid {first.process.pid}): stop it, or give this one another file"
            )
    finally:
        code, stderr = first.stop()
    assert code == 0 and "saved 6 entries" in stderr, stderr
    assert _file_lines(tmp_path / "dev.jsonl") == 6
    # Once the first has stopped, the file is free again.
    again = Local("--data", "dev.jsonl", cwd=tmp_path)
    assert again.stop()[0] == 0


def test_a_failed_save_keeps_serving_and_the_last_one_keeps_the_tables(tmp_path: Path) -> None:
    """A save that fails (here the data's directory removed; a full disk alike) ended the
    server at once, exit 2 naming `--output`, and everything since the last save was lost."""
    (tmp_path / "d").mkdir()
    server = Local("--data", "d/dev.jsonl", "--save-every", "0.5", cwd=tmp_path)
    assert server.process.stderr is not None
    env = server.env()
    shutil.rmtree(tmp_path / "d")
    assert run(["import", str(ROOT / "examples" / "ledger.jsonl")], env).returncode == 0
    while (line := server.process.stderr.readline()).startswith("serving DynamoDB"):
        pass
    assert line == (
        f"could not save d/dev.jsonl (its directory {tmp_path / 'd'} does not exist); still "
        "serving, trying again\n"
    )
    (tmp_path / "d").mkdir()
    assert server.process.stderr.readline() == "saved d/dev.jsonl again\n"
    assert _file_lines(tmp_path / "d" / "dev.jsonl") == 6
    deadline = time.monotonic() + 10
    while not (tmp_path / "d" / ".dev.jsonl.stream").exists():  # saved just after FILE
        assert time.monotonic() < deadline, "the save wrote no stream"
        time.sleep(0.05)
    shutil.rmtree(tmp_path / "d")
    assert run(["rm", "build", "sb-2", "--yes"], env).returncode == 0  # still serving
    code, stderr = server.stop()
    assert code == 1, stderr
    kept = re.search(r"the tables are saved in (\S+) instead", stderr)
    assert kept is not None, stderr
    saved = Path(kept.group(1))
    try:
        assert _file_lines(saved) == 5
        lines = _not_local(saved.read_text().splitlines())
    finally:
        saved.unlink()
    example = (ROOT / "examples" / "ledger.jsonl").read_text().splitlines()
    assert len(lines) == sum('"sb-2"' not in line for line in example) == 5
    assert all('"sb-2"' not in line for line in lines)


def test_the_lock_is_beside_the_data_and_follows_no_link(tmp_path: Path) -> None:
    """The lock was first a predictable name in the shared temporary directory, opened for
    writing and truncated (a link planted there made `local` truncate its target), then a
    file in a directory under TMPDIR (two shells with different TMPDIRs both served one
    data file, the red team found). It is now beside the data file, opened without
    following a link."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / ".dev.jsonl.lock").symlink_to(victim)
    done = run(["local", "--port", "0", "--data", "dev.jsonl"], bare_env(), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(
        f"error: --data: cannot open the lock file {tmp_path / '.dev.jsonl.lock'} ("
    )
    assert victim.read_text() == "precious" and not (tmp_path / "dev.jsonl").exists()
    (tmp_path / ".dev.jsonl.lock").unlink()
    first = Local("--data", "dev.jsonl", cwd=tmp_path)
    try:
        for tmpdir in ("t1", "t2"):
            (tmp_path / tmpdir).mkdir()
            env = bare_env(TMPDIR=str(tmp_path / tmpdir))
            second = run(["local", "--port", "0", "--data", "dev.jsonl"], env, cwd=tmp_path)
            assert second.returncode == 1 and "is in use by another" in second.stderr
    finally:
        assert first.stop()[0] == 0


def test_closing_the_terminal_saves_and_stops(tmp_path: Path) -> None:
    """SIGHUP (a terminal or an SSH session closed) ended `local` on the spot, unsaved."""
    server = Local("--data", "dev.jsonl", "--save-every", "60", cwd=tmp_path)
    assert run(["import", str(ROOT / "examples" / "ledger.jsonl")], server.env()).returncode == 0
    code, stderr = server.stop(signal.SIGHUP)
    assert code == 0, stderr
    assert stderr.splitlines()[-1].startswith("SIGHUP: stopped; saved 6 entries")
    assert _file_lines(tmp_path / "dev.jsonl") == 6


def test_a_data_file_replaced_by_a_fifo_between_the_look_and_the_write_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save looked at a regular file; a FIFO took its place before the write opened it
    (ENXIO, "No such device or address"): the reason given is the replacement, as when the
    look finds it."""
    import errno

    from sandbox_ledger.cli import local_writes, transfer

    data = tmp_path / "dev.jsonl"
    data.write_text("")

    def replaced_then_opened(lines: object, path: Path) -> None:
        path.unlink()
        os.mkfifo(path)
        raise OSError(errno.ENXIO, os.strerror(errno.ENXIO), str(path))

    monkeypatch.setattr(transfer, "_export", replaced_then_opened)
    assert local_writes.write_data(("{}\n",), data) == "not a regular file any more"
    # Any other failure of the write keeps its own reason.
    data.unlink()
    data.write_text("")

    def full(lines: object, path: Path) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(transfer, "_export", full)
    assert local_writes.write_data(("{}\n",), data) == os.strerror(errno.ENOSPC)


def test_a_data_file_turned_into_a_fifo_is_a_failed_save_not_a_hang(tmp_path: Path) -> None:
    """A save opened a FIFO put in the data file's place and waited for a reader forever;
    SIGTERM and Ctrl-C could not end it (only kill -9, losing the tables)."""
    server = Local("--data", "dev.jsonl", "--save-every", "0.5", cwd=tmp_path)
    assert server.process.stderr is not None
    assert run(["import", str(ROOT / "examples" / "ledger.jsonl")], server.env()).returncode == 0
    data = tmp_path / "dev.jsonl"
    deadline = time.monotonic() + 10
    # Wait for the save of all 6 entries: a save still in flight would rename its file over
    # the FIFO, and then no save fails (CI hung here once, waiting for the line below).
    while time.monotonic() < deadline and _saved_lines(data) != 6:
        time.sleep(0.1)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fifo.replace(data)  # at once: a missing data file would be saved again on its own
    assert run(["rm", "build", "sb-2", "--yes"], server.env()).returncode == 0  # a change
    stream, lines = server.process.stderr, queue.Queue[str]()

    def read() -> None:  # every line, then "" at the end: a line that never comes fails
        for text in iter(stream.readline, ""):
            lines.put(text)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    try:
        while (line := lines.get(timeout=30)).startswith("serving DynamoDB"):
            pass
    except queue.Empty:
        server.process.kill()
        pytest.fail("no failed save said within 30 s")
    assert line == (
        "could not save dev.jsonl (not a regular file any more); still serving, trying again\n"
    )
    server.process.stderr = None  # the thread reads it to its end
    code, _ = server.stop()
    stderr = "".join(iter(lambda: lines.get(timeout=30), ""))
    assert code == 1 and "the tables are saved in" in stderr, stderr
    saved = Path(re.search(r"the tables are saved in (\S+) instead", stderr).group(1))  # type: ignore[union-attr]
    assert _file_lines(saved) == 5
    saved.unlink()


@pytest.mark.parametrize(
    ("entries", "said"), [(1, "1 entry,"), (0, "0 entries,"), (6, "6 entries,")]
)
def test_the_closing_summary_counts_entries_in_words(entries: int, said: str) -> None:
    from sandbox_ledger.cli.local_saves import Saver
    from sandbox_ledger.local.persist import DataState

    saver = Saver(Path("dev.jsonl"), None, None, None)  # type: ignore[arg-type]  # not used here
    saver.mirror = DataState(
        "dev.jsonl", {("build", "sb-1"): [(0, "")] * entries}, {"python": (0, "")}
    )
    saver.file = Path(__file__).stat()  # saved
    assert saver.summary() == (
        f"; saved {said} 1 environment record(s) and 0 resource record(s) to dev.jsonl"
    )


def _ledger_lines(entries: int, prefix: str = "sb") -> str:
    """``entries`` export lines in sessions of 6 (created, two execs, closed)."""
    events = ["sandbox.created", "exec.started", "exec.complete"] * 2
    lines = []
    for i in range(entries):
        session, position = divmod(i, 6)
        event = "sandbox.closed" if position == 5 else events[position]
        entry = {
            "ts": 1_700_000_000_000 + i,
            "name": f"job-{session % 50:02d}",
            "sandboxId": f"{prefix}-{session:08d}",
            "stepIndex": position // 2,
            "event": event,
        }
        lines.append(json.dumps(entry) + "\n")
    return "".join(lines)


def _stopped_while_loading(cwd: Path, data: str) -> tuple[int, str]:
    """Start ``local --data DATA`` with stderr on a pseudo-terminal, send SIGINT once its
    loading bar shows (the load has begun, whatever the machine's speed: a fixed wait raced a
    load of 3-4 s), and return its exit code and what it said after the bar (the bar's own
    drawing left out). It must end within 10 s of the signal."""
    leader, follower = pty.openpty()
    process = popen(
        ["local", "--port", "0", "--data", data],
        {**bare_env(), "TERM": "xterm", "COLUMNS": "100"},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    seen, signalled = bytearray(), None
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 60)
            assert ready, f"no output for 60 s: {seen!r}"
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            seen += chunk
            if signalled is None and f"loading {data}".encode() in seen:
                assert b"loaded " not in seen, seen
                process.send_signal(signal.SIGINT)
                signalled = time.monotonic()
        code = process.wait(timeout=60)
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
    assert signalled is not None and time.monotonic() - signalled < 10, seen
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode("utf-8", "replace"))
    lines = [line.strip() for line in re.split(r"[\r\n]+", shown) if line.strip()]
    return code, "\n".join(line for line in lines if not line.startswith(f"loading {data}"))


@pytest.mark.slow
def test_at_100000_entries_a_written_entry_survives_kill_9_and_the_server_restarts(
    tmp_path: Path,
) -> None:
    """At 20,000 entries a save took 40 s and Ctrl-C 69 s; at 110,000 a restart took 451 s
    and `kill -9` lost a third of what the import had been told was written. Now: a save
    appends what changed, so entries written a save interval before `kill -9` are kept; the
    restart on 100,000 entries serves, answers, exports them all and stops at Ctrl-C."""
    from sandbox_ledger.local.persist import read_data

    (tmp_path / "dev.jsonl").write_text(_ledger_lines(100_000))
    before = (tmp_path / "dev.jsonl").read_bytes()
    code, said = _stopped_while_loading(tmp_path, "dev.jsonl")
    assert code == 0, said
    assert said.splitlines()[-1] == (
        "SIGINT: stopped while loading dev.jsonl: nothing saved, the file is as it was"
    ), said
    assert (tmp_path / "dev.jsonl").read_bytes() == before
    started = time.monotonic()
    server = Local("--data", "dev.jsonl", "--save-every", "1", cwd=tmp_path)
    assert time.monotonic() - started < 180  # a few seconds quiet: docs/benchmarks.md
    (tmp_path / "more.jsonl").write_text(_ledger_lines(24, prefix="new"))
    imported = run(["import", "more.jsonl"], server.env(), cwd=tmp_path, timeout=300)
    assert imported.returncode == 0, imported.stderr
    time.sleep(3)  # the next save, with room for a loaded machine
    server.process.kill()
    server.process.wait()
    assert read_data(tmp_path / "dev.jsonl").entries == 100_024

    again = Local("--data", "dev.jsonl", "--save-every", "1", cwd=tmp_path)
    # Every session from .dev.jsonl.image (written once the last server served, the new
    # ones appended by its saves): 3.8 s of CPU quiet, 10.4 s building them (benchmarks.md).
    with open(f"/proc/{again.process.pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    assert (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") < 7.5
    env = again.env()
    listed = run(["ls", "--name", "job-00", "--json"], env)
    assert listed.returncode == 0, listed.stderr
    exported = run(["export", "-o", "out.jsonl"], env, cwd=tmp_path, timeout=600)
    assert exported.returncode == 0, exported.stderr
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 100_024
    started = time.monotonic()
    code, stderr = again.stop(signal.SIGINT)
    assert code == 0 and time.monotonic() - started < 10, stderr
    assert stderr.splitlines()[-1].startswith("SIGINT: stopped; saved 100024 entries")


@pytest.mark.slow
def test_a_local_without_data_holding_many_entries_stops_within_2_s(tmp_path: Path) -> None:
    """Ctrl-C on a `local` without --data holding many entries took 9.8 s (the interpreter
    tearing moto's tables down, issue 43): it ends at once, its tables gone as it says."""
    lines = tmp_path / "many.jsonl"
    with lines.open("w") as out:
        for s in range(500):
            for i, event in enumerate(["sandbox.created", *["exec.started"] * 8, "sandbox.closed"]):
                step = -1 if event.startswith("sandbox.") else i
                out.write(
                    json.dumps(
                        {
                            "ts": 1_764_504_000_000 + 100 * s + i,
                            "name": "many",
                            "sandboxId": f"sb-{s}",
                            "stepIndex": step,
                            "event": event,
                        }
                    )
                    + "\n"
                )
    server = Local(cwd=tmp_path)
    imported = run(["import", str(lines)], server.env())
    assert imported.returncode == 0 and "5000 new" in imported.stderr, imported.stderr
    began = time.monotonic()
    code, stderr = server.stop(signal.SIGINT)
    took = time.monotonic() - began
    assert code == 0 and "SIGINT: stopped (no --data: the tables are gone)" in stderr, stderr
    assert took < 2.0, took


def test_local_strict_refuses_what_dynamodb_refuses(tmp_path: Path) -> None:
    """``local --strict``: a client's 26-item batch is refused as DynamoDB refuses it; the
    CLI's own import (batches of 25) works unchanged."""
    import boto3
    from botocore.exceptions import ClientError

    server = Local("--strict", cwd=tmp_path)
    try:
        env = server.env()
        imported = run(["import", str(ROOT / "examples" / "ledger.jsonl")], env)
        assert imported.returncode == 0, imported.stderr
        ddb = boto3.client(
            "dynamodb",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
        puts = [
            {"PutRequest": {"Item": {"PK": {"S": "x"}, "SK": {"S": f"{i:02d}"}}}} for i in range(26)
        ]
        with pytest.raises(ClientError, match="ValidationException"):
            ddb.batch_write_item(RequestItems={env["SANDBOX_LEDGER_TABLE"]: puts})
    finally:
        code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    [serving] = [line for line in stderr.splitlines() if line.startswith("serving DynamoDB")]
    assert serving.startswith("serving DynamoDB (strict: ") and "docs/fidelity.md" in serving
    assert "; with" not in serving  # the defaults: no field named
    # On exit it counts what the profile refused, by code.
    assert "strict profile refused: 1 ValidationException" in stderr.splitlines()


def test_local_strict_option_sets_fields_and_says_which(tmp_path: Path) -> None:
    """``--strict-option NAME=VALUE`` (repeated, or fields joined by commas) implies
    ``--strict``, applies its fields (a write rate of one unit a second per partition key:
    the second write to one is throttled) and names them on the serving line."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    server = Local(
        "--strict-option",
        "rate_scale=0.001,conflict_hold=0",
        "--strict-option",
        "ttl_delay=none",
        cwd=tmp_path,
    )
    try:
        env = server.env()
        ddb = boto3.client(
            "dynamodb",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
            config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),  # no resend
        )
        item = {"PK": {"S": "hot"}, "SK": {"S": "1"}}
        ddb.put_item(TableName=env["SANDBOX_LEDGER_TABLE"], Item=item)
        # One unit a second: of ten writes at once, one is throttled however slow the
        # machine (each would have to take a second for the bucket to fill again).
        with pytest.raises(ClientError, match="ProvisionedThroughputExceededException"):
            for n in range(2, 12):
                key = {**item, "SK": {"S": str(n)}}
                ddb.put_item(TableName=env["SANDBOX_LEDGER_TABLE"], Item=key)
    finally:
        code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    [serving] = [line for line in stderr.splitlines() if line.startswith("serving DynamoDB")]
    assert serving.startswith("serving DynamoDB (strict: "), serving
    assert "docs/fidelity.md; with rate_scale=0.001,conflict_hold=0,ttl_delay=none) at" in serving


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--strict-option", "index_delay=1"], "index_delay: '1' is not LOW:HIGH seconds"),
        (["--strict-option", "rate=1"], "rate: not a field of the strict profile"),
        (["--strict", "--strict-option", "rate_scale=0"], "rate_scale: must be above 0, not '0'"),
        (["--strict-option", "shard_key=row"], "shard_key: must be 'item' or 'partition'"),
        (["--strict-option", "ttl_delay"], "strict: 'ttl_delay' is not name=value"),
    ],
)
def test_local_strict_option_refuses_a_bad_field_before_starting(
    tmp_path: Path, options: list[str], says: str
) -> None:
    """A bad ``--strict-option``: one line naming the option and the field, exit code 2 (a
    usage error), nothing started: no data file, no lock."""

    port = str(free_port())
    done = run(["local", "--port", port, "--data", "dev.jsonl", *options], bare_env(), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: --strict-option: ") and says in line, line
    assert done.stdout == "" and list(tmp_path.iterdir()) == []


def test_a_restart_takes_the_image_and_one_damaged_is_ignored_with_a_word(
    tmp_path: Path,
) -> None:
    """The first start on a FILE of 6,000 entries writes ``.FILE.image`` once it serves; the
    next takes every session from it; a damaged one is said, ignored and written again; the
    data is FILE's each time (issue 41, item 5)."""
    from sandbox_ledger.local import image

    data = tmp_path / "dev.jsonl"
    data.write_text(_ledger_lines(6_000))
    before = data.read_bytes()
    kept = tmp_path / ".dev.jsonl.image"

    def start(replacing: bytes = b"") -> tuple[Local, str]:
        """A server on FILE, once its image is other than ``replacing``; ls; Ctrl-C."""
        server = Local("--data", "dev.jsonl", cwd=tmp_path)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not kept.exists() or kept.read_bytes() == replacing):
            time.sleep(0.1)
        listed = run(["ls", "--name", "job-07", "--json"], server.env())
        assert listed.returncode == 0, listed.stderr
        assert len(json.loads(listed.stdout)["sessions"]) == 20
        code, said = server.stop(signal.SIGINT)
        assert code == 0, said
        return server, said

    _, said = start()
    assert kept.exists() and "ignored" not in said
    # FILE's lines (written whole, in export's order) and the line the first save added
    # naming the sessions' sequences (FILE named none): the same from then on.
    named = data.read_bytes()
    assert _file_lines(data) == 6_000
    assert sorted(named.splitlines()[:-1]) == sorted(before.splitlines())
    found = image.read(kept)
    assert found.ignored is None and len(found.sessions) == 1_000
    written = kept.read_bytes()
    _, said = start()
    assert "ignored" not in said and kept.read_bytes() == written  # taken, nothing to write
    damaged = bytearray(written)
    damaged[written.index(b"\n", len(image.MAGIC)) + 100] ^= 0x20  # in the first record
    kept.write_bytes(bytes(damaged))
    _, said = start(replacing=bytes(damaged))
    assert f"{kept.resolve()}: damaged (a record's digest does not match); ignored" in said
    assert image.read(kept).ignored is None  # written again
    assert data.read_bytes() == named
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".dev.jsonl.image",
        ".dev.jsonl.stream",
        "dev.jsonl",
    ]


def test_a_restart_on_its_data_is_the_same_store_and_its_feed_reads_on(
    tmp_path: Path,
) -> None:
    """A listing's cursor from before a restart of ``local --data`` pages on after it (the
    table is FILE's, one identity); a ``changes()`` position from before it delivers the
    changes after it, once, then those of writes after the restart (the stream is the one
    before, kept beside FILE). Before, the restarted server served a new stream and the
    position was said to be trimmed."""
    from sandbox_ledger import LedgerEntry, ListSandboxOptions
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    def adapter(env: dict[str, str]) -> SyncDynamoDBAdapter:
        return SyncDynamoDBAdapter(
            env["SANDBOX_LEDGER_TABLE"],
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
        )

    server = Local("--data", "dev.jsonl", cwd=tmp_path)
    env = server.env()
    assert run(["import", str(ROOT / "examples" / "ledger.jsonl")], env).returncode == 0
    with adapter(env) as ledger:
        first = ledger.list_all_sandbox_page(ListSandboxOptions(limit=1))
        feed = ledger.changes()
        position = next(feed).position
        following = next(feed)  # the change after the position
        feed.close()
    assert first.cursor is not None
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr

    again = Local("--data", "dev.jsonl", cwd=tmp_path)
    try:
        with adapter(again.env()) as ledger:  # a new client: it reads the table's identity
            rest = ledger.list_all_sandbox_page(ListSandboxOptions(cursor=first.cursor))
            assert sorted(s.sandbox_id for s in [*first.sessions, *rest.sessions]) == [
                "sb-1",
                "sb-2",
            ]
            feed = ledger.changes(after=position)
            assert next(feed) == following
            seen = []
            ledger.append(
                LedgerEntry(
                    ts=1, name="new", sandbox_id="after", step_index=-1, event="sandbox.created"
                )
            )
            while not seen or seen[-1].sandbox_id != "after":
                seen.append(next(feed))
            assert len({c.id for c in [following, *seen]}) == len(seen) + 1  # once each
            feed.close()
    finally:
        code, stderr = again.stop(signal.SIGTERM)
    assert code == 0, stderr


def test_clients_that_come_while_it_loads_wait_for_the_table_and_all_of_it(
    tmp_path: Path,
) -> None:
    """A client that knows the port (a fixed --port, a server restarted under its clients)
    sends requests while ``local --data`` builds its table from FILE: each waits until the
    table is made and loaded, then is served on all of it. Before, the server answered
    while it loaded (a table missing, sessions half loaded), and a client's write could
    make the load fail: the server did not start."""
    from sandbox_ledger import LedgerEntry
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    (tmp_path / "dev.jsonl").write_text(_ledger_lines(6_000))
    port = free_port()
    got: dict[str, Any] = {}

    def client() -> None:
        ledger = SyncDynamoDBAdapter(
            "sandbox-ledger", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1"
        )
        with ledger:
            while True:  # the first moment the port takes a connection
                try:
                    socket.create_connection(("127.0.0.1", port), 0.1).close()
                    break
                except OSError:
                    time.sleep(0.005)
            try:
                got["last"] = ledger.read_in_append_order("job-49", "sb-00000999")
                ledger.append(
                    LedgerEntry(
                        ts=1,
                        name="new",
                        sandbox_id="during",
                        step_index=-1,
                        event="sandbox.created",
                    )
                )
                got["during"] = ledger.read_in_append_order("new", "during")
            except Exception as exc:
                got["error"] = exc

    reader = threading.Thread(target=client)
    reader.start()
    server = Local("--data", "dev.jsonl", "--port", str(port), cwd=tmp_path)
    reader.join(timeout=120)
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    assert "error" not in got, got
    lines = [json.loads(line) for line in _ledger_lines(6_000).splitlines()]
    want = [line["event"] for line in lines if line["sandboxId"] == "sb-00000999"]
    assert [e.event for e in got["last"]] == want and len(want) == 6
    assert len(got["during"]) == 1


def test_every_write_acknowledged_before_it_stops_is_in_its_data(tmp_path: Path) -> None:
    """Writers keep writing while ``local --data`` is sent SIGTERM: every append the server
    acknowledged is in FILE when it has stopped (none only a later save would have taken:
    --save-every is far off). Before, it served writes after its last save read what
    changed, and answered them: acknowledged, then lost at the restart."""
    from botocore.config import Config

    from sandbox_ledger import LedgerEntry
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.local.persist import read_data

    server = Local("--data", "dev.jsonl", "--save-every", "600", cwd=tmp_path)
    endpoint = server.env()["AWS_ENDPOINT_URL"]
    acknowledged: dict[str, list[int]] = {}
    stop = threading.Event()

    def writer(sid: str) -> None:
        done = acknowledged.setdefault(sid, [])
        # Two tries: a 503 is sent once again, then the server is gone and the writer ends.
        once = Config(retries={"total_max_attempts": 2, "mode": "standard"}, connect_timeout=1)
        with SyncDynamoDBAdapter(
            "sandbox-ledger", endpoint_url=endpoint, region_name="us-east-1", config=once
        ) as ledger:
            for step in range(100_000):
                if stop.is_set():
                    return
                entry = LedgerEntry(
                    ts=step, name="n", sandbox_id=sid, step_index=step, event="exec.started"
                )
                try:
                    ledger.append(entry)
                except Exception:  # the server is going: not acknowledged
                    return
                done.append(step)

    writers = [threading.Thread(target=writer, args=(f"w{n}",)) for n in range(3)]
    for thread in writers:
        thread.start()
    time.sleep(1.5)
    code, stderr = server.stop(signal.SIGTERM)
    stop.set()
    for thread in writers:
        thread.join(timeout=120)
    assert code == 0, stderr
    assert all(acknowledged.values()), acknowledged
    saved = read_data(tmp_path / "dev.jsonl")
    for sid, steps in acknowledged.items():
        stored = {json.loads(line)["stepIndex"] for _, line in saved.sessions[("n", sid)]}
        assert set(steps) <= stored, (sid, sorted(set(steps) - stored))


@pytest.mark.slow
def test_a_client_held_while_it_loads_is_refused_if_it_stops_before_serving(
    tmp_path: Path,
) -> None:
    """Ctrl-C while ``local --data`` loads: a client's request held meanwhile is answered
    503 (and the SDK's resends find no server), never served on a table half loaded."""
    import urllib.request

    (tmp_path / "dev.jsonl").write_text(_ledger_lines(60_000))
    port = free_port()
    loading = popen(
        ["local", "--port", str(port), "--data", "dev.jsonl"],
        bare_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    answer: dict[str, Any] = {}

    def client() -> None:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/",
            data=json.dumps({"TableName": "sandbox-ledger"}).encode(),
            headers={
                "X-Amz-Target": "DynamoDB_20120810.DescribeTable",
                "Content-Type": "application/x-amz-json-1.0",
                "Authorization": "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/"
                "dynamodb/aws4_request, SignedHeaders=host, Signature=0",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                answer["status"] = response.status
        except urllib.error.HTTPError as exc:
            answer["status"] = exc.code
        except OSError as exc:
            answer["error"] = exc

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the port takes connections: the load has begun
        try:
            socket.create_connection(("127.0.0.1", port), 0.1).close()
            break
        except OSError:
            time.sleep(0.01)
    thread = threading.Thread(target=client)
    thread.start()
    time.sleep(0.5)
    loading.send_signal(signal.SIGINT)
    loading.communicate(timeout=60)
    thread.join(timeout=60)
    assert answer.get("status") == 503 or "error" in answer, answer


def test_local_takes_the_sweep_windows_of_its_table(tmp_path: Path) -> None:
    """``--stale-after`` and ``--retain-failed`` go into the table's descriptor, as ``table
    create`` puts them: the sweeper and the owners read them from there."""
    server = Local(
        *("--stale-after", "4", "--retain-failed", "8", "--stream-records", "5000"), cwd=tmp_path
    )
    try:
        described = run(["table", "create", "--json"], server.env())  # the table's own kept
        assert described.returncode == 0, described.stderr
        sweep = json.loads(described.stdout)["sweep"]
        assert (sweep["staleAfterSeconds"], sweep["retainFailedSeconds"]) == (4, 8), sweep
    finally:
        code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr


def test_a_restart_restores_each_resource_record_as_it_was(tmp_path: Path) -> None:
    """A resource record's revision, incarnation and TTL come back from ``local --data``'s
    FILE as they were: its owner's next heartbeat goes on from them. Before, a restart put
    each record anew (revision 1, a new incarnation), so an owner's and a sweeper's view of a
    live record no longer matched the table's: the soak saw live owners' records expired."""
    from resources.resource_fixtures import record
    from sandbox_ledger.resources import SyncResourceRecordStore

    def store(env: dict[str, str]) -> SyncResourceRecordStore:
        return SyncResourceRecordStore(
            env["SANDBOX_LEDGER_TABLE"],
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
        )

    server = Local("--data", "dev.jsonl", cwd=tmp_path)
    kept = record()
    with store(server.env()) as records:
        records.put(kept)
        records.touch(kept.id)
        before = records.touch(kept.id)
    assert before.revision == 3 and before.incarnation is not None
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr

    again = Local("--data", "dev.jsonl", cwd=tmp_path)
    try:
        with store(again.env()) as records:
            after = records.get_versioned(kept.id)
            assert after is not None
            assert (after.revision, after.incarnation, after.expires_at) == (
                before.revision,
                before.incarnation,
                before.expires_at,
            )
            assert records.touch(kept.id).revision == 4
    finally:
        code, stderr = again.stop(signal.SIGTERM)
    assert code == 0, stderr


def _first_cursor(server: Local) -> str:
    """A listing's cursor from ``server`` (one page of one session: more follow)."""
    from sandbox_ledger import ListSandboxOptions
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    env = server.env()
    with SyncDynamoDBAdapter(
        env["SANDBOX_LEDGER_TABLE"], endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1"
    ) as ledger:
        page = ledger.list_all_sandbox_page(ListSandboxOptions(limit=1))
    assert page.cursor is not None
    return page.cursor


def _page_on(server: Local, cursor: str) -> list[str]:
    from sandbox_ledger import ListSandboxOptions
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    env = server.env()
    with SyncDynamoDBAdapter(
        env["SANDBOX_LEDGER_TABLE"], endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1"
    ) as ledger:
        page = ledger.list_all_sandbox_page(ListSandboxOptions(cursor=cursor))
    return [s.sandbox_id for s in page.sessions]


def test_another_store_at_the_same_path_refuses_the_first_ones_cursor(tmp_path: Path) -> None:
    """A cursor is bound to its store: ``rm dev.jsonl`` then ``local --data dev.jsonl`` on
    other data is another store, and a cursor of the first is refused (InvalidInputError),
    as another table's is."""
    from sandbox_ledger.errors import InvalidInputError

    (tmp_path / "dev.jsonl").write_text(_ledger_lines(18, prefix="first"))
    server = Local("--data", "dev.jsonl", cwd=tmp_path)
    cursor = _first_cursor(server)
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    (tmp_path / "dev.jsonl").write_text(_ledger_lines(18, prefix="other"))
    again = Local("--data", "dev.jsonl", cwd=tmp_path)
    try:
        with pytest.raises(InvalidInputError, match="cursor"):
            _page_on(again, cursor)
    finally:
        code, stderr = again.stop(signal.SIGTERM)
    assert code == 0, stderr


def test_a_moved_data_file_is_the_same_store(tmp_path: Path) -> None:
    """``mv dev.jsonl kept.jsonl``: the same data, the same store; a cursor from before pages
    on after the restart as it does at the same path."""
    (tmp_path / "dev.jsonl").write_text(_ledger_lines(18))
    server = Local("--data", "dev.jsonl", cwd=tmp_path)
    cursor = _first_cursor(server)
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    (tmp_path / "dev.jsonl").rename(tmp_path / "kept.jsonl")
    again = Local("--data", "kept.jsonl", cwd=tmp_path)
    try:
        assert len(_page_on(again, cursor)) == 2
    finally:
        code, stderr = again.stop(signal.SIGTERM)
    assert code == 0, stderr


def test_a_data_file_names_its_store_from_its_first_save_on(tmp_path: Path) -> None:
    """FILE names the identity of the store it holds (``"store"`` in a ``localSequences``
    line), also with nothing else in it, and keeps it: each later start serves a table with
    that identity and saves it again."""
    data = tmp_path / "dev.jsonl"

    def named() -> str:
        stores = [
            value["store"]
            for line in data.read_text().splitlines()
            if (value := json.loads(line)).get("kind") == "localSequences" and "store" in value
        ]
        assert len(stores) == 1, stores
        return str(stores[0])

    server = Local("--data", "dev.jsonl", cwd=tmp_path)
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    first = named()
    assert re.fullmatch("[0-9a-f]{32}", first)
    data.write_text(data.read_text() + _ledger_lines(4))  # an export appended to it
    server = Local("--data", "dev.jsonl", cwd=tmp_path)
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    assert named() == first
    other = tmp_path / "other.jsonl"
    other.write_text(_ledger_lines(4))  # an export: no store named, a new one given
    server = Local("--data", "other.jsonl", cwd=tmp_path)
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    data = other
    assert named() != first


def test_the_same_file_by_another_name_is_the_same_store(tmp_path: Path) -> None:
    """Held: FILE given as a relative path, then through a link and another relative path,
    is one store (one identity): a cursor from before the restart pages on."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dev.jsonl").write_text(_ledger_lines(18))
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "data" / "dev.jsonl")
    server = Local("--data", "data/dev.jsonl", cwd=tmp_path)
    cursor = _first_cursor(server)
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    for name, cwd in (("link.jsonl", tmp_path), ("../data/./dev.jsonl", tmp_path / "data")):
        again = Local("--data", name, cwd=cwd)
        try:
            assert len(_page_on(again, cursor)) == 2
        finally:
            code, stderr = again.stop(signal.SIGTERM)
        assert code == 0, stderr


def test_what_the_strict_profiles_ttl_deleted_is_gone_from_its_data(tmp_path: Path) -> None:
    """``local --strict --data``: a resource record the profile's TTL service deleted is gone
    from FILE once saved. Before, a TTL deletion (made while serving another request) was
    not among the writes a save reads, so FILE kept the record: the next start brought it
    back (read, listed, swept) until the TTL service deleted it a second time."""
    from resources.resource_fixtures import record
    from sandbox_ledger.local.persist import read_data
    from sandbox_ledger.resources import SyncResourceRecordStore

    server = Local(
        *("--data", "dev.jsonl", "--save-every", "0.5", "--stale-after", "1", "--strict"),
        *("--strict-option", "ttl_delay=0,ttl_every=0.1"),
        cwd=tmp_path,
    )
    env = server.env()
    kept = record()
    with SyncResourceRecordStore(
        env["SANDBOX_LEDGER_TABLE"],
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        ttl_horizon=timedelta(seconds=1),
    ) as records:
        records.put(kept)
        deadline = time.monotonic() + 30
        while records.get_versioned(kept.id) is not None:  # each request lets the TTL look
            assert time.monotonic() < deadline, "the TTL service never deleted the record"
            time.sleep(0.2)
    time.sleep(1.5)  # saves run meanwhile
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    assert kept.id not in read_data(tmp_path / "dev.jsonl").records


def test_a_transaction_held_in_flight_as_it_stops_is_saved_or_refused(tmp_path: Path) -> None:
    """Held: ``local --strict --data`` holds each TransactWriteItems ``conflict_hold`` seconds
    outside its lock; one in its hold when SIGTERM comes is answered 503 (never served after
    the last save), so every append acknowledged is in FILE."""
    from botocore.config import Config

    from sandbox_ledger import LedgerEntry
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.local.persist import read_data

    server = Local(
        *("--data", "dev.jsonl", "--save-every", "600", "--strict"),
        *("--strict-option", "conflict_hold=0.4,rate_scale=100"),
        cwd=tmp_path,
    )
    endpoint = server.env()["AWS_ENDPOINT_URL"]
    acknowledged: dict[str, list[int]] = {}
    started = threading.Barrier(4)

    def writer(sid: str) -> None:
        done = acknowledged.setdefault(sid, [])
        once = Config(retries={"total_max_attempts": 2, "mode": "standard"}, connect_timeout=1)
        with SyncDynamoDBAdapter(
            "sandbox-ledger", endpoint_url=endpoint, region_name="us-east-1", config=once
        ) as ledger:
            started.wait()
            for step in range(1_000):
                entry = LedgerEntry(
                    ts=step, name="n", sandbox_id=sid, step_index=step, event="exec.started"
                )
                try:
                    ledger.append(entry)
                except Exception:  # the server is going: not acknowledged
                    return
                done.append(step)

    writers = [threading.Thread(target=writer, args=(f"w{n}",)) for n in range(3)]
    for thread in writers:
        thread.start()
    started.wait()
    time.sleep(2.1)  # mid-hold, most likely: each append holds 0.4 s
    code, stderr = server.stop(signal.SIGTERM)
    for thread in writers:
        thread.join(timeout=120)
    assert code == 0, stderr
    assert all(acknowledged.values()), acknowledged
    saved = read_data(tmp_path / "dev.jsonl")
    for sid, steps in acknowledged.items():
        stored = {json.loads(line)["stepIndex"] for _, line in saved.sessions[("n", sid)]}
        assert set(steps) <= stored, (sid, sorted(set(steps) - stored))


def test_a_copy_of_its_data_is_another_store(tmp_path: Path) -> None:
    """Held: two servers on copies of one FILE are two stores (the copies diverge from their
    first write): a cursor of one is refused by the other. A fix that keeps the identity in
    FILE (test_a_moved_data_file_is_the_same_store) must keep this."""
    from sandbox_ledger.errors import InvalidInputError

    (tmp_path / "dev.jsonl").write_text(_ledger_lines(18))
    shutil.copy(tmp_path / "dev.jsonl", tmp_path / "copy.jsonl")
    first = Local("--data", "dev.jsonl", cwd=tmp_path)
    second = Local("--data", "copy.jsonl", cwd=tmp_path)
    try:
        with pytest.raises(InvalidInputError, match="cursor"):
            _page_on(second, _first_cursor(first))
    finally:
        for server in (first, second):
            code, stderr = server.stop(signal.SIGTERM)
            assert code == 0, stderr


def test_a_follow_across_a_restart_goes_on_and_a_writer_goes_on_numbering(
    tmp_path: Path,
) -> None:
    """A restart of ``local --data`` keeps each session's incarnation and its marks'
    numbers (FILE names them: a ``localSequences`` line): a follow polling across it, and one
    resumed with a position from before it, hand out every entry appended after the restart
    once, in order, and end after ``sandbox.closed``; a writer that kept running appends on
    after it, each entry once. Before, the load began each session in a new incarnation,
    which a follower takes for a delete of its session: both follows ended at once."""
    from sandbox_ledger import LedgerEntry
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    port = free_port()

    def entry(step: int, event: str = "exec.started") -> LedgerEntry:
        return LedgerEntry(ts=step, name="job", sandbox_id="sb", step_index=step, event=event)

    def adapter() -> SyncDynamoDBAdapter:
        return SyncDynamoDBAdapter(
            "sandbox-ledger", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1"
        )

    server = Local("--data", "dev.jsonl", "--port", str(port), cwd=tmp_path)
    with adapter() as writer, adapter() as reader:
        for step, event in enumerate(["sandbox.created", "exec.started", "exec.started"]):
            writer.append(entry(step, event))
        follow = reader.follow("job", "sb")
        before = [next(follow) for _ in range(3)]
        code, stderr = server.stop(signal.SIGTERM)
        assert code == 0, stderr
        saved = (tmp_path / "dev.jsonl").read_text().splitlines()

        server = Local("--data", "dev.jsonl", "--port", str(port), cwd=tmp_path)
        try:
            for step in (3, 4):
                writer.append(entry(step))  # its guess of the next mark from before holds
            writer.append(entry(5, "sandbox.closed"))
            after = [followed.entry.step_index for followed in follow]
            with adapter() as resumed:
                again = resumed.follow("job", "sb", after=before[-1].position)
                resumed_steps = [followed.entry.step_index for followed in again]
                stored = [e.step_index for e in resumed.read_in_append_order("job", "sb")]
        finally:
            code, stderr = server.stop(signal.SIGTERM)
        assert code == 0, stderr
    assert [f.entry.step_index for f in before] == [0, 1, 2]
    assert after == [3, 4, 5]
    assert resumed_steps == [3, 4, 5]
    assert stored == [0, 1, 2, 3, 4, 5]
    # One run of marks from 0, in the incarnation FILE named before the restart: the
    # writer's appends after it took the next numbers.
    named = json.loads(saved[-1])
    assert named["kind"] == "localSequences"
    [[_, _, [[incarnation, number, index]]]] = named["sessions"]
    assert (number, index) == (0, 0)
    final = json.loads((tmp_path / "dev.jsonl").read_text().splitlines()[-1])
    assert final["sessions"] == [["job", "sb", [[incarnation, 0, 0]]]]


def _keeping_transactions(url: str) -> tuple[Any, Any, list[dict[str, Any]]]:
    """A boto3 session on ``url`` whose clients keep a copy of each TransactWriteItems
    request they send (what the SDK sends again when an answer is lost), a low-level client
    of it, and the copies."""
    import copy

    import boto3

    sent: list[dict[str, Any]] = []
    session = boto3.Session(
        aws_access_key_id="local", aws_secret_access_key="local", region_name="us-east-1"
    )
    session.events.register(
        "provide-client-params.dynamodb.TransactWriteItems",
        lambda params, **_: sent.append(copy.deepcopy(params)),
    )
    return session, session.client("dynamodb", endpoint_url=url), sent


def _job_sb_keys(client: Any, *prefixes: str) -> list[str]:
    """The sort keys of the session ("job", "sb") that begin with one of ``prefixes``, in
    key order: each entry's head and parts, a checkpoint's marker, under its order id."""
    found = client.query(
        TableName="sandbox-ledger",
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": "S#3#job#sb"}},
    )
    return sorted(sk for item in found["Items"] if (sk := item["SK"]["S"]).startswith(prefixes))


def test_an_append_resent_after_a_restart_finds_its_entry(tmp_path: Path) -> None:
    """An append whose answer a restart of ``local --data`` cut is sent again by the SDK, the
    very request: the server had stored and saved it, and the load keeps each entry's head
    under the order id its writer chose (FILE names them), so the resend's condition finds
    it there, the transaction is cancelled on the head and the entry is stored once. Before,
    the load stored each head under a new id: the resend's head went in, its mark's
    condition failed, and the adapter sent it again with the next mark, a second copy."""

    from botocore.exceptions import ClientError

    from sandbox_ledger import LedgerEntry
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    session, client, sent = _keeping_transactions(url)

    def entry(step: int, event: str = "exec.complete") -> LedgerEntry:
        return LedgerEntry(ts=step, name="job", sandbox_id="sb", step_index=step, event=event)

    server = Local("--data", "dev.jsonl", "--port", str(port), cwd=tmp_path)
    with SyncDynamoDBAdapter("sandbox-ledger", endpoint_url=url, session=session) as writer:
        for step, event in enumerate(["sandbox.created", "exec.complete"]):
            writer.append(entry(step, event))
        before = _job_sb_keys(client, "E#")
        code, stderr = server.stop(signal.SIGTERM)
        assert code == 0, stderr
        server = Local("--data", "dev.jsonl", "--port", str(port), cwd=tmp_path)
        try:
            after = _job_sb_keys(client, "E#")
            with pytest.raises(ClientError) as resent:
                client.transact_write_items(**sent[-1])  # the last append's request, again
            writer.append(entry(2))
            stored = [e.step_index for e in writer.read_in_append_order("job", "sb")]
            summary = writer.get_sandbox_details("job", "sb")
        finally:
            code, stderr = server.stop(signal.SIGTERM)
        assert code == 0, stderr
    assert len(before) == 2 and after == before
    reasons = resent.value.response["CancellationReasons"]
    assert reasons[0]["Code"] == "ConditionalCheckFailed"  # the head: there already
    assert stored == [0, 1, 2]
    assert summary is not None and summary.exec_count == 2  # each exec.complete once


def test_an_owners_conditional_write_from_before_a_restart_goes_on_after_it(
    tmp_path: Path,
) -> None:
    """A resource record keeps its revision and incarnation across a restart of ``local
    --data`` (FILE's record line names them): an owner's write conditional on what it read
    before the restart lands after it. Before, the load stored each record anew (revision 1,
    a new incarnation) and the write failed as a conflict."""
    from resources.resource_fixtures import record
    from sandbox_ledger.resources import SyncResourceRecordStore

    mine = record()
    server = Local("--data", "dev.jsonl", cwd=tmp_path)
    env = server.env()
    with SyncResourceRecordStore(
        env["SANDBOX_LEDGER_TABLE"], endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1"
    ) as store:
        store.put(mine)
        read = store.touch(mine.id)
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr

    again = Local("--data", "dev.jsonl", cwd=tmp_path)
    try:
        env = again.env()
        with SyncResourceRecordStore(
            env["SANDBOX_LEDGER_TABLE"],
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
        ) as store:
            written = store.put(
                read.record,
                expected_revision=read.revision,
                expected_incarnation=read.incarnation,
            )
    finally:
        code, stderr = again.stop(signal.SIGTERM)
    assert code == 0, stderr
    assert (written.revision, written.incarnation) == (read.revision + 1, read.incarnation)


def test_a_data_file_of_an_earlier_version_names_its_sequences_from_the_first_save(
    tmp_path: Path,
) -> None:
    """FILE without ``localSequences`` lines (an earlier version's, or an export) loads each
    session in a new incarnation, and the first save (here the one on exit, nothing else
    changed) writes FILE whole naming them: a follow across the next restart goes on. Before,
    a session nothing changed had no sequence in FILE, and each restart drew another."""
    from sandbox_ledger import LedgerEntry
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    created = LedgerEntry(
        ts=1, name="job", sandbox_id="old", step_index=-1, event="sandbox.created"
    )
    (tmp_path / "dev.jsonl").write_text(json.dumps(created.wire()) + "\n")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = Local("--data", "dev.jsonl", "--port", str(port), cwd=tmp_path)
    with SyncDynamoDBAdapter("sandbox-ledger", endpoint_url=endpoint, region_name="us-east-1") as a:
        follow = a.follow("job", "old")
        assert next(follow).entry.event == "sandbox.created"
        code, stderr = server.stop(signal.SIGTERM)
        assert code == 0, stderr
        server = Local("--data", "dev.jsonl", "--port", str(port), cwd=tmp_path)
        try:
            a.append(created.model_copy(update={"ts": 2, "event": "sandbox.closed"}))
            events = [followed.entry.event for followed in follow]
        finally:
            code, stderr = server.stop(signal.SIGTERM)
        assert code == 0, stderr
    assert events == ["sandbox.closed"]
    assert _file_lines(tmp_path / "dev.jsonl") == 2


def test_entries_file_names_no_order_id_for_are_named_before_a_save_appends_ids(
    tmp_path: Path,
) -> None:
    """FILE naming order ids for a session's first entries only (an export of it appended
    to FILE, a hand edit, a save cut between its entry lines and its ``localSequences``
    line): the load gives the others new ones, and the first save writes FILE whole, naming
    them all. Before, the load counted the sessions FILE names ids for, not the ids: the
    next save of that session appended its new entries' ids as from after the load's, and
    after a ``kill -9`` the next start refused FILE ("order ids of ('job', 'sb') from entry
    3, but 2 named before")."""
    from sandbox_ledger import LedgerEntry
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.local.persist import read_data

    def append(server: Local, step: int) -> None:
        env = server.env()
        with SyncDynamoDBAdapter(
            env["SANDBOX_LEDGER_TABLE"],
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
        ) as ledger:
            ledger.append(
                LedgerEntry(ts=step, name="job", sandbox_id="sb", step_index=step, event="x.y")
            )

    data = tmp_path / "dev.jsonl"
    server = Local("--data", "dev.jsonl", cwd=tmp_path)
    for step in range(2):
        append(server, step)
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    exported = {"ts": 5, "name": "job", "sandboxId": "sb", "stepIndex": 5, "event": "x.y"}
    data.write_text(data.read_text() + json.dumps(exported) + "\n")  # no order id named
    server = Local("--data", "dev.jsonl", "--save-every", "0.5", cwd=tmp_path)
    append(server, 6)
    deadline = time.monotonic() + 30
    while '"stepIndex": 6' not in data.read_text():  # a save (not the last one) holds it
        assert time.monotonic() < deadline, data.read_text()
        time.sleep(0.1)
    server.process.kill()
    server.process.communicate(timeout=30)
    server = Local("--data", "dev.jsonl", cwd=tmp_path)
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    saved = read_data(data)
    steps = [json.loads(line)["stepIndex"] for _, line in saved.sessions[("job", "sb")]]
    assert steps == [0, 1, 5, 6]
    assert len(saved.orders[("job", "sb")]) == 4


def test_a_copy_of_a_saved_data_file_is_the_same_store(tmp_path: Path) -> None:
    """The identity is the data's: a FILE a save wrote names its store, and a copy of it
    names the same, as a copied SQLite file holds its store_id and a DynamoDB table restored
    from a backup holds its descriptor's. A cursor of one pages on in the other (a position
    in the same data, from the copy on). A copy of an export names none, and each start
    gives each its own (``test_a_copy_of_its_data_is_another_store``)."""
    (tmp_path / "dev.jsonl").write_text(_ledger_lines(18))
    server = Local("--data", "dev.jsonl", cwd=tmp_path)
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    shutil.copy(tmp_path / "dev.jsonl", tmp_path / "copy.jsonl")
    first = Local("--data", "dev.jsonl", cwd=tmp_path)
    second = Local("--data", "copy.jsonl", cwd=tmp_path)
    try:
        assert len(_page_on(second, _first_cursor(first))) == 2
    finally:
        for running in (first, second):
            code, stderr = running.stop(signal.SIGTERM)
            assert code == 0, stderr


def test_a_cursor_pages_on_after_a_kill_before_the_first_save(tmp_path: Path) -> None:
    """FILE naming no store (an export, an earlier version's FILE), served and killed
    (``kill -9``, a crash) before its first save: the next start serves the same data, and
    a cursor handed out meanwhile pages on. Before, each start gave such a FILE a new
    random identity, so the cursor was refused as another store's until a save named one."""
    data = tmp_path / "dev.jsonl"
    data.write_text(_ledger_lines(18))
    server = Local("--data", "dev.jsonl", "--save-every", "600", cwd=tmp_path)
    cursor = _first_cursor(server)
    server.process.kill()
    server.process.communicate(timeout=30)
    assert data.read_text() == _ledger_lines(18)  # never saved
    again = Local("--data", "dev.jsonl", cwd=tmp_path)
    try:
        assert len(_page_on(again, cursor)) == 2
    finally:
        code, stderr = again.stop(signal.SIGTERM)
    assert code == 0, stderr


@pytest.mark.parametrize("kind", ["checkpoint", "large"])
def test_a_checkpoint_or_a_large_entry_resent_after_a_restart_is_stored_once(
    tmp_path: Path, kind: str
) -> None:
    """Held: test_an_append_resent_after_a_restart_finds_its_entry for a checkpoint (its
    marker carries the order id too) and for an entry kept in parts: the last request of
    its append, sent again after a restart, is cancelled and the entry is stored once."""

    from botocore.exceptions import ClientError

    from sandbox_ledger import LedgerEntry
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    session, client, sent = _keeping_transactions(url)
    now = int(time.time() * 1000)  # a checkpoint's marker expires: not one of 1970

    if kind == "checkpoint":
        last = LedgerEntry(
            ts=now + 2,
            name="job",
            sandbox_id="sb",
            step_index=1,
            event="sandbox.checkpoint_created",
            payload={"snapshotId": "snap-1"},
        )
    else:
        last = LedgerEntry(
            ts=now + 2,
            name="job",
            sandbox_id="sb",
            step_index=1,
            event="exec.complete",
            payload={"stdout": random.Random(7).randbytes(500_000).hex()},  # beyond an item
        )
    server = Local("--data", "dev.jsonl", "--port", str(port), cwd=tmp_path)
    with SyncDynamoDBAdapter("sandbox-ledger", endpoint_url=url, session=session) as writer:
        writer.append(
            LedgerEntry(
                ts=now + 1, name="job", sandbox_id="sb", step_index=0, event="sandbox.created"
            )
        )
        writer.append(last)
        before = _job_sb_keys(client, "E#", "K#")  # heads, parts, markers
        code, stderr = server.stop(signal.SIGTERM)
        assert code == 0, stderr
        server = Local("--data", "dev.jsonl", "--port", str(port), cwd=tmp_path)
        try:
            after = _job_sb_keys(client, "E#", "K#")
            with pytest.raises(ClientError) as resent:
                client.transact_write_items(**sent[-1])  # the last append's request, again
            stored = writer.read_in_append_order("job", "sb")
            checkpoints = writer.list_checkpoints("job", "sb") if kind == "checkpoint" else []
        finally:
            code, stderr = server.stop(signal.SIGTERM)
        assert code == 0, stderr
    assert after == before
    kept = "K#" if kind == "checkpoint" else "E#"  # a marker, or parts ("E#ts#order#00001")
    assert any(sk.startswith(kept) and sk.count("#") == 2 + (kind == "large") for sk in before)
    reasons = resent.value.response["CancellationReasons"]
    assert reasons[0]["Code"] == "ConditionalCheckFailed"  # the head: there already
    assert [e.event for e in stored] == ["sandbox.created", last.event]
    assert stored[-1].payload == last.payload
    assert len(checkpoints) == (kind == "checkpoint")


# -- the table's stream across a restart (local/streamfile.py) ---------------------------


def _streams(port: int) -> Any:
    import boto3

    return boto3.client(
        "dynamodbstreams",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def _stream_arn(port: int) -> str:
    import boto3

    client = boto3.client(
        "dynamodb",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    return str(client.describe_table(TableName="sandbox-ledger")["Table"]["LatestStreamArn"])


def _shards(port: int, arn: str) -> dict[str, dict[str, Any]]:
    client, shards, params = _streams(port), {}, {"StreamArn": arn}
    while True:
        page = client.describe_stream(**params)["StreamDescription"]
        shards.update({s["ShardId"]: s for s in page["Shards"]})
        if not page.get("LastEvaluatedShardId"):
            return shards
        params["ExclusiveStartShardId"] = page["LastEvaluatedShardId"]


def _read_on(port: int, arn: str, at: dict[str, str], done: set[str]) -> list[dict[str, Any]]:
    """Every record after the position (``at``: shard -> last sequence number read; ``done``:
    shards read to their end), a parent shard before its children, as a consumer reads
    them; the position moved on."""
    client, shards, found = _streams(port), _shards(port, arn), []
    progress = True
    while progress:
        progress = False
        for shard in sorted(shards):
            parent = shards[shard].get("ParentShardId")
            if shard in done or (parent in shards and parent not in done):
                continue
            if shard in at:
                kind = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": at[shard]}
            else:
                kind = {"ShardIteratorType": "TRIM_HORIZON"}
            iterator = client.get_shard_iterator(StreamArn=arn, ShardId=shard, **kind).get(
                "ShardIterator"
            )
            while iterator:
                page = client.get_records(ShardIterator=iterator)
                for record in page["Records"]:
                    found.append(record)
                    at[shard] = record["dynamodb"]["SequenceNumber"]
                iterator = page.get("NextShardIterator")
                if not page["Records"]:
                    break
            if not iterator:
                done.add(shard)
                shards = _shards(port, arn)  # its children
                progress = True
    return found


def _what(records: list[dict[str, Any]]) -> list[tuple[str, str, str, str | None]]:
    """Each record's sequence number, event, keys and userIdentity type."""
    return [
        (
            r["dynamodb"]["SequenceNumber"],
            r["eventName"],
            json.dumps(r["dynamodb"]["Keys"], sort_keys=True),
            (r.get("userIdentity") or {}).get("Type"),
        )
        for r in records
    ]


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "moto"])
def test_a_restart_serves_the_same_stream_from_a_position_saved_before_it(
    tmp_path: Path, strict: bool
) -> None:
    """A record made just before SIGTERM (a put; under --strict, a TTL deletion too) is read
    after the restart from a sequence-number position saved before it, once, on the same
    stream ARN and shards; the load added no record; the writes after the restart come after
    it. Before, the restarted server served a new stream (new ARN, no records)."""
    from resources.resource_fixtures import record
    from sandbox_ledger import LedgerEntry
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.resources import SyncResourceRecordStore

    port = free_port()
    argv = ["--data", "dev.jsonl", "--port", str(port)]
    if strict:
        argv += ["--stale-after", "1", "--strict-option", "ttl_delay=0,ttl_every=0.1"]
    server = Local(*argv, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    first, last = record(), record()
    with SyncResourceRecordStore(
        "sandbox-ledger",
        endpoint_url=url,
        region_name="us-east-1",
        ttl_horizon=timedelta(seconds=1),
    ) as records:
        records.put(first)
        arn = _stream_arn(port)
        at: dict[str, str] = {}
        done: set[str] = set()
        before = _read_on(port, arn, at, done)
        shards = _shards(port, arn)
        records.put(last)  # just before the stop, read by no one yet
        if strict:  # and the TTL service's deletion of it
            deadline = time.monotonic() + 30
            while records.get_versioned(last.id) is not None:
                assert time.monotonic() < deadline, "the TTL service never deleted it"
                time.sleep(0.1)
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr

    again = Local(*argv, cwd=tmp_path)
    try:
        assert _stream_arn(port) == arn
        now = _shards(port, arn)
        assert {s: now[s] for s in shards if s in now} == {
            s: v for s, v in shards.items() if s in now
        }
        assert set(shards) <= set(now) | done  # a shard read to its end may go, none other
        after = _read_on(port, arn, at, done)
        whole = _read_on(port, arn, {}, set())  # all it holds, from the trim horizon
        events = [(event, who) for _, event, _, who in _what(after)]
        assert ("INSERT", None) in events
        if strict:
            assert ("REMOVE", "Service") in events
        assert _what(whole) == _what(before) + _what(after)  # once; none of the load's
        with SyncDynamoDBAdapter("sandbox-ledger", endpoint_url=url, region_name="us-east-1") as (
            ledger
        ):
            ledger.append(
                LedgerEntry(ts=1, name="n", sandbox_id="sb", step_index=-1, event="sandbox.created")
            )
        newer = _read_on(port, arn, at, done)
        assert newer
        assert min(int(r["dynamodb"]["SequenceNumber"]) for r in newer) > max(
            int(r["dynamodb"]["SequenceNumber"]) for r in whole
        )
    finally:
        code, stderr = again.stop(signal.SIGTERM)
    assert code == 0, stderr


def _put_items(port: int, count: int) -> None:
    """``count`` resource records put (a stream record each, at least)."""
    from resources.resource_fixtures import record
    from sandbox_ledger.resources import SyncResourceRecordStore

    with SyncResourceRecordStore(
        "sandbox-ledger", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1"
    ) as records:
        for _ in range(count):
            records.put(record())


def test_stream_records_bounds_what_a_restart_keeps_and_a_bad_sidecar_is_ignored(
    tmp_path: Path,
) -> None:
    """``--stream-records N`` bounds the records kept across restarts too (a restart with a
    lower bound keeps the newest N); a sidecar that is not FILE's (damaged, another store's)
    is ignored with one line on stderr, and the server starts on a new stream."""
    port = free_port()
    argv = ("--data", "dev.jsonl", "--port", str(port))
    server = Local(*argv, "--stream-records", "6", cwd=tmp_path)
    _put_items(port, 8)
    arn = _stream_arn(port)
    kept = _what(_read_on(port, arn, {}, set()))
    assert len(kept) == 6
    code, stderr = server.stop(signal.SIGINT)  # Ctrl-C saves it as SIGTERM does
    assert code == 0, stderr

    server = Local(*argv, "--stream-records", "4", cwd=tmp_path)
    try:
        assert _stream_arn(port) == arn
        assert _what(_read_on(port, arn, {}, set())) == kept[-4:]
        _put_items(port, 1)
        newer = _what(_read_on(port, arn, {}, set()))
        assert len(newer) == 4
        assert newer[0] in kept
    finally:
        code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    sidecar = tmp_path / ".dev.jsonl.stream"
    assert len(sidecar.read_text().splitlines()) < 20  # trimmed records are not kept

    # Another store's: FILE's sidecar beside other data (another store) is not its stream.
    (tmp_path / "other.jsonl").write_text(_ledger_lines(18, prefix="other"))
    shutil.copy(sidecar, tmp_path / ".other.jsonl.stream")
    other = Local("--data", "other.jsonl", "--port", str(port), cwd=tmp_path)
    try:
        assert _stream_arn(port) != arn
        assert _read_on(port, _stream_arn(port), {}, set()) == []
    finally:
        code, stderr = other.stop(signal.SIGTERM)
    assert code == 0, stderr
    assert stderr.count(".other.jsonl.stream: the stream of another store; ignored") == 1

    sidecar.write_bytes(b"\x00\x17 damaged")
    damaged = Local(*argv, cwd=tmp_path)
    try:
        assert _stream_arn(port) != arn
        assert _read_on(port, _stream_arn(port), {}, set()) == []
    finally:
        code, stderr = damaged.stop(signal.SIGTERM)
    assert code == 0, stderr
    said = [line for line in stderr.splitlines() if ".dev.jsonl.stream" in line]
    assert said == [
        f"{sidecar}: not a stream of this version; ignored (the table's stream starts new)"
    ]


def test_local_killed_loses_at_most_the_stream_records_since_the_last_save(
    tmp_path: Path,
) -> None:
    """kill -9: the next start serves the stream as the last save left it (its records, the
    same ARN), whatever a save cut mid-write left at the sidecar's end; never a lost
    sidecar."""
    port = free_port()
    argv = ("--data", "dev.jsonl", "--port", str(port), "--save-every", "0.5")
    server = Local(*argv, cwd=tmp_path)
    _put_items(port, 3)
    arn = _stream_arn(port)
    saved = _what(_read_on(port, arn, {}, set()))
    sidecar = tmp_path / ".dev.jsonl.stream"
    deadline = time.monotonic() + 10
    while sidecar.read_text().count('{"r":') < len(saved) if sidecar.exists() else True:
        assert time.monotonic() < deadline, "no save wrote the stream"
        time.sleep(0.1)
    server.process.kill()
    server.process.wait()
    with sidecar.open("a") as torn:  # a save cut mid-write
        torn.write('{"r":[1100000000017454423999,null,null,{"dynamodb"')
    again = Local(*argv, cwd=tmp_path)
    try:
        assert _stream_arn(port) == arn
        assert _what(_read_on(port, arn, {}, set())) == saved
        _put_items(port, 1)
        assert _what(_read_on(port, arn, {}, set()))[: len(saved)] == saved
    finally:
        code, stderr = again.stop(signal.SIGTERM)
    assert code == 0, stderr
    assert ".dev.jsonl.stream" not in stderr
    assert '{"dynamodb"' not in sidecar.read_text()
