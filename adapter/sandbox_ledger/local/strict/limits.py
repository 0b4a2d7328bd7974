"""DynamoDB's request limits, checked before the request reaches moto (which accepts 26-item
batches, 405,000-byte items and numbers of any length).

The rules, quoted from DynamoDB's documentation:

- Item size (Developer Guide, "Quotas"): "The maximum item size in DynamoDB is 400 KB, which
  includes both attribute name binary length (UTF-8 length) and attribute value lengths":
  a put's item, and the item an update leaves (its expression applied to a copy first).
- BatchWriteItem (API Reference): "A single call to BatchWriteItem can transmit up to 16MB of
  data over the network, consisting of up to 25 item put or delete operations".
- BatchGetItem (API Reference): "A single operation can retrieve up to 16 MB of data, which
  can contain as many as 100 items".
- TransactWriteItems (API Reference): "a synchronous write operation that groups up to 100
  action requests [...] The aggregate size of the items in the transaction cannot exceed
  4 MB."; TransactGetItems: "up to 100 TransactGetItem objects".
- Numbers: up to 38 significant digits, magnitudes from 1E-130 to 9.99...E+125
  (:mod:`.sizes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .sizes import NumberError, item_size, significant_digits

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "BATCH_GET_KEYS",
    "BATCH_WRITE_BYTES",
    "BATCH_WRITE_REQUESTS",
    "ITEM_BYTES",
    "TRANSACTION_ACTIONS",
    "TRANSACTION_BYTES",
    "Refused",
    "check",
]

ITEM_BYTES = 400 * 1024
BATCH_WRITE_REQUESTS = 25
BATCH_WRITE_BYTES = 16 * 1024 * 1024
BATCH_GET_KEYS = 100
TRANSACTION_ACTIONS = 100
TRANSACTION_BYTES = 4 * 1024 * 1024


class Refused(Exception):
    """A request DynamoDB refuses: its error code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _validation(message: str) -> Refused:
    return Refused("ValidationException", message)


def _numbers(value: Any) -> None:
    """Every number in a request (``{"N": ...}`` and ``{"NS": [...]}`` anywhere in it)."""
    if isinstance(value, dict):
        if len(value) == 1 and "N" in value and isinstance(value["N"], str):
            significant_digits(value["N"])
            return
        if len(value) == 1 and "NS" in value and isinstance(value["NS"], list):
            for raw in value["NS"]:
                significant_digits(raw)
            return
        for inner in value.values():
            _numbers(inner)
    elif isinstance(value, list):
        for inner in value:
            _numbers(inner)


def _item(item: dict[str, Any]) -> int:
    size = item_size(item)
    if size > ITEM_BYTES:
        raise _validation("Item size has exceeded the maximum allowed size")
    return size


def _updated(size: int | None) -> None:
    if size is not None and size > ITEM_BYTES:
        raise _validation("Item size to update has exceeded the maximum allowed size")


def check(
    operation: str,
    request: dict[str, Any],
    stored: Callable[[str, dict[str, Any]], int] = lambda table, key: 0,
    updated: Callable[[str, dict[str, Any]], int | None] = lambda table, update: None,
) -> None:
    """Refuse ``request`` as DynamoDB would (``stored(table, key)``: the size of the item a
    transaction's update, delete or check names, as stored; ``updated(table, update)``: the
    size of the item an update leaves, None where it cannot pass the limit).

    Raises:
        Refused: the request breaks one of the limits above.
    """
    try:
        _numbers(request)
    except NumberError as exc:
        raise _validation(str(exc)) from None
    if operation == "PutItem" and isinstance(request.get("Item"), dict):
        _item(request["Item"])
    elif operation == "UpdateItem":
        _updated(updated(request.get("TableName", ""), request))
    elif operation == "BatchWriteItem":
        tables = request.get("RequestItems") or {}
        count = sum(len(requests) for requests in tables.values())
        if count > BATCH_WRITE_REQUESTS:
            raise _validation(
                "1 validation error detected: Value at 'requestItems' failed to satisfy "
                "constraint: Map value must satisfy constraint: [Member must have length "
                f"less than or equal to {BATCH_WRITE_REQUESTS}]"
            )
        total = 0
        for requests in tables.values():
            for one in requests:
                put = one.get("PutRequest")
                if put is not None:
                    total += _item(put.get("Item", {}))
        if total > BATCH_WRITE_BYTES:
            raise _validation("Too many items requested for the BatchWriteItem call")
    elif operation == "BatchGetItem":
        tables = request.get("RequestItems") or {}
        if sum(len(t.get("Keys", [])) for t in tables.values()) > BATCH_GET_KEYS:
            raise _validation("Too many items requested for the BatchGetItem call")
    elif operation in ("TransactWriteItems", "TransactGetItems"):
        actions = request.get("TransactItems") or []
        if len(actions) > TRANSACTION_ACTIONS:
            raise _validation(
                "1 validation error detected: Value at 'transactItems' failed to satisfy "
                f"constraint: Member must have length less than or equal to {TRANSACTION_ACTIONS}"
            )
        total = 0
        for action in actions:
            put = action.get("Put")
            if put is not None:
                total += _item(put.get("Item", {}))
                continue
            for kind in ("Update", "Delete", "ConditionCheck", "Get"):
                named = action.get(kind)
                if named is not None:
                    total += stored(named.get("TableName", ""), named.get("Key", {}))
                    if kind == "Update":
                        _updated(updated(named.get("TableName", ""), named))
        if total > TRANSACTION_BYTES:
            raise _validation("Transaction request cannot be larger than 4 MB")
