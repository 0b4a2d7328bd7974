"""A local server's data in one file, across restarts (``sandbox-ledger local --data FILE``).

The file is JSON lines: the ledger exactly as ``sandbox-ledger export`` writes it (entries,
then environment records), then one line per resource record,
``{"kind": "resourceRecord", "record": {...}}`` with the record in its file shape. The
caller writes the lines atomically (a temporary file renamed over the last one), so a crash
loses at most what changed since the last save and never the file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox_ledger._json import DuplicateKeyError, loads_unique
from sandbox_ledger.errors import InvalidInputError

if TYPE_CHECKING:
    from pathlib import Path

    from sandbox_ledger.protocol import SyncTransferAdapter
    from sandbox_ledger.resources import ResourceActivityRecord, SyncResourceRecordStore

__all__ = ["RESOURCE_KIND", "Loaded", "Snapshot", "load", "snapshot"]

RESOURCE_KIND = "resourceRecord"


@dataclass(frozen=True)
class Snapshot:
    """What a save writes: the lines, their digest (unchanged data: no write) and counts."""

    lines: tuple[str, ...]
    digest: str
    entries: int
    environments: int
    records: int


@dataclass(frozen=True)
class Loaded:
    """What a load restored."""

    entries: int
    environments: int
    records: int


def snapshot(ledger: SyncTransferAdapter, store: SyncResourceRecordStore) -> Snapshot:
    """Every ledger entry, environment record and resource record, as the file's lines."""
    from sandbox_ledger.resources import Unreadable
    from sandbox_ledger.transfer import export_lines

    environments = ledger.list_environments()
    ledger_lines = list(export_lines(ledger, ledger.scan_sessions(None), environments))
    records = [
        json.dumps({"kind": RESOURCE_KIND, "record": found.record.wire()}, ensure_ascii=False)
        + "\n"
        for page in store.scan()
        for found in page
        if not isinstance(found, Unreadable)
    ]
    lines = (*ledger_lines, *records)
    digest = hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()
    return Snapshot(
        lines, digest, len(ledger_lines) - len(environments), len(environments), len(records)
    )


def load(path: Path, ledger: SyncTransferAdapter, store: SyncResourceRecordStore) -> Loaded:
    """Restore a file :func:`snapshot` wrote into an empty table.

    Raises:
        InvalidInputError: a line that is neither (field: the file and line number); nothing
            of a bad file is loaded.
    """
    from sandbox_ledger.transfer import import_entries, parse_lines

    ledger_lines: list[bytes] = []
    records: list[ResourceActivityRecord] = []
    with path.open("rb") as source:
        for number, raw in enumerate(source, start=1):
            record = _resource_line(raw, f"{path}:{number}")
            if record is None:
                ledger_lines.append(raw)
            else:
                records.append(record)
                ledger_lines.append(b"\n")  # keeps the ledger's line numbers the file's
    parsed = parse_lines(ledger_lines)
    if parsed.errors:
        first = parsed.errors[0]
        raise InvalidInputError(f"{path}:{first.number}", first.reason)
    report = import_entries(ledger, parsed)
    if report.failed:
        first_failed = report.failed[0]
        raise InvalidInputError(f"{path}:{first_failed.number}", first_failed.reason)
    for record in records:
        store.put(record)
    return Loaded(report.new + report.present, len(parsed.environments), len(records))


def _resource_line(raw: bytes, where: str) -> ResourceActivityRecord | None:
    """The resource record of a ``resourceRecord`` line, None for any other line."""
    from pydantic import ValidationError

    from sandbox_ledger.resources import ResourceActivityRecord

    if b'"kind"' not in raw or RESOURCE_KIND.encode() not in raw:
        return None
    try:
        value = loads_unique(raw)
    except DuplicateKeyError as exc:
        raise InvalidInputError(where, str(exc)) from exc
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("kind") != RESOURCE_KIND or "event" in value:
        return None
    try:
        return ResourceActivityRecord.model_validate(value.get("record"))
    except ValidationError as exc:
        raise InvalidInputError(where, f"not a resource record ({exc.errors()[0]['msg']})") from exc
