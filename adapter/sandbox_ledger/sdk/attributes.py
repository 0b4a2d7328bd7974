"""DynamoDB's low-level attribute values: constructors and the item size DynamoDB bills."""

from __future__ import annotations

from typing import Any

Item = dict[str, dict[str, Any]]


MAX_ITEM_BYTES = 409_600


def item_size(item: Item) -> int:
    """An item's size as DynamoDB bills and limits it: attribute names plus values
    (strings as UTF-8, binary as is, numbers about one byte per two digits plus one, lists
    and maps 3 bytes plus a byte per element besides their elements)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    (kind, raw), *_ = value.items()
    if kind == "S":
        return len(raw.encode())
    if kind == "B":
        return len(raw)
    if kind == "N":
        return (len(raw.lstrip("-").replace(".", "")) + 1) // 2 + 1
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in raw)
    if kind == "M":
        return 3 + sum(len(name.encode()) + _value_size(v) + 1 for name, v in raw.items())
    raise ValueError(f"item_size: unsupported attribute type {kind}")


def S(value: str) -> dict[str, str]:
    return {"S": value}


def N(value: int) -> dict[str, str]:
    return {"N": str(value)}


def B(value: bytes) -> dict[str, bytes]:
    return {"B": value}
