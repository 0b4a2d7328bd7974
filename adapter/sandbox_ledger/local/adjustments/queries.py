"""A Query reads its partition, not the table.

moto's Query reads every item of the table, sorted by its keys (``Table.all_items``), then
keeps the partition asked for and sorts the matches again: each Query costs time proportional
to the table (N log N comparisons of moto's typed values). During a Query, ``all_items`` here
yields only the partition asked for (a base-table Query), or, for an index Query, the items
whose index partition key is the one asked for, unsorted: moto keeps exactly those (it checks
the same equality, then the rest of the key condition) and sorts what it keeps by the index's
keys and the table's (a total order), so its answers are the same. An index Query still looks
at every item of the table (moto keeps no index), but at a few hundred nanoseconds each
instead of moto's typed comparisons and sort of all of them.
"""

from __future__ import annotations

import threading
from typing import Any

from . import Adjustment, active

NAME = "queries"
KNOWN_SOURCES = {
    "Table.query": frozenset({"34a9b1baa01eedac"}),
    "Table.all_items": frozenset({"19b1232d1bafee4a"}),
}


def _sources() -> dict[str, Any]:
    from moto.dynamodb.models.table import Table

    return {"Table.query": Table.query, "Table.all_items": Table.all_items}


def _install(stock: dict[str, Any]) -> None:
    from moto.dynamodb.models.table import Table

    stock_query, stock_all_items = stock["Table.query"], stock["Table.all_items"]
    running = threading.local()

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        if active(NAME) is None:
            return stock_query(self, *args, **kwargs)
        index_name = kwargs["index_name"] if "index_name" in kwargs else _arg(args, 7)
        hash_key = kwargs["hash_key"] if "hash_key" in kwargs else _arg(args, 0)
        conditions = kwargs.get("hash_key_conditions") if index_name else None
        outer = getattr(running, "query", None)
        running.query = (self, None if index_name else hash_key, conditions or None)
        try:
            return stock_query(self, *args, **kwargs)
        finally:
            running.query = outer

    def all_items(self: Any) -> list[Any]:
        scope = getattr(running, "query", None)
        if scope is None or scope[0] is not self:
            return stock_all_items(self)  # type: ignore[no-any-return]
        hash_key, conditions = scope[1], scope[2]
        if hash_key is None:
            partitions = list(self.items.values())
        else:
            partition = self.items.get(hash_key)
            partitions = [] if partition is None else [partition]
        if not self.range_key_attr:
            items = partitions
        else:
            items = [item for partition in partitions for item in partition.values()]
        for name, value in conditions or ():
            items = [item for item in items if _may_equal(item, name, value)]
        return items

    Table.query = query  # type: ignore[method-assign]
    Table.all_items = all_items  # type: ignore[method-assign]


def _may_equal(item: Any, name: str, value: Any) -> bool:
    """Whether ``item``'s attribute ``name`` may equal the key value ``value`` (a moto
    ``DynamoType``), as moto's own check would keep it: the same type and raw value (a string
    or binary key), or equal as moto compares numbers ("1" and "1.0")."""
    attrs = getattr(item, "attrs", None)
    if attrs is None:
        return True  # not an item: moto's own check decides
    found = attrs.get(name)
    if found is None or found.type != value.type:
        return False
    return bool(found.value == value.value or (value.type == "N" and found == value))


def _arg(args: tuple[Any, ...], position: int) -> Any:
    return args[position] if len(args) > position else None


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="a Query reads its partition, not the whole table sorted",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
