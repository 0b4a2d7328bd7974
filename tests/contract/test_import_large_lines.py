"""Imports of large lines (issue 41, item 9): a batch ends at its byte budget, inside a
session if need be, so lines of 10 MB never gather 1,000 to a batch (10 GB); every entry is
still stored exactly once, on every store."""

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


def e(sid: str, event: str, ts: int, payload: object = None) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name="big", sandbox_id=sid, step_index=0, event=event, payload=payload
    )


def lines(entries: list[LedgerEntry]) -> list[bytes]:
    return [json.dumps(x.wire()).encode() + b"\n" for x in entries]


KINDS = ["memory", "sqlite", "postgres", "dynamodb"]


def _target(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A synchronous import target of ``kind``, empty."""
    if kind == "dynamodb":
        from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

        table = request.getfixturevalue("sync_table")
        endpoint = request.getfixturevalue("moto_endpoint")
        return SyncDynamoDBAdapter(table, endpoint_url=endpoint, region_name="us-east-1")
    if kind == "sqlite":
        from sandbox_ledger.sqlite import SQLiteAdapter

        return BlockingAdapter(SQLiteAdapter(tmp_path / "ledger.db"))
    if kind == "postgres":
        from sandbox_ledger.postgres import PostgresAdapter

        dsn = request.getfixturevalue("postgres_dsn")
        return BlockingAdapter(PostgresAdapter(dsn, schema=request.getfixturevalue("pg_schema")))
    return BlockingAdapter(MemoryAdapter())


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A synchronous import target of each kind, emptied per test."""
    target = _target(request.param, request, tmp_path)
    yield target
    target.close()


class Watched:
    """A target that records each batch: the sessions it read and the entries it wrote."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.reads: list[list[tuple[str, str]]] = []
        self.writes: list[list[LedgerEntry]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)

    def read_stored_sessions(self, sessions: Any) -> Any:
        self.reads.append(list(sessions))
        return self.target.read_stored_sessions(sessions)

    def append_once_many(self, items: Any, **kwargs: Any) -> Any:
        self.writes.append([entry for entry, _ in items])
        return self.target.append_once_many(items, **kwargs)


def _digests(target: Any, sid: str) -> list[str]:
    return sorted(map(content_digest, target.read_all("big", sid)))


def test_a_batch_ends_at_its_byte_budget_inside_a_session(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines of about 1 KB with a budget of 3 KB: batches of three lines, a session of ten
    (identical lines among them) split over four, each read once, in its first batch; the
    copies of a line beyond the split are counted on (four identical lines: four entries),
    and a second run finds every entry present. Before, the batch closed only between
    sessions at 1,000 entries: one batch held the whole file."""
    monkeypatch.setattr(stream, "BATCH_BYTES", 3_000, raising=False)
    same = e("s", "exec.started", 5, "x" * 1_000)
    created = e("s", "sandbox.created", 1, "c" * 1_000)
    session = [
        created,
        same,
        same,
        *(e("s", "exec.started", 10 + i, "y" * 1_000) for i in range(5)),
        same,
        same,
    ]
    after = e("t", "sandbox.created", 2, "t" * 1_000)
    target = Watched(store)
    report = import_lines(target, lines([*session, after]))  # type: ignore[arg-type]
    assert (report.new, report.present, report.failed) == (11, 0, [])
    assert [len(w) for w in target.writes] == [3, 3, 3, 2]
    assert target.reads == [[("big", "s")], [], [], [("big", "t")]]
    assert _digests(store, "s") == sorted(map(content_digest, session))
    assert _digests(store, "t") == [content_digest(after)]
    again = import_lines(store, lines([*session, after]))
    assert (again.new, again.present, again.failed) == (0, 11, [])
    assert _digests(store, "s") == sorted(map(content_digest, session))


def test_a_split_session_counts_what_another_import_stored_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session's stored contents carried into the next batch are a guess, not a lock:
    an entry another import stored between the two batches is found by its claim, counted
    present and not written twice."""
    monkeypatch.setattr(stream, "BATCH_BYTES", 2_000, raising=False)
    target = BlockingAdapter(MemoryAdapter())
    entries = [e("s", "exec.started", 10 + i, "z" * 1_000) for i in range(4)]

    class Racing(Watched):
        def append_once_many(self, items: Any, **kwargs: Any) -> Any:
            if len(self.writes) == 1:  # between the first batch and the second
                self.target.append_once(entries[2], 1)
            return super().append_once_many(items, **kwargs)

    report = import_lines(Racing(target), lines(entries))  # type: ignore[arg-type]
    assert (report.new, report.present, report.failed) == (3, 1, [])
    assert _digests(target, "s") == sorted(map(content_digest, entries))


def test_a_line_past_the_longest_is_its_failure_and_the_rest_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line longer than MAX_LINE_BYTES (here 2,000 bytes) is read past in pieces, never
    held whole, and reported as its line's failure naming the limit; the lines around it are
    imported, and nothing of it is stored: from a file, and from lines already read."""
    from sandbox_ledger import transfer

    monkeypatch.setattr(transfer, "MAX_LINE_BYTES", 2_000)
    first, last = e("s", "sandbox.created", 1), e("s", "exec.started", 3, "ok")
    long = e("s", "exec.started", 2, "x" * 5_000)
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b"".join(lines([first, long, last])) + json.dumps(long.wire()).encode())
    for source in (path.open("rb"), path.read_bytes().splitlines(keepends=True)):
        target = BlockingAdapter(MemoryAdapter())
        report = import_lines(target, transfer.read_lines(source))
        assert (report.new, [f.number for f in report.failed]) == (2, [2, 4])
        assert all("longer than 2,000 bytes" in f.reason for f in report.failed)
        assert target.read_all("big", "s") == [first, last]
    with path.open("rb") as source:
        sizes = [len(raw) for raw in transfer.read_lines(source)]
    assert sizes[1] == sizes[3] == 100  # stand-ins of the long lines: never their 5,000 bytes


def _ten_mb_lines(sessions: int, per_session: int) -> Iterator[bytes]:
    for s in range(sessions):
        for i in range(per_session):
            payload = {"out": f"{s:03d}{i:04d}" * 1_428_572}  # 10,000,004 characters
            entry = e(f"s{s}", "exec.complete", 1_000 + i, payload)
            yield json.dumps(entry.wire()).encode() + b"\n"


@pytest.mark.slow
def test_lines_of_10_mb_import_in_memory_bounded_by_a_batch(tmp_path: Path) -> None:
    """24 lines of 10 MB (240 MB, two sessions) into SQLite: the Python heap's peak stays
    within a few batches (32 MiB each) and does not grow with the file; every entry is
    stored once, and a second run finds them all. Before, the 24 lines were one batch: the
    peak held the whole file several times over."""
    import tracemalloc

    from sandbox_ledger.sqlite import SQLiteAdapter

    target = BlockingAdapter(SQLiteAdapter(tmp_path / "big.db"))
    target.connect()
    tracemalloc.start()
    try:
        report = import_lines(target, _ten_mb_lines(2, 12))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (report.new, report.present, report.failed) == (24, 0, [])
    assert peak < 6 * stream.BATCH_BYTES, peak
    details = target.read_all("big", "s1")
    assert len(details) == 12 and all(len(x.payload["out"]) == 10_000_004 for x in details)
    again = import_lines(target, _ten_mb_lines(2, 12))
    assert (again.new, again.present, again.failed) == (0, 24, [])
    target.close()


@pytest.mark.slow
def test_a_100_mb_line_imports_whole_and_a_longer_than_the_longest_fails_alone(
    tmp_path: Path, store: Any
) -> None:
    """A line of 100 MB (incompressible) is stored whole on every store; one of 128 MiB and
    more is its line's failure (before, it was read whole and stored)."""
    from sandbox_ledger.transfer import MAX_LINE_BYTES

    target = store
    big = e("s", "exec.complete", 2, secrets_text(100_000_000))
    too_long = e("s", "exec.complete", 3, "y" * (MAX_LINE_BYTES + 10))
    path = tmp_path / "lines.jsonl"
    with path.open("wb") as out:
        out.writelines(lines([e("s", "sandbox.created", 1), big, too_long]))
    with path.open("rb") as source:
        report = import_lines(target, source)
    assert (report.new, [f.number for f in report.failed]) == (2, [3])
    stored = target.read_all("big", "s")
    assert [x.ts for x in stored] == [1, 2] and stored[1].payload == big.payload
    details = target.get_sandbox_details("big", "s")
    assert details is not None and details.exec_count == 1


def secrets_text(size: int) -> str:
    """``size`` characters that do not compress (DynamoDB stores them as ~290 parts)."""
    import secrets

    return secrets.token_urlsafe(size * 3 // 4 + 3)[:size]
