"""What a DynamoDB stream record of the ledger table means for the fleet's feed.

The item families come from :func:`sandbox_ledger.keys.item_family` (the one key schema):

=====================  ===========================================  ==========================
stream record          item                                         changes
=====================  ===========================================  ==========================
INSERT, MODIFY         a session's summary, by a write that folded  ``session.created``,
                       in ``sandbox.created``/``sandbox.closed``    ``session.closed``: one
                       entries (``lc`` lists them; ``lq``, the      per entry, in order
                       write's mark, changed)
REMOVE by a caller     a session's summary (``delete_sandbox``)     ``session.deleted``
INSERT, MODIFY         a session's summary built again by a delete  ``session.deleted``,
                       that stalled past its lease (``rb``)         then its ``lc`` again
REMOVE by TTL          a session's summary (ledger retention)       ``session.expired``
INSERT                 an entry's head of an earlier version        ``session.created`` or
                       (no ``cs``), event created or closed         ``session.closed``
REMOVE by a caller     a resource record claimed ``expiring``       ``resource.expired``
REMOVE by TTL          a resource record                            ``resource.ttl_removed``
=====================  ===========================================  ==========================

**One item per session.** DynamoDB orders the stream records of one item only: records of
two items of a session (two entries' heads, a head and the summary) can be read in either
order once a shard splits. So every change of a session is read off its summary's records:
each write that stores a ``sandbox.created`` or ``sandbox.closed`` updates the summary in
the same transaction, listing those entries (``lc``), and the summary's removal is its
deletion or expiry. A write that leaves the summary's ``lq`` (a delete's lease, a raise of
its TTL, a writer of an earlier version) is no change. A head written by an earlier
version (no ``cs``) still makes its own change, so a fleet upgraded writer by writer loses
none.

A session has a summary once a ``sandbox.created``, ``sandbox.closed`` or ``exec.complete``
was stored (the summary a ``delete_sandbox`` of nothing makes for its lease is no session).
Every other record (other entries, parts, checkpoints, claims, environments, the descriptor,
an owner's own delete of a resource record) is no change of the fleet. A change's id is the
stream record's ``eventID`` (``<eventID>.<n>`` for the n-th change after the first of one
record): the same record read twice gives the same ids.
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

__all__ = ["changes_of"]

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


def changes_of(record: dict[str, Any]) -> list[Change]:
    """The changes a stream record is, in order (see the module docstring); their positions
    are sealed by the feed loop."""
    body = record.get("dynamodb") or {}
    keys = body.get("Keys") or {}
    pk = (keys.get(k.PARTITION_KEY) or {}).get("S")
    sk = (keys.get(k.SORT_KEY) or {}).get("S")
    if not isinstance(pk, str) or not isinstance(sk, str):
        return []
    family, event = k.item_family(pk, sk), record.get("eventName")
    at, rid = _ms(body.get("ApproximateCreationDateTime")), str(record.get("eventID", ""))
    if family is ItemFamily.ENTRY and event == "INSERT":
        image = body.get("NewImage") or {}
        kind = _OF_EVENT.get((image.get(A.EVENT) or {}).get("S", ""))
        if kind is None or A.ON_SUMMARY in image:
            return []  # no lifecycle event, or its change is the summary's record's
        name, sandbox_id = k.parse_session_pk(pk)
        return [Change(kind, rid, _int(image.get(A.TS), at), name=name, sandbox_id=sandbox_id)]
    if family is ItemFamily.SUMMARY and event in ("INSERT", "MODIFY"):
        return _lifecycle(pk, rid, body)
    if event != "REMOVE":
        return []
    ttl = is_ttl_removal(record)
    if family is ItemFamily.SUMMARY:
        if A.ITEM_TYPE not in (body.get("OldImage") or {}):
            return []  # only a delete's lease was there: no session had begun
        kind = ChangeKind.SESSION_EXPIRED if ttl else ChangeKind.SESSION_DELETED
        name, sandbox_id = k.parse_session_pk(pk)
        return [Change(kind, rid, at, name=name, sandbox_id=sandbox_id)]
    if family is ItemFamily.RESOURCE:
        claimed = k.CLAIM in (body.get("OldImage") or {})
        if not (ttl or claimed):
            return []  # an owner's own delete: no expiry
        kind = ChangeKind.RESOURCE_TTL_REMOVED if ttl else ChangeKind.RESOURCE_EXPIRED
        return [Change(kind, rid, at, record_id=k.resource_id(pk))]
    return []


def _lifecycle(pk: str, rid: str, body: dict[str, Any]) -> list[Change]:
    """The created and closed entries a summary write folded in (``lc``), when the write
    moved its ``sq`` (a write of entries; not a lease, a TTL raise or a rebuild)."""
    new, old = body.get("NewImage") or {}, body.get("OldImage") or {}
    name, sandbox_id = k.parse_session_pk(pk)
    out: list[Change] = []
    rebuilt = new.get(A.REBUILT)
    if rebuilt is not None and rebuilt != old.get(A.REBUILT):
        # Built again by a delete that stalled past its lease, from the next session's
        # entries (whose writes folded them into the deleted session's summary, and made
        # their changes then): the deletion, and the next session's created and closed again.
        at = _ms(body.get("ApproximateCreationDateTime"))
        out.append(Change(ChangeKind.SESSION_DELETED, rid, at, name=name, sandbox_id=sandbox_id))
    elif new.get(A.LIFECYCLE_SEQUENCE) in (None, old.get(A.LIFECYCLE_SEQUENCE)):
        # No write of entries (``lq`` names the one whose ``lc`` is held): a lease, a raise
        # of the TTL, a summary built again, a write of an earlier version (which never
        # wrote ``lc``: its heads made the changes; an ``lc`` it left is a later write's).
        return []
    folded = (new.get(A.LIFECYCLE) or {}).get("L")
    if not isinstance(folded, list):
        return out
    for element in folded:
        fields = element.get("M") if isinstance(element, dict) else None
        kind = _OF_EVENT.get(((fields or {}).get(A.EVENT) or {}).get("S", ""))
        if fields is None or kind is None:
            continue  # not what this version writes
        at = _int(fields.get(A.TS), 0)
        change_id = rid if not out else f"{rid}.{len(out)}"
        out.append(Change(kind, change_id, at, name=name, sandbox_id=sandbox_id))
    return out


def _int(value: object, default: int) -> int:
    """A stream image's number attribute, or ``default`` (an image this version never
    wrote)."""
    try:
        return int(value["N"])  # type: ignore[index]
    except (TypeError, ValueError, KeyError):
        return default
