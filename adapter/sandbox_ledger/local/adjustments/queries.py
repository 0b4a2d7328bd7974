"""A Query reads its partition, not the table.

moto's Query reads every item of the table, sorted by its keys (``Table.all_items``), then
keeps the partition asked for and sorts the matches again: each Query costs time proportional
to the table (N log N comparisons of moto's typed values). During a Query, ``all_items`` here
yields only the partition asked for (a base-table Query), or the items unsorted (an index
Query): the query sorts what it keeps by the index's keys and the table's (a total order), so
its answers are the same.
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
        outer = getattr(running, "query", None)
        running.query = (self, None if index_name else hash_key)
        try:
            return stock_query(self, *args, **kwargs)
        finally:
            running.query = outer

    def all_items(self: Any) -> list[Any]:
        scope = getattr(running, "query", None)
        if scope is None or scope[0] is not self:
            return stock_all_items(self)  # type: ignore[no-any-return]
        hash_key = scope[1]
        if hash_key is None:
            partitions = list(self.items.values())
        else:
            partition = self.items.get(hash_key)
            partitions = [] if partition is None else [partition]
        if not self.range_key_attr:
            return partitions
        return [item for partition in partitions for item in partition.values()]

    Table.query = query  # type: ignore[method-assign]
    Table.all_items = all_items  # type: ignore[method-assign]


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
