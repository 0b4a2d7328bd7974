"""The embedded DynamoDB's adjustments of moto's expression work (condition trees parsed once
per text, names and values; update validation passes walked with one lookup per node type):
the same trees, errors and updates as moto's own code, on edge cases too."""

from __future__ import annotations

import contextlib
import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox_ledger.local.adjustments import condition_trees, update_traversal

from .test_local import _backend, _state, _tree, adjusted, key

# (text, names, values): the library's conditions, every function and operator, nested
# paths and values of every JSON type; then refusals (bad syntax, a name or value missing, a
# reserved word, redundant parentheses).
CONDITIONS: list[tuple[str, Any, Any]] = [
    ("attribute_not_exists(#pk)", {"#pk": "PK"}, None),
    ("attribute_not_exists(#pk)", {"#pk": "PK"}, {}),
    ("attribute_not_exists(#pk)", {"#pk": "SK"}, None),
    ("attribute_not_exists(#dl) OR #dl < :now", {"#dl": "deleting"}, {":now": {"N": "5"}}),
    ("attribute_not_exists(#dl) OR #dl < :now", {"#dl": "deleting"}, {":now": {"N": "50"}}),
    ("NOT (a = :v) AND b <> :w", None, {":v": {"S": "x"}, ":w": {"BOOL": True}}),
    ("a = :v", None, {":v": {"BOOL": True}}),
    ("a = :v", None, {":v": {"N": "1"}}),
    ("a = :v", None, {":v": {"NULL": True}}),
    ("a.b[1].c <> :v OR size(#x) >= :n", {"#x": "x"}, {":v": {"S": "q"}, ":n": {"N": "2"}}),
    ("m = :m", None, {":m": {"M": {"k": {"L": [{"N": "1"}, {"S": "s"}]}}}}),
    ("s = :s", None, {":s": {"SS": ["a", "b"]}}),
    ("contains(s, :e) AND begins_with(t, :p)", None, {":e": {"S": "a"}, ":p": {"S": "he"}}),
    ("n BETWEEN :lo AND :hi", None, {":lo": {"N": "1"}, ":hi": {"N": "3"}}),
    ("n IN (:a, :b)", None, {":a": {"N": "2"}, ":b": {"N": "7"}}),
    ("attribute_type(a, :t)", None, {":t": {"S": "S"}}),
    ("#rev = :r AND", {"#rev": "rev"}, {":r": {"N": "1"}}),
    ("#missing = :r", {"#rev": "rev"}, {":r": {"N": "1"}}),
    ("a = :missing", None, {":r": {"N": "1"}}),
    ("a = :v", None, None),
    ("name = :v", None, {":v": {"S": "x"}}),
    ("((a = :v))", None, {":v": {"S": "x"}}),
    ("", None, None),
]

ITEMS = [
    None,
    {"PK": {"S": "p"}, "SK": {"S": "s"}},
    {
        "PK": {"S": "p"},
        "SK": {"S": "s"},
        "a": {"M": {"b": {"L": [{"N": "0"}, {"M": {"c": {"S": "q"}}}]}}},
        "x": {"L": [{"N": "1"}, {"N": "2"}]},
        "m": {"M": {"k": {"L": [{"N": "1"}, {"S": "s"}]}}},
        "s": {"SS": ["a", "b"]},
        "t": {"S": "hello"},
        "n": {"N": "2"},
        "deleting": {"N": "7"},
    },
]


def _parse(text: str, names: Any, values: Any) -> Any:
    """What moto's parser gives for a condition (in this thread's adjustments): its tree's
    text, the names and values it found used, and its verdict on each of ITEMS; or the error."""
    from moto.dynamodb.comparisons import ConditionExpressionParser
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    parser = ConditionExpressionParser(text, names, values)
    try:
        op = parser.parse()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    verdicts = []
    for attrs in ITEMS:
        item = (
            None
            if attrs is None
            else Item(DynamoType(attrs["PK"]), DynamoType(attrs["SK"]), attrs=attrs)
        )
        try:
            verdicts.append(op.expr(item))
        except Exception as exc:
            verdicts.append(f"{type(exc).__name__}: {exc}")
    return (_plain(op), parser.expr_attr_names_found, parser.expr_attr_values_found, verdicts)


def _plain(value: Any) -> Any:
    """A condition tree as plain data: each object's class and attributes, recursively."""
    if hasattr(value, "__dict__"):
        return (type(value).__name__, sorted((k, _plain(v)) for k, v in vars(value).items()))
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize(("text", "names", "values"), CONDITIONS)
def test_condition_trees_are_stock_moto_s(text: str, names: Any, values: Any) -> None:
    """A condition's tree, the names and values found used, its verdict on items, or the
    error of one that does not parse: as moto's own parser gives them, each time."""
    condition_trees._trees.clear()
    stock = _parse(text, copy.deepcopy(names), copy.deepcopy(values))
    with adjusted("condition_trees"):
        patched = [_parse(text, copy.deepcopy(names), copy.deepcopy(values)) for _ in range(3)]
    assert patched == [stock] * 3
    parsed = isinstance(stock, tuple)
    assert len(condition_trees._trees) == (1 if parsed else 0)


def test_conditions_one_after_another_are_stock_moto_s() -> None:
    """Every condition above, parsed one after the other twice with the cache kept between
    them (texts repeat with other names and values): each as moto's own parser gives it."""
    condition_trees._trees.clear()
    stock = [_parse(t, copy.deepcopy(n), copy.deepcopy(v)) for t, n, v in CONDITIONS]
    with adjusted("condition_trees"):
        for _ in range(2):
            patched = [_parse(t, copy.deepcopy(n), copy.deepcopy(v)) for t, n, v in CONDITIONS]
            assert patched == stock


def test_a_condition_tree_is_remembered_by_value_and_type() -> None:
    """The same text with other names or values, or values equal but of other types (True
    and 1), is parsed on its own; with equal ones it is the tree parsed before."""
    from moto.dynamodb.comparisons import ConditionExpressionParser

    condition_trees._trees.clear()

    def tree(names: Any, values: Any) -> Any:
        with adjusted("condition_trees"):
            return ConditionExpressionParser("#a = :v", names, values).parse()

    first = tree({"#a": "a"}, {":v": {"N": "1"}})
    assert tree({"#a": "a"}, {":v": {"N": "1"}}) is first
    assert tree({"#a": "b"}, {":v": {"N": "1"}}) is not first
    assert tree({"#a": "a"}, {":v": {"N": "2"}}) is not first
    assert tree({"#a": "a"}, {":v": {"BOOL": True}}) is not tree({"#a": "a"}, {":v": {"BOOL": 1}})
    assert len(condition_trees._trees) == 5


def test_a_remembered_tree_holds_none_of_the_request_s_objects() -> None:
    """Changing a request's values after it was parsed (moto may keep them in an item)
    changes no later parse of equal values."""
    from moto.dynamodb.comparisons import ConditionExpressionParser

    condition_trees._trees.clear()
    values = {":s": {"L": [{"S": "a"}]}}
    with adjusted("condition_trees"):
        ConditionExpressionParser("x = :s", None, values).parse()
        values[":s"]["L"].append({"S": "b"})
        again = ConditionExpressionParser("x = :s", None, {":s": {"L": [{"S": "a"}]}}).parse()
    fresh = ConditionExpressionParser("x = :s", None, {":s": {"L": [{"S": "a"}]}}).parse()
    assert _plain(again) == _plain(fresh)
    assert _plain(again) != _plain(ConditionExpressionParser("x = :s", None, values).parse())


def test_values_moto_would_parse_otherwise_are_parsed_each_time() -> None:
    """Floats and bytes are not remembered (their equality is not their identity as JSON)."""
    from moto.dynamodb.comparisons import ConditionExpressionParser

    condition_trees._trees.clear()
    with adjusted("condition_trees"):
        for values in ({":v": {"N": 1.0}}, {":v": {"B": b"x"}}):
            ConditionExpressionParser("a = :v", None, values).parse()
    assert len(condition_trees._trees) == 0


def test_the_condition_cache_is_bounded() -> None:
    from moto.dynamodb.comparisons import ConditionExpressionParser

    condition_trees._trees.clear()
    with adjusted("condition_trees"):
        for i in range(condition_trees.CONDITION_TREES_CACHED + 10):
            ConditionExpressionParser("a = :v", None, {":v": {"N": str(i)}}).parse()
    assert len(condition_trees._trees) == condition_trees.CONDITION_TREES_CACHED


# Update expressions against items: every action kind, functions, arithmetic, nested paths;
# and each way a validation pass refuses (a missing path or value, a type mismatch, a key
# attribute, an empty key value, a path that cannot be created).
UPDATES: list[tuple[str, Any, Any]] = [
    (
        "SET #nm = :nm, sid = :sid, st = if_not_exists(st, :ts), g1 = :g ADD execs :one",
        {"#nm": "name"},
        {
            ":nm": {"S": "n"},
            ":sid": {"S": "i"},
            ":ts": {"N": "5"},
            ":g": {"S": "g"},
            ":one": {"N": "1"},
        },
    ),
    (
        "SET n = n + :one, l = list_append(l, :l)",
        None,
        {":one": {"N": "1"}, ":l": {"L": [{"N": "9"}]}},
    ),
    ("SET a.b[1].c = :v REMOVE t", None, {":v": {"S": "z"}}),
    ("DELETE s :s ADD s2 :s", None, {":s": {"SS": ["a"]}}),
    ("SET missing2 = missing + :one", None, {":one": {"N": "1"}}),
    ("SET t = t + :one", None, {":one": {"N": "1"}}),
    ("ADD t :one", None, {":one": {"N": "1"}}),
    ("SET PK = :v", None, {":v": {"S": "x"}}),
    ("SET gsi = :e", None, {":e": {"S": ""}}),
    ("SET n = :absent", None, {":one": {"N": "1"}}),
    ("SET nope.deep.path = :v", None, {":v": {"S": "z"}}),
    ("SET #u = :v", {"#v": "x"}, {":v": {"S": "z"}}),
]


def _validate(expression: str, names: Any, values: Any, attrs: Any) -> Any:
    from moto.dynamodb.models.dynamo_type import DynamoType, Item
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser
    from moto.dynamodb.parsing.validators import UpdateExpressionValidator

    class Table:
        table_key_attrs = ["PK", "SK"]
        attribute_keys = ["PK", "SK", "gsi"]
        attr = [{"AttributeName": "gsi", "AttributeType": "S"}]

    item = Item(DynamoType(attrs["PK"]), DynamoType(attrs["SK"]), attrs=copy.deepcopy(attrs))
    try:
        tree = UpdateExpressionValidator(
            UpdateExpressionParser.make(expression),
            expression_attribute_names=names,
            expression_attribute_values=values,
            item=item,
            table=Table(),
        ).validate()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return _tree(tree)


@pytest.mark.parametrize(("expression", "names", "values"), UPDATES)
@pytest.mark.parametrize("attrs", ITEMS[1:])
def test_update_validation_is_stock_moto_s(
    expression: str, names: Any, values: Any, attrs: Any
) -> None:
    """Each update expression's validated tree (every node, its type and parent link), or
    the error a pass raises: as moto's own walk gives them, on a bare item and a full one."""
    stock = _validate(expression, names, values, attrs)
    with adjusted("update_traversal"):
        patched = _validate(expression, names, values, attrs)
        assert update_traversal.NAME
    assert patched == stock


def test_other_traversers_walk_as_moto_s() -> None:
    """A traverser that is not one of the validator's passes keeps moto's own walk."""
    from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser, UpdateExpressionPath
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    seen: list[int] = []

    class Counting(DepthFirstTraverser):  # type: ignore[misc]
        def _processing_map(self) -> dict[Any, Any]:
            seen.append(1)
            return {UpdateExpressionPath: lambda node: node}

    with adjusted("update_traversal"):
        Counting().traverse(UpdateExpressionParser.make("SET a = :v, b = :w"))
    stock_calls = len(seen)
    seen.clear()
    Counting().traverse(UpdateExpressionParser.make("SET a = :v, b = :w"))
    assert len(seen) == stock_calls > 1  # asked at every node, as moto does


def test_a_validation_pass_asks_for_its_processors_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The adjustment is taken: a pass asks for its map of processors once per walk, where
    moto's own walk asks at every node."""
    from moto.dynamodb.parsing import validators
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    calls: list[int] = []
    stock_map = validators.ExecuteOperations._processing_map

    def counted(self: Any) -> Any:
        calls.append(1)
        return stock_map(self)

    monkeypatch.setattr(validators.ExecuteOperations, "_processing_map", counted)
    tree = UpdateExpressionParser.make("SET a = :v, b = :w ADD c :x")
    with adjusted("update_traversal"):
        validators.ExecuteOperations().traverse(copy.deepcopy(tree))
    assert len(calls) == 1
    validators.ExecuteOperations().traverse(copy.deepcopy(tree))
    assert len(calls) > 10


# Updates that create their item: plain ones (validated once with new_item_updates); ones
# whose names include a key attribute (validated as moto does: SET a = PK is refused by the
# first validation, which sees no PK; a path naming a key anywhere, if_not_exists(PK, :v)
# say, is refused by moto's key check; a #placeholder for a key, even unused, takes moto's
# two validations); refusals, conditions, and a second update of each item (the item
# exists: one validation, as moto).
NEW_ITEM_UPDATES: list[dict[str, Any]] = [
    {
        "UpdateExpression": "SET #nm = :nm, st = if_not_exists(st, :ts) ADD execs :one",
        "ExpressionAttributeNames": {"#nm": "name"},
        "ExpressionAttributeValues": {":nm": {"S": "n"}, ":ts": {"N": "5"}, ":one": {"N": "1"}},
    },
    {"UpdateExpression": "SET a = PK", "ExpressionAttributeValues": None},
    {
        "UpdateExpression": "SET a = #k",
        "ExpressionAttributeNames": {"#k": "SK"},
    },
    {
        "UpdateExpression": "SET a = :v",
        "ExpressionAttributeNames": {"#unused": "PK"},
        "ExpressionAttributeValues": {":v": {"S": "x"}},
    },
    {"UpdateExpression": "SET a = b + :one", "ExpressionAttributeValues": {":one": {"N": "1"}}},
    {
        "UpdateExpression": "SET a = if_not_exists(PK, :v)",
        "ExpressionAttributeValues": {":v": {"S": "absent"}},
    },
    {
        "UpdateExpression": "SET a = if_not_exists(#k, :v)",
        "ExpressionAttributeNames": {"#k": "SK"},
        "ExpressionAttributeValues": {":v": {"S": "absent"}},
    },
    {"UpdateExpression": "SET a.b = :v", "ExpressionAttributeValues": {":v": {"S": "x"}}},
    {"UpdateExpression": "SET a = :missing", "ExpressionAttributeValues": {":v": {"S": "x"}}},
    {"UpdateExpression": "ADD n :s", "ExpressionAttributeValues": {":s": {"S": "x"}}},
    {
        "UpdateExpression": "SET l = list_append(if_not_exists(l, :e), :l) REMOVE gone",
        "ExpressionAttributeValues": {":e": {"L": []}, ":l": {"L": [{"N": "1"}]}},
    },
    {
        "UpdateExpression": "SET a = :v",
        "ConditionExpression": "attribute_exists(PK)",
        "ExpressionAttributeValues": {":v": {"S": "x"}},
    },
]


def _updates(backend: Any) -> list[str]:
    """Each update above on a new item, then again on that item: the outcome of each."""
    outcomes = []
    for number, update in enumerate(NEW_ITEM_UPDATES):
        for _ in range(2):
            params = {
                "update_expression": update["UpdateExpression"],
                "expression_attribute_names": update.get("ExpressionAttributeNames"),
                "expression_attribute_values": update.get("ExpressionAttributeValues") or {},
                "condition_expression": update.get("ConditionExpression"),
            }
            try:
                item = backend.update_item("t", key("p", f"s{number}"), **copy.deepcopy(params))
                outcomes.append(str(item.to_json()))
            except Exception as exc:
                outcomes.append(f"{type(exc).__name__}: {exc}")
    return outcomes


def test_updates_that_create_their_item_are_stock_moto_s() -> None:
    """Every update above, on a new item then on the item it made: the same answers,
    errors, items and stream records as moto's own two validations."""
    stock, patched = _backend("t"), _backend("t")
    expected = _updates(stock)
    with adjusted("new_item_updates", "update_expressions", "update_traversal"):
        assert _updates(patched) == expected
    assert _state(patched, "t") == _state(stock, "t")
    assert any("does not exist" in outcome for outcome in expected)  # SET a = PK refused
    assert sum("Exception" in outcome or "Error" in outcome for outcome in expected) >= 6


@pytest.mark.parametrize(
    ("number", "validations"), [(0, 1), (1, 0), (2, 0), (3, 2), (4, 0), (5, 0), (6, 0), (10, 1)]
)
def test_an_update_that_creates_its_item_is_validated_once_unless_it_names_a_key(
    number: int, validations: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shortcut is taken for a new item whose update names no key attribute (one
    validation where moto runs two), and not when a #placeholder stands for a key (two); an
    update refused (a missing path, a key named in a path) stops where moto's stops."""
    from moto.dynamodb.parsing import validators

    runs: list[int] = []
    stock_traverse = validators.ExecuteOperations.traverse  # a pass: once per validation

    def counted(self: Any, node: Any) -> Any:
        runs.append(1)
        return stock_traverse(self, node)

    monkeypatch.setattr(validators.ExecuteOperations, "traverse", counted)
    backend = _backend("t")
    update = NEW_ITEM_UPDATES[number]
    with adjusted("new_item_updates"), contextlib.suppress(Exception):
        backend.update_item(
            "t",
            key("p", "new"),
            update_expression=update["UpdateExpression"],
            expression_attribute_names=update.get("ExpressionAttributeNames"),
            expression_attribute_values=update.get("ExpressionAttributeValues") or {},
        )
    assert len(runs) == validations


def test_the_hot_path_names_adjustments() -> None:
    """Every name the byte-for-byte comparisons and server_replay.py leave off is an
    adjustment (a misspelt one would leave nothing off and compare the server with itself)."""
    from sandbox_ledger.local import adjustments

    assert adjustments.HOT_PATH.issubset(a.name for a in adjustments.all_adjustments())


def test_an_adjustment_left_off_first_does_not_undo_another_installed_later() -> None:
    """A process whose first server leaves ``update_expressions`` off and whose next has
    every adjustment on: an update that creates its item is still validated once (before,
    installing ``update_expressions`` then replaced ``new_item_updates``' hooks, which was
    still reported on)."""
    script = """
import contextlib
from moto.dynamodb.parsing import validators
from tests.local.test_local import _backend
from sandbox_ledger.local import adjustments

adjustments.prepare(leave_off={"update_expressions"})
on, _ = adjustments.prepare()
assert "new_item_updates" in on and "update_expressions" in on, on
runs = []
stock_traverse = validators.ExecuteOperations.traverse
def counted(self, node):
    runs.append(1)
    return stock_traverse(self, node)
validators.ExecuteOperations.traverse = counted
backend = _backend("t")
with adjustments.serving(adjustments.Settings(on=on, stream_records=None)):
    backend.update_item(
        "t", {"PK": {"S": "p"}, "SK": {"S": "new"}}, update_expression="SET a = :v",
        expression_attribute_names=None, expression_attribute_values={":v": {"S": "x"}},
    )
print(len(runs))
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
