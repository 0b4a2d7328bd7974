"""The embedded server's HTTP layer: keep-alive connections, bodies read in full, HEAD lengths,
``Expect: 100-continue`` uploads, dropped clients, and moto's dispatch kept for every service."""

from __future__ import annotations

import http.client
import json
import socket
import uuid
from typing import Any

import boto3
import pytest

from sandbox_ledger import local
from sandbox_ledger.local.adjustments import dispatch

SIGNED = (
    "AWS4-HMAC-SHA256 Credential=AKID/20261201/us-east-1/{}/aws4_request, "
    "SignedHeaders=host, Signature=x"
)


def _host_port(endpoint: str) -> tuple[str, int]:
    host, port = endpoint.removeprefix("http://").split(":")
    return host, int(port)


def _list_tables(
    connection: http.client.HTTPConnection, **headers: str
) -> http.client.HTTPResponse:
    connection.request(
        "POST",
        "/",
        body="{}",
        headers={
            "X-Amz-Target": "DynamoDB_20120810.ListTables",
            "Content-Type": "application/x-amz-json-1.0",
            "Authorization": SIGNED.format("dynamodb"),
            **headers,
        },
    )
    return connection.getresponse()


def test_one_connection_serves_many_requests(moto_endpoint: str) -> None:
    connection = http.client.HTTPConnection(*_host_port(moto_endpoint), timeout=10)
    connection.connect()
    sock = connection.sock
    for _ in range(5):
        response = _list_tables(connection)
        assert response.status == 200
        assert response.getheader("Connection") != "close"
        assert "TableNames" in json.loads(response.read())
        assert connection.sock is sock  # the same TCP connection every time
    connection.close()


def test_a_client_asking_to_close_gets_its_connection_closed(moto_endpoint: str) -> None:
    connection = http.client.HTTPConnection(*_host_port(moto_endpoint), timeout=10)
    response = _list_tables(connection, Connection="close")
    assert response.status == 200
    response.read()
    assert response.will_close


def test_a_client_that_drops_mid_body_does_not_wedge_the_server(moto_endpoint: str) -> None:
    with socket.create_connection(_host_port(moto_endpoint), timeout=10) as sock:
        sock.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
            b'X-Amz-Target: DynamoDB_20120810.ListTables\r\n\r\n{"Lim'
        )
    connection = http.client.HTTPConnection(*_host_port(moto_endpoint), timeout=10)
    assert _list_tables(connection).status == 200


def test_s3_uploads_heads_and_downloads_through_the_same_server(moto_endpoint: str) -> None:
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    body = bytes(range(256)) * 8192  # 2 MiB: botocore sends Expect: 100-continue
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    head = s3.head_object(Bucket=bucket, Key="k")
    assert head["ContentLength"] == len(body)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == body
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 1


def test_other_services_still_reach_their_own_backend(moto_endpoint: str) -> None:
    dynamodb = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    events = boto3.client("events", endpoint_url=moto_endpoint, region_name="us-east-1")
    dynamodb.list_tables()  # remembered: the DynamoDB app
    name = f"bus-{uuid.uuid4().hex[:12]}"
    events.create_event_bus(Name=name)
    assert name in [b["Name"] for b in events.list_event_buses()["EventBuses"]]
    dynamodb.list_tables()


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (
            {
                "PATH_INFO": "/",
                "HTTP_X_AMZ_TARGET": "DynamoDB_20120810.GetItem",
                "HTTP_AUTHORIZATION": SIGNED.format("dynamodb"),
            },
            ("DynamoDB_20120810", "dynamodb"),
        ),
        (
            {
                "PATH_INFO": "/",
                "HTTP_X_AMZ_TARGET": "DynamoDBStreams_20120810.GetRecords",
                "HTTP_AUTHORIZATION": SIGNED.format("dynamodb"),
            },
            ("DynamoDBStreams_20120810", "dynamodb"),
        ),
        ({"PATH_INFO": "/", "HTTP_X_AMZ_TARGET": "AWSEvents.PutEvents"}, None),
        ({"PATH_INFO": "/moto-api/", "HTTP_X_AMZ_TARGET": "DynamoDB_20120810.GetItem"}, None),
        ({"PATH_INFO": "/", "HTTP_X_AMZ_TARGET": "DynamoDB_20120810.GetItem"}, None),
    ],
)
def test_only_signed_dynamodb_requests_skip_moto_dispatch(
    environ: dict[str, Any], expected: tuple[str, str] | None
) -> None:
    assert dispatch._dynamodb_request(environ) == expected


def _raw_exchange(endpoint: str, payload: bytes) -> bytes:
    """Send ``payload`` on a fresh connection; everything the server sends until it closes."""
    with socket.create_connection(_host_port(endpoint), timeout=10) as sock:
        sock.sendall(payload)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


LIST_TABLES = (
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n"
    b"X-Amz-Target: DynamoDB_20120810.ListTables\r\n"
    b"Authorization: " + SIGNED.format("dynamodb").encode() + b"\r\n"
)


@pytest.mark.parametrize("length", [b"abc", b"-1", b"12, 12", b"+12", b"\xd9\xa1\xd9\xa2"])
def test_a_length_that_is_not_a_count_is_refused_and_nothing_after_it_runs(
    moto_endpoint: str, length: bytes
) -> None:
    hidden = LIST_TABLES + b"Content-Length: 2\r\n\r\n{}"  # a whole request as the "body"
    received = _raw_exchange(
        moto_endpoint, LIST_TABLES + b"Content-Length: " + length + b"\r\n\r\n" + hidden
    )
    assert received.startswith(b"HTTP/1.1 400"), received[:80]
    assert received.count(b"HTTP/1.1 ") == 1  # the hidden request was not served


def test_a_body_over_the_limit_is_refused_without_reading_it(moto_endpoint: str) -> None:
    too_long = str(local.MAX_REQUEST_BODY + 1).encode()
    received = _raw_exchange(
        moto_endpoint, LIST_TABLES + b"Content-Length: " + too_long + b"\r\n\r\n"
    )
    assert received.startswith(b"HTTP/1.1 413"), received[:80]


def test_a_malformed_chunked_body_is_refused(moto_endpoint: str) -> None:
    received = _raw_exchange(
        moto_endpoint, LIST_TABLES + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
    )
    assert received.startswith(b"HTTP/1.1 400"), received[:80]
    connection = http.client.HTTPConnection(*_host_port(moto_endpoint), timeout=10)
    assert _list_tables(connection).status == 200


def test_an_oddly_signed_first_request_does_not_decide_where_later_ones_go() -> None:
    server = local.LocalDynamoDB()  # its own dispatcher: the first request is this test's
    endpoint = server.start()
    try:
        odd = (
            "AWS4-HMAC-SHA256 SignedHeaders=host, "
            "Credential=AKID/20261201/us-east-1/dynamodb/aws4_request, Signature=x"
        )
        connection = http.client.HTTPConnection(*_host_port(endpoint), timeout=10)
        _list_tables(connection, Authorization=odd).read()  # moto reads it as S3's
        dynamodb = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
        assert "TableNames" in dynamodb.list_tables()
    finally:
        server.stop()


def test_stop_ends_the_connections_it_kept_open() -> None:
    server = local.LocalDynamoDB()
    endpoint = server.start()
    connection = http.client.HTTPConnection(*_host_port(endpoint), timeout=10)
    assert _list_tables(connection).read()
    server.stop()
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        _list_tables(connection).read()


@pytest.mark.parametrize("strict", [False, True])
def test_a_stopping_server_refuses_a_request_without_waiting_for_its_lock(strict: bool) -> None:
    """Once :meth:`LocalDynamoDB.refuse_clients` returned, a client's request is answered
    ``503`` at once, while the server is held (its last save reads the tables request by
    request, each holding it). It waited its turn for the lock first: a fleet's resends,
    each waiting and answered 503 in turn, starved the save, and a SIGTERM of ``local
    --data`` under fifteen clients took over two minutes to exit."""
    server = local.LocalDynamoDB(strict=strict)
    server.start()
    try:
        server.refuse_clients()
        host, port = server.endpoint_url.removeprefix("http://").split(":")
        with server.exclusive():  # the last save, reading
            connection = http.client.HTTPConnection(host, int(port), timeout=10)
            body = json.dumps({})
            connection.request(
                "POST",
                "/",
                body,
                {
                    "X-Amz-Target": "DynamoDB_20120810.ListTables",
                    "Content-Type": "application/x-amz-json-1.0",
                },
            )
            status = connection.getresponse().status
            connection.close()
    finally:
        server.stop()
    assert status == 503
