"""Outpost's resources directory: one ``<id>.json`` per record, in the seed's exact shape.

:func:`import_directory` brings a directory of record files into the table and is idempotent:
a record is written only when the file is newer (``updatedAt``) than what the table holds, so
re-running it, or running it after the owners have touched their records, never goes back in
time and never duplicates (records are keyed by id). :func:`export_directory` writes the
table's records back, one file each, every file renamed into place only once complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from pydantic import ValidationError

from sandbox_ledger._json import DuplicateKeyError, loads_unique
from sandbox_ledger._signals import deferred, removed_on_termination
from sandbox_ledger.errors import ConflictError, InvalidInputError
from sandbox_ledger.resources._items import Unreadable, VersionedRecord, decode_or_unreadable
from sandbox_ledger.resources.models import ResourceActivityRecord

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sandbox_ledger.resources.store import SyncResourceRecordStore
    from sandbox_ledger.sdk.attributes import Item

__all__ = [
    "DirectoryExport",
    "DirectoryImport",
    "export_directory",
    "import_directory",
    "read_record_file",
    "record_file_text",
    "stored_record",
]


def stored_record(item: Item) -> VersionedRecord | Unreadable:
    """The record a stored item holds, with its revision, incarnation, TTL and a sweeper's
    claim; :class:`Unreadable` for one this version cannot read (a newer writer's)."""
    return decode_or_unreadable(item)


@dataclass
class DirectoryImport:
    """What :func:`import_directory` did, file by file."""

    written: list[str] = field(default_factory=list)
    """Files whose record was new to the table or newer than the stored one."""
    unchanged: list[str] = field(default_factory=list)
    """Files whose record the table already holds at the same or a later ``updatedAt``."""
    failed: dict[str, str] = field(default_factory=dict)
    """File name -> why it was not imported."""


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


MAX_RECORD_FILE_BYTES = 1_048_576
"""The largest record file read: a record is one table item (at most 400 KB stored); the
rest is room for a file's indentation."""


def read_record_file(path: Path) -> ResourceActivityRecord:
    """One record file (UTF-8, a byte-order mark allowed), validated.

    Raises:
        InvalidInputError: naming the file: unreadable, not JSON, not a record, or a file
            name that is not ``<id>.json`` of the record it holds.
    """
    name = path.name
    if not path.is_file():  # a directory, a FIFO (reading it would block), a device
        raise InvalidInputError(name, "not a regular file")
    try:
        size = path.stat().st_size
        if size > MAX_RECORD_FILE_BYTES:  # judged before anything is read
            raise InvalidInputError(
                name,
                f"{size:,} bytes; a record file holds at most {MAX_RECORD_FILE_BYTES:,} "
                "(a record is one table item, at most 400 KB)",
            )
        text = path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(name, f"cannot be read ({exc})") from exc
    try:
        raw = loads_unique(text)
    except DuplicateKeyError as exc:
        raise InvalidInputError(name, f"not a resource record ({exc})") from exc
    except (json.JSONDecodeError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidInputError(name, f"not JSON ({reason})") from exc
    try:
        record = ResourceActivityRecord.model_validate(raw)
    except ValidationError as exc:
        raise InvalidInputError(name, f"not a resource record ({_first_error(exc)})") from exc
    except (ValueError, RecursionError) as exc:  # e.g. an unpaired surrogate in a string
        raise InvalidInputError(name, f"not a resource record ({exc})") from exc
    _refuse_lone_surrogates(raw, name)
    if path.stem != record.id:
        raise InvalidInputError(
            name, f"holds record {record.id}; it must be named {record.id}.json"
        )
    return record


def _refuse_lone_surrogates(value: object, name: str, where: str = "") -> None:
    """JSON may escape half a UTF-16 pair (``"\\ud800"``); no store can hold it as text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError(name, f"{where or 'a string'}: unpaired surrogate") from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_lone_surrogates(key, name, where)
            _refuse_lone_surrogates(item, name, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _refuse_lone_surrogates(item, name, f"{where}[{i}]")


def import_directory(
    store: SyncResourceRecordStore,
    directory: Path,
    *,
    on_file: Callable[[str], None] | None = None,
) -> DirectoryImport:
    """Load every ``*.json`` record of ``directory`` into the table, newest version winning.

    A bad file is reported by name in ``failed`` and the others are still imported.
    Raises:
        InvalidInputError: ``directory`` is not a directory.
    """
    if not directory.is_dir():
        raise InvalidInputError(str(directory), "is not a directory")
    report = DirectoryImport()
    for path in sorted(directory.glob("*.json")):
        if on_file is not None:
            on_file(path.name)
        try:
            record = read_record_file(path)
        except InvalidInputError as exc:
            report.failed[path.name] = str(exc)
            continue
        stored = store.get_versioned(record.id)
        if stored is not None and stored.record.updated_at_ms >= record.updated_at_ms:
            report.unchanged.append(path.name)
            continue
        try:
            store.put(record)  # conditional: never over a newer record or a sweeper's claim
        except InvalidInputError as exc:  # a record the table cannot hold: this file alone
            report.failed[path.name] = str(exc)
            continue
        except ConflictError:
            now = store.get_versioned(record.id)
            if now is not None and now.record.updated_at_ms >= record.updated_at_ms:
                report.unchanged.append(path.name)  # an owner's newer write won the race
            else:
                report.failed[path.name] = "the record is being expired by a sweeper"
            continue
        report.written.append(path.name)
    return report


def record_file_text(record: ResourceActivityRecord) -> str:
    """A record as its file holds it: the seed's camelCase wire shape, absent optionals left
    out."""
    return json.dumps(record.wire(), indent=2, ensure_ascii=False) + "\n"


def _write_atomically(path: Path, text: str) -> None:
    # Ctrl-C (or a signal another handler turns into an exception) held while the temporary
    # file is created and taken inside the try that removes it; SIGTERM or SIGHUP that would
    # end the process outright removes it first: however soon a signal follows the file's
    # creation, it leaves no temporary file behind.
    created: list[tuple[TextIO, str]] = []

    def remove() -> None:
        for _, tmp in created:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    with removed_on_termination(remove):
        try:
            with deferred((signal.SIGINT, signal.SIGTERM, signal.SIGHUP)):
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
                try:
                    created.append((os.fdopen(fd, "w", encoding="utf-8"), tmp))
                except BaseException:
                    os.close(fd)
                    os.unlink(tmp)
                    raise
            handle, tmp = created[0]
            with handle:
                handle.write(text)
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a plain open() would not
            os.replace(tmp, path)
            created.clear()  # renamed: nothing left to remove
        except BaseException:
            for handle, tmp in created:
                handle.close()
                # Gone once renamed: a signal taken after the rename must not become a
                # FileNotFoundError that hides it.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@dataclass
class DirectoryExport:
    """What :func:`export_directory` wrote, and what it could not."""

    written: list[str] = field(default_factory=list)
    """The files written, ``<id>.json`` each."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Record id -> why this version cannot decode it (a newer writer's field, damage): no
    file is written for it, so a backup without it is incomplete."""


def export_directory(
    store: SyncResourceRecordStore,
    directory: Path,
    *,
    on_file: Callable[[str], None] | None = None,
    page_size: int = 1000,
    segments: int = 1,
) -> DirectoryExport:
    """Write every record of the table to ``directory/<id>.json``; returns the files written
    and the records that could not be decoded (never dropped silently).

    The records are read by a Scan of the table, not through the phase index, so a record
    in a phase this version does not know, or without its index attributes, is reported
    unreadable instead of missed. Each file is written to a temporary name and renamed into
    place, so a failure never leaves a half-written file (files of records already written
    stay).
    """
    directory.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    unreadable: dict[str, str] = {}
    for page in store.scan(segments=segments, page_size=page_size):
        for stored in page:
            if isinstance(stored, Unreadable):
                unreadable[stored.record_id] = stored.reason
                continue
            name = f"{stored.record.id}.json"
            _write_atomically(directory / name, record_file_text(stored.record))
            written.append(name)
            if on_file is not None:
                on_file(name)
    return DirectoryExport(written, unreadable)
