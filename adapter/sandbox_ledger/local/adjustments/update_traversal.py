"""An update expression's validation passes look up each node's processor once per type.

moto validates an update expression (twice for a new item) in ten passes over its tree, and
every pass asks, at every node, for the pass's map of processors twice (a new dict each time)
and whether the node is an instance of its classes (abstract classes, so each check goes
through ``ABCMeta.__instancecheck__``): for an import's session summary update (about 75
nodes) that bookkeeping was most of the validation, about a fifth of an import's server
time. This adjustment walks the tree in the same order, calls the same hook before each
child and the same processor on the same nodes, replacing each node the same way; it asks
for the map once per pass and decides per node type, not per node, which of its processors
(the first whose class the node is an instance of, as moto's ``process``) serves it.
"""

from __future__ import annotations

from typing import Any

from . import Adjustment, active

NAME = "update_traversal"
# The passes of moto's UpdateExpressionValidator: each class's map of processors is a literal
# dict of its own methods (the same keys on every call), and none overrides how the
# traverser walks (nodes_to_be_processed, process, traverse_node_recursively, traverse).
PASSES = (
    "ActionCountValidator",
    "OverlappingPathsValidator",
    "UpdateHashRangeKeyValidator",
    "ExpressionAttributeValueProcessor",
    "ExpressionAttributeResolvingProcessor",
    "UpdateExpressionFunctionEvaluator",
    "NoneExistingPathChecker",
    "ExecuteOperations",
    "TypeMismatchValidator",
    "EmptyStringKeyValueValidator",
)
KNOWN_SOURCES = {
    "DepthFirstTraverser": frozenset({"69ec1a458e661138"}),
    "Node": frozenset({"aee87f5697d8c605"}),
    "ActionCountValidator": frozenset({"b5cc1164ffecbaf0"}),
    "OverlappingPathsValidator": frozenset({"ff20adb968ea93de"}),
    "UpdateHashRangeKeyValidator": frozenset({"6c1c02a6dfea6c4b"}),
    "ExpressionAttributeValueProcessor": frozenset({"6d987ea07c893335"}),
    "ExpressionAttributeResolvingProcessor": frozenset({"7fe02f96a5f33639"}),
    "UpdateExpressionFunctionEvaluator": frozenset({"8d4943bc20079589"}),
    "NoneExistingPathChecker": frozenset({"ebdd93697503393a"}),
    "ExecuteOperations": frozenset({"e5c4ae3d20b1ea9a"}),
    "TypeMismatchValidator": frozenset({"d31d15d6022a1a36"}),
    "EmptyStringKeyValueValidator": frozenset({"82263c93767e8ed1"}),
}

_NOT_A_NODE = -2
_NOT_PROCESSED = -1


def _sources() -> dict[str, Any]:
    from moto.dynamodb.parsing import ast_nodes as moto_ast_nodes
    from moto.dynamodb.parsing import validators

    ast_nodes: Any = moto_ast_nodes  # moto's module is untyped
    return {
        "DepthFirstTraverser": ast_nodes.DepthFirstTraverser,
        "Node": ast_nodes.Node,
        **{name: getattr(validators, name) for name in PASSES},
    }


def _install(stock: dict[str, Any]) -> None:
    """Replace ``DepthFirstTraverser.traverse`` by :func:`walk` for moto's validation passes
    while a server serves a request (moto's own walk for any other traverser)."""
    from moto.dynamodb.parsing import ast_nodes

    traverser: Any = ast_nodes
    DepthFirstTraverser = traverser.DepthFirstTraverser
    node_class = stock["Node"]
    stock_traverse = DepthFirstTraverser.traverse
    no_hook = DepthFirstTraverser.pre_processing_of_child
    passes = frozenset(stock[name] for name in PASSES)
    # (pass class, node type) -> the index of its processor, or _NOT_A_NODE / _NOT_PROCESSED
    plans: dict[tuple[type[Any], type[Any]], int] = {}

    def traverse(self: Any, node: Any) -> Any:
        kind = type(self)
        if kind not in passes or active(NAME) is None:
            return stock_traverse(self, node)
        processors = self._processing_map()
        return walk(
            node,
            -1,
            kind,
            tuple(processors.items()),
            self.pre_processing_of_child if kind.pre_processing_of_child is not no_hook else None,
            plans,
            node_class,
        )

    DepthFirstTraverser.traverse = traverse


def walk(
    node: Any,
    child_id: int,
    kind: type[Any],
    processors: tuple[tuple[type[Any], Any], ...],
    hook: Any,
    plans: dict[tuple[type[Any], type[Any]], int],
    node_class: type[Any],
) -> Any:
    """moto's ``DepthFirstTraverser.traverse_node_recursively`` (moto 5.2.5, Apache-2.0) for
    a pass whose map of processors is ``processors`` and whose child hook is ``hook`` (None:
    moto's, which does nothing)."""
    plan = plans.get((kind, type(node)))
    if plan is None:
        plan = _plan(node, processors, node_class)
        plans[(kind, type(node))] = plan
    if plan == _NOT_A_NODE:
        return node
    parent_node = node.parent
    children = node.children
    if children is not None:
        for i, child_node in enumerate(children):
            if hook is not None:
                hook(node, i)
            walk(child_node, i, kind, processors, hook, plans, node_class)
    if plan != _NOT_PROCESSED:
        node = processors[plan][1](node)
        node.parent = parent_node
        if parent_node:
            parent_node.children[child_id] = node
    return node


def _plan(node: Any, processors: tuple[tuple[type[Any], Any], ...], node_class: type[Any]) -> int:
    """What moto's walk does with a node of this type: not a node, no processor, or the
    index of the first processor whose class it is an instance of."""
    if not isinstance(node, node_class):
        return _NOT_A_NODE
    for index, (cls, _) in enumerate(processors):
        if isinstance(node, cls):
            return index
    return _NOT_PROCESSED


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="an update expression's validation passes look up each node's processor per type",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
