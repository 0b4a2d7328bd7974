"""The items an import stores for one session, built without a request: what the embedded
server's restart puts straight into its table (:mod:`sandbox_ledger.local.bulk`), with the
adapter's own builders, so that a load and an import store the very same items.

The import (:mod:`._bulk`, :mod:`._packing`) writes, per entry in the session's order: its
parts, its head (carrying its sequence mark's number), its claim, a checkpoint's marker (with
the number too) and its sequence mark; and the session's summary folded from every entry.
Into an empty table without retention, the marks are numbered from 0 in a new incarnation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb import _sequence as seq
from sandbox_ledger.dynamodb._packing import new_unit
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.models import LedgerEntry, require_storable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sandbox_ledger.sdk.attributes import Item

__all__ = ["checked", "order_ids_after", "session_items"]


def checked(entry: object) -> LedgerEntry:
    """``entry`` if the adapter would store it (as its appends check it).

    Raises:
        InvalidInputError: not an entry, or one DynamoDB cannot hold.
    """
    if not isinstance(entry, LedgerEntry):
        raise InvalidInputError("entry", f"expected a LedgerEntry, got {type(entry).__name__}")
    require_storable(entry)
    return entry


def session_items(
    planned: Sequence[tuple[LedgerEntry, int, str]], shard_count: int
) -> tuple[list[Item], str]:
    """Every item the import stores for one session's entries (each with its occurrence and
    content digest, in the session's order) into an empty table without retention, in the
    order it writes them; and the last order id they took.

    Raises:
        InvalidInputError: an entry DynamoDB cannot hold (a ValueError too).
    """
    units = [
        new_unit(index, entry, k.claim_sk(digest, k.check_occurrence(occurrence)), None)
        for index, (entry, occurrence, digest) in enumerate(planned)
    ]
    items: list[Item] = []
    if units:
        pk = units[0].head[k.PARTITION_KEY]["S"]
        incarnation = seq.new_incarnation()
        for number, unit in enumerate(units):
            items.extend(unit.parts)
            items.append(seq.sequenced(unit.head, number))  # as the import's request puts it
            items.append(unit.claim)
            if unit.marker is not None:
                items.append(seq.sequenced(unit.marker, number))
            items.append(seq.mark_item(pk, seq.Mark(incarnation, number), unit.head))
        update = it.summary_fold([u.entry for u in units], shard_count, None)
        if update is not None:
            changed = max(i for i, u in enumerate(units) if it.changes_summary(u.entry))
            items.append(it.summary_item(it.summary_sequenced(update, changed, incarnation)))
    last = max((unit.claim[A.CLAIM_ORDER]["S"] for unit in units), default="")
    return items, last


def order_ids_after(last_order: str) -> None:
    """This process's order ids go on after ``last_order`` (as they would after an import in
    this process, whatever the clock says)."""
    stamp = it.order_time_ns(last_order)
    if stamp is not None:
        it.order_ids.continue_after(stamp)
