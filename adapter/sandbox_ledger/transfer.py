"""Export and import of ledgers as JSON lines in the TypeScript wire shape.

**Export** writes each session's entries in the order they were appended, so that replaying
the file reproduces every summary exactly (``startedAt`` is the first *appended*
``sandbox.created``, not the earliest), one entry per line.

**Import reconciles; it does not replay.** An entry's identity is its content within its
session (:func:`content_digest`) and its occurrence among identical entries of the file
(the first, second, ... copy). For each session the importer reads what the table holds,
counts identical entries as a multiset, and writes only the copies beyond what is there;
each write carries its identity and is conditional on it (a claim item in the same
transaction on DynamoDB), so repeated, overlapping, reordered and concurrent imports store
every entry of the file exactly once and never duplicate an entry the table already holds,
while genuinely repeated events (two identical lines) survive as two entries.

**Environment records** travel in the same file, after the entries, one line each:
``{"kind": "environment", "record": {...}}`` with the record's wire shape (every field,
null values included). A line with ``kind`` and no ``event`` is a typed line; every entry line
has ``event``. An importer that meets a kind it does not know reports that line as failed,
naming the kind (written by a newer version), and imports the rest; an importer older than
typed lines reports them as failed lines too (no ``ts``, ``name``, ``sandboxId``), so an
export never loses data silently in either direction, and a file without typed lines (an
older export) imports as before.

Environment records are reconciled by ``builtAt``: a record the store does not hold is
saved; one whose ``builtAt`` is newer than the store's replaces it; an identical one is
already present; otherwise (the store's is as new or newer) the store's is kept. Importing
the same file again therefore changes nothing, and importing an older export never rolls a
rebuilt environment back. The comparison and the save are two steps: a builder saving the
same record between them can be overwritten by the file's record when the file's is newer
than what the builder read, as any two writers of one record.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import io
import itertools
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sandbox_ledger import _json
from sandbox_ledger._json import (
    DuplicateKeyError,
    loads_unique,
    object_keys,
    refuse_duplicate_keys,
)
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.keys import check_session_key
from sandbox_ledger.models import EnvironmentRecord, LedgerEntry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence
    from contextlib import AbstractContextManager

    from sandbox_ledger.protocol import SyncTransferAdapter

__all__ = [
    "ENVIRONMENT_KIND",
    "MAX_LINE_BYTES",
    "EnvironmentCounts",
    "ImportReport",
    "LineError",
    "ParsedFile",
    "content_digest",
    "environment_line",
    "export_lines",
    "import_entries",
    "import_lines",
    "parse_lines",
    "read_lines",
]

_BOM = b"\xef\xbb\xbf"

MAX_LINE_BYTES = 128 * 2**20
"""The longest line an import reads (134,217,728 bytes, newline included): a longer one is
that line's failure, read past in pieces of 1 MiB without being held (a file of one line
without a newline does not fill the memory), and the import goes on."""

ENVIRONMENT_KIND = "environment"
LOCAL_SEQUENCES_KIND = "localSequences"
"""The line of a local server's data file that names its sessions' sequences
(:data:`sandbox_ledger.local.persist.SEQUENCES_KIND`): an import skips it, as a blank line."""
_LOCAL_SEQUENCES_START = '{"kind":"localSequences",'
LOCAL_ITEMS_KIND = "localItems"
"""The line of a local server's data file that keeps a session's items its entries do not
rebuild (:mod:`sandbox_ledger.local.loose`): an import skips it, as a blank line."""
_LOCAL_STARTS = (_LOCAL_SEQUENCES_START, '{"kind":"localItems",')

"""The ``kind`` of an environment record's line in an export."""
EXPORT_SESSIONS = 100
"""The most sessions an export reads at a time (one query on SQL)."""
EXPORT_ENTRIES = 10_000
"""About how many entries an export reads at a time: from one session, the number of
sessions read doubles, up to this many entries' worth of the largest session just read."""


def content_digest(entry: LedgerEntry) -> str:
    """The identity of an entry's content: a digest of its canonical wire JSON.

    Key order inside objects does not matter; every field does (ts, step, payload, ...).
    """
    canonical = _canonical_text(entry) if type(entry) is LedgerEntry else None
    if canonical is None:
        canonical = _json.canonical(entry.wire())
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:32]


_string = json.encoder.encode_basestring
"""The C function the encoders write a string with (``ensure_ascii=False``)."""
_SCALARS = frozenset({str, int, float, bool, type(None)})
"""The payload values the fast canonical text takes as they are: exactly these types (the
checked payload's own; a subclass, or a container, may serialize otherwise in ``wire()``)."""


def _canonical_text(entry: LedgerEntry) -> str | None:
    """``_json.canonical(entry.wire())``, written out in its sorted key order (``branch``,
    ``error``, ``event``, ``name``, ``payload``, ``sandboxId``, ``stepIndex``, ``ts``): half
    the time of sorting and encoding the wire shape, for every line an import reads. None for
    an entry this cannot write so (unknown fields, a field that is not its type: an entry
    built without validation, or a payload changed in place that the encoder refuses), whose
    wire shape is encoded instead; and for a payload that is a scalar or an object of
    scalars (what an exec's or a checkpoint's holds), each exactly its JSON type: anything
    else may be copied otherwise by pydantic than the encoder reads it (a dict subclass's
    ``items()``). Only for a ``LedgerEntry`` itself: a subclass may declare fields or
    serialize them its own way."""
    try:
        ts, step, branch = entry.ts, entry.step_index, entry.branch
        if (
            entry.__pydantic_extra__
            or type(ts) is not int
            or type(step) is not int
            or (branch is not None and type(branch) is not int)
        ):
            return None
        head = "{" if branch is None else f'{{"branch":{branch},'
        if entry.error is not None:
            head += f'"error":{_string(entry.error)},'
        payload = entry.payload
        if payload is None:
            text = ""
        elif type(payload) in _SCALARS or (
            type(payload) is dict and _SCALARS.issuperset(map(type, payload.values()))
        ):
            text = f'"payload":{_json.canonical(payload)},'
        else:
            return None  # nested, or a container subclass: as pydantic copies it (wire())
        return (
            f'{head}"event":{_string(entry.event)},"name":{_string(entry.name)},{text}'
            f'"sandboxId":{_string(entry.sandbox_id)},"stepIndex":{step},"ts":{ts}}}'
        )
    except (ValueError, TypeError, AttributeError):  # AttributeError: a field never set
        return None


def entry_line(entry: LedgerEntry) -> str:
    """One exported line (without its newline): the entry's wire shape as compact JSON."""
    return _json.unicode_text(entry.wire())


def environment_line(record: EnvironmentRecord) -> str:
    """One exported environment line (without its newline): its kind and the record's wire
    shape, every field kept (null values included)."""
    return _json.unicode_text({"kind": ENVIRONMENT_KIND, "record": record.wire()})


@dataclass(frozen=True)
class LineError:
    """A line that was not imported: its 1-based number and why."""

    number: int
    reason: str


@dataclass
class ParsedFile:
    """The valid entries of a file with their line numbers, and the lines that failed."""

    entries: list[tuple[int, LedgerEntry]] = field(default_factory=list)
    errors: list[LineError] = field(default_factory=list)
    environments: list[tuple[int, EnvironmentRecord]] = field(default_factory=list)


def _reason(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        parts = []
        for error in errors()[:3]:
            where = ".".join(str(p) for p in error.get("loc", ())) or "line"
            parts.append(f"{where}: {error.get('msg', 'invalid')}")
        if parts:
            return "; ".join(parts)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def parse_line(raw: bytes) -> LedgerEntry | EnvironmentRecord | None:
    """One line as an entry or an environment record, None when blank.

    Raises:
        ValueError: not UTF-8, not JSON, not an entry, keys too long, or a typed line of an
            unknown kind or with an invalid record (the reason says which).
    """
    return _parse_line(raw, None)


def _parse_line(
    raw: bytes, checked: tuple[str, str] | None
) -> LedgerEntry | EnvironmentRecord | None:
    """:func:`parse_line`; ``checked``: a session key that passed the key rule already (the
    previous line's, in a file whose sessions' lines are together), not checked again."""
    raw = raw.rstrip(b"\r\n")
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"invalid UTF-8 at byte {exc.start + 1}") from exc
    try:
        entry = LedgerEntry.model_validate_json(text)
    except ValueError as exc:
        typed = _typed_line(text)
        if typed is not None:
            return typed
        if text.startswith(_LOCAL_STARTS):
            return None  # a local server's data file: its own lines, not the ledger
        raise ValueError(_reason(exc)) from exc
    # A JSON object may name a key twice, which the parse above takes as its last value: such
    # a line is refused. Only a line with more colons than the entry holds keys may name one
    # twice (see refuse_duplicate_keys); attributes read straight: this runs for every line.
    colons, keys = text.count(":"), len(entry.__pydantic_fields_set__)
    if colons > keys:
        payload = entry.payload
        # A payload object's own keys first (most payloads are flat): all only when needed.
        if colons > keys + (len(payload) if payload.__class__ is dict else 0):
            extra = entry.__pydantic_extra__
            keys += object_keys(payload) + (object_keys(list(extra.values())) if extra else 0)
            if colons > keys:
                refuse_duplicate_keys(text)
    if (entry.name, entry.sandbox_id) != checked:
        check_session_key(entry.name, entry.sandbox_id)
    return entry


def _typed_line(text: str) -> EnvironmentRecord | None:
    """The record of a typed line (an object with ``kind`` and no ``event``), None if the
    line is not one (then it is a bad entry line).

    Raises:
        ValueError: an unknown kind, or an invalid record.
    """
    try:
        value = loads_unique(text)
    except DuplicateKeyError:
        raise
    except (ValueError, RecursionError):  # nested deeper than the decoder recurses: a bad line
        return None
    if not isinstance(value, dict) or "kind" not in value or "event" in value:
        return None
    kind = value["kind"]
    if kind in (LOCAL_SEQUENCES_KIND, LOCAL_ITEMS_KIND):
        return None
    if kind != ENVIRONMENT_KIND:
        raise ValueError(
            f"line kind {kind!r} is unknown to this version of sandbox-ledger (written by a "
            "newer one? upgrade to import it)"
        )
    unknown = set(value) - {"kind", "record"}
    if unknown:
        raise ValueError(f"environment line: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        record = EnvironmentRecord.model_validate(value.get("record"))
    except ValueError as exc:
        raise ValueError(f"environment record: {_reason(exc)}") from exc
    from sandbox_ledger.keys import environment_sk

    environment_sk(record.name)  # the key rule every adapter applies
    return record


def parse_lines(lines: Iterable[bytes]) -> ParsedFile:
    """Parse JSON lines (bytes, as read from a binary file). A UTF-8 byte-order mark on the
    first line and CRLF line ends are accepted; blank lines are skipped; every other line is
    an entry or a :class:`LineError`, and a bad line never stops the ones after it."""
    parsed = ParsedFile()
    for number, item in _parsed(_Sized(lines)):
        if isinstance(item, LineError):
            parsed.errors.append(item)
        elif isinstance(item, LedgerEntry):
            parsed.entries.append((number, item))
        else:
            parsed.environments.append((number, item))
    return parsed


@dataclass
class EnvironmentCounts:
    """What an import did with the file's environment records (see the module)."""

    new: int = 0
    updated: int = 0
    present: int = 0
    kept: int = 0
    """The store's record was as new or newer (same ``builtAt``, other content, or later)."""

    @property
    def total(self) -> int:
        return self.new + self.updated + self.present + self.kept


@dataclass
class ImportReport:
    """How many entries were new, already present, and which lines failed; what happened to
    the environment records, if the file had any."""

    new: int = 0
    present: int = 0
    failed: list[LineError] = field(default_factory=list)
    environments: EnvironmentCounts = field(default_factory=EnvironmentCounts)
    expired: int = 0
    """Entries not written because they are already past the store's retention."""

    def summary(self) -> str:
        """One line: ``N new, M already present, E expired, F failed``, then, for a file
        with environment records, ``; environments: N new, U updated, P already present, K
        not newer than the store's``."""
        line = (
            f"{self.new} new, {self.present} already present, {self.expired} expired, "
            f"{len(self.failed)} failed"
        )
        env = self.environments
        if env.total:
            line += (
                f"; environments: {env.new} new, {env.updated} updated, {env.present} already "
                f"present, {env.kept} not newer than the store's"
            )
        return line


def plan_session(
    existing: Iterable[LedgerEntry],
    incoming: Iterable[tuple[int, LedgerEntry]],
    *,
    seen: Counter[str] | None = None,
    held: Counter[str] | None = None,
) -> tuple[list[tuple[int, LedgerEntry, int, str]], int]:
    """What to write for one session: (line, entry, occurrence, content digest) for every
    copy beyond those the session holds (compared as a multiset of contents), and how many
    are present.

    ``seen``: how often each content came in earlier lines of the file (a session whose
    lines are not all together), counted on into it. ``held``: the session's stored
    contents by digest, if known (then ``existing`` is not read).
    """
    if held is None:
        held = Counter(content_digest(e) for e in existing)
    seen = Counter() if seen is None else seen
    writes: list[tuple[int, LedgerEntry, int, str]] = []
    present = 0
    # dict.get, not the Counter's missing-key method: this runs for every line imported.
    count, holds = seen.get, held.get
    for number, entry in incoming:
        digest = content_digest(entry)
        occurrence = seen[digest] = count(digest, 0) + 1
        if occurrence <= holds(digest, 0):
            present += 1
        else:
            writes.append((number, entry, occurrence, digest))
    return writes, present


def import_lines(
    target: SyncTransferAdapter,
    lines: Iterable[bytes],
    *,
    progress: Callable[[int], None] | None = None,
    report: ImportReport | None = None,
    guard: Callable[[], AbstractContextManager[object]] | None = None,
) -> ImportReport:
    """Parse and reconcile JSON lines into ``target`` as they are read (a file, a pipe):
    memory holds one batch of sessions, not the file. Lines are parsed as
    :func:`parse_lines` parses them and reconciled as :func:`import_entries` says. The
    counts go into ``report`` (a new one if None) batch by batch as each is written, so a
    caller that keeps it knows how far an interrupted import got; exactly, if ``guard()``
    holds off its interruptions while a batch is written and counted. A storage failure
    that stops a batch part way (:attr:`StorageError.outcomes`) has what it wrote counted
    before it is raised."""
    from sandbox_ledger._import_stream import stream_import

    report = report if report is not None else ImportReport()
    sized = _Sized(lines)
    return stream_import(
        target,
        _parsed(sized),
        report,
        progress=progress,
        guard=guard or contextlib.nullcontext,
        line_bytes=sized.last,
    )


class _TooLong(bytes):
    """The start of a line longer than :data:`MAX_LINE_BYTES` (the rest was skipped)."""


def read_lines(source: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of ``source`` (a binary file, a pipe, or lines already read) as an import
    takes them: from a binary file, never more than :data:`MAX_LINE_BYTES` of one line held
    (a longer line is read past in pieces and comes as a stand-in the import reports as
    that line's failure)."""
    if isinstance(source, io.BufferedIOBase | io.RawIOBase):
        while raw := source.readline(MAX_LINE_BYTES + 1):
            if len(raw) > MAX_LINE_BYTES:
                rest = raw
                while rest and not rest.endswith(b"\n"):
                    rest = source.readline(2**20)
                raw = _TooLong(raw[:100])
            yield raw
        return
    for raw in source:
        yield _TooLong(raw[:100]) if len(raw) > MAX_LINE_BYTES else raw


class _Sized:
    """:func:`read_lines` of some lines, with the size of the last one read."""

    def __init__(self, lines: Iterable[bytes]) -> None:
        self._lines = lines
        self._last = 0

    def __iter__(self) -> Iterator[bytes]:
        lines = self._lines
        if isinstance(lines, io.BufferedIOBase | io.RawIOBase):
            lines = read_lines(lines)
        for raw in lines:  # one generator per line, not two: an import's hot path
            size = self._last = len(raw)
            yield _TooLong(raw[:100]) if size > MAX_LINE_BYTES else raw

    def last(self) -> int:
        return self._last


def _parsed(
    lines: Iterable[bytes],
) -> Iterator[tuple[int, LedgerEntry | EnvironmentRecord | LineError]]:
    checked: tuple[str, str] | None = None
    held: set[tuple[str, str]] = set()
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, _TooLong):
            yield number, LineError(number, _too_long())
            continue
        if number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        try:
            item = _parse_line(raw, checked)
        except ValueError as exc:
            yield number, LineError(number, str(exc))
            continue
        if item is None and b'"localItems"' in raw:
            _note_held(raw, held)
        if isinstance(item, LedgerEntry):
            checked = (item.name, item.sandbox_id)
            if checked in held:
                continue  # a delete holds the session: gone, as an export leaves it out
        if item is not None:
            yield number, item


def _note_held(raw: bytes, held: set[tuple[str, str]]) -> None:
    """Note in ``held`` whether a local server's ``localItems`` line says a delete holds its
    session (its summary under a delete's lease): the session's entries after it are left
    out, as an export leaves out such a session."""
    from sandbox_ledger import keys as k
    from sandbox_ledger.keys import LedgerAttr as A

    try:
        value = loads_unique(raw)
    except ValueError:
        return
    if not isinstance(value, dict) or value.get("kind") != LOCAL_ITEMS_KIND:
        return
    name, sandbox_id, items = value.get("name"), value.get("sandboxId"), value.get("items")
    if not isinstance(name, str) or not isinstance(sandbox_id, str) or not isinstance(items, list):
        return
    if any(
        isinstance(item, dict)
        and item.get(k.SORT_KEY) == {"S": k.SUMMARY_SK}
        and A.DELETING in item
        for item in items
    ):
        held.add((name, sandbox_id))
    else:
        held.discard((name, sandbox_id))


def _too_long() -> str:
    return (
        f"longer than {MAX_LINE_BYTES:,} bytes, the longest line an import reads "
        "(sandbox_ledger.transfer.MAX_LINE_BYTES)"
    )


def import_entries(
    target: SyncTransferAdapter,
    parsed: ParsedFile,
    *,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Reconcile the parsed file into ``target`` (see the module), in line order, a batch of
    whole sessions at a time (``append_once_many``, after one ``read_stored_sessions``).

    Every write carries the entry's identity, so imports running at once store every entry
    once. Lines the store refuses (:class:`~sandbox_ledger.errors.InvalidInputError`) are
    reported as failed and the import goes on; a storage failure stops it (a re-run
    resumes: nothing is written twice). An entry the store does not hold and that is
    already past the store's retention (``ledger_retention()``) is not written (TTL or
    ``purge_expired`` removed it, or it was never there): counted as expired. ``progress``
    is called with the number of entries and records done.
    """
    from sandbox_ledger._import_stream import stream_import

    report = ImportReport(failed=list(parsed.errors))
    items: Iterator[tuple[int, LedgerEntry | EnvironmentRecord | LineError]] = heapq.merge(
        parsed.entries, parsed.environments, key=lambda pair: pair[0]
    )
    return stream_import(target, items, report, progress=progress)


def reconcile_environment(
    target: SyncTransferAdapter, number: int, record: EnvironmentRecord, report: ImportReport
) -> None:
    """Save ``record`` unless the store holds it or a record at least as new (see the
    module); a record the store refuses is line ``number``'s failure."""
    counts = report.environments
    try:
        held = target.get_environment(record.name)
        if held is not None and held.wire() == record.wire():
            counts.present += 1
        elif held is not None and held.built_at >= record.built_at:
            counts.kept += 1
        else:
            target.save_environment(record)
            if held is None:
                counts.new += 1
            else:
                counts.updated += 1
    except InvalidInputError as exc:
        report.failed.append(LineError(number, str(exc)))


class SessionsReader(Protocol):
    """What :func:`export_lines` reads a store through (every sync store has it)."""

    def read_sessions_in_append_order(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]: ...


def export_lines(
    source: SessionsReader,
    sessions: Iterable[tuple[str, str]],
    environments: Iterable[EnvironmentRecord] = (),
    *,
    progress: Callable[[int], None] | None = None,
    exported: list[tuple[str, str]] | None = None,
) -> Iterator[str]:
    """Every entry of the sessions, in (name, sandboxId) order and append order within each,
    then the environment records in the order given (``list_environments()``: newest
    ``builtAt`` first, ties in first-saved order, which an import reproduces), as lines with
    their newline: deterministic, so exporting twice gives the same bytes. ``progress`` is
    called with the number of sessions read; ``exported`` collects the sessions that had an
    entry to export (one listed but emptied meanwhile, by a delete, had none). Sessions are
    read several at a time (``read_sessions_in_append_order``; see :data:`EXPORT_ENTRIES`)."""
    ordered = list(sessions)
    if not all(a < b for a, b in itertools.pairwise(ordered)):
        ordered = sorted(set(ordered))  # else sorted and distinct already (a store's scan)
    start, size = 0, 1
    while start < len(ordered):
        run, start = ordered[start : start + size], start + size
        read = source.read_sessions_in_append_order(run)
        largest = max(1, max(map(len, read), default=0))
        size = max(1, min(EXPORT_SESSIONS, size * 2, EXPORT_ENTRIES // largest))
        for key, entries in zip(run, read, strict=True):
            if progress is not None:
                progress(1)
            if entries and exported is not None:
                exported.append(key)
            for entry in entries:
                yield entry_line(entry) + "\n"
    for record in environments:
        yield environment_line(record) + "\n"
