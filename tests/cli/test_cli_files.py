"""``export -o FILE`` and ``import PATH`` as real processes: a killed export leaves FILE as it
was and nothing that blocks or piles up; import reads pipes, FIFOs and stdin."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandbox_ledger.cli import app

from . import processes
from .processes import popen, run

ROOT = Path(__file__).resolve().parents[2]
LEDGER = ROOT / "examples" / "ledger.jsonl"

# The CLI in a child process that reads one session at a time and whose read of session sb-2
# announces itself (touches the file named by its first argument) and then waits: an export
# killed then is killed mid-file, with sb-1's lines written and sb-2's not, whatever the
# machine's speed.
HELD_EXPORT = """
import asyncio, sys
from pathlib import Path
from sandbox_ledger import transfer
from sandbox_ledger.sqlite.adapter import SQLiteAdapter

reached = Path(sys.argv.pop(1))
original = SQLiteAdapter.read_sessions_in_append_order

async def held(self, sessions):
    if ("build", "sb-2") in sessions:
        reached.touch()
        await asyncio.sleep(600)  # cancellable, as a read waiting on the network is
    return await original(self, sessions)

SQLiteAdapter.read_sessions_in_append_order = held
transfer.EXPORT_SESSIONS = 1
sys.argv[0] = "sandbox-ledger"
from sandbox_ledger.cli import main
main()
"""


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A SQLite store holding examples/ledger.jsonl (sessions build/sb-1 and build/sb-2)."""
    for name in ("SANDBOX_LEDGER_TABLE", "SANDBOX_LEDGER_STORE"):
        monkeypatch.delenv(name, raising=False)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = CliRunner().invoke(app, ["--store", url, "import", str(LEDGER)])
    assert done.exit_code == 0, done.output
    return url


def partials(output: Path) -> list[Path]:
    return sorted(output.parent.glob(f".{output.name}.*.partial"))


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_LEDGER_")}


def kill_mid_export(store: str, output: Path, number: signal.Signals, tmp_path: Path) -> int:
    """Start an export to ``output``, wait until it is reading its second session, send it
    ``number``; returns its exit status."""
    reached = tmp_path / f"reached-{number.name}"
    process = subprocess.Popen(
        [sys.executable, "-c", HELD_EXPORT, str(reached), "--store", store, "export", "-o", output],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        while not reached.exists():
            assert process.poll() is None, process.communicate()[1]
            time.sleep(0.01)
        assert len(partials(output)) == 1  # mid-export: its temporary file is there
        process.send_signal(number)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode


def test_a_killed_export_leaves_the_file_and_nothing_that_blocks_or_piles_up(
    store: str, tmp_path: Path
) -> None:
    output = tmp_path / "backup.jsonl"
    output.write_text("the previous backup\n")

    assert kill_mid_export(store, output, signal.SIGTERM, tmp_path) == 143  # after its line
    assert output.read_text() == "the previous backup\n"
    assert partials(output) == []  # SIGTERM: removed on the way out

    assert kill_mid_export(store, output, signal.SIGKILL, tmp_path) == -signal.SIGKILL
    assert output.read_text() == "the previous backup\n"
    assert len(partials(output)) == 1  # SIGKILL leaves it: nothing can run

    done = run(["--store", store, "export", "-o", str(output)], env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(output.read_text().splitlines()) == len(LEDGER.read_text().splitlines())
    assert partials(output) == []  # the dead run's file is gone, and so is this run's


def test_a_leftover_of_this_very_pid_never_blocks_and_a_live_writers_file_is_kept(
    store: str, tmp_path: Path
) -> None:
    """Every container run is PID 1: a file named after the PID must not stop the next run;
    a file whose writer still runs (it holds its lock) is left alone."""
    output = tmp_path / "backup.jsonl"
    (tmp_path / f".{output.name}.{os.getpid()}.partial").write_text("killed run\n")
    live = tmp_path / f".{output.name}.0123456789abcdef.partial"
    with live.open("w") as writer:
        fcntl.flock(writer.fileno(), fcntl.LOCK_EX)
        done = CliRunner().invoke(app, ["--store", store, "export", "-o", str(output)])
        assert done.exit_code == 0, done.output
        assert partials(output) == [live]
    assert len(output.read_text().splitlines()) == len(LEDGER.read_text().splitlines())


def run_import(store: str, path: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return run(["--store", store, "import", path], env(), stdin=stdin, timeout=120)


@pytest.mark.parametrize("path", ["/dev/stdin", "-"])
def test_import_reads_a_pipe(tmp_path: Path, path: str) -> None:
    """`cat f | sandbox-ledger import /dev/stdin` (or `-`): stdin is a pipe here."""
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = run_import(store, path, stdin=LEDGER.read_text())
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().endswith("6 new, 0 already present, 0 expired, 0 failed")


def test_import_reads_a_fifo(tmp_path: Path) -> None:
    """`import <(zcat f.gz)` names a pipe as a path: a FIFO is the same."""
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    fifo = tmp_path / "entries.fifo"
    os.mkfifo(fifo)
    process = popen(
        ["--store", store, "import", str(fifo)],
        env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while True:  # until the command opens it for reading (or gives up on it)
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as exc:
            assert exc.errno == errno.ENXIO, exc  # no reader yet
            assert process.poll() is None, process.communicate()[1]
            time.sleep(0.01)
    os.set_blocking(writer, True)
    with open(writer, "wb") as stream:
        stream.write(LEDGER.read_bytes())
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert stderr.strip().endswith("6 new, 0 already present, 0 expired, 0 failed")


def test_import_of_a_directory_says_so(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = run_import(store, str(tmp_path))
    assert done.returncode == 2
    assert f"{tmp_path}: is a directory" in done.stderr
    assert not (tmp_path / "ledger.db").exists()  # refused before the store was opened


def test_an_ignored_hangup_lets_the_export_finish(tmp_path: Path) -> None:
    # As under nohup: SIGHUP ignored. The export used to remove its temporary file on the
    # signal, then go on writing and fail (FileNotFoundError), leaving the old file.
    from sandbox_ledger.cli.transfer import _export

    out = tmp_path / "backup.jsonl"
    out.write_text("OLD\n")

    def lines() -> Iterator[str]:
        for i in range(4):
            if i == 2:
                os.kill(os.getpid(), signal.SIGHUP)
            yield f'{{"n": {i}}}\n'

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert _export(lines(), out) == 4
    finally:
        signal.signal(signal.SIGHUP, before)
    assert out.read_text().splitlines() == [f'{{"n": {i}}}' for i in range(4)]
    assert sorted(os.listdir(tmp_path)) == ["backup.jsonl"]


# An export whose temporary file has just been created (before it is even locked) when
# ``NUMBER`` arrives: the race a signal sent as soon as the file shows up can hit.
SIGNAL_AT_CREATION = """
import os, signal, threading, time
from pathlib import Path
from sandbox_ledger.cli import transfer
from sandbox_ledger.cli.interrupt import raise_on_sigterm

raise_on_sigterm()  # as the console script does
# Another thread, as a store's event loop is: the kernel may give it the signal.
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
locking = transfer._lock

def lock(descriptor, *, wait):
    os.kill(os.getpid(), signal.NUMBER)
    return locking(descriptor, wait=wait)

transfer._lock = lock
transfer._export(iter(['{"n": 1}\\n']), Path("backup.jsonl"))
"""


@pytest.mark.parametrize(
    ("number", "death"),
    [
        (signal.SIGTERM, "sandbox_ledger.cli.interrupt.Terminated: 15"),
        (signal.SIGINT, "KeyboardInterrupt"),
        (signal.SIGHUP, ""),  # ended by the signal itself, once the file is removed
    ],
)
def test_a_signal_the_instant_the_temporary_file_exists_leaves_nothing(
    tmp_path: Path, number: signal.Signals, death: str
) -> None:
    (tmp_path / "backup.jsonl").write_text("OLD\n")
    code = SIGNAL_AT_CREATION.replace("NUMBER", number.name)
    done = processes.python(code, env(), cwd=tmp_path)
    assert done.stdout == ""
    assert done.stderr.rstrip().rsplit("\n", 1)[-1] == death, done.stderr
    assert done.returncode == (1 if number == signal.SIGTERM else -number), done.stderr
    assert sorted(os.listdir(tmp_path)) == ["backup.jsonl"]
    assert (tmp_path / "backup.jsonl").read_text() == "OLD\n"


# ``resources export``'s file writer, Ctrl-C arriving the instant its temporary file exists.
INTERRUPT_AT_RECORD_FILE = """
import os, signal, tempfile, threading, time
from pathlib import Path
from sandbox_ledger.resources import files

threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # another thread

creating = tempfile.mkstemp

def mkstemp(**options):
    made = creating(**options)
    os.kill(os.getpid(), signal.SIGINT)
    return made

tempfile.mkstemp = mkstemp
files._write_atomically(Path("r1.json"), "{}\\n")
"""


def test_ctrl_c_the_instant_a_record_files_temporary_exists_leaves_nothing(
    tmp_path: Path,
) -> None:
    (tmp_path / "r1.json").write_text("OLD\n")
    done = processes.python(INTERRUPT_AT_RECORD_FILE, env(), cwd=tmp_path)
    assert done.returncode == -signal.SIGINT, done.stderr
    assert done.stderr.rstrip().rsplit("\n", 1)[-1] == "KeyboardInterrupt", done.stderr
    assert sorted(os.listdir(tmp_path)) == ["r1.json"]
    assert (tmp_path / "r1.json").read_text() == "OLD\n"


def test_a_signal_just_after_a_record_files_rename_is_the_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C taken right after the temporary file was renamed into place: the file is
    # complete, and the interruption is what propagates (it used to become a
    # FileNotFoundError from removing the temporary file that was already renamed).
    from sandbox_ledger.resources import files

    renaming = os.replace

    def replace(source: str, destination: Path) -> None:
        renaming(source, destination)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", replace)
    (tmp_path / "r1.json").write_text("OLD\n")
    with pytest.raises(KeyboardInterrupt) as raised:
        files._write_atomically(tmp_path / "r1.json", "{}\n")
    assert raised.value.__context__ is None
    assert sorted(os.listdir(tmp_path)) == ["r1.json"]
    assert (tmp_path / "r1.json").read_text() == "{}\n"


# ``export -o`` through the console script, SIGTERM arriving the instant the complete file is
# renamed into place: the line printed must not say the file was left as it was.
SIGNAL_AT_RENAME = """
import os, signal, sys, threading, time
from sandbox_ledger.cli import main

threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # another thread

renaming = os.replace

def replace(source, destination):
    renaming(source, destination)
    os.kill(os.getpid(), signal.SIGTERM)

os.replace = replace
sys.argv = ["sandbox-ledger", "--store", "sqlite:///ledger.db", "export", "-o", "backup.jsonl"]
main()
"""


def test_a_signal_as_the_export_is_renamed_into_place_says_it_was_replaced(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run(["--store", store, "import", str(LEDGER)], env()).returncode == 0
    whole = run(["--store", store, "export"], env())
    assert whole.returncode == 0, whole.stderr
    (tmp_path / "backup.jsonl").write_text("OLD\n")
    done = processes.python(SIGNAL_AT_RENAME, env(), cwd=tmp_path)
    assert done.returncode == 143, done.stderr
    assert done.stderr.splitlines() == [
        "interrupted by SIGTERM: the export was complete: backup.jsonl was replaced by it"
    ]
    assert (tmp_path / "backup.jsonl").read_text() == whole.stdout
    assert sorted(os.listdir(tmp_path)) == ["backup.jsonl", "ledger.db"]


def test_a_deferred_signal_waits_for_the_block_whichever_thread_takes_it() -> None:
    """``deferred`` holds a signal sent to the process while another thread runs (which the
    kernel may give it to: a per-thread mask would not hold it), then delivers it once, to
    the handler it had, where the block ends; an ignored signal stays ignored."""
    from sandbox_ledger._signals import deferred

    seen: list[int] = []
    before = signal.signal(signal.SIGUSR1, lambda number, _frame: seen.append(number))
    ignored = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        with deferred((signal.SIGUSR1, signal.SIGUSR2)):
            for _ in range(2):  # twice: delivered once
                sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGUSR1))
                sender.start()
                sender.join()
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(0.05)  # a handler would have run by now
            assert seen == []
        assert seen == [signal.SIGUSR1]
        assert signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR1, before)
        signal.signal(signal.SIGUSR2, ignored)


def test_a_deferred_interrupt_is_raised_where_the_block_ends() -> None:
    from sandbox_ledger._signals import deferred

    steps = []
    with pytest.raises(KeyboardInterrupt):
        with deferred((signal.SIGINT,)):
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("after the signal")
        steps.append("after the block")
    assert steps == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_every_deferred_signal_reaches_its_handler_even_after_one_raises() -> None:
    """Ctrl-C and SIGTERM both held: both handlers run at the block's end, in arrival order,
    as if the two had come then (the first one's exception does not swallow the second);
    the second's exception propagates, the first's as its context."""
    from sandbox_ledger._signals import deferred

    class Terminated(Exception):
        pass

    seen: list[int] = []

    def interrupted(number: int, _frame: object) -> None:
        seen.append(number)
        raise KeyboardInterrupt

    def terminated(number: int, _frame: object) -> None:
        seen.append(number)
        raise Terminated

    before = signal.signal(signal.SIGINT, interrupted), signal.signal(signal.SIGTERM, terminated)
    try:
        raised: BaseException | None = None
        try:  # a KeyboardInterrupt escaping would end the test session, not fail the test
            with deferred((signal.SIGINT, signal.SIGTERM)):
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
        except BaseException as exc:
            raised = exc
        assert seen == [signal.SIGINT, signal.SIGTERM]
        assert isinstance(raised, Terminated), raised
        assert isinstance(raised.__context__, KeyboardInterrupt)
        assert signal.getsignal(signal.SIGTERM) is terminated
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


def test_an_export_to_a_missing_directory_or_a_directory_names_it(
    store: str, tmp_path: Path
) -> None:
    """Usage errors naming what the user gave (not an internal temporary file), exit 2."""
    missing = tmp_path / "no-such-dir" / "backup.jsonl"
    done = CliRunner().invoke(app, ["--store", store, "export", "-o", str(missing)])
    assert done.exit_code == 2, done.output
    assert f"{missing}: its directory {missing.parent} does not exist" in done.stderr
    assert ".partial" not in done.stderr
    folder = tmp_path / "a-folder"
    folder.mkdir()
    done = CliRunner().invoke(app, ["--store", store, "export", "-o", str(folder)])
    assert done.exit_code == 2 and f"{folder} is a directory" in done.stderr, done.output
    assert list(folder.iterdir()) == []


def _small_store(tmp_path: Path) -> str:
    source = tmp_path / "in.jsonl"
    source.write_text(
        '{"ts": 1, "name": "job", "sandboxId": "sb-1", "stepIndex": -1, '
        '"event": "sandbox.created"}\n'
    )
    store = f"sqlite:///{tmp_path / 'l.db'}"
    assert run_import(store, str(source)).returncode == 0
    return store


def test_export_to_dash_writes_stdout_as_import_reads_stdin(tmp_path: Path) -> None:
    store = _small_store(tmp_path)
    done = run(["--store", store, "export", "-o", "-"], dict(os.environ), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert '"sandboxId": "sb-1"' in done.stdout
    assert not (tmp_path / "-").exists()


def test_an_output_that_cannot_be_created_is_named_as_given(tmp_path: Path) -> None:
    """Not the temporary file written beside it (red team: '.x.jsonl.<hex>.partial')."""
    store = _small_store(tmp_path)
    done = run(["--store", store, "export", "-o", "/proc/x.jsonl"], dict(os.environ))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "error: -o: /proc/x.jsonl: cannot create a file in /proc (No such file or directory)"
    ]
