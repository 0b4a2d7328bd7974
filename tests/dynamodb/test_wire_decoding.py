"""Reads decoded from the wire (``sandbox_ledger.sdk.wire``) give exactly what botocore's own
parser gives: on generated items of every attribute type in each output it takes over, on
errors and throttling (botocore's alone), and on bodies it cannot read; the library's clients
have it, a caller's other clients and ``SANDBOX_LEDGER_WIRE_DECODING=0`` do not."""

from __future__ import annotations

import base64
import json
from typing import Any

import botocore.session
import pytest
from botocore.parsers import create_parser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_ledger.sdk import wire

MODEL = botocore.session.get_session().get_service_model("dynamodb")

texts = st.text(max_size=12)
numbers = st.integers(-(10**12), 10**12).map(str)
blobs = st.binary(max_size=24)


def wire_values() -> st.SearchStrategy[dict[str, Any]]:
    """Attribute values as DynamoDB's JSON carries them (binary ones base64)."""
    b64 = blobs.map(lambda b: base64.b64encode(b).decode())
    scalars = st.one_of(
        texts.map(lambda s: {"S": s}),
        numbers.map(lambda n: {"N": n}),
        b64.map(lambda b: {"B": b}),
        st.booleans().map(lambda b: {"BOOL": b}),
        st.just({"NULL": True}),
        st.lists(texts, min_size=1, max_size=3, unique=True).map(lambda v: {"SS": v}),
        st.lists(numbers, min_size=1, max_size=3, unique=True).map(lambda v: {"NS": v}),
        st.lists(b64, min_size=1, max_size=3, unique=True).map(lambda v: {"BS": v}),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3).map(lambda v: {"L": v}),
            st.dictionaries(texts, inner, max_size=3).map(lambda v: {"M": v}),
        ),
        max_leaves=8,
    )


items = st.dictionaries(st.text(min_size=1, max_size=8), wire_values(), min_size=1, max_size=5)
capacity = st.fixed_dictionaries(
    {"TableName": st.just("t"), "CapacityUnits": st.sampled_from([0.5, 1.0, 12.5])}
)


def bodies() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    query = st.fixed_dictionaries(
        {"Items": st.lists(items, max_size=4), "Count": st.integers(0, 9)},
        optional={
            "ScannedCount": st.integers(0, 9),
            "LastEvaluatedKey": items,
            "ConsumedCapacity": capacity,
        },
    )
    get = st.fixed_dictionaries({}, optional={"Item": items, "ConsumedCapacity": capacity})
    batch = st.fixed_dictionaries(
        {
            "Responses": st.dictionaries(st.sampled_from(["a", "b"]), st.lists(items, max_size=3)),
            "UnprocessedKeys": st.dictionaries(
                st.just("a"),
                st.fixed_dictionaries({"Keys": st.lists(items, min_size=1, max_size=2)}),
            ),
        },
        optional={"ConsumedCapacity": st.lists(capacity, max_size=2)},
    )
    return st.one_of(
        query.map(lambda b: ("Query", b)),
        query.map(lambda b: ("Scan", b)),
        get.map(lambda b: ("GetItem", b)),
        batch.map(lambda b: ("BatchGetItem", b)),
    )


def response(body: bytes, status: int = 200) -> dict[str, Any]:
    headers = {"x-amzn-requestid": "REQ", "content-type": "application/x-amz-json-1.0"}
    return {"status_code": status, "headers": headers, "body": body, "context": {}}


def both(operation: str, answer: dict[str, Any]) -> tuple[Any, Any]:
    shape = MODEL.operation_model(operation).output_shape
    ours = wire.WireParser(create_parser("json")).parse(dict(answer), shape)
    theirs = create_parser("json").parse(dict(answer), shape)
    return ours, theirs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies())
def test_every_read_output_is_what_botocore_parses(case: tuple[str, dict[str, Any]]) -> None:
    operation, body = case
    ours, theirs = both(operation, response(json.dumps(body).encode()))
    assert ours == theirs


def test_blobs_come_back_as_bytes_and_the_metadata_as_botocore_s() -> None:
    body = {
        "Items": [{"pk": {"S": "a"}, "v": {"B": base64.b64encode(b"\x00\xff").decode()}}],
        "Count": 1,
        "LastEvaluatedKey": {"pk": {"S": "a"}},
    }
    ours, theirs = both("Query", response(json.dumps(body).encode()))
    assert ours == theirs and ours["Items"][0]["v"] == {"B": b"\x00\xff"}
    assert ours["ResponseMetadata"]["RequestId"] == "REQ"
    assert ours["ResponseMetadata"]["HTTPStatusCode"] == 200


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, b'{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"x"}'),
        (
            400,
            b'{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"}',
        ),
        (500, b'{"__type":"com.amazon.coral.availability#InternalServerError"}'),
        (503, b"<html>Service Unavailable</html>"),
        (200, b"not json"),
        (200, b"[1, 2]"),
        (200, b'{"Items": "not a list", "Count": 1}'),
        (200, b'{"Items": [{"a": null}], "Count": 1}'),
        (200, b'{"Items": [{"a": {"B": 7}}], "Count": 1}'),
        (200, b""),
    ],
)
def test_errors_and_bodies_the_fast_path_refuses_are_botocore_s_alone(
    status: int, body: bytes
) -> None:
    try:
        ours, theirs = both("Query", response(body, status))
    except Exception as exc:  # botocore's own failure, the same on both sides
        with pytest.raises(type(exc)):
            create_parser("json").parse(
                response(body, status), MODEL.operation_model("Query").output_shape
            )
        return
    assert ours == theirs


def test_the_library_s_clients_decode_from_the_wire_unless_turned_off(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    adapter = SyncDynamoDBAdapter("any", endpoint_url=moto_endpoint)
    assert isinstance(adapter.client()._endpoint._response_parser_factory, wire._Factory)
    adapter.close()
    monkeypatch.setenv("SANDBOX_LEDGER_WIRE_DECODING", "0")
    adapter = SyncDynamoDBAdapter("any", endpoint_url=moto_endpoint)
    assert not isinstance(adapter.client()._endpoint._response_parser_factory, wire._Factory)
    adapter.close()


def test_a_caller_s_session_keeps_botocore_s_parser_for_its_other_clients(
    moto_endpoint: str,
) -> None:
    import boto3

    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    session = boto3.Session(region_name="us-east-1")
    adapter = SyncDynamoDBAdapter("any", endpoint_url=moto_endpoint, session=session)
    assert isinstance(adapter.client()._endpoint._response_parser_factory, wire._Factory)
    theirs = session.client("dynamodb", endpoint_url=moto_endpoint)
    assert not isinstance(theirs._endpoint._response_parser_factory, wire._Factory)
    adapter.close()
