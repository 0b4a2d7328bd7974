"""The streaming importer (``_import_stream.py``) as a user of ``sandbox-ledger import`` meets
it, batch after batch: what is counted new, present, expired and failed (with its line), and
the progress it reports for every line done."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from sandbox_ledger import EnvironmentRecord, LedgerEntry
from sandbox_ledger import _import_stream as stream
from sandbox_ledger.blocking import BlockingAdapter
from sandbox_ledger.memory import MemoryAdapter
from sandbox_ledger.transfer import LineError, environment_line, import_lines

NOW = 1_800_000_000  # the clock, fixed: Unix seconds
DAY = 86_400
NUL = "contains NUL (\\x00), which PostgreSQL text cannot hold"


def line(sid: str, ts_s: int, event: str = "exec.started") -> bytes:
    e = LedgerEntry(ts=ts_s * 1000, name="n", sandbox_id=sid, step_index=0, event=event)
    return json.dumps(e.wire()).encode() + b"\n"


def test_every_line_is_counted_and_its_progress_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a retention of a day: an entry whose expiry is this very second is expired (a
    read hides it at once), in the first batch as in the others; a line the store refuses
    fails with its number; progress adds up to the lines done, on a first import and on a
    second that finds the file's entries present."""
    monkeypatch.setattr(stream.time, "time", lambda: NOW + 0.5)
    monkeypatch.setattr(stream, "BATCH_ENTRIES", 1)  # the first session is a batch alone
    lines = [
        line("s0", NOW - DAY),  # expires at NOW: expired
        line("s1", NOW - DAY - 10),  # expired 10 s ago
        line("s2", NOW),  # new, then present
        line("s4", NOW - DAY - 20),  # expired, after lines done in its batch
        line("s3", NOW, event="a\x00b"),  # no store can hold a NUL in the event
        environment_line(EnvironmentRecord(name="py", built_at=1)).encode() + b"\n",
        environment_line(EnvironmentRecord(name="p\x00y", built_at=1)).encode() + b"\n",
    ]
    failed = [LineError(5, f"entry.event: {NUL}"), LineError(7, f"record.name: {NUL}")]
    target = BlockingAdapter(MemoryAdapter(retention=timedelta(days=1)))
    for present in (0, 1):
        done: list[int] = []
        report = import_lines(target, lines, progress=done.append)
        assert (report.new, report.present, report.expired) == (1 - present, present, 3)
        assert report.failed == failed
        assert (report.environments.new, report.environments.present) == (1 - present, present)
        assert sum(done) == len(lines)
    assert target.scan_sessions() == [("n", "s2")]


def test_a_session_that_comes_back_within_its_batch_keeps_its_earlier_lines() -> None:
    """A, B, then A again, all in one batch: A's second run of lines joins the first in the
    batch (the batch's list for A is found again, not replaced), so all three are stored."""
    now = 1_700_000_000
    lines = [line("a", now), line("b", now), line("a", now + 1, "sandbox.closed")]
    with BlockingAdapter(MemoryAdapter()) as target:
        report = import_lines(target, lines)
        assert (report.new, report.present, report.failed) == (3, 0, [])
        assert [e.event for e in target.read_all("n", "a")] == ["exec.started", "sandbox.closed"]
