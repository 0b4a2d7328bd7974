"""An item's size is summed once as its attributes are built.

moto builds an item's attributes one by one into a ``LimitedSizeDict``, whose every
assignment sums the size of every attribute already there before checking the new total
against its limit (405,000 bytes): an item of n attributes costs n * (n + 1) / 2 size
computations, each a walk of the attribute's value. The ledger's items have 8 to 14
attributes, and an import writes two or three items per entry: about a sixth of the
server's time on a transaction of 100 puts. Here an item's attributes are built with a
running total, checked against the same limit after each attribute, as moto's own sum
would be: the same item or the same ``ItemSizeTooLarge``. Assignments to an item that
exists (an update's) still go through moto's own check, but on a strict server, whose front
checks the item an update leaves by DynamoDB's own formula before moto applies it
(:mod:`sandbox_ledger.local.strict.limits`): moto's would refuse an item DynamoDB takes.
"""

from __future__ import annotations

from typing import Any

from . import Adjustment, active

NAME = "item_sizes"
KNOWN_SOURCES = {
    "Item.__init__": frozenset({"11eb3dfce741941f"}),
    "LimitedSizeDict.__setitem__": frozenset({"cfc51d35c272c820"}),
}

LIMIT = 405_000
"""moto's limit on an item's size (bytes), in ``LimitedSizeDict.__setitem__``."""


def _sources() -> dict[str, Any]:
    # The assignment's check is relied on (its limit, what it sums), left out on a strict
    # server only.
    from moto.dynamodb.models.dynamo_type import Item, LimitedSizeDict

    return {
        "Item.__init__": Item.__init__,
        "LimitedSizeDict.__setitem__": LimitedSizeDict.__setitem__,
    }


def _install(stock: dict[str, Any]) -> None:
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
    from moto.dynamodb.models.utilities import bytesize

    stock_init = stock["Item.__init__"]
    assign = dict.__setitem__

    def __init__(self: Any, hash_key: Any, range_key: Any | None, attrs: dict[str, Any]) -> None:
        settings = active(NAME)
        if settings is None:
            stock_init(self, hash_key, range_key, attrs)
            return
        limit = None if settings.strict else LIMIT  # the strict front checked it exactly
        self.hash_key = hash_key
        self.range_key = range_key
        built = LimitedSizeDict()
        size = 0
        for key, value in attrs.items():
            typed = DynamoType(value)
            # moto's check before each assignment: the attributes so far, plus this one.
            size += bytesize(key) + typed.size()
            if limit is not None and size > limit:
                raise ItemSizeTooLarge
            assign(built, key, typed)
        self.attrs = built

    Item.__init__ = __init__  # type: ignore[method-assign]

    stock_set = stock["LimitedSizeDict.__setitem__"]

    def __setitem__(self: Any, key: str, value: Any) -> None:
        settings = active(NAME)
        if settings is not None and settings.strict:
            assign(self, key, value)  # the strict front checked the update's item exactly
            return
        stock_set(self, key, value)

    LimitedSizeDict.__setitem__ = __setitem__  # type: ignore[method-assign]


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="an item's size is summed once as it is built, not once per attribute",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
