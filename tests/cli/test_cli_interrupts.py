"""Fast, quiet failures and Ctrl-C/SIGTERM (issue 25), as real processes: an unreachable
store fails within seconds in one line; an interrupted command says how far it got."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sandbox_ledger._import_stream import BATCH_ENTRIES

from .processes import EVERY_COMMAND_BUT_DEMO_AND_LOCAL, ROOT, bare_env, popen, run

if TYPE_CHECKING:
    from collections.abc import Callable


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
    argv = ["--store", f"sqlite:///{db}", "import", str(source)]
    process = popen(argv, bare_env(), stderr=subprocess.PIPE, text=True)
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
    argv = ["--store", store, "export", "-o", str(backup)]
    process = popen(argv, bare_env(), stderr=subprocess.PIPE, text=True)
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


def test_a_second_signal_during_a_batch_says_the_batch_may_be_stored_too() -> None:
    """Ctrl-C waits for the batch being written, so the line counts exactly what is stored;
    a second one stops at once, while that batch may still commit: the line then says
    "at least" and names the batch, instead of an exact count a re-run would contradict.
    One signal keeps the exact line."""
    import os

    from sandbox_ledger.cli.interrupt import ImportStatus
    from sandbox_ledger.transfer import ImportReport

    report = ImportReport(new=4)
    once = ImportStatus(lines=10, report=report)
    with pytest.raises(KeyboardInterrupt), once.batch():
        os.kill(os.getpid(), signal.SIGINT)  # held: raised when the batch is done
        report.new += 3
    assert not once.cut
    assert "written so far: 7 new" in once.describe()
    assert "at least" not in once.describe()

    report = ImportReport(new=4)
    twice = ImportStatus(lines=10, report=report)
    with pytest.raises(KeyboardInterrupt), twice.batch():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # stops at once, mid-batch
        report.new += 3  # never reached
    assert twice.cut
    said = twice.describe()
    assert "written so far: at least 4 new" in said
    assert "the batch being written when the second signal came may be stored too" in said
