"""The items an import stores for one session, built without a request: what the embedded
server's restart puts straight into its table (:mod:`sandbox_ledger.local.bulk`), with the
adapter's own builders, so that a load and an import store the very same items.

The import (:mod:`._bulk`, :mod:`._packing`) writes, per entry in the session's order: its
parts, its head (carrying its sequence mark's number), its claim, a checkpoint's marker (with
the number too) and its sequence mark; and the session's summary folded from every entry.
Into an empty table without retention, the marks are numbered from 0 in a new incarnation,
or as the session's sequence a local server saved says (its incarnations and numbers kept
across a restart: see :func:`session_items`).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb import _sequence as seq
from sandbox_ledger.dynamodb._packing import new_unit
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.models import LedgerEntry, require_storable
from sandbox_ledger.sdk.attributes import N

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sandbox_ledger.sdk.attributes import Item

__all__ = [
    "MAX_ORDER_CHARS",
    "check_orders",
    "check_runs",
    "checked",
    "mark_runs",
    "order_ids_after",
    "session_items",
]


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
    planned: Sequence[tuple[LedgerEntry, int, str]],
    shard_count: int,
    runs: Sequence[tuple[str, int, int]] | None = None,
    orders: Sequence[str] | None = None,
) -> tuple[list[Item], str]:
    """Every item the import stores for one session's entries (each with its occurrence and
    content digest, in the session's order) into an empty table without retention, in the
    order it writes them; and the last order id they took.

    The marks are numbered from 0 in a new incarnation, or as ``runs`` says (the session's
    sequence as a store held it: see :func:`mark_runs`), with the items a delete and a dead
    one's seal left there: mark 0 spent, when the first mark is not 0; a seal before each
    run of another incarnation than the run before it. The first entries' heads take the
    order ids ``orders`` names, in order (the ones their writers chose, as a store held
    them: an append resent after a restart then finds its entry), the rest new ones.

    Raises:
        InvalidInputError: an entry DynamoDB cannot hold (a ValueError too).
        ValueError: ``orders`` names one order id twice.
    """
    named = check_orders(orders or [])
    units = [
        new_unit(
            index,
            entry,
            k.claim_sk(digest, k.check_occurrence(occurrence)),
            None,
            named[index] if index < len(named) else None,
        )
        for index, (entry, occurrence, digest) in enumerate(planned)
    ]
    items: list[Item] = []
    if units:
        pk = units[0].head[k.PARTITION_KEY]["S"]
        marks = _numbered(len(units), runs)
        for (number, incarnation), unit in zip(marks, units, strict=True):
            items.extend(unit.parts)
            items.append(seq.sequenced(unit.head, number))  # as the import's request puts it
            items.append(unit.claim)
            if unit.marker is not None:
                items.append(seq.sequenced(unit.marker, number))
            items.append(seq.mark_item(pk, seq.Mark(incarnation, number), unit.head))
        items += _left_by_deletes(pk, marks)
        update = it.summary_fold([u.entry for u in units], shard_count, None)
        if update is not None:
            changed = max(i for i, u in enumerate(units) if it.changes_summary(u.entry))
            number, incarnation = marks[changed]
            items.append(it.summary_item(it.summary_sequenced(update, number, incarnation)))
    last = max((unit.claim[A.CLAIM_ORDER]["S"] for unit in units), default="")
    return items, last


def mark_runs(marks: Sequence[tuple[int, str] | None]) -> list[tuple[str, int, int]] | None:
    """A session's sequence, from each entry's mark (number, incarnation) in the session's
    order: ``(incarnation, number, index)`` where a run of consecutive numbers in one
    incarnation begins (at the ``index``-th entry); None if an entry has no mark."""
    runs: list[tuple[str, int, int]] = []
    last: tuple[int, str] | None = None
    for index, mark in enumerate(marks):
        if mark is None:
            return None
        if last is None or mark[1] != last[1] or mark[0] != last[0] + 1:
            runs.append((mark[1], mark[0], index))
        last = mark
    return runs


def check_runs(value: object) -> tuple[tuple[str, int, int], ...]:
    """``value`` (JSON) as a session's sequence :func:`mark_runs` makes: a non-empty list of
    ``[incarnation, number, index]``, the first at index 0, each run's marks after the ones
    before.

    Raises:
        ValueError: anything else (the reason says what).
    """
    if not isinstance(value, list) or not value:
        raise ValueError("no runs")
    runs: list[tuple[str, int, int]] = []
    for run in value:
        if (
            not isinstance(run, list)
            or len(run) != 3
            or not isinstance(run[0], str)
            or not 0 < len(run[0]) <= 64
            or not all(type(n) is int and 0 <= n < seq.MAX_MARKS for n in run[1:])
        ):
            raise ValueError("a run is not [incarnation, number, index]")
        if runs:
            _, number, index = runs[-1]
            ordered = run[2] > index and run[1] - number >= run[2] - index
        else:
            ordered = run[2] == 0
        if not ordered:
            raise ValueError("runs out of order")
        runs.append((run[0], run[1], run[2]))
    return tuple(runs)


MAX_ORDER_CHARS = 64
"""The longest order id a data file may name (the adapter's are 28 characters)."""


def check_orders(value: object) -> tuple[str, ...]:
    """``value`` (JSON) as a session's order ids: a list of distinct non-empty strings
    without ``#`` (an entry head's key is ``E#<ts>#<order>``), each at most
    :data:`MAX_ORDER_CHARS` long.

    Raises:
        ValueError: anything else (the reason says what).
    """
    if not isinstance(value, list | tuple):
        raise ValueError("order ids are not a list")
    for order in value:
        if (
            not isinstance(order, str)
            or not 0 < len(order) <= MAX_ORDER_CHARS
            or "#" in order
            or not order.isascii()
            or not order.isprintable()
        ):
            raise ValueError(f"not an order id: {order!r}")
    if len(set(value)) != len(value):
        raise ValueError("an order id named twice")
    return tuple(value)


def _numbered(count: int, runs: Sequence[tuple[str, int, int]] | None) -> list[tuple[int, str]]:
    """Each of ``count`` entries' mark (number, incarnation): from ``runs`` (those that begin
    at an entry there is), else from 0 in a new incarnation."""
    if not runs:
        runs = [(seq.new_incarnation(), 0, 0)]
    marks: list[tuple[int, str]] = []
    starts = [run for run in runs if run[2] < count]
    for position, (incarnation, first, index) in enumerate(starts):
        end = starts[position + 1][2] if position + 1 < len(starts) else count
        marks += [(first + i, incarnation) for i in range(end - index)]
    return marks


def _left_by_deletes(pk: str, marks: list[tuple[int, str]]) -> list[Item]:
    """Mark 0 spent (a delete left it: its number is never taken again) when the first mark
    is not 0, and a dead delete's seal before a mark of another incarnation than the one
    before it (a follower of the incarnation before passes it, as it did)."""
    items: list[Item] = []
    if marks[0][0] > 0:
        spent = seq.seal_item(pk, 0, seq.new_incarnation())
        spent[A.SPENT] = N(1)
        items.append(spent)
    for (before, was), (number, incarnation) in itertools.pairwise(marks):
        if incarnation != was and number - 1 > before:
            items.append(seq.seal_item(pk, number - 1, incarnation))
    return items


def order_ids_after(last_order: str) -> None:
    """This process's order ids go on after ``last_order`` (as they would after an import in
    this process, whatever the clock says)."""
    stamp = it.order_time_ns(last_order)
    if stamp is not None:
        it.order_ids.continue_after(stamp)
