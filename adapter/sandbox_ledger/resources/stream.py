"""Recognising TTL deletions of resource records in DynamoDB Streams records.

A stream record comes from outside (Lambda's event, or an object the handler kept): every
field is read here for what it may hold, so one odd record is that record's problem, never its
batch's. A field of the wrong type reads as absent; an image that cannot be decoded is a
ValueError naming why; a creation time that is no plausible Unix time reads as absent.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from sandbox_ledger import keys as k
from sandbox_ledger.resources.events import Expiry

TTL_PRINCIPAL = "dynamodb.amazonaws.com"

_LATEST_S = 253_402_300_800
"""Year 10000 in Unix seconds: no ``datetime`` reaches it."""


def member(value: object, name: str) -> object:
    """``value[name]`` when ``value`` is a JSON object, else None (a stream record's fields
    are read through it: a field of the wrong type is taken as absent)."""
    return value.get(name) if isinstance(value, dict) else None


def created_at(stream_record: object) -> datetime | None:
    """When DynamoDB wrote ``stream_record`` (its ``ApproximateCreationDateTime``, Unix
    seconds), or None when it holds no plausible time: absent, not a number (a string, a bool),
    not finite, before 1970 or past the year 9999."""
    created = member(member(stream_record, "dynamodb"), "ApproximateCreationDateTime")
    if isinstance(created, bool) or not isinstance(created, int | float):
        return None
    if not (math.isfinite(created) and 0 <= created < _LATEST_S):
        return None
    return datetime.fromtimestamp(created, UTC)


def is_ttl_removal(stream_record: object) -> bool:
    """True for a REMOVE made by DynamoDB's TTL process (not by a caller's DeleteItem).

    Its ``userIdentity`` is spelt ``{"type", "principalId"}`` in a Lambda event and
    ``{"Type", "PrincipalId"}`` in a record read through the Streams API (GetRecords, the
    SDK's ``Identity``): both are read."""
    identity = member(stream_record, "userIdentity")
    kind = member(identity, "type") or member(identity, "Type")
    principal = member(identity, "principalId") or member(identity, "PrincipalId")
    return (
        member(stream_record, "eventName") == "REMOVE"
        and kind == "Service"
        and principal == TTL_PRINCIPAL
    )


def ttl_expiry(stream_record: object) -> Expiry | None:
    """The ResourceExpired detail for a TTL removal of a resource record, else None.

    Its ``expiredAt`` is the record's creation time, or now when it holds no plausible one
    (:func:`created_at`).

    Raises:
        ValueError: a TTL-removed resource item that cannot be decoded, saying why (so the
            stream consumer keeps or fails that one record instead of dropping it).
    """
    if not is_ttl_removal(stream_record):
        return None
    image = member(member(stream_record, "dynamodb"), "OldImage")
    if not isinstance(image, dict) or member(image.get(k.ITEM_TYPE), "S") != k.RESOURCE_ITEM_TYPE:
        return None
    # Only a resource record's removal needs the models (pydantic): the stream handler also
    # sees the TTL removals of ledger items, which it ignores without loading them.
    from sandbox_ledger.resources import _items as ri
    from sandbox_ledger.resources.models import to_iso

    try:
        stored = ri.decode(image)
    # A field missing (KeyError) or of another type (TypeError, AttributeError), a body that
    # is no record (pydantic's ValidationError is a ValueError) or nested past the decoder's
    # depth (RecursionError): each this record's fault, said as a ValueError.
    except (KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ValueError(f"the OldImage is not a resource record item ({exc!r})") from exc
    when = created_at(stream_record) or datetime.now(UTC)
    return Expiry(
        record=stored.record,
        reason=stored.expiring or "ttl: the record outlived its TTL horizon unswept",
        trigger="ttl",
        # The claimed revision if a sweeper claimed it (its event, if published, has the
        # same key), else the current one: what a sweeper would have claimed it at.
        revision=stored.expired_revision,
        expired_at=to_iso(when),
    )
