"""What a DynamoDB stream record of the ledger table means for the fleet's feed.

The item families come from :func:`sandbox_ledger.keys.item_family` (the one key schema):

=====================  ===========================================  ==========================
stream record          item                                         change
=====================  ===========================================  ==========================
INSERT                 an entry's head, event ``sandbox.created``   ``session.created``
INSERT                 an entry's head, event ``sandbox.closed``    ``session.closed``
REMOVE by a caller     a session's summary (``delete_sandbox``)     ``session.deleted``
REMOVE by TTL          a session's summary (ledger retention)       ``session.expired``
REMOVE by a caller     a resource record claimed ``expiring``       ``resource.expired``
REMOVE by TTL          a resource record                            ``resource.ttl_removed``
=====================  ===========================================  ==========================

A session has a summary once a ``sandbox.created``, ``sandbox.closed`` or ``exec.complete``
was stored (the summary a ``delete_sandbox`` of nothing makes for its lease is no session).
Every other record (other entries, parts, checkpoints, claims, environments, the descriptor,
an owner's own delete of a resource record) is no change of the fleet. A change's id is the
stream record's ``eventID``: the same record read twice has the same id.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from sandbox_ledger import keys as k
from sandbox_ledger.changes import Change, ChangeKind
from sandbox_ledger.keys import ItemFamily
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.resources.stream import is_ttl_removal

__all__ = ["change_of"]

_OF_EVENT = {
    LedgerEvent.SandboxCreated.value: ChangeKind.SESSION_CREATED,
    LedgerEvent.SandboxClosed.value: ChangeKind.SESSION_CLOSED,
}


def _ms(when: object) -> int:
    """``ApproximateCreationDateTime`` in Unix ms: a datetime from the SDK, seconds in a
    Lambda event."""
    if isinstance(when, datetime):
        return int(when.timestamp() * 1000)
    if isinstance(when, str):
        try:
            when = float(when)
        except ValueError:
            return 0
    if isinstance(when, bool) or not isinstance(when, int | float):
        return 0
    # Not a plausible time (not finite, before 1970, past the year 9999): as if absent.
    return int(when * 1000) if math.isfinite(when) and 0 <= when < _LATEST_S else 0


_LATEST_S = 253_402_300_800
"""10000-01-01T00:00:00Z in Unix seconds."""


def change_of(record: dict[str, Any]) -> Change | None:
    """The change a stream record is, or None (see the module docstring); its position is
    sealed by the feed loop."""
    body = record.get("dynamodb") or {}
    keys = body.get("Keys") or {}
    pk = (keys.get(k.PARTITION_KEY) or {}).get("S")
    sk = (keys.get(k.SORT_KEY) or {}).get("S")
    if not isinstance(pk, str) or not isinstance(sk, str):
        return None
    family, event = k.item_family(pk, sk), record.get("eventName")
    at, rid = _ms(body.get("ApproximateCreationDateTime")), str(record.get("eventID", ""))
    if family is ItemFamily.ENTRY and event == "INSERT":
        image = body.get("NewImage") or {}
        kind = _OF_EVENT.get((image.get(A.EVENT) or {}).get("S", ""))
        if kind is None:
            return None
        name, sandbox_id = k.parse_session_pk(pk)
        try:
            ts = int((image.get(A.TS) or {}).get("N", at))
        except (TypeError, ValueError):  # an image this version never wrote
            ts = at
        return Change(kind, rid, ts, name=name, sandbox_id=sandbox_id)
    if event != "REMOVE":
        return None
    ttl = is_ttl_removal(record)
    if family is ItemFamily.SUMMARY:
        if A.ITEM_TYPE not in (body.get("OldImage") or {}):
            return None  # only a delete's lease was there: no session had begun
        kind = ChangeKind.SESSION_EXPIRED if ttl else ChangeKind.SESSION_DELETED
        name, sandbox_id = k.parse_session_pk(pk)
        return Change(kind, rid, at, name=name, sandbox_id=sandbox_id)
    if family is ItemFamily.RESOURCE:
        claimed = k.CLAIM in (body.get("OldImage") or {})
        if not (ttl or claimed):
            return None  # an owner's own delete: no expiry
        kind = ChangeKind.RESOURCE_TTL_REMOVED if ttl else ChangeKind.RESOURCE_EXPIRED
        return Change(kind, rid, at, record_id=k.resource_id(pk))
    return None
