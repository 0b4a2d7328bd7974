"""A condition expression is parsed once per text, names and values.

moto parses a write's condition three times per request (its request handler checks the
names it uses, its backend's transaction checks it, then the write checks it again), and
every import action carries one: about a fifth of an import's server time. The tree depends
on the text, the attribute names and the attribute values alone, and evaluating it
(``expr(item)``) only reads it, so the tree is remembered for those three (compared by value,
types included) and the same tree serves each later parse of them. Every condition is still
evaluated against the item, every time: only the parsing is saved.
"""

from __future__ import annotations

import copy
from typing import Any

from . import Adjustment, active
from .lru import Bounded

NAME = "condition_trees"
KNOWN_SOURCES = {
    # The whole module: the parser, and every Op, Func and Operand class a tree is made of
    # (their expr() only reads the tree, which sharing one tree relies on). moto 5.2.1's
    # differs from 5.2.5's in FuncBetween only (which reads its tree in both).
    "moto.dynamodb.comparisons": frozenset({"7e8d48dd56d04eb1", "ad05e1ef2af5ad04"}),
}

CONDITION_TREES_CACHED = 1024
"""Parsed conditions kept (by text, names and values)."""

# (text, names, values) frozen -> (tree, names found, values found)
_trees = Bounded(CONDITION_TREES_CACHED)
_PLAIN = (str, int, bool, type(None))


def _sources() -> dict[str, Any]:
    from moto.dynamodb import comparisons

    return {"moto.dynamodb.comparisons": comparisons}


def frozen(value: Any) -> Any:
    """``value`` (JSON as moto's request parser gives it) as a hashable key that equals
    another's only for values of the same types and contents; raises TypeError for anything
    else (a float, bytes, a Decimal: moto parses those each time)."""
    kind = type(value)
    if kind is dict:
        return (dict, tuple((frozen(k), frozen(v)) for k, v in value.items()))
    if kind is list:
        return (list, tuple(frozen(v) for v in value))
    if kind in _PLAIN:
        return (kind, value)
    raise TypeError(kind.__name__)


def _install(stock: dict[str, Any]) -> None:
    """Remember each parsed condition's tree, and the names and values it was found to use.

    ``ConditionExpressionParser.parse`` looks its text, names and values up (by value, with
    their types) and, when found, extends the parser's lists of names and values used as the
    parse did and returns the remembered tree; else it parses a private deep copy of the
    names and values (so no request's objects are held, nor changed later under the tree)
    and remembers the result (the newest :data:`CONDITION_TREES_CACHED`). A condition that
    does not parse is parsed again each time, and raises moto's own error each time.
    """
    from moto.dynamodb.comparisons import ConditionExpressionParser

    parser: Any = ConditionExpressionParser
    stock_parse = parser.parse

    def parse(self: Any) -> Any:
        text = self.condition_expression
        if type(self) is not parser or type(text) is not str or active(NAME) is None:
            return stock_parse(self)
        names = self.expression_attribute_names
        values = self.expression_attribute_values
        try:
            key = (text, frozen(names), frozen(values))
        except (TypeError, RecursionError):
            return stock_parse(self)
        known = _trees.get(key)
        if known is None:
            private = parser(text, copy.deepcopy(names), copy.deepcopy(values))
            tree = stock_parse(private)
            found = (list(private.expr_attr_names_found), list(private.expr_attr_values_found))
            known = (tree, *found)
            _trees.put(key, known)
        tree, names_found, values_found = known
        self.expr_attr_names_found.extend(names_found)
        self.expr_attr_values_found.extend(values_found)
        return tree

    parser.parse = parse


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="a condition expression is parsed once per text, names and values",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
