"""Pure conversions between resource records and their DynamoDB items."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from sandbox_ledger import keys as k
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.resources.models import ResourceActivityRecord
from sandbox_ledger.sdk.attributes import Item, N, S

ITEM_TYPE = k.RESOURCE_ITEM_TYPE


@dataclass(frozen=True)
class VersionedRecord:
    """A stored record with its revision (the optimistic-concurrency token) and TTL."""

    record: ResourceActivityRecord
    revision: int
    expires_at: int | None
    """Unix seconds after which DynamoDB TTL may delete it (a backstop later than the expiry
    policy's own); None for a record the policy keeps forever."""
    expiring: str | None = None
    """Set once a sweeper has claimed the record for expiry: the reason."""
    claimed_by: str | None = None
    """The run id of the sweeper holding the claim."""
    claim_until_ms: int | None = None
    """When that claim's lease ends (None: a claim without a lease, taken over at once)."""
    claim_rev: int | None = None
    """The revision the expiry was claimed at (see :data:`sandbox_ledger.keys.CLAIM_REV`)."""
    observed_rev: int | None = None
    """The revision a sweeper last observed (see :data:`sandbox_ledger.keys.OBSERVED_REV`)."""
    observed_at_ms: int | None = None
    """When, on that sweeper's clock (Unix ms)."""
    incarnation: str | None = None
    """The token set when the record was created (see :data:`sandbox_ledger.keys.INCARNATION`):
    a record deleted and allocated again under its id has another one. None for a record
    written before incarnations existed."""
    item: Item | None = field(default=None, compare=False, repr=False)
    """The stored item it was read from, every attribute (the local server's data file keeps
    it, so a restart restores the record as it was: its revision, incarnation, claim and
    observation); None for one not read from a table."""

    @property
    def expired_revision(self) -> int:
        """The revision an expiry of this record is about: the one its first claim was made
        at (a takeover keeps it), else the current one (what a claim would be made at)."""
        return self.revision if self.claim_rev is None else self.claim_rev

    @property
    def observed_ms(self) -> int | None:
        """When a sweeper observed the current revision (None: not observed, or the owner
        wrote since, which voids the observation)."""
        return self.observed_at_ms if self.observed_rev == self.revision else None


@dataclass(frozen=True)
class Unreadable:
    """A stored resource item this version cannot decode: its id and why (never its payload).

    Forward compatibility: a record written by a newer writer (an unknown field, another
    ``version``) is refused like a damaged one: reported, never expired or deleted by this
    version, so no information a newer reclaimer needs is dropped.
    """

    record_id: str
    reason: str
    body: str | None = field(default=None, repr=False, compare=False)
    """The stored JSON text as it is, for an operator's inspection (``resources show``);
    reports and sweep results carry only the id and the reason."""
    item: Item | None = field(default=None, repr=False, compare=False)
    """The whole stored item (low-level format), for a copy that keeps it as stored (the
    local server's data file)."""


def _why(exc: Exception) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        parts = [
            f"{'.'.join(str(p) for p in e['loc']) or 'record'}: {e['msg']}" for e in exc.errors()
        ]
        return "invalid record: " + "; ".join(parts)[:300]
    if isinstance(exc, KeyError):
        return f"missing attribute {exc.args[0]!r}"
    if isinstance(exc, json.JSONDecodeError):
        return f"record body is not JSON ({exc.msg})"
    if isinstance(exc, RecursionError):
        return "record body is nested too deeply to decode"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def decode_or_unreadable(item: Item) -> VersionedRecord | Unreadable:
    """:func:`decode`, or an :class:`Unreadable` saying why it cannot be decoded."""
    try:
        return decode(item)
    # pydantic's ValidationError is a ValueError; a body nested deeper than the JSON decoder
    # recurses is a RecursionError: each a damaged record to report, never a failed sweep.
    except (KeyError, ValueError, TypeError, RecursionError) as exc:
        try:
            record_id = record_id_of(item)
        except (KeyError, ValueError):
            record_id = str(item.get(k.PARTITION_KEY, {}).get("S", "?"))
        body = item.get(k.RECORD_BODY, {}).get("S")
        return Unreadable(record_id, _why(exc), body if isinstance(body, str) else None, item)


def check_page_size(page_size: object) -> int:
    """``page_size`` if it is an integer (not a bool) of at least 1: a page's ``Limit``, which
    the library's clients send unchecked (botocore's parameter validation is off).

    Raises:
        InvalidInputError: naming ``page_size``.
    """
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise InvalidInputError("page_size", "must be a positive integer")
    return page_size


def record_key(record_id: str) -> Item:
    """The key of the record ``record_id`` (a canonical UUID, else InvalidInputError)."""
    return {k.PARTITION_KEY: S(k.resource_pk(record_id)), k.SORT_KEY: S(k.RESOURCE_SK)}


def check_stored_id(record_id: object) -> str:
    """An id a record may be stored under, for reading only: the canonical UUID, or another
    spelling of one that an older version took as given (:class:`uuid.UUID` reads it).

    Raises:
        InvalidInputError: naming ``id``, as :func:`sandbox_ledger.keys.check_record_id`,
            for anything that is no UUID at all.
    """
    try:
        return k.check_record_id(record_id)
    except InvalidInputError as not_canonical:
        try:
            uuid.UUID(str(record_id))
        except ValueError:
            raise not_canonical from None
        return str(record_id)


def stored_record_key(record_id: str) -> Item:
    """The key of a record whose id was read from the table: as stored, unchecked, so a record
    an older version wrote under another spelling of a UUID is still read (and reported
    unreadable) instead of failing the whole sweep."""
    return {k.PARTITION_KEY: S(k.RESOURCE_PREFIX + record_id), k.SORT_KEY: S(k.RESOURCE_SK)}


def index_keys(record: ResourceActivityRecord, shard_count: int) -> dict[str, Any]:
    shard = k.shard_of(k.resource_pk(record.id), shard_count)
    return {
        k.RESOURCES_BY_PHASE.partition_key: S(k.resource_phase_pk(record.phase, shard)),
        k.RESOURCES_BY_PROVIDER.partition_key: S(
            k.resource_provider_pk(record.sandbox_provider, shard)
        ),
    }


def body(record: ResourceActivityRecord) -> str:
    """The stored JSON: the wire record without updatedAt, which lives in its own attribute
    so a heartbeat is a single UpdateItem."""
    wire = record.wire()
    del wire["updatedAt"]
    return json.dumps(wire, ensure_ascii=False, separators=(",", ":"))


def write_values(
    record: ResourceActivityRecord, *, expires_at: int | None, shard_count: int
) -> dict[str, Any]:
    """Every attribute a full write sets, except the revision (and the TTL attribute when
    ``expires_at`` is None: the write removes it)."""
    values: dict[str, Any] = {
        k.ITEM_TYPE: S(ITEM_TYPE),
        k.RECORD_BODY: S(body(record)),
        k.RECORD_PHASE: S(record.phase),
        k.RECORD_UPDATED_AT: S(record.updated_at),
        k.INDEX_SORT_KEY: N(record.updated_at_ms),
        **index_keys(record, shard_count),
    }
    if expires_at is not None:
        values[k.TTL_ATTRIBUTE] = N(expires_at)
    return values


def decode(item: Item) -> VersionedRecord:
    """A stored item (low-level format) back to a versioned record."""
    wire = json.loads(item[k.RECORD_BODY]["S"])
    wire["updatedAt"] = item[k.RECORD_UPDATED_AT]["S"]
    record = ResourceActivityRecord.model_validate(wire, context={"stored": True})
    if record.id != record_id_of(item):
        raise ValueError(f"id: the record's id {record.id!r} is not the one of its key")
    return VersionedRecord(
        record=record,
        revision=int(item[k.REVISION]["N"]),
        expires_at=int(item[k.TTL_ATTRIBUTE]["N"]) if k.TTL_ATTRIBUTE in item else None,
        expiring=item[k.CLAIM]["S"] if k.CLAIM in item else None,
        claimed_by=item[k.CLAIM_OWNER]["S"] if k.CLAIM_OWNER in item else None,
        claim_until_ms=int(item[k.CLAIM_UNTIL]["N"]) if k.CLAIM_UNTIL in item else None,
        claim_rev=int(item[k.CLAIM_REV]["N"]) if k.CLAIM_REV in item else None,
        observed_rev=int(item[k.OBSERVED_REV]["N"]) if k.OBSERVED_REV in item else None,
        observed_at_ms=int(item[k.OBSERVED_AT]["N"]) if k.OBSERVED_AT in item else None,
        incarnation=item[k.INCARNATION]["S"] if k.INCARNATION in item else None,
        item=item,
    )


def hidden(stored: VersionedRecord, now_s: int) -> bool:
    """True past its TTL (DynamoDB may take days to delete it); never without a TTL."""
    return stored.expires_at is not None and stored.expires_at <= now_s


def is_record(item: Item) -> bool:
    """True for a resource record item (the table holds other kinds)."""
    return item.get(k.ITEM_TYPE, {}).get("S") == ITEM_TYPE


def record_id_of(item: Item) -> str:
    """The record id in an item's partition key."""
    return k.resource_id(item[k.PARTITION_KEY]["S"])
