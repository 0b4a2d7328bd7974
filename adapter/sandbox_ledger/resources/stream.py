"""Recognising TTL deletions of resource records in DynamoDB Streams records."""

from __future__ import annotations

from typing import Any

from sandbox_ledger import keys as k
from sandbox_ledger.resources.events import Expiry

TTL_PRINCIPAL = "dynamodb.amazonaws.com"


def is_ttl_removal(stream_record: dict[str, Any]) -> bool:
    """True for a REMOVE made by DynamoDB's TTL process (not by a caller's DeleteItem)."""
    identity = stream_record.get("userIdentity") or {}
    return (
        stream_record.get("eventName") == "REMOVE"
        and identity.get("type") == "Service"
        and identity.get("principalId") == TTL_PRINCIPAL
    )


def ttl_expiry(stream_record: dict[str, Any]) -> Expiry | None:
    """The ResourceExpired detail for a TTL removal of a resource record, else None.

    Raises ValueError when a TTL-removed resource item cannot be decoded (so the stream
    consumer reports that one record as failed instead of dropping it).
    """
    if not is_ttl_removal(stream_record):
        return None
    image = (stream_record.get("dynamodb") or {}).get("OldImage") or {}
    if image.get(k.ITEM_TYPE, {}).get("S") != k.RESOURCE_ITEM_TYPE:
        return None
    # Only a resource record's removal needs the models (pydantic): the stream handler also
    # sees the TTL removals of ledger items, which it ignores without loading them.
    from datetime import UTC, datetime

    from sandbox_ledger.resources import _items as ri
    from sandbox_ledger.resources.models import to_iso

    stored = ri.decode(image)
    created = (stream_record.get("dynamodb") or {}).get("ApproximateCreationDateTime")
    when = datetime.fromtimestamp(float(created), UTC) if created else datetime.now(UTC)
    return Expiry(
        record=stored.record,
        reason=stored.expiring or "ttl: the record outlived its TTL horizon unswept",
        trigger="ttl",
        # The claimed revision if a sweeper claimed it (its event, if published, has the
        # same key), else the current one: what a sweeper would have claimed it at.
        revision=stored.expired_revision,
        expired_at=to_iso(when),
    )
