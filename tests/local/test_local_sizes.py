"""The embedded server's size adjustments against moto's own code: ``item_sizes`` (an item's
size summed once as it is built) and ``stream_sizes`` (a stream record's size measured at
its first read). Each builds, in moto's objects, exactly what moto builds, and refuses
exactly what moto refuses."""

from __future__ import annotations

import datetime
import types
from typing import Any

import pytest
from moto.dynamodb.exceptions import ItemSizeTooLarge
from moto.dynamodb.models import table as table_module
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.utilities import bytesize, dynamo_json_dump

from local.test_local import adjusted
from sandbox_ledger.local.adjustments import item_sizes

ATTRIBUTES: list[dict[str, Any]] = [
    {"pk": {"S": "a"}},
    {"pk": {"S": "a"}, "sk": {"S": "b"}, "n": {"N": "12.50"}, "t": {"BOOL": True}},
    {"pk": {"S": "a"}, "nul": {"NULL": True}, "b": {"B": b"\x00\x01"}},
    {"pk": {"S": "é"}, "ss": {"SS": ["x", "yy"]}, "ns": {"NS": ["1", "22"]}},
    {"pk": {"S": "a"}, "m": {"M": {"k": {"L": [{"S": "v"}, {"M": {"d": {"N": "1"}}}]}}}},
]


def _item(attrs: dict[str, Any]) -> Any:
    return Item(DynamoType(attrs["pk"]), None, attrs)


def _outcome(attrs: dict[str, Any]) -> Any:
    try:
        item = _item(attrs)
    except ItemSizeTooLarge as exc:
        return type(exc)
    assert type(item.attrs) is LimitedSizeDict
    return [(k, v.type, v.value) for k, v in item.attrs.items()]


@pytest.mark.parametrize("attrs", ATTRIBUTES)
def test_an_item_is_built_as_moto_builds_it(attrs: dict[str, Any]) -> None:
    with adjusted("item_sizes"):
        patched = _outcome(attrs)
    assert patched == _outcome(attrs)  # outside a server's request: moto's own code
    assert isinstance(patched, list) and [k for k, *_ in patched] == list(attrs)


@pytest.mark.parametrize("over", [0, 1])
@pytest.mark.parametrize("where", ["last", "first", "nested"])
def test_the_size_limit_is_moto_s_to_the_byte(over: int, where: str) -> None:
    """An item of exactly moto's limit is built, one byte more is refused, wherever the
    large attribute sits (its sum is checked after every attribute, as moto checks it)."""
    small = {"pk": {"S": "a"}, "z": {"N": "1"}}
    base = sum(bytesize(k) + DynamoType(v).size() for k, v in small.items()) + len("big")
    if where == "nested":  # a map's size: each key's bytes plus its value's
        base += len("k")
    fill = "x" * (item_sizes.LIMIT - base + over)
    value = {"M": {"k": {"S": fill}}} if where == "nested" else {"S": fill}
    attrs = {"big": value, **small} if where == "first" else {**small, "big": value}
    with adjusted("item_sizes"):
        patched = _outcome(attrs)
    stock = _outcome(attrs)
    assert patched == stock
    assert (stock is ItemSizeTooLarge) is bool(over)


def _record(stream_type: str, old: Any, new: Any) -> Any:
    table = types.SimpleNamespace(hash_key_attr="pk", range_key_attr="sk")
    event = "INSERT" if old is None else "REMOVE" if new is None else "MODIFY"
    return table_module.StreamRecord(table, stream_type, event, old, new, 7)


def _items() -> tuple[Any, Any]:
    dynamo = DynamoType
    attrs = {"pk": {"S": "p"}, "sk": {"S": "s"}, "m": {"M": {"a": {"L": [{"N": "1"}]}}}}
    old = Item(dynamo({"S": "p"}), dynamo({"S": "s"}), attrs)
    new = Item(dynamo({"S": "p"}), dynamo({"S": "s"}), {**attrs, "n": {"N": "2"}})
    return old, new


@pytest.mark.parametrize(
    "stream_type", ["KEYS_ONLY", "NEW_IMAGE", "OLD_IMAGE", "NEW_AND_OLD_IMAGES"]
)
@pytest.mark.parametrize("images", ["insert", "modify", "remove"])
def test_a_stream_record_is_moto_s_record(
    stream_type: str, images: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same record (id, time, keys, images, SizeBytes) as moto's, though its size is
    measured only when it is read; the images are those of the write, whatever happens to
    the items after it."""
    at = datetime.datetime(2026, 12, 5, 12, 0, 0, 123456)
    monkeypatch.setattr(table_module, "utcnow", lambda: at)
    monkeypatch.setattr(table_module.mock_random, "uuid4", lambda: types.SimpleNamespace(hex="id"))
    old, new = _items()
    old, new = {"insert": (None, new), "modify": (old, new), "remove": (old, None)}[images]
    with adjusted("stream_sizes"):
        patched = _record(stream_type, old, new)
    assert "_size_unmeasured" in patched.__dict__  # nothing measured yet
    stock = _record(stream_type, old, new)
    for item in (old, new):  # a later update of the items changes neither record
        if item is not None:
            item.attrs["m"].value["a"].value.append(DynamoType({"N": "9"}))
            item.attrs["late"] = DynamoType({"S": "later"})
    assert patched.to_json() == stock.to_json()
    assert patched.to_json()["dynamodb"]["ApproximateCreationDateTime"] == at
    size = patched.to_json()["dynamodb"]["SizeBytes"]
    assert size == len(dynamo_json_dump({**stock.to_json()["dynamodb"], "SizeBytes": 1}))
    assert "_size_unmeasured" not in patched.__dict__
