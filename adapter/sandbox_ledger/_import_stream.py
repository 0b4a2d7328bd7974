"""The streaming importer behind :func:`sandbox_ledger.transfer.import_lines` and
:func:`~sandbox_ledger.transfer.import_entries`.

Lines arrive in file order. Consecutive lines of one session form a group; groups are
gathered into a batch (whole sessions, sized by :data:`BATCH_SECONDS`), and a batch is
reconciled with one ``read_stored_sessions`` and written with one ``append_once_many``, so
memory holds one batch, never the file. A batch also ends once its lines pass
:data:`BATCH_BYTES`, inside a session if need be (lines of 10 MB: a batch of 1,000 held
10 GB): the session's next lines go on in the next batch, reconciled against what the store
held of it and what the batch before wrote, without reading it again.

An entry's identity is its content and its occurrence among identical entries of its session
*in the whole file*. A session whose lines come back after its batch was written (a file
whose sessions are interleaved) continues the occurrences counted for it so far: every
written session's counts are kept in a temporary SQLite database on disk (one row per
session, consulted only for a session that comes back out of key order; an export lists
sessions in key order, so an export never consults it).
"""

from __future__ import annotations

import contextlib
import gc
import json
import sqlite3
import time
from collections import Counter
from typing import TYPE_CHECKING

from sandbox_ledger._json import ascii_text
from sandbox_ledger.errors import StorageError
from sandbox_ledger.keys import ledger_expires_at
from sandbox_ledger.models import EnvironmentRecord, LedgerEntry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence
    from contextlib import AbstractContextManager

    from sandbox_ledger.errors import InvalidInputError
    from sandbox_ledger.protocol import SyncTransferAdapter
    from sandbox_ledger.transfer import ImportReport, LineError

__all__ = ["BATCH_BYTES", "BATCH_ENTRIES", "BATCH_SECONDS", "MAX_BATCH_ENTRIES", "stream_import"]

BATCH_ENTRIES = 1000
"""Entries gathered (whole sessions) before the first batch is reconciled and written; the
least a batch gathers."""
MAX_BATCH_ENTRIES = 8000
"""The most entries a batch gathers (a session larger than that is a batch of its own)."""
BATCH_BYTES = 32 * 2**20
"""The most bytes of lines a batch gathers (of a file read by :func:`import_lines`): a batch
ends at the line that reaches it, whole sessions or not. A line larger than that is a batch
of its own."""
BATCH_SECONDS = 0.5
"""About how long a batch's write should take: after each batch the next one gathers as many
entries as the store wrote in that time, from :data:`BATCH_ENTRIES` to
:data:`MAX_BATCH_ENTRIES`. A fast store (SQL) commits fewer, larger transactions (each a
disk flush); a slow one (DynamoDB) keeps batches small; an interruption held off while a
batch is written (the CLI's Ctrl-C) waits about this long, whatever the store."""

YOUNG_OBJECTS = 50_000
"""While an import runs, the cyclic garbage collector looks at the youngest objects once this
many were allocated (Python's default: 700). An import allocates a few dozen objects per line
(the parsed entry, its row, its digest), which reference counting frees; at the default the
collector ran about 16 times per 1,000 lines and took 8-10% of a SQLite import's time,
finding nothing. Put back when the import ends (see :func:`_fewer_collections`)."""


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Raise the collector's first threshold to :data:`YOUNG_OBJECTS` for the import, and put
    back the threshold found when it ends (by an error or an interruption too), unless
    something set another meanwhile. A threshold found above it, or 0 (collection off), or
    already raised (another import running in another thread), is left alone: with imports
    in several threads the first to end puts the threshold back, and the others run on at
    the program's own. No count is kept, so an interruption anywhere in here leaves nothing
    to put back later, except at the very moment the threshold is put back."""
    found = gc.get_threshold()
    raised = (YOUNG_OBJECTS, found[1], found[2])
    try:
        if 0 < found[0] < YOUNG_OBJECTS:
            gc.set_threshold(*raised)
        yield
    finally:
        if 0 < found[0] < YOUNG_OBJECTS and gc.get_threshold() == raised:
            gc.set_threshold(*found)


Key = tuple[str, str]
Item = tuple[int, "LedgerEntry | EnvironmentRecord | LineError"]


class _Counted:
    """The file's occurrence counts of the sessions already written (see the module)."""

    def __init__(self) -> None:
        self._db: sqlite3.Connection | None = None
        self._highest: Key | None = None

    def prior(self, key: Key) -> Counter[str]:
        """How often each content of the session came earlier in the file."""
        if self._db is None or self._highest is None or key > self._highest:
            return Counter()  # after every written session in key order: never seen
        row = self._db.execute("SELECT counts FROM seen WHERE session = ?", (_id(key),)).fetchone()
        return Counter(json.loads(row[0])) if row else Counter()

    def record(self, counts: dict[Key, Counter[str]]) -> None:
        if self._db is None:
            # "": a private temporary database SQLite deletes on close (on disk past its cache).
            self._db = sqlite3.connect("", isolation_level=None)
            self._db.execute("CREATE TABLE seen (session TEXT PRIMARY KEY, counts TEXT)")
        rows = [(_id(key), _encode(c)) for key, c in counts.items()]
        self._db.execute("BEGIN")
        self._db.executemany("INSERT OR REPLACE INTO seen VALUES (?, ?)", rows)
        self._db.execute("COMMIT")
        top = max(counts)
        if self._highest is None or top > self._highest:
            self._highest = top

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


# JSON in ASCII escapes lone surrogates, which a name may hold and SQLite's text may not: a
# session's key as its JSON text is its row's key.
_id = _encode = ascii_text


class _Batch:
    """Sessions waiting to be reconciled and written: whole, but for the last one when the
    batch reached :data:`BATCH_BYTES` (its lines go on in the next batch) and the first one
    when the batch before did (``held``: what the store holds of it, known already)."""

    def __init__(self, held: dict[Key, Counter[str]] | None = None) -> None:
        self.sessions: dict[Key, list[tuple[int, LedgerEntry]]] = {}
        self.prior: dict[Key, Counter[str]] = {}
        self.size = 0
        self.bytes = 0
        self.held = held or {}
        """Sessions whose stored contents are known (not read again), by content digest."""
        self.split: Key | None = None
        """The session whose lines go on in the next batch."""


def stream_import(
    target: SyncTransferAdapter,
    items: Iterable[Item],
    report: ImportReport,
    *,
    progress: Callable[[int], None] | None = None,
    batch_entries: int | None = None,
    guard: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
    line_bytes: Callable[[], int] | None = None,
) -> ImportReport:
    """Reconcile ``items`` (line number and what the line held, in file order) into
    ``target``, batch by batch (``batch_entries``, default :data:`BATCH_ENTRIES`), counting
    into ``report`` (see the module). Each batch's writes and its counts run inside
    ``guard()``: a caller that holds off interruptions there (the CLI's Ctrl-C) reports
    exactly what was written. ``line_bytes``: the size of the line the item just taken came
    from (lines read as items are taken), which bounds a batch by :data:`BATCH_BYTES`."""
    with _fewer_collections():
        return _stream(target, items, report, progress, batch_entries, guard, line_bytes)


def _stream(
    target: SyncTransferAdapter,
    items: Iterable[Item],
    report: ImportReport,
    progress: Callable[[int], None] | None,
    batch_entries: int | None,
    guard: Callable[[], AbstractContextManager[object]],
    line_bytes: Callable[[], int] | None,
) -> ImportReport:
    from sandbox_ledger.transfer import LineError, reconcile_environment

    limit = batch_entries or BATCH_ENTRIES
    sizing = batch_entries is None
    seconds = target.ledger_retention()
    counted = _Counted()
    batch = _Batch()
    current: Key | None = None
    session: list[tuple[int, LedgerEntry]] = []  # the current session's lines in the batch
    try:
        for number, item in items:
            if isinstance(item, LedgerEntry):
                key = (item.name, item.sandbox_id)
                full = batch.bytes >= BATCH_BYTES
                if key != current or full:
                    if batch.size >= limit or full:
                        batch.split = key if key == current else None
                        with guard():
                            took, known = _write(target, batch, counted, report, seconds, progress)
                        if sizing:
                            limit = _next_limit(batch.size, took)
                        batch = _Batch(known)
                    current = key
                    held = batch.sessions.get(key)
                    if held is None:
                        held = batch.sessions[key] = []
                        batch.prior[key] = counted.prior(key)
                    session = held
                session.append((number, item))
                batch.size += 1
                if line_bytes is not None:
                    batch.bytes += line_bytes()
            elif isinstance(item, LineError):
                report.failed.append(item)
            else:
                with guard():
                    reconcile_environment(target, number, item, report)
                if progress is not None:
                    progress(1)
        if batch.size:
            with guard():
                _write(target, batch, counted, report, seconds, progress)
    finally:
        counted.close()
    report.failed.sort(key=lambda e: e.number)
    return report


def _count(
    writes: list[tuple[int, LedgerEntry, int, str]],
    outcomes: Sequence[bool | InvalidInputError | None],
    report: ImportReport,
) -> int:
    """Count each write's outcome into ``report`` (None: not written); how many counted."""
    from sandbox_ledger.transfer import LineError

    counted = 0
    for (number, *_), outcome in zip(writes, outcomes, strict=True):
        if outcome is None:
            continue
        if outcome is True:
            report.new += 1
        elif outcome is False:
            report.present += 1
        else:
            report.failed.append(LineError(number, str(outcome)))
        counted += 1
    return counted


def _next_limit(size: int, took: float) -> int:
    """The next batch's size: what the store wrote in :data:`BATCH_SECONDS` at the rate of
    the batch just written (``size`` entries in ``took`` seconds), within the bounds."""
    rate = size / max(took, 1e-6)
    return min(MAX_BATCH_ENTRIES, max(BATCH_ENTRIES, round(rate * BATCH_SECONDS)))


def _write(
    target: SyncTransferAdapter,
    batch: _Batch,
    counted: _Counted,
    report: ImportReport,
    seconds: int | None,
    progress: Callable[[int], None] | None,
) -> tuple[float, dict[Key, Counter[str]]]:
    """Reconcile one batch against what the store holds (expired entries included, where the
    store still keeps them: reconciling against the visible ones only would write an expired
    entry again on every run) and write what it lacks; how long that took (seconds), and
    what the store holds of the session that goes on in the next batch (``batch.split``)."""
    from sandbox_ledger.transfer import content_digest, plan_session

    started = time.monotonic()
    keys = list(batch.sessions)
    unknown = [key for key in keys if key not in batch.held]
    read = dict(zip(unknown, target.read_stored_sessions(unknown), strict=True))
    writes: list[tuple[int, LedgerEntry, int, str]] = []
    done = 0
    carried: Counter[str] | None = None
    for key in keys:
        if key in batch.held:
            held = batch.held[key]
        else:
            held = Counter(content_digest(e) for e in read.pop(key))
        if key == batch.split:
            carried = held
        planned, present = plan_session((), batch.sessions[key], seen=batch.prior[key], held=held)
        report.present += present
        done += present
        for number, entry, occurrence, digest in planned:
            expires = ledger_expires_at(entry.ts, seconds)
            # The clock is read per entry: an import that runs long must not write an entry
            # that expired since it began (a read judges it hidden at once). Written, it
            # would be hidden at once and move the summary towards its old expiry.
            if expires is not None and expires <= int(time.time()):
                report.expired += 1
                done += 1
            else:
                writes.append((number, entry, occurrence, digest))
    if writes:
        # A DeploymentMismatchError (the client disagrees with the table, not a line) stops
        # the import: what the batch wrote stays, each entry once, and a re-run resumes.
        try:
            outcomes = target.append_once_many(
                [(e, occurrence) for _, e, occurrence, _ in writes],
                digests=[digest for *_, digest in writes],  # computed once, by plan_session
            )
        except StorageError as exc:
            # Stopped part way (DynamoDB writes a batch in several transactions): what it
            # stored is counted, so the report says what this run wrote.
            if exc.outcomes is not None:
                _count(writes, exc.outcomes, report)
            raise
        done += _count(writes, outcomes, report)
        if carried is not None:  # what the store holds of it now: held, and what it stored
            carried.update(
                digest
                for (_, e, _, digest), outcome in zip(writes, outcomes, strict=True)
                if isinstance(outcome, bool) and (e.name, e.sandbox_id) == batch.split
            )
    counted.record(batch.prior)  # plan_session counted this batch's lines into them
    if progress is not None and done:
        progress(done)
    known = {} if batch.split is None else {batch.split: carried or Counter()}
    return time.monotonic() - started, known
