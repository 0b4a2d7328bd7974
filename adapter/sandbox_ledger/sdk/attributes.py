"""DynamoDB's low-level attribute values: constructors and the item size DynamoDB bills."""

from __future__ import annotations

from typing import Any

Item = dict[str, dict[str, Any]]


MAX_ITEM_BYTES = 409_600


def item_size(item: Item) -> int:
    """An item's size as DynamoDB bills and limits it: attribute names plus values
    (strings as UTF-8, binary as is, numbers about one byte per two digits plus one)."""
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        for kind, raw in value.items():
            if kind == "S":
                size += len(raw.encode())
            elif kind == "B":
                size += len(raw)
            elif kind == "N":
                size += (len(raw.lstrip("-").replace(".", "")) + 1) // 2 + 1
            else:
                raise ValueError(f"item_size: unsupported attribute type {kind}")
    return size


def S(value: str) -> dict[str, str]:
    return {"S": value}


def N(value: int) -> dict[str, str]:
    return {"N": str(value)}


def B(value: bytes) -> dict[str, bytes]:
    return {"B": value}
