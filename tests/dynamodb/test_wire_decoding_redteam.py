"""Red team of reads decoded from the wire (``sandbox_ledger.sdk.wire``) and of the library's
clients skipping botocore's parameter validation.

- Bodies DynamoDB can send (unicode escapes, astral characters, long numbers, empty values,
  32 levels of nesting, binary spellings, duplicate keys, UnprocessedKeys, every shape of
  ConsumedCapacity, Select=COUNT, a 200 carrying ``__type``) parse exactly as botocore parses
  them; bodies it does not send (a BOM, UTF-16, a type this botocore does not model, a null
  value, two types at once) are botocore's alone.
- Through a scripted HTTP server, the library's clients (sync and async) retry, fail and
  succeed on the same responses as with botocore's parser: throttled then answered, a 500, a
  body whose x-amz-crc32 does not match, a body cut short.
- ``install`` leaves a caller's other clients alone, is idempotent, survives close and
  recreate, never wraps the streams client, and after-call hooks see the same answer.
- A caller's ``parameter_validation=True`` wins over the library's default (sync and async).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import gzip
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ParamValidationError
from botocore.parsers import create_parser

from sandbox_ledger.sdk import wire
from sandbox_ledger.sdk.client import STREAMS, AsyncClient, SyncClient

MODEL = botocore.session.get_session().get_service_model("dynamodb")


def _response(body: bytes, status: int = 200) -> dict[str, Any]:
    headers = {"x-amzn-requestid": "REQ", "content-type": "application/x-amz-json-1.0"}
    return {"status_code": status, "headers": headers, "body": body, "context": {}}


def _outcome(parser: Any, operation: str, body: bytes) -> tuple[str, Any]:
    shape = MODEL.operation_model(operation).output_shape
    try:
        return "parsed", parser.parse(_response(body), shape)
    except Exception as exc:  # botocore's own failure: the same type on both sides
        return "raised", type(exc)


def _both(operation: str, body: bytes) -> tuple[tuple[str, Any], tuple[str, Any]]:
    ours = _outcome(wire.WireParser(create_parser("json")), operation, body)
    return ours, _outcome(create_parser("json"), operation, body)


def _nested(depth: int, kind: str) -> dict[str, Any]:
    value: dict[str, Any] = {"S": "leaf"}
    for _ in range(depth):
        value = {"L": [value]} if kind == "L" else {"M": {"k": value}}
    return value


def _query(*items: dict[str, Any], **more: Any) -> bytes:
    return json.dumps({"Items": list(items), "Count": len(items), **more}).encode()


B64 = base64.b64encode(b"\x00\xff\xfe").decode()
CAPACITY = {
    "TableName": "t",
    "CapacityUnits": 3.5,
    "ReadCapacityUnits": 3.5,
    "Table": {"CapacityUnits": 1.0, "ReadCapacityUnits": 1.0},
    "LocalSecondaryIndexes": {"lsi": {"CapacityUnits": 0.5}},
    "GlobalSecondaryIndexes": {"gsi1": {"CapacityUnits": 2, "ReadCapacityUnits": 2}},
}

SENT_BY_DYNAMODB: list[tuple[str, str, bytes]] = [
    (
        "unicode escapes and astral characters in values and names",
        "Query",
        b'{"Items":[{"\\ud83d\\ude00k\\u00e9":{"S":"\\ud83d\\ude00\\u0000\\n\\"\\\\"},'
        b'"\\u2028":{"SS":["\\ud834\\udd1e","\\u00ff"]}}],"Count":1}',
    ),
    (
        "raw UTF-8 astral characters",
        "Query",
        _query({"\U0001f600": {"S": "\U0001f600\U00010348" * 50}, "z": {"S": "é" * 10}}),
    ),
    (
        "numbers of 38 digits and extreme exponents",
        "Query",
        _query(
            {
                "a": {"N": "9" * 38},
                "b": {"N": "-0." + "0" * 100 + "1"},
                "c": {"N": "1E+125"},
                "d": {"NS": ["-1E-130", "0", "12345678901234567890123456789012345678"]},
            }
        ),
    ),
    (
        "empty strings, binary, lists and maps",
        "Query",
        _query({"a": {"S": ""}, "b": {"B": ""}, "c": {"L": []}, "d": {"M": {}}, "": {"S": ""}}),
    ),
    ("32 levels of lists", "Query", _query({"a": _nested(32, "L")})),
    ("32 levels of maps", "Scan", _query({"a": _nested(32, "M")})),
    (
        "binary padded, unpadded (refused alike), with newlines and with a single byte",
        "Query",
        _query({"a": {"B": "AAE="}, "b": {"B": "AA\nE="}, "c": {"BS": ["AA==", "AAE=", B64]}}),
    ),
    ("binary without its padding", "Query", _query({"a": {"B": "AAE"}})),
    (
        "duplicate keys: the last wins on both sides",
        "Query",
        b'{"Items":[{"a":{"S":"1"}}],"Items":[{"a":{"S":"2"},"a":{"N":"3"}}],"Count":1,"Count":2}',
    ),
    (
        "BatchGetItem with UnprocessedKeys holding binary keys",
        "BatchGetItem",
        json.dumps(
            {
                "Responses": {"t": [{"pk": {"B": B64}, "v": {"L": [{"B": B64}]}}], "u": []},
                "UnprocessedKeys": {
                    "t": {
                        "Keys": [{"pk": {"B": B64}, "sk": {"S": "x"}}],
                        "ConsistentRead": True,
                        "ProjectionExpression": "#a",
                        "ExpressionAttributeNames": {"#a": "a"},
                    }
                },
                "ConsumedCapacity": [CAPACITY, {"TableName": "u", "CapacityUnits": 0}],
            }
        ).encode(),
    ),
    (
        "ConsumedCapacity with every part",
        "Query",
        _query({"a": {"S": "x"}}, ConsumedCapacity=CAPACITY, ScannedCount=7),
    ),
    (
        "GetItem with ConsumedCapacity and no item",
        "GetItem",
        json.dumps({"ConsumedCapacity": CAPACITY}).encode(),
    ),
    ("GetItem of an empty projection", "GetItem", b'{"Item":{}}'),
    ("Select=COUNT: no Items", "Query", b'{"Count":5,"ScannedCount":9}'),
    (
        "Select=COUNT with a LastEvaluatedKey",
        "Scan",
        b'{"Count":0,"ScannedCount":100,"LastEvaluatedKey":{"pk":{"S":"p"},"n":{"N":"1"}}}',
    ),
    (
        "a projection: some attributes of a nested map",
        "Query",
        _query({"m": {"M": {"x": {"L": [{"NULL": True}, {"BOOL": False}]}}}}),
    ),
    (
        "a 200 carrying an error's __type",
        "Query",
        b'{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"slow"}',
    ),
    ("a 200 with nothing", "Query", b""),
    ("a body cut short", "Query", _query({"a": {"S": "x"}})[:-9]),
    ("a body with trailing data", "Query", _query({"a": {"S": "x"}}) + b" {}"),
]


@pytest.mark.parametrize(
    ("operation", "body"), [c[1:] for c in SENT_BY_DYNAMODB], ids=[c[0] for c in SENT_BY_DYNAMODB]
)
def test_what_dynamodb_sends_parses_exactly_as_botocore_s(operation: str, body: bytes) -> None:
    ours, theirs = _both(operation, body)
    assert ours == theirs


def test_the_fast_path_takes_dynamodb_s_bodies_itself() -> None:
    """The cases above are the fast path's own work, not botocore's fallback."""
    body = _query({"a": _nested(32, "M"), "b": {"B": B64}}, LastEvaluatedKey={"a": {"B": "AA=="}})
    split = wire._split(_response(body), MODEL.operation_model("Query").output_shape)
    assert split is not None
    rest, decoded = split
    assert json.loads(rest["body"]) == {"Count": 1}
    assert decoded["Items"][0]["b"] == {"B": b"\x00\xff\xfe"}
    assert decoded["LastEvaluatedKey"] == {"a": {"B": b"\x00"}}


NOT_SENT_BY_DYNAMODB: list[tuple[str, bytes]] = [
    # json.loads of bytes takes a BOM and UTF-16; botocore decodes UTF-8 only.
    ("a UTF-8 BOM", b"\xef\xbb\xbf" + _query({"a": {"S": "x"}})),
    ("UTF-16", _query({"a": {"S": "x"}}).decode().encode("utf-16")),
    # botocore's parse drops a member its model does not have (a type newer than it).
    ("a type this botocore does not model", _query({"a": {"X": "x"}})),
    ("a null value", _query({"a": {"S": None}})),
    ("two types at once", _query({"a": {"S": "x", "B": "AA=="}})),
    ("a map of strings", _query({"a": {"M": {"k": "Sabc"}}})),
    ("a value that is a list", _query({"a": ["S"]})),
    ("a list that is a string", _query({"a": {"L": "abc"}})),
    ("a null item", b'{"Items":[null],"Count":1}'),
    ("binary that is a number", _query({"a": {"B": 7}})),
]


@pytest.mark.parametrize(
    "body", [c[1] for c in NOT_SENT_BY_DYNAMODB], ids=[c[0] for c in NOT_SENT_BY_DYNAMODB]
)
def test_bodies_dynamodb_does_not_send_are_botocore_s_alone(body: bytes) -> None:
    assert wire._split(_response(body), MODEL.operation_model("Query").output_shape) is None
    ours, theirs = _both("Query", body)
    assert ours == theirs


def test_nesting_past_botocore_s_recursion_limit_is_decoded() -> None:
    """DynamoDB nests at most 32 levels; an item nested far deeper (a store that does not
    check) makes botocore's parse exceed the recursion limit, where ours still decodes it."""
    depth = 300
    body = _query({"a": _nested(depth, "L")})
    ours, theirs = _both("Query", body)
    assert theirs == ("raised", RecursionError)
    assert ours[0] == "parsed"
    value = ours[1]["Items"][0]["a"]
    for _ in range(depth):
        value = value["L"][0]
    assert value == {"S": "leaf"}


# -- a scripted DynamoDB: the library's clients beside botocore's parser ----------------------

Reply = tuple[int, dict[str, str], bytes]


class _Script:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.targets: list[str] = []
        self.bodies: list[Any] = []


def _crc(body: bytes) -> str:
    return str(binascii.crc32(body) & 0xFFFFFFFF)


def _ok(body: bytes, crc: bytes | None = None) -> Reply:
    return 200, {"x-amz-crc32": _crc(body if crc is None else crc)}, body


def _error(status: int, kind: str) -> Reply:
    body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{kind}", "message": kind})
    return status, {}, body.encode()


@pytest.fixture
def scripted() -> Iterator[tuple[str, _Script]]:
    script = _Script()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            script.bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            script.targets.append(self.headers.get("x-amz-target", ""))
            status, headers, body = script.replies.pop(0)
            self.send_response(status)
            self.send_header("content-type", "application/x-amz-json-1.0")
            self.send_header("x-amzn-requestid", "REQ")
            self.send_header("content-length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", script
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


QUERY = {
    "TableName": "t",
    "KeyConditionExpression": "pk = :p",
    "ExpressionAttributeValues": {":p": {"S": "a"}},
}
ITEMS = [{"pk": {"S": "a"}, "b": {"B": B64}, "m": {"M": {"l": {"L": [{"N": "1"}]}}}}]
GOOD = json.dumps({"Items": ITEMS, "Count": 1, "ConsumedCapacity": CAPACITY}).encode()
GZIP = gzip.compress(GOOD)
CORRUPT = GOOD.replace(b'"N": "1"', b'"N": "7"')

SCRIPTS: dict[str, list[Reply]] = {
    "throttled then answered": [_error(400, "ThrottlingException"), _ok(GOOD)],
    "over its throughput then answered": [
        _error(400, "ProvisionedThroughputExceededException"),
        _ok(GOOD),
    ],
    "a 500 then answered": [_error(500, "InternalServerError"), _ok(GOOD)],
    "a 503 page then answered": [(503, {}, b"<html>Service Unavailable</html>"), _ok(GOOD)],
    "a body whose crc32 does not match, then answered": [_ok(CORRUPT, crc=GOOD), _ok(GOOD)],
    "a body cut short under a crc32 of the whole, then answered": [
        _ok(GOOD[:-20], crc=GOOD),
        _ok(GOOD),
    ],
    "a body cut short with no crc32": [(200, {}, GOOD[:-20])],
    "a 200 carrying an error": [_ok(b'{"__type":"x#ThrottlingException","message":"m"}')],
    "a validation error": [_error(400, "ValidationException")],
    "a gzip body": [(200, {"content-encoding": "gzip", "x-amz-crc32": _crc(GZIP)}, GZIP)],
    "a gzip body under the crc32 of its text": [
        (200, {"content-encoding": "gzip", "x-amz-crc32": _crc(GOOD)}, GZIP)
    ],
}


def _sync_outcome(
    endpoint: str, script: _Script, replies: list[Reply], decoded: bool, monkeypatch: Any
) -> tuple[Any, int, list[Any]]:
    monkeypatch.setenv("SANDBOX_LEDGER_WIRE_DECODING", "1" if decoded else "0")
    script.replies[:], script.targets[:] = list(replies), []
    client = SyncClient(endpoint_url=endpoint, region_name="us-east-1", session=None, config=None)
    seen: list[Any] = []
    raw = client.get()
    assert isinstance(raw._endpoint._response_parser_factory, wire._Factory) is decoded
    raw.meta.events.register("after-call.dynamodb", lambda parsed, **_: seen.append(parsed))
    try:
        outcome: Any = raw.query(**QUERY)
        outcome["ResponseMetadata"].pop("HTTPHeaders")  # the date differs
        outcome["ResponseMetadata"].pop("RetryAttempts")  # asserted through the request count
    except ClientError as exc:
        outcome = ("error", exc.response["Error"]["Code"], exc.response["Error"].get("Message"))
    except Exception as exc:  # botocore's own failure (a gzip body: it never inflates one)
        outcome = ("raised", type(exc))
    finally:
        client.close()
    return outcome, len(script.targets), seen


@pytest.mark.parametrize("case", list(SCRIPTS))
def test_retries_errors_and_answers_are_botocore_s(
    case: str, scripted: tuple[str, _Script], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, script = scripted
    ours = _sync_outcome(endpoint, script, SCRIPTS[case], True, monkeypatch)
    theirs = _sync_outcome(endpoint, script, SCRIPTS[case], False, monkeypatch)
    assert ours[:2] == theirs[:2]
    assert [{**p, "ResponseMetadata": None} for p in ours[2]] == [
        {**p, "ResponseMetadata": None} for p in theirs[2]
    ]
    if case.startswith("a gzip body"):  # botocore never asks for gzip, nor inflates it
        assert ours[0] == ("raised", UnicodeDecodeError)
    if len(SCRIPTS[case]) > 1:  # retried, then the good answer, items decoded
        assert ours[1] == 2
        assert ours[0]["Items"][0]["b"] == {"B": b"\x00\xff\xfe"}
        assert ours[0]["ConsumedCapacity"] == CAPACITY


async def _async_outcome(
    endpoint: str, script: _Script, replies: list[Reply], decoded: bool, monkeypatch: Any
) -> tuple[Any, int]:
    monkeypatch.setenv("SANDBOX_LEDGER_WIRE_DECODING", "1" if decoded else "0")
    script.replies[:], script.targets[:] = list(replies), []
    client = AsyncClient(endpoint_url=endpoint, region_name="us-east-1", session=None, config=None)
    raw = await client.get()
    assert isinstance(raw._endpoint._response_parser_factory, wire._Factory) is decoded
    try:
        outcome: Any = await raw.query(**QUERY)
        outcome["ResponseMetadata"].pop("HTTPHeaders")
        outcome["ResponseMetadata"].pop("RetryAttempts")
    except ClientError as exc:
        outcome = ("error", exc.response["Error"]["Code"])
    finally:
        await client.close()
    return outcome, len(script.targets)


@pytest.mark.parametrize(
    "case",
    [
        "throttled then answered",
        "a body whose crc32 does not match, then answered",
        "a body cut short with no crc32",
        "a validation error",
    ],
)
async def test_the_async_client_retries_and_answers_as_botocore_s(
    case: str, scripted: tuple[str, _Script], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, script = scripted
    ours = await _async_outcome(endpoint, script, SCRIPTS[case], True, monkeypatch)
    theirs = await _async_outcome(endpoint, script, SCRIPTS[case], False, monkeypatch)
    assert ours == theirs


def _page(n: int, last: bool) -> Reply:
    item = {"pk": {"S": "a"}, "sk": {"B": base64.b64encode(bytes([n, 255])).decode()}}
    body: dict[str, Any] = {"Items": [item], "Count": 1}
    if not last:
        body["LastEvaluatedKey"] = item
    return _ok(json.dumps(body).encode())


PAGING: list[Reply] = [
    _page(0, False),
    _error(400, "ThrottlingException"),
    _page(1, False),
    _page(2, True),
]
BATCH: list[Reply] = [
    _ok(
        json.dumps(
            {
                "Responses": {"t": [ITEMS[0]]},
                "UnprocessedKeys": {"t": {"Keys": [{"pk": {"B": B64}}], "ConsistentRead": True}},
            }
        ).encode()
    ),
    _ok(json.dumps({"Responses": {"t": [{"pk": {"B": B64}}]}, "UnprocessedKeys": {}}).encode()),
]


@pytest.mark.parametrize("case", ["paging", "batch"])
def test_paging_and_unprocessed_keys_send_what_botocore_s_parse_sent(
    case: str, scripted: tuple[str, _Script], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LastEvaluatedKey and UnprocessedKeys holding binary go back to DynamoDB as they came
    (the next request's ExclusiveStartKey, the retried keys), through a throttled page."""
    from sandbox_ledger.sdk.batching import batch_get
    from sandbox_ledger.sdk.paging import query_all
    from sandbox_ledger.sdk.steps import run_sync

    endpoint, script = scripted
    runs = []
    for decoded in (True, False):
        monkeypatch.setenv("SANDBOX_LEDGER_WIRE_DECODING", "1" if decoded else "0")
        script.replies[:] = PAGING if case == "paging" else BATCH
        script.bodies[:] = []
        client = SyncClient(
            endpoint_url=endpoint, region_name="us-east-1", session=None, config=None
        )
        op = query_all(QUERY) if case == "paging" else batch_get("t", [{"pk": {"S": "a"}}])
        runs.append((run_sync(client.get(), op), list(script.bodies)))
        client.close()
    assert runs[0] == runs[1]
    found, sent = runs[0]
    if case == "paging":
        assert [item["sk"]["B"] for item in found] == [b"\x00\xff", b"\x01\xff", b"\x02\xff"]
        assert [body.get("ExclusiveStartKey") for body in sent] == [
            None,
            json.loads(PAGING[0][2])["LastEvaluatedKey"],
            json.loads(PAGING[0][2])["LastEvaluatedKey"],
            json.loads(PAGING[2][2])["LastEvaluatedKey"],
        ]
    else:
        assert found == [{**ITEMS[0], "b": {"B": b"\x00\xff\xfe"}}, {"pk": {"B": b"\x00\xff\xfe"}}]
        assert sent[1]["RequestItems"] == {
            "t": {"Keys": [{"pk": {"B": B64}}], "ConsistentRead": True}
        }


def test_the_botocore_instrumentation_records_the_same_attributes(
    scripted: tuple[str, _Script], monkeypatch: pytest.MonkeyPatch
) -> None:
    """opentelemetry-instrumentation-botocore reads the parsed answer (a Query's
    ConsumedCapacity): its spans carry the same attributes both ways."""
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    endpoint, script = scripted
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    untyped: Any = BotocoreInstrumentor
    instrumentor = untyped()
    instrumentor.instrument(tracer_provider=provider)
    seen: list[dict[str, Any]] = []
    try:
        for decoded in (True, False):
            monkeypatch.setenv("SANDBOX_LEDGER_WIRE_DECODING", "1" if decoded else "0")
            script.replies[:] = [_ok(GOOD)]
            client = SyncClient(
                endpoint_url=endpoint, region_name="us-east-1", session=None, config=None
            )
            client.get().query(**QUERY)
            client.close()
            (span,) = exporter.get_finished_spans()
            exporter.clear()
            seen.append(
                {k: v for k, v in (span.attributes or {}).items() if k.startswith("aws.dynamodb")}
            )
    finally:
        instrumentor.uninstrument()
    assert seen[0] == seen[1], seen
    (capacity,) = seen[0]["aws.dynamodb.consumed_capacity"]
    assert json.loads(capacity) == CAPACITY


# -- install ----------------------------------------------------------------------------------


def test_install_is_idempotent_and_survives_close_and_recreate() -> None:
    client = SyncClient(
        endpoint_url="http://127.0.0.1:9", region_name="us-east-1", session=None, config=None
    )
    first = client.get()
    factory = first._endpoint._response_parser_factory
    assert isinstance(factory, wire._Factory)
    assert wire.install(first) is True
    assert wire.install(first) is True
    assert first._endpoint._response_parser_factory is factory  # never wrapped twice
    assert not isinstance(factory._factory, wire._Factory)
    client.close()
    second = client.get()
    assert second is not first
    assert isinstance(second._endpoint._response_parser_factory, wire._Factory)
    client.close()


def test_the_streams_client_is_never_wrapped() -> None:
    client = SyncClient(
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        session=None,
        config=None,
        service=STREAMS,
    )
    streams = client.get()
    assert not isinstance(streams._endpoint._response_parser_factory, wire._Factory)
    assert wire.install(streams) is False
    client.close()


async def test_a_caller_s_aioboto3_session_keeps_botocore_s_parser_for_its_other_clients() -> None:
    import aioboto3

    session = aioboto3.Session(region_name="us-east-1")
    ours = AsyncClient(
        endpoint_url="http://127.0.0.1:9", region_name=None, session=session, config=None
    )
    raw = await ours.get()
    assert isinstance(raw._endpoint._response_parser_factory, wire._Factory)
    async with session.client("dynamodb", endpoint_url="http://127.0.0.1:9") as theirs:
        assert not isinstance(theirs._endpoint._response_parser_factory, wire._Factory)
        assert wire.install(raw, aio=True) is True
        assert not isinstance(theirs._endpoint._response_parser_factory, wire._Factory)
    await ours.close()
    again = await ours.get()
    assert isinstance(again._endpoint._response_parser_factory, wire._Factory)
    await ours.close()


# -- parameter validation ---------------------------------------------------------------------

BAD = {"TableName": "t", "Key": {"pk": {"S": 5}}}


def _validates(client: Any) -> bool:
    """Whether ``client`` checks parameters (its serializer wrapped in botocore's validator;
    ``meta.config`` does not say: botocore builds it without the setting)."""
    from botocore.validate import ParamValidationDecorator

    return isinstance(client._serializer, ParamValidationDecorator)


def test_the_library_skips_validation_and_a_caller_s_config_turns_it_back_on() -> None:
    where: dict[str, Any] = {
        "endpoint_url": "http://127.0.0.1:9",
        "region_name": "us-east-1",
        "session": None,
    }
    default = SyncClient(**where, config=None)
    assert not _validates(default.get())
    default.close()
    checked = SyncClient(**where, config=Config(parameter_validation=True, read_timeout=3))
    with pytest.raises(ParamValidationError, match=r"Key\.pk\.S"):
        checked.get().get_item(**BAD)  # refused before any request
    checked.close()


async def test_a_caller_s_config_turns_validation_back_on_for_the_async_client() -> None:
    from aiobotocore.config import AioConfig

    where: dict[str, Any] = {
        "endpoint_url": "http://127.0.0.1:9",
        "region_name": "us-east-1",
        "session": None,
    }
    for given in (Config(parameter_validation=True), AioConfig(parameter_validation=True)):
        client = AsyncClient(**where, config=given)
        raw = await client.get()
        assert _validates(raw)
        with pytest.raises(ParamValidationError):
            await raw.get_item(**BAD)
        await client.close()
    default = AsyncClient(**where, config=None)
    assert not _validates(await default.get())
    await default.close()
    await asyncio.sleep(0)


# A sweep's page_size is the phase index Query's Limit: botocore refused a bad one before
# any request; with its validation off, the local server answered 0 with a 500 (ten times,
# retried) and took -1, "100", 1.5, True and None as if they were a page size.
BAD_PAGE_SIZES: list[Any] = [0, -1, "100", 1.5, True, None]


@pytest.mark.parametrize("page_size", BAD_PAGE_SIZES, ids=repr)
def test_a_sweep_refuses_a_page_size_that_is_not_one_before_any_request(page_size: Any) -> None:
    from sandbox_ledger.errors import InvalidInputError
    from sandbox_ledger.resources import SyncResourceRecordStore, sweep

    store = SyncResourceRecordStore("nowhere", endpoint_url="http://127.0.0.1:9")
    with pytest.raises(InvalidInputError, match="page_size"):
        sweep(store, None, now=datetime.now(UTC), dry_run=True, page_size=page_size)
    store.close()


def test_the_store_s_candidates_refuse_a_page_size_that_is_not_one(
    moto_endpoint: str, sync_table: str
) -> None:
    from sandbox_ledger.errors import InvalidInputError
    from sandbox_ledger.resources import SyncResourceRecordStore

    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    for page_size in BAD_PAGE_SIZES:
        with pytest.raises(InvalidInputError, match="page_size"):
            next(store.candidates("running", before=datetime.now(UTC), page_size=page_size))
    store.close()


@pytest.mark.parametrize("setting", ["true", "false"])
async def test_a_profile_s_parameter_validation_is_kept(
    setting: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore lets any client config that turns validation off beat the profile's
    ``parameter_validation``: the library's default would have silenced a profile that turns
    it on (it was kept before the default). A caller's config that turns it off wins; one
    that turns it on, only where the profile does not turn it off (botocore's own rule)."""
    config_file = tmp_path / "config"
    config_file.write_text(f"[profile red]\nparameter_validation = {setting}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config_file))
    monkeypatch.setenv("AWS_PROFILE", "red")
    where: dict[str, Any] = {
        "endpoint_url": "http://127.0.0.1:9",
        "region_name": "us-east-1",
        "session": None,
    }
    expected = setting == "true"
    sync = SyncClient(**where, config=None)
    assert _validates(sync.get()) is expected
    sync.close()
    aio = AsyncClient(**where, config=None)
    assert _validates(await aio.get()) is expected
    await aio.close()
    for given in (True, False):
        sync = SyncClient(**where, config=Config(parameter_validation=given))
        assert _validates(sync.get()) is (given and expected)
        sync.close()
        aio = AsyncClient(**where, config=Config(parameter_validation=given))
        assert _validates(await aio.get()) is (given and expected)
        await aio.close()
