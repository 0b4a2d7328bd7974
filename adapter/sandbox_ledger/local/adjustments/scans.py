"""A Scan page costs its page, not the whole table sorted.

moto's Scan of the base table sorts every item of the table by its keys (``all_items``,
N log N comparisons of moto's typed values) for every page, then walks from the first item
to the page's ``ExclusiveStartKey`` comparing each one: reading a table of N items in pages
costs N log N per page, N²/page in all (an export of 200,000 entries took requests past a
client's read timeout). Here a base-table Scan of a table whose keys are strings reads the
table's keys sorted at a scan's first page (when its key set changed since the last sort:
a sum of the keys' hashes, one pass without a sort, tells; a count does not, since a table
emptied and written again can hold as many items under other keys), finds where each page
starts by bisection, and hands moto the items from there, as stored now: the same order and
pages as moto's own. The later pages of a scan go on in
the order its first page found, however the table is written to meanwhile: an item written
during a scan may be missed by the pages after it, which DynamoDB allows (a Scan is not a
snapshot); one deleted is not returned.
"""

from __future__ import annotations

import bisect
import threading
from typing import Any

from . import Adjustment, active

NAME = "scans"
KNOWN_SOURCES = {"Table.scan": frozenset({"4dd20e30e48c5fa8"})}


def _sources() -> dict[str, Any]:
    from moto.dynamodb.models.table import Table

    return {"Table.scan": Table.scan}


class _Order:
    """A table's keys, sorted, and the signature of the key set they were read from."""

    def __init__(self, table: Any, signature: tuple[int, int]) -> None:
        self.keys = sorted(_keys(table))
        self.signature = signature


def _keys(table: Any) -> Any:
    return (
        (item.hash_key.value, item.range_key.value)
        for partition in table.items.values()
        for item in partition.values()
    )


def _signature(table: Any) -> tuple[int, int]:
    """The table's key set in two numbers (its size, the sum of its keys' hashes modulo
    2**64): one pass, no sort; two different key sets share one with odds of about 2**-64."""
    count = total = 0
    for one in _keys(table):
        count += 1
        total += hash(one)
    return count, total & 0xFFFF_FFFF_FFFF_FFFF


_ORDER = "_sandbox_ledger_scan_order"
"""The attribute of a table that keeps its :class:`_Order` (gone with the table)."""
_orders_lock = threading.Lock()


def _install(stock: dict[str, Any]) -> None:
    from moto.dynamodb.models.table import Table

    stock_scan = stock["Table.scan"]

    def scan(self: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs["index_name"] if "index_name" in kwargs else _arg(args, 4)
        if (
            active(NAME) is None
            or index_name
            or not self.range_key_attr
            or self.hash_key_type != "S"
            or self.range_key_type != "S"
        ):
            return stock_scan(self, *args, **kwargs)
        start = kwargs["exclusive_start_key"] if "exclusive_start_key" in kwargs else _arg(args, 2)
        with _orders_lock:
            order = getattr(self, _ORDER, None)
            # A scan's first page sorts the table's keys as they are (when they changed); its
            # later pages go on in that order, written to or not (DynamoDB: a Scan is not a
            # snapshot, an item written meanwhile may be missed). Sorting again whenever the
            # table changed made every page of a scan of a table being written to cost the
            # whole table: under the soak's fleet, scans held the server for seconds.
            if order is None or start is None:
                signature = _signature(self)
                if order is None or order.signature != signature:
                    order = _Order(self, signature)
                    setattr(self, _ORDER, order)
        first = 0
        if start is not None:
            after = (start[self.hash_key_attr]["S"], start[self.range_key_attr]["S"])
            first = bisect.bisect_right(order.keys, after)
        self.all_items = lambda: _items_from(self, order.keys, first)
        try:
            return stock_scan(self, *args, **kwargs)
        finally:
            del self.all_items

    Table.scan = scan  # type: ignore[method-assign]


def _items_from(table: Any, keys: list[tuple[str, str]], first: int) -> Any:
    """The table's items from ``keys[first]`` on, as stored now (deleted ones left out)."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    for position in range(first, len(keys)):
        hash_value, range_value = keys[position]
        partition = table.items.get(DynamoType({"S": hash_value}))
        if partition is None:
            continue
        item = partition.get(DynamoType({"S": range_value}))
        if item is not None:
            yield item


def _arg(args: tuple[Any, ...], position: int) -> Any:
    return args[position] if len(args) > position else None


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="a Scan page reads its page, not the whole table sorted",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
