"""An update expression is parsed once and its static checks run once per shape.

moto parsed every UpdateItem's expression twice (its request handler, then its backend) and
validated it once or twice (twice for a new item), each validation running ten passes over a
``copy.deepcopy`` of the tree, three of which look at nothing but the expression, the names and
the table's keys: more than half of an UpdateItem's server time. The answers and errors stay
moto's, byte for byte (``tests/local/test_local.py``).
"""

from __future__ import annotations

from typing import Any

from . import Adjustment, active
from .lru import Bounded

NAME = "update_expressions"
KNOWN_SOURCES = {
    "UpdateExpressionParser.make": frozenset({"a4679cfccfac2fb1"}),
    "Validator.__init__": frozenset({"76b2050654af7cda"}),
    "Validator.validate": frozenset({"36111fc95d7376b4"}),
    "UpdateExpressionValidator.get_ast_processors": frozenset({"16d6106c88e7f8f3"}),
    "ActionCountValidator.verify_action_counts": frozenset({"430db1923bae95f4"}),
    "OverlappingPathsValidator.check_for_overlapping_paths": frozenset({"27103bac4e49bba7"}),
    "UpdateHashRangeKeyValidator.check_for_hash_or_range_key": frozenset({"65fb77b826f45587"}),
    "ActionCountValidator._processing_map": frozenset({"3176f3a09758747b"}),
    "OverlappingPathsValidator._processing_map": frozenset({"d2799e483b6bd45f"}),
    "UpdateHashRangeKeyValidator._processing_map": frozenset({"3369f3313c7e7dee"}),
}

UPDATE_EXPRESSIONS_CACHED = 256
"""Parsed update expressions kept (by their text), and as many checked expression shapes."""

_parsed = Bounded(UPDATE_EXPRESSIONS_CACHED)  # expression text -> moto's AST of it
# id of an AST in _parsed (alive while there) -> (its text, whether _copy_tree can copy it)
_source_of: dict[int, tuple[str, bool]] = {}
_PLAIN_LEAVES = (str, int, float, bool, type(None))
_PLAIN_LEAF_TYPES = frozenset(_PLAIN_LEAVES)
_PLAIN_NODE_ATTRIBUTES = frozenset({"type", "children", "parent"})
_checked = Bounded(UPDATE_EXPRESSIONS_CACHED)  # shapes that passed moto's static checks


def _sources() -> dict[str, Any]:
    from moto.dynamodb.parsing import validators
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]

    v = validators
    return {
        # make is a classmethod: its function, as the class holds it.
        "UpdateExpressionParser.make": vars(UpdateExpressionParser)["make"].__func__,
        "Validator.__init__": v.Validator.__init__,
        "Validator.validate": v.Validator.validate,
        "UpdateExpressionValidator.get_ast_processors": (
            v.UpdateExpressionValidator.get_ast_processors
        ),
        "ActionCountValidator.verify_action_counts": v.ActionCountValidator.verify_action_counts,
        "OverlappingPathsValidator.check_for_overlapping_paths": (
            v.OverlappingPathsValidator.check_for_overlapping_paths
        ),
        "UpdateHashRangeKeyValidator.check_for_hash_or_range_key": (
            v.UpdateHashRangeKeyValidator.check_for_hash_or_range_key
        ),
        "ActionCountValidator._processing_map": v.ActionCountValidator._processing_map,
        "OverlappingPathsValidator._processing_map": v.OverlappingPathsValidator._processing_map,
        "UpdateHashRangeKeyValidator._processing_map": (
            v.UpdateHashRangeKeyValidator._processing_map
        ),
    }


def _install(stock: dict[str, Any]) -> None:
    """Parse each update expression text once, and run moto's three checks that depend
    only on the expression (not the item or the values) once per expression shape.

    - ``UpdateExpressionParser.make`` keeps the tree of each text it parsed (the newest
      :data:`UPDATE_EXPRESSIONS_CACHED`) and returns that same tree for the same text. Its
      users only read it (the request handlers collect its names and values), and moto's
      validator deep-copies it before changing anything. A text that does not parse is
      parsed again each time, so it raises moto's own error each time.
    - ``Validator.validate`` skips the action count, overlapping paths and key attribute
      checks (moto's first three passes; they change nothing in the tree) for a tree from
      that cache whose text, attribute names and table keys already passed them. Every other
      pass runs as before, and a shape that failed a check is checked again each time.
    - ``Validator.__init__`` copies such a tree with :func:`_copy_tree`, not ``copy.deepcopy``.
    """
    from moto.dynamodb.parsing import validators as moto_validators
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser as parser  # type: ignore[attr-defined]

    validators: Any = moto_validators
    stock_make = stock["UpdateExpressionParser.make"]
    stock_init = stock["Validator.__init__"]
    stock_validate = stock["Validator.validate"]
    node_class = validators.Node
    update_validator = validators.UpdateExpressionValidator
    static = (
        validators.ActionCountValidator,
        validators.OverlappingPathsValidator,
        validators.UpdateHashRangeKeyValidator,
    )

    def make(cls: Any, expression_str: Any) -> Any:
        if cls is not parser or type(expression_str) is not str or active(NAME) is None:
            return stock_make(cls, expression_str)
        tree = _parsed.get(expression_str)
        if tree is None:
            tree = stock_make(cls, expression_str)
            _source_of[id(tree)] = (expression_str, _plain_tree(tree, node_class))
            forgotten = _parsed.put(expression_str, tree)
            if forgotten is not None:
                del _source_of[id(forgotten[1])]
        return tree

    def init(
        self: Any,
        expression: Any,
        expression_attribute_names: Any,
        expression_attribute_values: Any,
        item: Any,
        table: Any,
    ) -> None:
        known = _source_of.get(id(expression)) if active(NAME) is not None else None
        if known is None or _parsed.get(known[0]) is not expression:
            known = None
        self._sandbox_source = None if known is None else known[0]
        if known is None or not known[1]:
            stock_init(
                self,
                expression,
                expression_attribute_names,
                expression_attribute_values,
                item,
                table,
            )
            return
        # moto's Validator.__init__, with its deepcopy of the tree done by _copy_tree.
        self.expression_attribute_names = expression_attribute_names
        self.expression_attribute_values = expression_attribute_values
        self.item = item
        self.table = table
        self.processors = self.get_ast_processors()
        self.node_to_validate = _copy_tree(expression, None)

    def validate(self: Any) -> Any:
        in_scope = type(self) is update_validator and active(NAME) is not None
        shape = _static_shape(self) if in_scope else None
        processors = self.processors
        if shape is None or [type(p) for p in processors[:3]] != list(static):
            return stock_validate(self)
        known = _checked.get(shape) is not None
        n = self.node_to_validate
        for position, processor in enumerate(processors):
            if position < 3 and known:
                continue
            n = processor.traverse(n)
            if position == 2:
                _checked.put(shape, True)
        return n

    parser.make = classmethod(make)
    validators.Validator.__init__ = init
    validators.Validator.validate = validate


def _plain_tree(root: Any, node_class: type[Any]) -> bool:
    """Whether ``copy.deepcopy(root)`` and ``_copy_tree(root, None)`` make the same tree: no
    node reached twice, each node's parent the node whose children hold it (the root's
    none), no attribute but moto's three, and only immutable leaves."""
    seen: set[int] = set()
    pending: list[tuple[Any, Any]] = [(root, None)]
    while pending:
        node, parent = pending.pop()
        if id(node) in seen or node.parent is not parent:
            return False
        seen.add(id(node))
        if set(vars(node)) != _PLAIN_NODE_ATTRIBUTES or not isinstance(node.type, str):
            return False
        children = node.children
        if children is None:
            continue
        if type(children) is not list:
            return False
        for child in children:
            if isinstance(child, node_class):
                pending.append((child, node))
            elif type(child) not in _PLAIN_LEAVES:
                return False
    return True


def _copy_tree(node: Any, parent: Any) -> Any:
    """A copy of a tree that :func:`_plain_tree` accepted, as ``copy.deepcopy`` makes it.

    Such a tree's children are nodes or leaves of :data:`_PLAIN_LEAVES` types, told apart
    by their type (``isinstance`` with moto's abstract node class costs more than the copy).
    """
    new = object.__new__(type(node))
    children = node.children
    if children is not None:
        children = [
            child if type(child) in _PLAIN_LEAF_TYPES else _copy_tree(child, new)
            for child in children
        ]
    new.__dict__ = {"type": node.type, "children": children, "parent": parent}
    return new


def _static_shape(validator: Any) -> tuple[Any, ...] | None:
    """What moto's static update expression checks depend on (the text, the attribute
    names, the table's keys), hashable, or None when it cannot be known."""
    source = getattr(validator, "_sandbox_source", None)
    names = validator.expression_attribute_names
    if source is None or not (names is None or type(names) is dict):
        return None
    try:
        shape = (
            source,
            None if names is None else tuple(sorted(names.items())),
            tuple(validator.table.table_key_attrs),
        )
        hash(shape)
    except TypeError:  # a name mapped to a list, say: moto decides, every time
        return None
    return shape


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="an update expression is parsed once and its static checks run once per shape",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
