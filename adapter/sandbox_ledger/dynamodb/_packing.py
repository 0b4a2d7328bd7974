"""Pure: an import batch's entries as TransactWriteItems within DynamoDB's limits (see
:mod:`._bulk`, which runs them). No I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb import _ops
from sandbox_ledger.dynamodb import _sequence as _seq
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.sdk.attributes import N, S

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sandbox_ledger.dynamodb._sequence import Mark
    from sandbox_ledger.models import LedgerEntry
    from sandbox_ledger.sdk.attributes import Item

__all__ = [
    "MAX_ACTIONS",
    "MAX_TRANSACTION_BYTES",
    "Group",
    "Slot",
    "Transaction",
    "Unit",
    "item_bytes",
    "new_unit",
    "pack",
    "remove",
    "request",
]

MAX_ACTIONS = 100
"""DynamoDB's limit of actions in one TransactWriteItems."""

MAX_TRANSACTION_BYTES = 4_000_000
"""Below DynamoDB's 4 MB (4,194,304 bytes) limit on a transaction's items."""

_SUMMARY_BYTES = 2_048
"""Room kept for a session's summary besides its keys (attribute names, numbers, prefixes)."""


_LIFECYCLE_BYTES = 48
"""Room for one element of the summary's ``lc`` (a created or closed entry's event and ts,
at their largest: 34 bytes as DynamoDB counts them)."""


def _grow(unit: Unit) -> int:
    """What ``unit`` adds to its transaction's bytes, its summary's ``lc`` element with it."""
    return unit.size + (_LIFECYCLE_BYTES if unit.entry.event in it.SHARDED_EVENTS else 0)


def _summary_bytes(pk: str) -> int:
    """Room for the summary of session ``pk``, put whole or updated: its partition key, and
    the name and sandboxId it holds and repeats in its index keys (each at most the
    partition key's length; up to 8,306 bytes with the longest keys check_session_key
    allows), besides :data:`_SUMMARY_BYTES`."""
    return _SUMMARY_BYTES + 4 * len(pk.encode("utf-8", "surrogatepass"))


def item_bytes(item: Item) -> int:
    """An item's size as DynamoDB counts it (attribute names and values; numbers at their
    largest), for the transaction limit and capacity estimates."""
    size = 0
    for name, value in item.items():
        size += len(name.encode("utf-8", "surrogatepass"))
        (kind, raw), *_ = value.items()
        if kind == "S":
            size += len(raw.encode("utf-8", "surrogatepass"))
        elif kind == "N":
            size += len(raw) // 2 + 2
        elif kind == "B":
            size += len(raw)
        else:
            size += len(repr(raw))
    return size


@dataclass
class Unit:
    """One item of the batch to write: its entry's head, claim and marker."""

    index: int
    entry: LedgerEntry
    ttl: int | None
    head: Item
    parts: list[Item]
    claim: Item
    marker: Item | None

    @property
    def actions(self) -> int:
        """Its head, claim and sequence mark, and a checkpoint's marker."""
        return 3 if self.marker is None else 4

    @property
    def size(self) -> int:
        """Its items' bytes: head, claim, marker and sequence mark (its mark's number and
        incarnation, which the head and the marker carry too, not known yet: at their
        largest)."""
        marker = self.marker
        marker_bytes = item_bytes(_seq.sequenced(marker, _LARGEST.number)) if marker else 0
        mark = item_bytes(_seq.mark_item(self.head[k.PARTITION_KEY]["S"], _LARGEST, self.head))
        head = item_bytes(_seq.sequenced(self.head, _LARGEST.number))
        return head + item_bytes(self.claim) + marker_bytes + mark


@dataclass
class Group:
    """A session's units in one transaction, and the form its summary update takes."""

    pk: str
    units: list[Unit]
    form: str = _ops.FRESH
    """The form of its summary update that fits the stored summary's expiry
    (:func:`._ops.summary_form`)."""
    kept: int | None = None
    """The summary TTL its last request set (None: it set none, its mark's ``kept`` stands):
    what the sequencer learns of it once the request lands."""
    first: bool = False
    """The session's first group in the batch: its summary is put whole, on the condition
    that none is stored (the common case of a move: a session the target does not hold),
    instead of updated: DynamoDB (and the embedded server, by far) does less for a put
    than for an update expression of a dozen clauses."""
    stored: bool = False
    """The put's condition failed: the session's summary is stored, so it is updated."""
    mark: Mark | None = None
    """Where its units' sequence marks start (see :mod:`._sequence`); None: to be placed."""
    misses: int = 0
    """How often its marks were taken by another writer first (then read before placing)."""

    @property
    def puts_summary(self) -> bool:
        return self.first and not self.stored

    def ttl(self) -> int | None:
        ttls = [u.ttl for u in self.units if u.ttl is not None and it.changes_summary(u.entry)]
        return max(ttls) if ttls else None


@dataclass
class Transaction:
    groups: list[Group] = field(default_factory=list)
    after: set[int] = field(default_factory=set)
    """Transactions that hold earlier entries of one of its sessions: they go first."""
    attempt: int = 0
    conflicts: int = 0
    """Cancellations only for transactions in flight on its items (``steps.MAX_CONFLICTS``)."""
    backoff: bool = False
    landed: bool = False
    """A resend found it stored: its units are written."""

    @property
    def units(self) -> list[Unit]:
        return [u for g in self.groups for u in g.units]


_LARGEST = _seq.Mark("f" * 64, _seq.MAX_MARKS - 1, floor=10**12)
"""A sequence mark at its largest, for sizes (its TTL raised: its entry's kept beside it)."""


_ABSENT = {
    "ConditionExpression": "attribute_not_exists(#pk)",
    "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY},
}


_ABSENT_SUMMARY = {**_ABSENT, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}


def new_unit(
    index: int, entry: LedgerEntry, claim: str, retention: int | None, order: str | None = None
) -> Unit:
    """The items that store ``entry``, its head under ``order`` (the order id its writer
    chose, kept by a local server across a restart) or a new one."""
    order = it.order_ids.next() if order is None else order
    ttl = k.ledger_expires_at(entry.ts, retention)
    encoded = it.encode_entry(entry, order, ttl)
    claim_item = {**it.summary_key(encoded.head[k.PARTITION_KEY]["S"]), A.CLAIM_ORDER: S(order)}
    claim_item[k.SORT_KEY] = S(claim)
    if ttl is not None:
        claim_item[k.TTL_ATTRIBUTE] = N(ttl)
    marker = (
        it.checkpoint_marker(entry, order, ttl)
        if entry.event == LedgerEvent.CheckpointCreated
        else None
    )
    return Unit(index, entry, ttl, encoded.head, encoded.parts, claim_item, marker)


def pack(units: Sequence[Unit]) -> list[Transaction]:
    """Units (grouped by session, in order) into transactions within DynamoDB's limits,
    whole sessions where they fit."""
    transactions = [Transaction()]
    actions = size = 0
    last: dict[str, int] = {}  # session -> the last transaction holding it
    for unit in units:
        pk = unit.head[k.PARTITION_KEY]["S"]
        current = transactions[-1]
        group = current.groups[-1] if current.groups and current.groups[-1].pk == pk else None
        # A new group brings its summary's write and the check of the mark before its own.
        extra = unit.actions + (0 if group else 2)
        grow = _grow(unit) + (0 if group else _summary_bytes(pk))
        if current.groups and (
            actions + extra > MAX_ACTIONS or size + grow > MAX_TRANSACTION_BYTES
        ):
            current = Transaction()
            transactions.append(current)
            actions = size = 0
            group = None
            extra, grow = unit.actions + 2, _grow(unit) + _summary_bytes(pk)
        if group is None:
            group = Group(pk, [], first=pk not in last)
            current.groups.append(group)
            if pk in last:
                current.after.add(last[pk])
            last[pk] = len(transactions) - 1
        group.units.append(unit)
        actions += extra
        size += grow
    return transactions if transactions[0].groups else []


@dataclass(frozen=True)
class Slot:
    """What one action of a transaction is: a unit's head, claim or marker, or a group's
    summary update."""

    kind: str
    """head, claim, marker, summary, raise (of the summary's TTL) or mark (a sequence mark
    or the check before them)"""
    unit: Unit | None = None
    group: Group | None = None


def request(
    table: str, transaction: Transaction, shard_count: int, now_ms: int
) -> tuple[dict[str, Any], list[Slot]]:
    actions: list[dict[str, Any]] = []
    slots: list[Slot] = []
    for group in transaction.groups:
        assert group.mark is not None, "a group's marks are placed before its request"
        for number, unit in enumerate(group.units, start=group.mark.number):
            head = _seq.sequenced(unit.head, number)
            actions.append({"Put": {"TableName": table, "Item": head, **_ABSENT}})
            slots.append(Slot("head", unit))
            actions.append({"Put": {"TableName": table, "Item": unit.claim, **_ABSENT}})
            slots.append(Slot("claim", unit))
            if unit.marker is not None:
                marker = _seq.sequenced(unit.marker, number)
                actions.append({"Put": {"TableName": table, "Item": marker}})
                slots.append(Slot("marker", unit))
        marks = _seq.mark_actions(table, group.pk, group.mark, [u.head for u in group.units])
        actions.extend(marks)
        slots.extend(Slot("mark", group=group) for _ in marks)
        heads = [u.head for u in group.units]
        mark_ttl = group.mark.ttl_after(heads)
        kept = None if mark_ttl is None else it.summary_expiry(mark_ttl, now_ms // 1000)
        ttl = group.ttl()
        entries = [u.entry for u in group.units]
        group.kept = None
        if not any(it.changes_summary(e) for e in entries):
            due = now_ms // 1000 + it.SUMMARY_RENEW_S
            if kept is not None and group.mark.needs_raise(heads, due):
                # Its marks pass what is known of the summary's TTL: raise it, so that TTL
                # keeps the summary while these entries live (see _items.SUMMARY_SLACK_S).
                raised = it.summary_raise(group.pk, kept)
                actions.append({"Update": {"TableName": table, **raised}})
                slots.append(Slot("raise", group=group))
                group.kept = kept
            continue
        update = _ops.summary_form(entries, shard_count, ttl, kept, group.form)
        group.kept = kept
        last = max(i for i, u in enumerate(group.units) if it.changes_summary(u.entry))
        update = it.summary_sequenced(update, group.mark.number + last, group.mark.incarnation)
        if group.puts_summary:
            # On an absent summary, the update's result (no lease or expiry to respect yet).
            # A failed condition returns the stored summary, as the update's does.
            item = it.summary_item(update)
            actions.append({"Put": {"TableName": table, "Item": item, **_ABSENT_SUMMARY}})
        else:
            condition = _ops._summary_condition(update, now_ms, ttl, form=group.form)
            actions.append({"Update": {"TableName": table, **update, **condition}})
        slots.append(Slot("summary", group=group))
    return {"TransactItems": actions}, slots


def remove(transaction: Transaction, taken: list[Unit]) -> None:
    gone = {id(u) for u in taken}
    for group in transaction.groups:
        group.units = [u for u in group.units if id(u) not in gone]
    transaction.groups = [g for g in transaction.groups if g.units]
