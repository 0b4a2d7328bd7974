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
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.keys import check_session_key
from sandbox_ledger.models import LedgerEntry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

__all__ = [
    "ImportReport",
    "LineError",
    "ParsedFile",
    "content_digest",
    "export_lines",
    "import_entries",
    "parse_lines",
]

_BOM = b"\xef\xbb\xbf"


def content_digest(entry: LedgerEntry) -> str:
    """The identity of an entry's content: a digest of its canonical wire JSON.

    Key order inside objects does not matter; every field does (ts, step, payload, ...).
    """
    canonical = json.dumps(
        entry.wire(), sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def entry_line(entry: LedgerEntry) -> str:
    """One exported line (without its newline): the entry's wire shape as compact JSON."""
    return json.dumps(entry.wire(), ensure_ascii=False)


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


def parse_line(raw: bytes) -> LedgerEntry | None:
    """One line as an entry, None when blank.

    Raises:
        ValueError: not UTF-8, not JSON, not an entry, or keys too long (the reason says which).
    """
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
        raise ValueError(_reason(exc)) from exc
    check_session_key(entry.name, entry.sandbox_id)
    return entry


def parse_lines(lines: Iterable[bytes]) -> ParsedFile:
    """Parse JSON lines (bytes, as read from a binary file). A UTF-8 byte-order mark on the
    first line and CRLF line ends are accepted; blank lines are skipped; every other line is
    an entry or a :class:`LineError`, and a bad line never stops the ones after it."""
    parsed = ParsedFile()
    for number, raw in enumerate(lines, start=1):
        if number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        try:
            entry = parse_line(raw)
        except ValueError as exc:
            parsed.errors.append(LineError(number, str(exc)))
            continue
        if entry is not None:
            parsed.entries.append((number, entry))
    return parsed


class ImportTarget(Protocol):
    """What the importer needs from a (sync) adapter. With ``append_once`` (DynamoDB) writes
    are conditional on their identity, so concurrent imports never duplicate; without it
    (``append`` only) repeated, overlapping and reordered imports are still reconciled, but
    two imports running at the same moment may both write a missing entry."""

    def read_all(self, name: str, sandbox_id: str) -> list[LedgerEntry]: ...

    def append(self, entry: LedgerEntry) -> object: ...


@dataclass
class ImportReport:
    """How many entries were new, already present, and which lines failed."""

    new: int = 0
    present: int = 0
    failed: list[LineError] = field(default_factory=list)

    def summary(self) -> str:
        """One line: ``N new, M already present, F failed``."""
        return f"{self.new} new, {self.present} already present, {len(self.failed)} failed"


def plan_session(
    existing: Iterable[LedgerEntry], incoming: Iterable[tuple[int, LedgerEntry]]
) -> tuple[list[tuple[int, LedgerEntry, int]], int]:
    """What to write for one session: (line, entry, occurrence) for every copy beyond those
    the session holds (compared as a multiset of contents), and how many are present."""
    held = Counter(content_digest(e) for e in existing)
    seen: Counter[str] = Counter()
    writes: list[tuple[int, LedgerEntry, int]] = []
    present = 0
    for number, entry in incoming:
        digest = content_digest(entry)
        seen[digest] += 1
        if seen[digest] <= held[digest]:
            present += 1
        else:
            writes.append((number, entry, seen[digest]))
    return writes, present


def import_entries(
    target: ImportTarget,
    parsed: ParsedFile,
    *,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Reconcile the parsed file into ``target`` session by session (see the module).

    Lines the store refuses (:class:`~sandbox_ledger.errors.InvalidInputError`) are reported
    as failed and the import goes on; a storage failure stops it (a re-run resumes: nothing
    is written twice). ``progress`` is called with the number of entries done.
    """
    report = ImportReport(failed=list(parsed.errors))
    append_once = getattr(target, "append_once", None)
    sessions: dict[tuple[str, str], list[tuple[int, LedgerEntry]]] = {}
    for number, entry in parsed.entries:
        sessions.setdefault((entry.name, entry.sandbox_id), []).append((number, entry))
    for (name, sandbox_id), incoming in sessions.items():
        writes, present = plan_session(target.read_all(name, sandbox_id), incoming)
        report.present += present
        if progress is not None and present:
            progress(present)
        for number, entry, occurrence in writes:
            try:
                if append_once is not None:
                    stored = bool(append_once(entry, occurrence))
                else:
                    target.append(entry)
                    stored = True
            except InvalidInputError as exc:
                report.failed.append(LineError(number, str(exc)))
                continue
            if stored:
                report.new += 1
            else:
                report.present += 1
            if progress is not None:
                progress(1)
    report.failed.sort(key=lambda e: e.number)
    return report


class ExportSource(Protocol):
    """What the exporter needs from a (sync) adapter; ``read_in_append_order`` is used when
    the adapter has it (DynamoDB), ``read_all`` (ts order) otherwise."""

    def read_all(self, name: str, sandbox_id: str) -> list[LedgerEntry]: ...


def export_lines(source: ExportSource, sessions: Iterable[tuple[str, str]]) -> Iterator[str]:
    """Every entry of the sessions, in (name, sandboxId) order and append order within each,
    as lines with their newline: deterministic, so exporting twice gives the same bytes."""
    read = getattr(source, "read_in_append_order", None) or source.read_all
    for name, sandbox_id in sorted(set(sessions)):
        for entry in read(name, sandbox_id):
            yield entry_line(entry) + "\n"
