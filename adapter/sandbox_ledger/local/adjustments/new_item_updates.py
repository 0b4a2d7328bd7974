"""An update that creates its item is validated once, not twice, when its paths name no key.

For an item that does not exist yet, moto's ``update_item`` validates the update expression
against an item with no attributes at all (only for its errors: the result is dropped),
stores an item holding just the key, then validates the expression again against that one
and executes the result. The validation passes were about a fifth of an import's server
time (every session's summary update creates its summary).

The two validations differ only in the item they resolve paths against: ``{}`` and the key
attributes alone. A path resolves its first name in the item's attributes; when no name of
the expression (its attribute names and the values of its ``#placeholders``) is a key
attribute, every path resolves alike in both (absent), so both validations raise the same
error or build the same tree, which holds nothing of either item. The second validation
then returns the tree the first built (moto dropped it: it is used once). Anything else (a
name that is a key attribute, another item, other names or values, another expression) is
validated as moto does. (moto's own key check refuses an update whose paths name a key
attribute anywhere, before the item matters; the names are checked here all the same, so
that the argument above does not rest on that check.)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from . import Adjustment, active
from .lru import Bounded

NAME = "new_item_updates"
KNOWN_SOURCES = {
    # The two validations of an update that creates its item.
    "DynamoDBBackend.update_item": frozenset({"e641e2f1ca45727d"}),
    # Paths resolve against item.attrs only (a LimitedSizeDict: a dict that checks sizes as
    # it is written), first name first.
    "ExpressionPathResolver": frozenset({"456c9701362a71b1"}),
    "ExpressionAttributeResolvingProcessor": frozenset({"7fe02f96a5f33639"}),
    "Item.__init__": frozenset({"11eb3dfce741941f"}),
    "LimitedSizeDict": frozenset({"d7b64564777a5504"}),
}

_names_of = Bounded(256)  # id(expression tree) -> (the tree, the attribute names it holds)
_last = threading.local()  # .first: the _First of this thread's last validation, if any


@dataclass(frozen=True)
class _First:
    """A validation against an item with no attributes that passed, and what it built."""

    expression: Any
    names: Any
    values: Any
    table: Any
    tree: Any


def _sources() -> dict[str, Any]:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import Item, LimitedSizeDict
    from moto.dynamodb.parsing import validators

    return {
        "DynamoDBBackend.update_item": DynamoDBBackend.update_item,
        "ExpressionPathResolver": validators.ExpressionPathResolver,
        "ExpressionAttributeResolvingProcessor": validators.ExpressionAttributeResolvingProcessor,
        "Item.__init__": Item.__init__,
        "LimitedSizeDict": LimitedSizeDict,
    }


def _install(stock: dict[str, Any]) -> None:
    """Wrap ``Validator.__init__`` (to keep the expression tree it was given) and
    ``Validator.validate`` (as installed before: moto's, or :mod:`.update_expressions`')."""
    from moto.dynamodb.parsing import validators as moto_validators
    from moto.dynamodb.parsing.ast_nodes import ExpressionAttribute  # type: ignore[attr-defined]

    validators: Any = moto_validators
    update_validator = validators.UpdateExpressionValidator
    inner_init = validators.Validator.__init__
    inner_validate = validators.Validator.validate

    def init(self: Any, expression: Any, *args: Any, **kwargs: Any) -> None:
        inner_init(self, expression, *args, **kwargs)
        self._sandbox_expression = expression

    def validate(self: Any) -> Any:
        if type(self) is not update_validator or active(NAME) is None:
            return inner_validate(self)
        first: _First | None = getattr(_last, "first", None)
        _last.first = None  # a first validation serves the next one only
        if first is not None and _is_second(self, first):
            return first.tree
        tree = inner_validate(self)
        if _is_first(self, ExpressionAttribute):
            _last.first = _First(
                self._sandbox_expression,
                self.expression_attribute_names,
                self.expression_attribute_values,
                self.table,
                tree,
            )
        return tree

    validators.Validator.__init__ = init
    validators.Validator.validate = validate


def _is_first(validator: Any, attribute_class: type[Any]) -> bool:
    """Whether this validation is against an item with no attributes (moto's first) of an
    expression none of whose names is a key attribute of the table."""
    item, table = validator.item, validator.table
    if not isinstance(item.attrs, dict) or item.attrs:  # moto's LimitedSizeDict
        return False
    names = validator.expression_attribute_names
    if names is not None and type(names) is not dict:
        return False
    used = set(_attribute_names(validator._sandbox_expression, attribute_class))
    used.update(names.values() if names else ())
    keys = {table.hash_key_attr, table.range_key_attr} - {None}
    return not (used & keys)


def _is_second(validator: Any, first: _First) -> bool:
    """Whether this validation is moto's second of the same update: the same expression,
    names, values and table, against an item holding the key attributes alone."""
    table = validator.table
    if not (
        validator._sandbox_expression is first.expression
        and validator.expression_attribute_names is first.names
        and validator.expression_attribute_values is first.values
        and table is first.table
    ):
        return False
    attrs = validator.item.attrs
    keys = {table.hash_key_attr, table.range_key_attr} - {None}
    return isinstance(attrs, dict) and set(attrs) == keys


def _attribute_names(expression: Any, attribute_class: type[Any]) -> list[str]:
    """The plain attribute names in an expression tree (remembered per tree)."""
    known = _names_of.get(id(expression))
    if known is not None and known[0] is expression:
        return list(known[1])
    found = [str(node.get_attribute_name()) for node in expression.find_clauses([attribute_class])]
    _names_of.put(id(expression), (expression, tuple(found)))
    return found


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="an update that creates its item is validated once when its paths name no key",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
