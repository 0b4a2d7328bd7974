"""The local server's saves: only what changed, appended to the data file.

The server keeps a mirror of what its data file holds (:class:`~.persist.DataState`: each
session's entry lines, the environment lines, the resource record lines). A save takes the
partitions the requests served since the last one wrote (:class:`~.inprocess.WriteLog`),
reads just those through the library (in process: each read holds the server for one
request's time), and turns what differs from the mirror into lines to append:

- a session whose saved entries are the first of what it holds now: its new entries, as
  plain ``export`` lines (appending to a session is the common case, and the file stays an
  export);
- any other change of a session (a delete, a session begun again): a ``localSession`` block
  with all its entries (none: gone);
- the environments changed: a ``localEnvironments`` block with every one;
- a resource record changed: its line again; gone: ``{"kind": "resourceRecord", "deleted":
  id}``;
- the sequence of the sessions whose sequence changed (saved for the first time, begun again
  in another incarnation), and the order ids of their new entries: one ``localSequences``
  line naming them, after their entries.

A save's cost is what changed since the last one, whatever the tables hold; an idle server
reads and writes nothing. Every so often (when the appended lines outgrow what the file held
when last written whole) and on exit, the file is written whole again from the mirror.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING

from sandbox_ledger import keys as k
from sandbox_ledger.local.persist import (
    ENVIRONMENTS_KIND,
    SESSION_KIND,
    DataState,
    deleted_record_line,
    record_line,
    sequences_line,
    snapshot,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping
    from pathlib import Path

    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.local.inprocess import Written
    from sandbox_ledger.local.loose import Marked
    from sandbox_ledger.local.persist import Runs
    from sandbox_ledger.models import LedgerEntry
    from sandbox_ledger.resources import SyncResourceRecordStore

__all__ = ["Changes", "FileChangedError", "append", "changes", "write_synced"]

_READ_SESSIONS = 50
"""Sessions read per call of ``read_sessions_in_append_order``."""


class Changes:
    """The lines a save appends, and the mirror as it is once they are written."""

    def __init__(self, lines: list[str], after: DataState) -> None:
        self.lines, self.after = lines, after


_READ_ATTEMPTS = 3
"""Reads of what changed before a save gives up on a session a delete keeps moving between
the read of its entries and of its loose items (the next save reads it again)."""


def changes(
    mirror: DataState,
    written: Written,
    table: str,
    ledger: SyncDynamoDBAdapter,
    store: SyncResourceRecordStore,
) -> Changes:
    """What the writes in ``written`` changed in ``table`` against ``mirror`` (which is left
    as it is: the save that writes the lines takes :attr:`Changes.after`).

    Raises:
        ChangedBehindRead: a delete moved on between the reads of a session's entries and of
            its loose items at each attempt (a LedgerError: the save is tried again).
    """
    from sandbox_ledger.dynamodb.loose_items import ChangedBehindRead

    for _ in range(_READ_ATTEMPTS - 1):
        with contextlib.suppress(ChangedBehindRead):  # read again
            return _changes(mirror, written, table, ledger, store)
    return _changes(mirror, written, table, ledger, store)


def _changes(
    mirror: DataState,
    written: Written,
    table: str,
    ledger: SyncDynamoDBAdapter,
    store: SyncResourceRecordStore,
) -> Changes:
    from sandbox_ledger.transfer import entry_line, environment_line

    after = DataState(
        mirror.path,
        dict(mirror.sessions),
        dict(mirror.environments),
        dict(mirror.records),
        dict(mirror.sequences),
        dict(mirror.orders),
        mirror.store_id,
        dict(mirror.loose),
    )
    if written.everything:
        return _everything(after, ledger, store)
    pks = written.partitions.get(table, set())
    lines: list[str] = []
    sessions = sorted({k.parse_session_pk(pk) for pk in pks if pk.startswith(k.SESSION_PREFIX)})
    named: dict[tuple[str, str], Runs] = {}
    ordered: dict[tuple[str, str], tuple[int, list[str]]] = {}
    read: dict[tuple[str, str], Marked] = {}
    for key, marked in _read_marked(ledger, sessions):
        read[key] = marked
        now = [entry_line(entry) + "\n" for entry, _, _ in marked]
        ids = [order for _, _, order in marked]
        saved = [line for _, line in after.sessions.get(key, [])]
        known = after.orders.get(key, [])
        runs = _runs(marked)
        if now == saved and after.sequences.get(key) == runs and ids == known:
            continue
        if now[: len(saved)] == saved and ids[: len(known)] == known:
            lines += now[len(saved) :]
            if len(ids) > len(known):
                ordered[key] = (len(known), ids[len(known) :])
        else:
            head = {"kind": SESSION_KIND, "name": key[0], "sandboxId": key[1]}
            lines.append(json.dumps({**head, "entries": len(now)}, ensure_ascii=False) + "\n")
            lines += now
            after.sequences.pop(key, None)  # as the block's load does
            after.orders.pop(key, None)
            if ids:
                ordered[key] = (0, ids)
        if now:
            after.sessions[key] = [(0, line) for line in now]
            after.orders[key] = ids
            if runs is not None and after.sequences.get(key) != runs:
                named[key] = after.sequences[key] = runs
        else:
            after.sessions.pop(key, None)
            after.orders.pop(key, None)
    if named or ordered:  # after the entries: a block names its session's sequence anew
        lines.append(sequences_line(named, ordered))
    # Before the entries: a save cut short (kill -9) after a session's block that removed
    # its entries and before its loose items would load the session gone without the
    # summary a delete holds (its removal, the session.deleted, never to come); cut after
    # its loose items and before the block, it loads as the delete found it (its lease taken,
    # its seal put), which the delete run again ends.
    lines[:0] = _loose(after, ledger, read)
    if k.ENVIRONMENT_PK in pks:
        now_env = {r.name: (0, environment_line(r) + "\n") for r in ledger.list_environments()}
        if [line for _, line in now_env.values()] != [
            line for _, line in after.environments.values()
        ]:
            lines.append(json.dumps({"kind": ENVIRONMENTS_KIND, "records": len(now_env)}) + "\n")
            lines += [line for _, line in now_env.values()]
            after.environments = now_env
    record_ids = sorted(k.resource_id(pk) for pk in pks if pk.startswith(k.RESOURCE_PREFIX))
    if record_ids:
        lines += _records(after, record_ids, store)
    return Changes(lines, after)


def _read_marked(
    ledger: SyncDynamoDBAdapter, sessions: list[tuple[str, str]]
) -> Iterator[tuple[tuple[str, str], list[tuple[LedgerEntry, tuple[int, str] | None, str]]]]:
    """Each of ``sessions`` read whole, each entry with its sequence mark, in runs of
    :data:`_READ_SESSIONS` (each run a request's time of the server)."""
    for start in range(0, len(sessions), _READ_SESSIONS):
        run = sessions[start : start + _READ_SESSIONS]
        yield from zip(run, ledger.read_sessions_marked(run), strict=True)


def _loose(
    after: DataState, ledger: SyncDynamoDBAdapter, read: Mapping[tuple[str, str], Marked]
) -> list[str]:
    """The ``localItems`` lines of the sessions read whose loose items changed (see
    :mod:`~.loose`), ``after`` updated."""
    from sandbox_ledger.local.loose import loose_items, loose_line

    lines: list[str] = []
    for key, items in loose_items(ledger, read).items():
        saved = after.loose.get(key)
        line = loose_line(key, items)
        if items and (saved is None or saved[1] != line):
            lines.append(line)
            after.loose[key] = (0, line)
        elif not items and saved is not None:
            lines.append(line)
            del after.loose[key]
    return lines


def _runs(marked: list[tuple[LedgerEntry, tuple[int, str] | None, str]]) -> Runs | None:
    """The session's sequence (see :data:`~.persist.SEQUENCES_KIND`) of its entries' marks;
    None if one has none (the load then begins a new incarnation)."""
    from sandbox_ledger.dynamodb.import_items import mark_runs

    runs = mark_runs([mark for _, mark, _ in marked])
    return None if runs is None else tuple(runs)


def _records(after: DataState, record_ids: list[str], store: SyncResourceRecordStore) -> list[str]:

    lines: list[str] = []
    # As stored, past its TTL or not: TTL deletes it, and its removal is in the stream.
    found = store.get_many(record_ids)
    for record_id in record_ids:
        stored = found.get(record_id)
        saved = after.records.get(record_id)
        if stored is None:
            if saved is not None:
                lines.append(deleted_record_line(record_id))
                del after.records[record_id]
            continue
        line = record_line(stored)
        if saved is None or saved[1] != line:
            lines.append(line)
            after.records[record_id] = (0, line)
    return lines


def _everything(
    after: DataState, ledger: SyncDynamoDBAdapter, store: SyncResourceRecordStore
) -> Changes:
    """Every table read again (after a request that may have changed anything): the file is
    written whole from it, so no line is appended."""
    from sandbox_ledger.local.persist import read_lines

    state = read_lines(snapshot(ledger, store).lines, after.path)
    state.appended = True  # written whole at this save
    state.store_id = after.store_id
    from sandbox_ledger.local.loose import sessions_with_marks
    from sandbox_ledger.transfer import entry_line

    # Sessions with no entry may keep loose items: the Scan finds their summaries and marks.
    every: dict[tuple[str, str], Marked] = {key: [] for key in sessions_with_marks(ledger)}
    for key, marked in _read_marked(ledger, sorted(state.sessions)):
        every[key] = marked
        runs = _runs(marked)
        read = [entry_line(entry) + "\n" for entry, _, _ in marked]
        if read == [line for _, line in state.sessions[key]]:
            state.orders[key] = [order for _, _, order in marked]
            if runs is not None:
                state.sequences[key] = runs  # (else changed since the snapshot: the next save)
    _loose(state, ledger, every)
    return Changes([], state)


def append(path: Path, lines: Iterable[str], expected: os.stat_result) -> int:
    """Append ``lines`` to ``path`` and flush them to disk; the bytes written.

    Raises:
        FileChangedError: ``path`` is no longer the file ``expected`` describes (replaced,
            removed): nothing appended.
        OSError: the write failed (the file may end in part of it: write it whole next).
    """
    data = "".join(lines).encode("utf-8")
    key = (expected.st_dev, expected.st_ino, expected.st_size)
    try:
        before = os.stat(path)
        if (before.st_dev, before.st_ino, before.st_size) != key:
            raise FileChangedError(str(path))
        # Non-blocking: a FIFO put in the file's place since the stat is refused at once.
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise FileChangedError(str(path)) from exc
    try:
        now = os.fstat(descriptor)
        if (now.st_dev, now.st_ino, now.st_size) != key:
            raise FileChangedError(str(path))
        os.set_blocking(descriptor, True)
        write_synced(descriptor, data)
    finally:
        os.close(descriptor)
    return len(data)


def write_synced(descriptor: int, data: bytes) -> None:
    """Write all of ``data`` to ``descriptor`` (a write may take part of it), then flush it
    to disk."""
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]
    os.fsync(descriptor)


class FileChangedError(Exception):
    """The data file is not the one the last save wrote: write it whole."""
