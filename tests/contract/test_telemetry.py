"""OpenTelemetry spans and metrics of every store (sandbox_ledger.telemetry), read back with
the SDK's in-memory exporter and reader: names and attributes per store, errors, retries as
events, the SDK instrumentations' spans nested under the library's, and the context carried
across BlockingAdapter's thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from dynamodb.faults import CancelTransactions, error_response
from sandbox_ledger import (
    EnvironmentRecord,
    InvalidInputError,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    MemoryAdapter,
)
from sandbox_ledger.blocking import BlockingAdapter
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter

_LOCK = threading.Lock()
_INSTALLED: dict[str, Any] = {}


def _installed() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    """The SDK, installed once per process (OpenTelemetry allows one global provider)."""
    with _LOCK:
        if not _INSTALLED:
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            reader = InMemoryMetricReader()
            metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
            _INSTALLED.update(exporter=exporter, reader=reader)
        return _INSTALLED["exporter"], _INSTALLED["reader"]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter, _ = _installed()
    exporter.clear()
    yield exporter
    exporter.clear()


def entry(sid: str, event: str = LedgerEvent.SandboxCreated, ts: int = 1) -> LedgerEntry:
    step = -1 if event.startswith("sandbox.") else 0
    return LedgerEntry(ts=ts, name="build", sandbox_id=sid, step_index=step, event=event)


def ours(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [
        s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "sandbox_ledger"
    ]


def by_operation(exporter: InMemorySpanExporter, operation: str) -> list[ReadableSpan]:
    return [s for s in ours(exporter) if s.attributes.get("db.operation.name") == operation]


@contextlib.asynccontextmanager
async def store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if kind == "memory":
        adapter: Any = MemoryAdapter()
    elif kind == "sqlite":
        from sandbox_ledger.sqlite import SQLiteAdapter

        adapter = SQLiteAdapter(tmp_path / "ledger.db")
    elif kind == "postgresql":
        from sandbox_ledger.postgres import PostgresAdapter

        dsn = request.getfixturevalue("postgres_dsn")
        adapter = PostgresAdapter(dsn, schema=request.getfixturevalue("pg_schema"))
    else:
        adapter = DynamoDBAdapter(
            request.getfixturevalue("sync_table"),
            endpoint_url=request.getfixturevalue("moto_endpoint"),
        )
    await adapter.connect()
    try:
        yield adapter
    finally:
        await adapter.close()


EXPECTED = {
    "memory": (None, None),
    "sqlite": ("sqlite", "ledger_events"),
    "postgresql": ("postgresql", "ledger_events"),
    "dynamodb": ("aws.dynamodb", None),  # the table: the test's own
}


@pytest.mark.parametrize("kind", list(EXPECTED))
async def test_each_operation_is_a_client_span_with_the_stores_attributes(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, spans: InMemorySpanExporter
) -> None:
    async with store(kind, tmp_path, request) as adapter:
        spans.clear()
        await adapter.append(entry("sb-1"))
        await adapter.append(entry("sb-1", LedgerEvent.ExecStarted, 2))
        assert len(await adapter.read_all("build", "sb-1")) == 2
        await adapter.list_all_sandbox_details(ListSandboxOptions(limit=5))
        await adapter.save_environment(
            EnvironmentRecord(name="env", image="img", built_at=1, sandbox_id="sb-1")
        )
    system, collection = EXPECTED[kind]
    if kind == "dynamodb":
        collection = adapter.table_name
    appends = by_operation(spans, "append")
    assert len(appends) == 2
    first = appends[0]
    assert first.kind == trace.SpanKind.CLIENT
    assert first.name == (f"append {collection}" if collection else "append")
    attributes = dict(first.attributes or {})
    assert attributes.get("db.system.name") == system
    assert attributes.get("db.collection.name") == collection
    assert attributes["sandbox.name"] == "build" and attributes["sandbox.id"] == "sb-1"
    assert attributes["sandbox.event"] == "sandbox.created"
    assert appends[1].attributes["sandbox.event"] == "exec.started"
    if kind == "postgresql":
        assert attributes["db.namespace"] == adapter.schema
    elif kind == "sqlite":
        assert attributes["db.namespace"] == str(tmp_path / "ledger.db")
    else:
        assert "db.namespace" not in attributes
    (read,) = by_operation(spans, "read_all")
    assert read.attributes["sandbox.id"] == "sb-1" and "sandbox.event" not in read.attributes
    assert by_operation(spans, "list_all_sandbox_details")
    (saved,) = by_operation(spans, "save_environment")
    assert saved.attributes["sandbox.name"] == "env"
    assert all(s.status.status_code == StatusCode.UNSET for s in ours(spans))


async def test_an_error_is_recorded_with_its_type_and_the_duration_metric_names_it(
    spans: InMemorySpanExporter,
) -> None:
    _, reader = _installed()
    adapter = MemoryAdapter()
    with pytest.raises(InvalidInputError):
        await adapter.read_all("", "sb")
    (failed,) = by_operation(spans, "read_all")
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.attributes["error.type"] == "sandbox_ledger.errors.InvalidInputError"
    assert [event.name for event in failed.events] == ["exception"]
    points = _points(reader, "db.client.operation.duration")
    assert any(
        p.attributes.get("db.operation.name") == "read_all"
        and p.attributes.get("error.type") == "sandbox_ledger.errors.InvalidInputError"
        and p.count >= 1
        for p in points
    )


def _points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    return [
        point
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def test_the_sync_twin_notes_throttled_retries_and_cancelled_transactions_as_events(
    moto_endpoint: str, sync_table: str, spans: InMemorySpanExporter, fast_sdk_backoff: None
) -> None:
    """botocore's own retry of a throttled request and the adapter's retry of a transaction
    cancelled by a conflict: each a `retry` event on the operation's span, with its reason
    and code, and counted."""
    _, reader = _installed()
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    client = adapter.client()
    sent: list[str] = []

    def throttle_first(request: Any, **_: Any) -> Any:
        if b"GetItem" not in request.headers.get("X-Amz-Target", b"") or sent:
            return None
        sent.append("throttled")
        return error_response("ThrottlingException", aio=False)

    client.meta.events.register_first("before-send.dynamodb", throttle_first)
    adapter.get_sandbox_details("build", "nothing")  # the first answer is an injected throttle
    client.meta.events.unregister("before-send.dynamodb", throttle_first)
    assert sent == ["throttled"]
    (read,) = by_operation(spans, "get_sandbox_details")
    retries = [dict(e.attributes or {}) for e in read.events if e.name == "retry"]
    assert retries and retries[0]["sandbox_ledger.retry.reason"] == "throttle"
    assert retries[0]["code"] == "ThrottlingException" and retries[0]["attempt"] == 1
    spans.clear()
    CancelTransactions("TransactionConflict", times=1, aio=False).attach(client)
    adapter.append(entry("sb-9"))
    (append,) = by_operation(spans, "append")
    [conflict] = [dict(e.attributes or {}) for e in append.events if e.name == "retry"]
    assert conflict["sandbox_ledger.retry.reason"] == "conflict"
    assert conflict["sandbox_ledger.request"] == "TransactWriteItems"
    counted = {
        p.attributes["sandbox_ledger.retry.reason"]: p.value
        for p in _points(reader, "sandbox_ledger.client.retries")
    }
    assert counted.get("throttle", 0) >= 1 and counted.get("conflict", 0) >= 1
    adapter.close()


async def test_the_sdks_requests_are_child_spans_with_the_botocore_instrumentation(
    moto_endpoint: str, sync_table: str, spans: InMemorySpanExporter
) -> None:
    from opentelemetry.instrumentation.botocore import (
        AiobotocoreInstrumentor,
        BotocoreInstrumentor,
    )

    instrumentors = [BotocoreInstrumentor(), AiobotocoreInstrumentor()]
    for instrumentor in instrumentors:
        instrumentor.instrument()
    try:
        sync = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
        sync.append(entry("sb-2"))
        sync.close()
        async with DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as aio:
            await aio.read_all("build", "sb-2")
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
    everything = spans.get_finished_spans()
    for operation in ("append", "read_all"):
        (parent,) = by_operation(spans, operation)
        children = [
            s
            for s in everything
            if s.parent is not None and s.parent.span_id == parent.context.span_id
        ]
        assert children, operation
        scopes = {s.instrumentation_scope.name for s in children}
        assert scopes == {"opentelemetry.instrumentation.botocore.dynamodb"}, scopes
        assert {s.context.trace_id for s in children} == {parent.context.trace_id}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_the_sql_stores_statements_are_child_spans_with_their_instrumentation(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, spans: InMemorySpanExporter
) -> None:
    """sqlite3's calls run in aiosqlite's thread: the store carries the caller's context
    there, so they too are children of the operation's span."""
    if kind == "sqlite":
        from opentelemetry.instrumentation.sqlite3 import SQLite3Instrumentor

        instrumentor: Any = SQLite3Instrumentor()
    else:
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

        instrumentor = PsycopgInstrumentor()
    instrumentor.instrument()
    try:
        async with store(kind, tmp_path, request) as adapter:
            spans.clear()
            await adapter.append(entry("sb-3"))
    finally:
        instrumentor.uninstrument()
    (parent,) = by_operation(spans, "append")
    children = [
        s
        for s in spans.get_finished_spans()
        if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]
    assert children and all(s.instrumentation_scope.name != "sandbox_ledger" for s in children)


def test_blocking_adapter_spans_are_children_of_the_callers_span(
    spans: InMemorySpanExporter,
) -> None:
    tracer = trace.get_tracer("the-caller")
    with BlockingAdapter(MemoryAdapter()) as ledger, tracer.start_as_current_span("work") as work:
        ledger.append(entry("sb-4"))
    (append,) = by_operation(spans, "append")
    assert append.parent is not None and append.parent.span_id == work.get_span_context().span_id


def test_without_an_sdk_the_api_is_a_no_op_and_nothing_is_recorded(tmp_path: Path) -> None:
    """A process that installs no SDK: the operations run as before and no span is recorded
    (the API's default provider), checked in a fresh interpreter."""
    import subprocess
    import sys

    code = (
        "import asyncio\n"
        "from opentelemetry import trace\n"
        "from sandbox_ledger import MemoryAdapter, LedgerEntry\n"
        "m = MemoryAdapter()\n"
        "asyncio.run(m.append(LedgerEntry(ts=1, name='n', sandbox_id='s', step_index=-1,"
        " event='sandbox.created')))\n"
        "span = trace.get_current_span()\n"
        "print(type(trace.get_tracer_provider()).__name__, span.is_recording())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ProxyTracerProvider", "False"]


def test_a_retry_reason_must_be_known() -> None:
    from sandbox_ledger.telemetry import retried

    with pytest.raises(ValueError, match="reason"):
        retried("because", attempt=1)


async def test_a_concurrent_operation_is_its_own_span(spans: InMemorySpanExporter) -> None:
    adapter = MemoryAdapter()
    await asyncio.gather(*(adapter.append(entry(f"sb-{i}")) for i in range(5)))
    appends = by_operation(spans, "append")
    assert sorted(s.attributes["sandbox.id"] for s in appends) == [f"sb-{i}" for i in range(5)]
    assert all(s.parent is None for s in appends)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql", "dynamodb"])
async def test_trace_ids_are_recorded_into_appended_entries_when_asked(
    kind: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Off by default; with the store's ``record_trace_ids`` (or the environment variable)
    each appended entry carries its append span's ids as ``traceId`` and ``spanId``, kept by
    the store as every extra field is (exported and imported so: test_entry_extras.py); an
    entry naming a trace id already keeps its own."""
    async with store(kind, tmp_path, request) as adapter:
        await adapter.append(entry("plain"))
        [plain] = await adapter.read_all("build", "plain")
        assert "traceId" not in (plain.model_extra or {})
        monkeypatch.setenv("SANDBOX_LEDGER_RECORD_TRACE_IDS", "1")
        spans.clear()
        await adapter.append(entry("traced"))
        own = LedgerEntry.model_validate({**entry("own").wire(), "traceId": "mine"})
        await adapter.append(own)
        adapter.record_trace_ids = False  # the store's own setting wins
        await adapter.append(entry("off"))
        [traced] = await adapter.read_all("build", "traced")
        [kept] = await adapter.read_all("build", "own")
        [off] = await adapter.read_all("build", "off")
    span = by_operation(spans, "append")[0]
    extra = traced.model_extra or {}
    assert extra["traceId"] == format(span.context.trace_id, "032x")
    assert extra["spanId"] == format(span.context.span_id, "016x")
    assert (kept.model_extra or {}) == {"traceId": "mine"}
    assert "traceId" not in (off.model_extra or {})


def test_a_sweep_is_one_span_with_its_counts_an_event_per_expiry_and_the_stores_calls_under_it(
    moto_endpoint: str, sync_table: str, moto_server: Any, spans: InMemorySpanExporter
) -> None:
    """The sweeper's run (the function its Lambda and `local --deployment` call): one span
    `sweep` whose attributes count what it did, an `expired` event per record expired, the
    resource store's operations its children."""
    from datetime import UTC, datetime, timedelta

    from resources.resource_fixtures import Collector, caught_up, record
    from sandbox_ledger.resources import ExpiryPolicy, SyncResourceRecordStore, sweep

    now = datetime.now(UTC)
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint, clock=lambda: now)
    dead = store.put(record(now=now, age=timedelta(hours=2))).record
    caught_up(moto_server, sync_table)
    policy = ExpiryPolicy(stale_after=timedelta(minutes=15))
    publisher = Collector()
    spans.clear()
    sweep(store, publisher, now=now, policy=policy)  # observes it
    sweep(store, publisher, now=now + timedelta(minutes=16), policy=policy)  # expires it
    first, second = [s for s in ours(spans) if s.name == "sweep"]
    assert first.attributes["sandbox_ledger.sweep.observed"] == 1
    assert first.attributes["sandbox_ledger.sweep.expired"] == 0 and not first.events
    assert second.attributes["sandbox_ledger.sweep.expired"] == 1
    assert second.attributes["sandbox_ledger.sweep.complete"] is True
    assert [(e.name, dict(e.attributes or {})) for e in second.events] == [
        ("expired", {"resource.id": dead.id})
    ]
    under = [
        s.attributes["db.operation.name"]
        for s in ours(spans)
        if s.parent is not None and s.parent.span_id == second.context.span_id
    ]
    assert {"get_many", "claim", "delete_claimed"} <= set(under), under
    assert [e.record.id for e in publisher.published] == [dead.id]


def test_a_batch_of_ttl_removals_is_one_span_with_an_event_per_expiry_reported(
    spans: InMemorySpanExporter,
) -> None:
    """The TTL reporter's batch (its Lambda's and `local --deployment`'s): one span with the
    counts and an `expired` event per expiry published."""
    from resources.resource_fixtures import Collector
    from resources.test_ttl_stream_records import TABLE, removal
    from sandbox_ledger.resources.unreported import report_ttl_removals

    records = [removal("1"), removal("2")]
    batch = report_ttl_removals(records, table_name=TABLE, publisher=Collector(), store=None)  # type: ignore[arg-type]
    ids = batch.published
    assert len(ids) == 2
    (span,) = [s for s in ours(spans) if s.name == "report ttl removals"]
    assert span.attributes["sandbox_ledger.ttl.reported"] == 2
    assert span.attributes["sandbox_ledger.ttl.failed"] == 0
    assert sorted(dict(e.attributes or {})["resource.id"] for e in span.events) == sorted(ids)


async def test_each_poll_of_follow_and_changes_is_a_span(spans: InMemorySpanExporter) -> None:
    adapter = MemoryAdapter()
    await adapter.append(entry("sb-5"))
    await adapter.append(entry("sb-5", LedgerEvent.SandboxClosed, 2))
    followed = [f async for f in adapter.follow("build", "sb-5")]
    assert len(followed) == 2
    polls = by_operation(spans, "follow")
    assert polls and all(p.attributes["sandbox.id"] == "sb-5" for p in polls)
    feed = adapter.changes()
    first = await anext(feed)
    await feed.aclose()
    assert first.sandbox_id == "sb-5"
    assert by_operation(spans, "changes")


def test_the_sync_twins_follow_and_changes_polls_are_spans(
    moto_endpoint: str, sync_table: str, spans: InMemorySpanExporter
) -> None:
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    adapter.append(entry("sb-6"))
    adapter.append(entry("sb-6", LedgerEvent.SandboxClosed, 2))
    assert len(list(adapter.follow("build", "sb-6"))) == 2
    (poll, *_) = by_operation(spans, "follow")
    assert poll.name == f"follow {sync_table}" and poll.attributes["sandbox.name"] == "build"
    feed = adapter.changes()
    assert next(feed).sandbox_id == "sb-6"
    feed.close()
    assert by_operation(spans, "changes")[0].attributes["db.system.name"] == "aws.dynamodb"
    adapter.close()


@pytest.mark.parametrize("twin", ["sync", "async"])
async def test_consumed_units_are_counted_per_operation_when_asked(
    moto_endpoint: str,
    sync_table: str,
    spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    twin: str,
) -> None:
    """With SANDBOX_LEDGER_CONSUMED_CAPACITY=1, the units DynamoDB reports for an operation's
    requests are its span's attributes and the per-operation counters; off by default (no
    attribute). The strict server reports what DynamoDB would: an append is a transaction
    (two units per item written, the entry and its sequence mark at least)."""
    _, reader = _installed()

    async def append_and_read(sid: str) -> None:
        if twin == "sync":
            adapter: Any = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
            await asyncio.to_thread(adapter.append, entry(sid))
            await asyncio.to_thread(adapter.list_sandbox_details, "build")
            adapter.close()
        else:
            async with DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as aio:
                await aio.append(entry(sid))
                await aio.list_sandbox_details("build")

    await append_and_read("sb-7")
    assert all(
        "sandbox_ledger.dynamodb.consumed.write_units" not in s.attributes for s in ours(spans)
    )
    monkeypatch.setenv("SANDBOX_LEDGER_CONSUMED_CAPACITY", "1")
    spans.clear()
    await append_and_read("sb-8")
    (append,) = by_operation(spans, "append")
    assert append.attributes["sandbox_ledger.dynamodb.consumed.write_units"] >= 4
    # A new client's first append to a session reads its last mark first: a Query.
    assert append.attributes["sandbox_ledger.dynamodb.consumed.read_units"] > 0
    (listed,) = by_operation(spans, "list_sandbox_details")
    assert listed.attributes["sandbox_ledger.dynamodb.consumed.read_units"] > 0
    counted = [
        p
        for p in _points(reader, "sandbox_ledger.dynamodb.consumed.write_units")
        if p.attributes.get("db.operation.name") == "append"
        and p.attributes.get("db.collection.name") == sync_table
    ]
    assert counted and counted[0].value >= 4
