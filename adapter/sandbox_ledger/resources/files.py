"""Outpost's resources directory: one ``<id>.json`` per record, in the seed's exact shape.

:func:`import_directory` brings a directory of record files into the table and is idempotent:
a record is written only when the file is newer (``updatedAt``) than what the table holds, so
re-running it, or running it after the owners have touched their records, never goes back in
time and never duplicates (records are keyed by id). :func:`export_directory` writes the
table's records back, one file each, every file renamed into place only once complete.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import ValidationError

from sandbox_ledger.errors import ConflictError, InvalidInputError
from sandbox_ledger.resources.models import ResourceActivityRecord

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sandbox_ledger.resources.store import SyncResourceRecordStore

__all__ = [
    "DirectoryImport",
    "export_directory",
    "import_directory",
    "read_record_file",
    "record_file_text",
]


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


def read_record_file(path: Path) -> ResourceActivityRecord:
    """One record file (UTF-8, a byte-order mark allowed), validated.

    Raises:
        InvalidInputError: naming the file: unreadable, not JSON, not a record, or a file
            name that is not ``<id>.json`` of the record it holds.
    """
    name = path.name
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(name, f"cannot be read ({exc})") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(name, f"not JSON ({exc})") from exc
    try:
        record = ResourceActivityRecord.model_validate(raw)
    except ValidationError as exc:
        raise InvalidInputError(name, f"not a resource record ({_first_error(exc)})") from exc
    if path.stem != record.id:
        raise InvalidInputError(
            name, f"holds record {record.id}; it must be named {record.id}.json"
        )
    return record


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
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def export_directory(
    store: SyncResourceRecordStore,
    directory: Path,
    *,
    on_file: Callable[[str], None] | None = None,
) -> list[str]:
    """Write every record of the table to ``directory/<id>.json``; returns the file names.

    Each file is written to a temporary name and renamed into place, so a failure never
    leaves a half-written file (files of records already written stay).
    """
    directory.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    cursor: str | None = None
    while True:
        page = store.list(limit=1000, cursor=cursor)
        for versioned in page.records:
            name = f"{versioned.record.id}.json"
            _write_atomically(directory / name, record_file_text(versioned.record))
            written.append(name)
            if on_file is not None:
                on_file(name)
        cursor = page.cursor
        if cursor is None:
            return written
