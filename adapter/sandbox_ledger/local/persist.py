"""A local server's data in one file, across restarts (``sandbox-ledger local --data FILE``).

The file is JSON lines: the ledger exactly as ``sandbox-ledger export`` writes it (entries,
then environment records), then one line per resource record,
``{"kind": "resourceRecord", "record": {...}}`` with the record in its file shape; a record
this version cannot read (a newer writer's field, another phase) is kept as stored:
``{"kind": "resourceRecord", "unreadable": "why", "item": {...}}``, its whole item in
DynamoDB's JSON (binary values in base64), which a load writes back as it is. The
caller writes the lines atomically (a temporary file renamed over the last one), so a crash
loses at most what changed since the last save and never the file.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox_ledger.errors import InvalidInputError

if TYPE_CHECKING:
    from pathlib import Path

    from sandbox_ledger.protocol import SyncTransferAdapter
    from sandbox_ledger.resources import ResourceActivityRecord, SyncResourceRecordStore
    from sandbox_ledger.sdk.attributes import Item

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
        json.dumps(
            {"kind": RESOURCE_KIND, "unreadable": found.reason, "item": _json_item(found.item)}
            if isinstance(found, Unreadable)
            else {"kind": RESOURCE_KIND, "record": found.record.wire()},
            ensure_ascii=False,
        )
        + "\n"
        for page in store.scan()
        for found in page
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
    from sandbox_ledger.resources import ResourceActivityRecord
    from sandbox_ledger.transfer import import_entries, parse_lines

    ledger_lines: list[bytes] = []
    records: list[ResourceActivityRecord | Item] = []
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
        if isinstance(record, ResourceActivityRecord):
            store.put(record)
        else:
            store.put_stored(record)
    return Loaded(report.new + report.present, len(parsed.environments), len(records))


def _resource_line(raw: bytes, where: str) -> ResourceActivityRecord | Item | None:
    """The resource record of a ``resourceRecord`` line (the stored item of an unreadable
    one), None for any other line."""
    from pydantic import ValidationError

    from sandbox_ledger.resources import ResourceActivityRecord

    if b'"kind"' not in raw or RESOURCE_KIND.encode() not in raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("kind") != RESOURCE_KIND or "event" in value:
        return None
    if "unreadable" in value:
        return _stored_item(value.get("item"), where)
    try:
        # Read as the store reads what it holds: a heartbeat from an owner whose clock runs
        # behind the creator's is stored on purpose, so the file that saved it loads it.
        return ResourceActivityRecord.model_validate(value.get("record"), context={"stored": True})
    except ValidationError as exc:
        raise InvalidInputError(where, f"not a resource record ({exc.errors()[0]['msg']})") from exc


def _json_item(item: Item | None) -> dict[str, Any]:
    """A low-level item as DynamoDB's JSON writes it: binary values in base64."""
    return {name: _json_value(value) for name, value in (item or {}).items()}


def _json_value(value: dict[str, Any]) -> dict[str, Any]:
    [(kind, inner)] = value.items()
    if kind == "B":
        return {kind: base64.b64encode(inner).decode("ascii")}
    if kind == "BS":
        return {kind: [base64.b64encode(b).decode("ascii") for b in inner]}
    if kind == "M":
        return {kind: {key: _json_value(v) for key, v in inner.items()}}
    if kind == "L":
        return {kind: [_json_value(v) for v in inner]}
    return {kind: inner}


def _stored_item(value: object, where: str) -> Item:
    """:func:`_json_item` read back; InvalidInputError naming ``where`` for anything else."""
    from sandbox_ledger import keys as k

    try:
        if not isinstance(value, dict):
            raise ValueError("no item")
        item = {str(name): _item_value(v) for name, v in value.items()}
        pk = item.get(k.PARTITION_KEY, {}).get("S")
        if not isinstance(pk, str) or not pk.startswith(k.RESOURCE_PREFIX):
            raise ValueError("not a resource record's key")
        if item.get(k.SORT_KEY) != {"S": k.RESOURCE_SK}:
            raise ValueError("not a resource record's key")
    except (ValueError, TypeError, binascii.Error) as exc:
        raise InvalidInputError(where, f"not a stored resource record ({exc})") from exc
    return item


_SCALAR_KINDS = {"S": str, "N": str, "BOOL": bool}


def _item_value(value: object) -> dict[str, Any]:
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"not an attribute value: {value!r}"[:200])
    [(kind, inner)] = value.items()
    if kind in _SCALAR_KINDS and isinstance(inner, _SCALAR_KINDS[kind]):
        return {kind: inner}
    if kind == "NULL" and inner is True:
        return {kind: inner}
    if kind == "B" and isinstance(inner, str):
        return {kind: base64.b64decode(inner, validate=True)}
    if kind in ("SS", "NS") and isinstance(inner, list) and all(isinstance(v, str) for v in inner):
        return {kind: inner}
    if kind == "BS" and isinstance(inner, list) and all(isinstance(v, str) for v in inner):
        return {kind: [base64.b64decode(v, validate=True) for v in inner]}
    if kind == "M" and isinstance(inner, dict):
        return {kind: {str(key): _item_value(v) for key, v in inner.items()}}
    if kind == "L" and isinstance(inner, list):
        return {kind: [_item_value(v) for v in inner]}
    raise ValueError(f"not an attribute value: {value!r}"[:200])
