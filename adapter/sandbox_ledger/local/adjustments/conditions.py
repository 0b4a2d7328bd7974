"""A condition expression's text is split into tokens once."""

from __future__ import annotations

import collections
from typing import Any

from . import Adjustment, active
from .lru import Bounded
from .update_expressions import UPDATE_EXPRESSIONS_CACHED

NAME = "conditions"
KNOWN_SOURCES = {
    "ConditionExpressionParser._lex_condition_expression": frozenset({"2396dfe834f97d24"}),
    "ConditionExpressionParser._lex_one_node": frozenset({"a0268b4e8af426cc"}),
}

_lexed = Bounded(UPDATE_EXPRESSIONS_CACHED)  # condition text -> its tokens


def _sources() -> dict[str, Any]:
    from moto.dynamodb.comparisons import ConditionExpressionParser as parser

    return {
        "ConditionExpressionParser._lex_condition_expression": parser._lex_condition_expression,
        "ConditionExpressionParser._lex_one_node": parser._lex_one_node,
    }


def _install(stock: dict[str, Any]) -> None:
    """Split each condition expression's text into tokens once.

    moto's condition parser (ConditionExpression, FilterExpression) starts by matching up to
    eight regular expressions at every position of the text; the tokens depend on the text
    alone, but the tree built from them holds the request's names and values, so only the
    tokens are remembered (the newest :data:`UPDATE_EXPRESSIONS_CACHED` texts), and each
    parse gets new token tuples with lists of their own. A text that does not lex is
    lexed again each time, and raises moto's own error each time.
    """
    from moto.dynamodb.comparisons import ConditionExpressionParser

    parser: Any = ConditionExpressionParser
    stock_lex = stock["ConditionExpressionParser._lex_condition_expression"]

    def lex(self: Any) -> Any:
        text = self.condition_expression
        if type(text) is not str or active(NAME) is None:
            return stock_lex(self)
        tokens = _lexed.get(text)
        if tokens is None:
            nodes = stock_lex(self)
            if all(type(n) is self.Node and n.children == [] for n in nodes):
                _lexed.put(text, tuple(tuple(n[:4]) for n in nodes))
            return nodes
        node = self.Node
        return collections.deque(node(*token, []) for token in tokens)

    parser._lex_condition_expression = lex


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="a condition expression's text is split into tokens once",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
