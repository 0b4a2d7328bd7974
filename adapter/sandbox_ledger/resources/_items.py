"""Pure conversions between resource records and their DynamoDB items."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sandbox_ledger import keys as k
from sandbox_ledger.ddb.attributes import Item, N, S
from sandbox_ledger.resources.models import ResourceActivityRecord

ITEM_TYPE = k.RESOURCE_ITEM_TYPE


@dataclass(frozen=True)
class VersionedRecord:
    """A stored record with its revision (the optimistic-concurrency token) and TTL."""

    record: ResourceActivityRecord
    revision: int
    expires_at: int
    """Unix seconds after which DynamoDB TTL may delete it (a backstop)."""
    expiring: str | None = None
    """Set once a sweeper has claimed the record for expiry: the reason."""


def record_key(record_id: str) -> Item:
    return {k.PARTITION_KEY: S(k.resource_pk(record_id)), k.SORT_KEY: S(k.RESOURCE_SK)}


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
    record: ResourceActivityRecord, *, horizon_seconds: int, shard_count: int
) -> dict[str, Any]:
    """Every attribute a full write sets, except the revision."""
    return {
        k.ITEM_TYPE: S(ITEM_TYPE),
        k.RECORD_BODY: S(body(record)),
        k.RECORD_PHASE: S(record.phase),
        k.RECORD_UPDATED_AT: S(record.updated_at),
        k.INDEX_SORT_KEY: N(record.updated_at_ms),
        k.TTL_ATTRIBUTE: N(record.updated_at_ms // 1000 + horizon_seconds),
        **index_keys(record, shard_count),
    }


def decode(item: Item) -> VersionedRecord:
    """A stored item (low-level format) back to a versioned record."""
    wire = json.loads(item[k.RECORD_BODY]["S"])
    wire["updatedAt"] = item[k.RECORD_UPDATED_AT]["S"]
    return VersionedRecord(
        record=ResourceActivityRecord.model_validate(wire),
        revision=int(item[k.REVISION]["N"]),
        expires_at=int(item[k.TTL_ATTRIBUTE]["N"]),
        expiring=item[k.CLAIM]["S"] if k.CLAIM in item else None,
    )


def is_record(item: Item) -> bool:
    """True for a resource record item (the table holds other kinds)."""
    return item.get(k.ITEM_TYPE, {}).get("S") == ITEM_TYPE


def record_id_of(item: Item) -> str:
    """The record id in an item's partition key."""
    return k.resource_id(item[k.PARTITION_KEY]["S"])
