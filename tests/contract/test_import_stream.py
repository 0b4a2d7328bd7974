"""The streaming import (issue 26): lines reconciled and written as they are read, a batch
of whole sessions at a time, with every exactly-once guarantee of the import kept on every
store (memory, SQLite, PostgreSQL, DynamoDB)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from sandbox_ledger import LedgerEntry
from sandbox_ledger import _import_stream as stream
from sandbox_ledger.blocking import BlockingAdapter
from sandbox_ledger.memory import MemoryAdapter
from sandbox_ledger.transfer import content_digest, import_lines

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def e(name: str, sid: str, event: str, ts: int, payload: object = None) -> LedgerEntry:
    return LedgerEntry(ts=ts, name=name, sandbox_id=sid, step_index=0, event=event, payload=payload)


def lines(entries: list[LedgerEntry]) -> list[bytes]:
    return [json.dumps(x.wire()).encode() + b"\n" for x in entries]


@pytest.fixture(params=["memory", "sqlite", "postgres", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A synchronous import target of each kind, emptied per test."""
    kind = request.param
    if kind == "dynamodb":
        from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

        table = request.getfixturevalue("sync_table")
        endpoint = request.getfixturevalue("moto_endpoint")
        target: Any = SyncDynamoDBAdapter(table, endpoint_url=endpoint, region_name="us-east-1")
    elif kind == "sqlite":
        from sandbox_ledger.sqlite import SQLiteAdapter

        target = BlockingAdapter(SQLiteAdapter(tmp_path / "ledger.db"))
    elif kind == "postgres":
        from sandbox_ledger.postgres import PostgresAdapter

        dsn = request.getfixturevalue("postgres_dsn")
        target = BlockingAdapter(PostgresAdapter(dsn, schema=request.getfixturevalue("pg_schema")))
    else:
        target = BlockingAdapter(MemoryAdapter())
    yield target
    target.close()


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of two entries, so a file of a few lines spans several batches."""
    monkeypatch.setattr(stream, "BATCH_ENTRIES", 2)
    monkeypatch.setattr(stream, "MAX_BATCH_ENTRIES", 2)


def _digests(target: Any, name: str, sid: str) -> list[str]:
    return sorted(map(content_digest, target.read_all(name, sid)))


@pytest.mark.usefixtures("small_batches")
def test_interleaved_sessions_keep_every_occurrence(store: Any) -> None:
    """A session whose lines come back after its batch was written continues its occurrence
    count: three identical lines of session b, split by session a's lines (and out of key
    order), are three entries; a re-run adds nothing (without the counts kept across
    batches, the later copies were taken for the first one and counted present)."""
    x = e("job", "b", "exec.started", 5, {"same": 1})
    y = e("job", "a", "exec.started", 7, {"same": 2})
    created = e("job", "b", "sandbox.created", 1)
    order = [created, x, y, x, y, x, e("job", "c", "sandbox.created", 2), x]
    report = import_lines(store, lines(order))
    assert (report.new, report.present, report.failed) == (8, 0, [])
    assert _digests(store, "job", "b") == sorted(map(content_digest, [created, x, x, x, x]))
    assert _digests(store, "job", "a") == sorted(map(content_digest, [y, y]))
    again = import_lines(store, lines(order))
    assert (again.new, again.present) == (0, 8)
    details = store.get_sandbox_details("job", "b")
    assert details is not None and details.started_at == 1


@pytest.mark.usefixtures("small_batches")
def test_lines_are_written_while_the_file_is_still_being_read(store: Any) -> None:
    """Streamed, not loaded: the first sessions are in the store before the last line is
    read (what keeps memory at one batch whatever the file's size)."""
    entries = [e("job", f"s{i:02d}", "sandbox.created", i + 1) for i in range(10)]
    seen_before_end: list[int] = []

    def source() -> Iterator[bytes]:
        yield from lines(entries)
        seen_before_end.append(len(store.scan_sessions()))

    report = import_lines(store, source())
    assert report.new == 10
    assert seen_before_end and seen_before_end[0] >= 8


class _Interrupted(BaseException):
    """Ctrl-C (or SIGTERM unwinding) in the middle of an import."""


@pytest.mark.usefixtures("small_batches")
def test_an_import_stopped_between_batches_resumes_exactly_once(store: Any) -> None:
    """The import stops after its second batch (Ctrl-C); the re-run finds what landed as
    present and writes only the rest, every entry once, each summary right."""
    entries = []
    for s in range(4):
        entries += [e("job", f"s{s}", "sandbox.created", 1), e("job", f"s{s}", "exec.complete", 2)]
        entries += [e("job", f"s{s}", "exec.complete", 2)]  # a genuine repeat: two entries

    class StopsAfterTwoBatches:
        def __init__(self) -> None:
            self.calls = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def append_once_many(self, items: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls > 2:
                raise _Interrupted
            return store.append_once_many(items, **kwargs)

    with pytest.raises(_Interrupted):
        import_lines(StopsAfterTwoBatches(), lines(entries))  # type: ignore[arg-type]
    landed = sum(len(store.read_all("job", f"s{s}")) for s in range(4))
    assert 0 < landed < 12
    report = import_lines(store, lines(entries))
    assert (report.new, report.present) == (12 - landed, landed)
    for s in range(4):
        assert len(store.read_all("job", f"s{s}")) == 3
        details = store.get_sandbox_details("job", f"s{s}")
        assert details is not None and details.exec_count == 2


@pytest.mark.usefixtures("small_batches")
def test_a_bad_line_in_a_batch_fails_alone(store: Any) -> None:
    """Bad lines (not JSON, past the key rule) are numbered failed lines; the rest of their
    batch is stored."""
    good = e("job", "s", "sandbox.created", 1)
    refused = e("j" * 2040, "s", "exec.started", 2)  # past the key rule
    report = import_lines(store, [*lines([good]), b"{not json\n", *lines([refused, good])])
    assert report.new == 2 and [f.number for f in report.failed] == [2, 3]
    assert report.summary() == "2 new, 0 already present, 0 expired, 2 failed"


def test_batches_grow_to_what_the_store_writes_in_half_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch gathers as many entries as the store wrote in BATCH_SECONDS at the last
    batch's rate, between BATCH_ENTRIES and MAX_BATCH_ENTRIES (whole sessions): a fast store
    gets few large transactions, a slow one keeps the first size (what a held Ctrl-C waits
    for)."""
    monkeypatch.setattr(stream, "BATCH_ENTRIES", 4)
    monkeypatch.setattr(stream, "MAX_BATCH_ENTRIES", 40)
    monkeypatch.setattr(stream, "BATCH_SECONDS", 0.5)
    entries = [e("job", f"s{i:03d}", "sandbox.created", i + 1) for i in range(100)]

    class Timed:
        def __init__(self, seconds_per_entry: float) -> None:
            self.target = BlockingAdapter(MemoryAdapter())
            self.pace = seconds_per_entry
            self.sizes: list[int] = []

        def __getattr__(self, name: str) -> Any:
            return getattr(self.target, name)

        def append_once_many(self, items: Any, **kwargs: Any) -> Any:
            self.sizes.append(len(items))
            now[0] += self.pace * len(items)  # the store's time, on the importer's clock
            return self.target.append_once_many(items, **kwargs)

    now = [0.0]
    monkeypatch.setattr(stream.time, "monotonic", lambda: now[0])
    fast, slow = Timed(1 / 64), Timed(1 / 4)  # 32 entries in 0.5 s; 2
    for target in (fast, slow):
        report = import_lines(target, lines(entries))  # type: ignore[arg-type]
        assert report.new == 100 and sum(target.sizes) == 100
    assert fast.sizes == [4, 32, 32, 32]
    assert slow.sizes == [4] * 25


def _export_like(sessions: int) -> Iterator[bytes]:
    """An export's lines: sessions of 6 entries, together and in key order."""
    events = ["sandbox.created", *["exec.started", "exec.complete"] * 2, "sandbox.closed"]
    for s in range(sessions):
        for k, event in enumerate(events):
            entry = e("job", f"sb-{s:07d}", event, 1_700_000_000_000 + s * 6 + k, {"k": k})
            yield json.dumps(entry.wire()).encode() + b"\n"


@pytest.mark.slow
def test_memory_is_bounded_by_a_batch_not_the_file(tmp_path: Path) -> None:
    """At scale: a file four times longer takes no more memory to import (the Python heap's
    peak, tracemalloc), and every entry and summary is counted right. Loading the file
    first, as the import did before, held about 1.8 KB per line."""
    import tracemalloc

    from sandbox_ledger.sqlite import SQLiteAdapter

    peaks = []
    for sessions in (4_000, 16_000):
        target = BlockingAdapter(SQLiteAdapter(tmp_path / f"{sessions}.db"))
        target.connect()
        tracemalloc.start()
        try:
            report = import_lines(target, _export_like(sessions))
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert (report.new, report.present, report.failed) == (sessions * 6, 0, [])
        assert len(target.scan_sessions()) == sessions
        last = target.get_sandbox_details("job", f"sb-{sessions - 1:07d}")
        assert last is not None and last.exec_count == 2 and last.status == "completed"
        target.close()
    assert peaks[1] < peaks[0] * 1.5 + 2_000_000, peaks
    assert peaks[1] < 96_000 * 400, peaks  # far below the 1.8 KB per line of a loaded file


def test_progress_shows_on_a_terminal_only(tmp_path: Path) -> None:
    """The import's progress line (lines done, lines/s, the share of a regular file) is
    drawn on a terminal; a redirected stderr gets only the failed lines."""
    import io
    import re

    from rich.console import Console

    from sandbox_ledger.cli.transfer import import_from

    file = tmp_path / "ledger.jsonl"
    file.write_bytes(b"".join(_export_like(400)) + b"{bad\n")
    for terminal in (True, False):
        shown = io.StringIO()
        console = Console(file=shown, force_terminal=terminal, width=120)
        with file.open("rb") as source:
            report = import_from(BlockingAdapter(MemoryAdapter()), source, label="f", err=console)
        assert report.new == 2400 and [f.number for f in report.failed] == [2401]
        out = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", shown.getvalue())  # colours off
        assert "f:2401:" in out
        assert ("2,000 lines" in out and "%" in out and "/s" in out) is terminal, out


async def test_a_postgres_batch_refused_by_a_concurrent_claim_runs_again(
    postgres_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another importer commits the same identities between this batch's claim read and its
    insert (injected there): the unique index refuses the insert, the whole transaction
    (summaries included) rolls back, and the batch runs again, finding every claim stored:
    each entry once, execCount counted once, nothing reported new twice."""
    from sandbox_ledger.postgres import PostgresAdapter
    from sandbox_ledger.postgres import adapter as pg

    first = PostgresAdapter(postgres_dsn, schema=pg_schema)
    second = PostgresAdapter(postgres_dsn, schema=pg_schema)
    items = [(e("job", "s", "sandbox.created", 1), 1)]
    items += [(e("job", "s", "exec.complete", 2 + i, {"i": i}), 1) for i in range(5)]
    count = pg._Connection.count
    interleaved: list[list[Any]] = []
    started: list[bool] = []

    async def count_after_the_other(self: Any, sql: str, params: Any = None) -> int:
        if sql == first.queries.fold_sessions and not started:
            # the first batch's first write (its summaries): after its claim read
            started.append(True)
            interleaved.append(await second.append_once_many(items))
        return await count(self, sql, params)

    monkeypatch.setattr(pg._Connection, "count", count_after_the_other)
    try:
        assert await first.append_once_many(items) == [False] * 6
        assert interleaved == [[True] * 6]
        assert len(await first.read_all("job", "s")) == 6
        details = await first.get_sandbox_details("job", "s")
        assert details is not None and details.exec_count == 5
    finally:
        await first.close()
        await second.close()
