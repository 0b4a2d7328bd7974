"""Item sizes and numbers as DynamoDB counts them, from the wire form of an item.

DynamoDB's rules (Developer Guide, "DynamoDB item sizes and formats"), quoted:

- "The size of a string is (number of UTF-8-encoded bytes of attribute name) + (number of
  UTF-8-encoded bytes)."
- "Numbers are variable length, with up to 38 significant digits. Leading and trailing
  zeroes are trimmed. The size of a number is approximately (number of UTF-8-encoded bytes
  of attribute name) + (1 byte per two significant digits) + (1 byte)."
- "the value's raw byte length is used for calculating size" (binary, sent as base64).
- "The size of a null attribute or a Boolean attribute is (number of UTF-8-encoded bytes of
  attribute name) + (1 byte)."
- "An attribute of type List or Map requires 3 bytes of overhead, regardless of its
  contents. [...] Each List or Map element also requires 1 byte of overhead."

And the number's range (Developer Guide, "Supported data types": Number): "Numbers can have
up to 38 digits of precision [...] Positive range: 1E-130 to
9.9999999999999999999999999999999999999E+125".
"""

from __future__ import annotations

import base64
import binascii
import math
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["NumberError", "item_size", "number_size", "significant_digits", "value_size"]

MAX_DIGITS = 38
SMALLEST = Decimal("1E-130")
LARGEST = Decimal("9.9999999999999999999999999999999999999E+125")


class NumberError(ValueError):
    """A number DynamoDB refuses (its message is DynamoDB's own)."""


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def significant_digits(raw: str) -> int:
    """The significant digits of a wire number (leading and trailing zeros trimmed).

    Raises:
        NumberError: not a number, over 38 significant digits, or out of DynamoDB's range.
    """
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise NumberError(f"A value provided cannot be converted into a number: {raw!r}") from None
    if not value.is_finite():
        raise NumberError(f"A value provided cannot be converted into a number: {raw!r}")
    # The digits as written (Decimal's constructor is exact; normalize() would round to 28).
    count = len("".join(map(str, value.as_tuple().digits)).strip("0")) or 1
    if count > MAX_DIGITS:
        raise NumberError("Attempting to store more than 38 significant digits in a Number")
    if value and not SMALLEST <= abs(value) <= LARGEST:
        raise NumberError(
            "Number overflow. Attempting to store a number with magnitude "
            "larger than supported range"
            if abs(value) > LARGEST
            else "Number underflow. Attempting to store a number with magnitude "
            "smaller than supported range"
        )
    return count


def number_size(raw: str) -> int:
    """A number value's bytes: one per two significant digits, plus one."""
    return math.ceil(significant_digits(raw) / 2) + 1


def _binary_bytes(raw: str | bytes) -> int:
    """The raw bytes of a binary value: base64 text on the wire; moto keeps some of the items
    it stores with the decoded bytes as text."""
    if isinstance(raw, bytes):
        return len(raw)
    try:
        return len(base64.b64decode(raw, validate=True))
    except (binascii.Error, ValueError):
        return len(raw.encode("utf-8", "surrogatepass"))


def value_size(value: dict[str, Any]) -> int:
    """The bytes of one wire value (``{"S": ...}``, ``{"M": {...}}``, ...), name excluded."""
    (kind, raw), *_ = value.items()
    if kind == "S":
        return _utf8(raw)
    if kind == "N":
        return number_size(raw)
    if kind == "B":
        return _binary_bytes(raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(_utf8(s) for s in raw)
    if kind == "NS":
        return sum(number_size(n) for n in raw)
    if kind == "BS":
        return sum(_binary_bytes(b) for b in raw)
    if kind == "L":
        return 3 + sum(value_size(v) + 1 for v in raw)
    if kind == "M":
        return 3 + sum(_utf8(name) + value_size(v) + 1 for name, v in raw.items())
    raise ValueError(f"not a DynamoDB value: {kind!r}")


def item_size(item: dict[str, Any]) -> int:
    """An item's size: its attribute names and values."""
    return sum(_utf8(name) + value_size(value) for name, value in item.items())
