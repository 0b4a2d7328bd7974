"""Reads decoded from the wire: the items of a successful DynamoDB read turned into the
client's attribute-value dicts straight from the response's JSON, without botocore's walk of
the output shape (its per-value structure and union handling is most of a large read's
client CPU).

Only the heavy members of four outputs are taken over: ``Items`` and ``LastEvaluatedKey``
(Query, Scan), ``Item`` (GetItem), ``Responses`` (BatchGetItem). Everything else of the
response, and every response that is not a 200, goes through botocore's own parser exactly
as before: errors and their codes, throttling, the retry handlers (which read the parsed
response and the HTTP response, never the items), ``ResponseMetadata``, ``ConsumedCapacity``,
``Count``, ``UnprocessedKeys``. The result is equal to botocore's (binary values decoded from
base64 to bytes the same way; tests/dynamodb/test_wire_decoding.py compares the two on
generated items of every attribute type); a body the fast path cannot read is parsed by
botocore alone.

It is installed per client (the library's own clients, :mod:`.client`), never on a
session's shared parser factory: a caller's other clients keep botocore's. Set
``SANDBOX_LEDGER_WIRE_DECODING=0`` to leave every client to botocore's parser (the
conformance suite runs both ways).
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

__all__ = ["HEAVY", "decode_item", "install", "wire_decoding"]

HEAVY: dict[str, tuple[str, ...]] = {
    "QueryOutput": ("Items", "LastEvaluatedKey"),
    "ScanOutput": ("Items", "LastEvaluatedKey"),
    "GetItemOutput": ("Item",),
    "BatchGetItemOutput": ("Responses",),
}
"""Per output shape, the members decoded here (the rest by botocore)."""

_b64decode = base64.b64decode


def wire_decoding() -> bool:
    """Whether new clients decode reads from the wire (``SANDBOX_LEDGER_WIRE_DECODING``,
    default on)."""
    return os.environ.get("SANDBOX_LEDGER_WIRE_DECODING", "1").strip().lower() not in (
        "0",
        "false",
        "no",
        "off",
    )


_AS_IS = frozenset(("BOOL", "NULL", "SS", "NS"))
"""The attribute types botocore's parse leaves as the JSON has them (besides S and N)."""


def _value(value: dict[str, Any]) -> dict[str, Any]:
    """One attribute value as botocore parses it (binary ones decoded, nested ones walked).

    Only a value as DynamoDB sends it is taken: a JSON object of one known type whose value
    is not null. Anything else (a type this botocore does not model, which its parse drops;
    a null, also dropped; two types at once; not an object) raises ValueError or
    AttributeError, and the whole body is left to botocore."""
    ((kind, inner),) = value.items()
    if inner is None:
        raise ValueError(kind)
    if kind == "S" or kind == "N":
        return value
    if kind == "B":
        return {"B": _b64decode(inner)}
    if kind == "M":
        return {"M": {key: _value(nested) for key, nested in inner.items()}}
    if kind == "L":
        return {"L": [_value(nested) for nested in inner]}
    if kind == "BS":
        return {"BS": [_b64decode(blob) for blob in inner]}
    if kind in _AS_IS:
        return value
    raise ValueError(kind)


def decode_item(item: dict[str, Any]) -> dict[str, Any]:
    """An item of a response's JSON as botocore parses it (ValueError or AttributeError for
    anything DynamoDB does not send: see :func:`_value`)."""
    return {name: _value(value) for name, value in item.items()}


def _member(name: str, value: Any) -> Any:
    if name == "Items":
        return [decode_item(item) for item in value]
    if name == "Responses":
        return {table: [decode_item(item) for item in items] for table, items in value.items()}
    return decode_item(value)  # Item, LastEvaluatedKey


def _split(response: dict[str, Any], shape: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the response without its heavy members, those members decoded), or None where
    botocore must parse it all (not a 200, another output, a body the fast path refuses)."""
    heavy = HEAVY.get(getattr(shape, "name", ""))
    if heavy is None or response.get("status_code") != 200:
        return None
    try:
        # Text as botocore reads it (UTF-8 only: json.loads of bytes would also take a BOM
        # or UTF-16, which botocore refuses).
        document = json.loads(response["body"].decode("utf-8"))
        if not isinstance(document, dict):
            return None
        taken = {name: document.pop(name) for name in heavy if document.get(name) is not None}
        decoded = {name: _member(name, value) for name, value in taken.items()}
    except (ValueError, TypeError, AttributeError, KeyError, UnicodeDecodeError):
        return None
    rest = json.dumps(document).encode() if document else b""
    return {**response, "body": rest}, decoded


class WireParser:
    """botocore's JSON parser with the heavy members of the reads taken over."""

    def __init__(self, parser: Any) -> None:
        self._parser = parser

    def parse(self, response: dict[str, Any], shape: Any) -> Any:
        split = _split(response, shape)
        if split is None:
            return self._parser.parse(response, shape)
        rest, decoded = split
        parsed = self._parser.parse(rest, shape)
        parsed.update(decoded)
        return parsed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)


class AioWireParser(WireParser):
    """aiobotocore's (its ``parse`` is a coroutine)."""

    async def parse(self, response: dict[str, Any], shape: Any) -> Any:
        split = _split(response, shape)
        if split is None:
            return await self._parser.parse(response, shape)
        rest, decoded = split
        parsed = await self._parser.parse(rest, shape)
        parsed.update(decoded)
        return parsed


class _Factory:
    """The endpoint's parser factory, handing out wire parsers for the JSON protocol."""

    def __init__(self, factory: Any, wrap: type[WireParser]) -> None:
        self._factory = factory
        self._wrap = wrap

    def create_parser(self, protocol: str) -> Any:
        parser = self._factory.create_parser(protocol)
        return self._wrap(parser) if protocol == "json" else parser

    def __getattr__(self, name: str) -> Any:
        return getattr(self._factory, name)


def install(client: Any, *, aio: bool = False) -> bool:
    """Make ``client`` (a DynamoDB client, sync or aiobotocore's with ``aio``) decode its
    reads from the wire, unless turned off; whether it does (False too where botocore's
    endpoint does not have the parser factory this expects: it then parses as before)."""
    if not wire_decoding() or client.meta.service_model.service_name != "dynamodb":
        return False
    endpoint: Any = getattr(client, "_endpoint", None)
    factory = getattr(endpoint, "_response_parser_factory", None)
    if endpoint is None or factory is None or not hasattr(factory, "create_parser"):
        return False
    if not isinstance(factory, _Factory):
        endpoint._response_parser_factory = _Factory(factory, AioWireParser if aio else WireParser)
    return True
