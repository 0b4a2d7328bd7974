"""Red team of the OpenTelemetry work (issue 47): what the library's telemetry must not
change, found changed, and its spans where they were missing."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sandbox_ledger import InvalidInputError, LedgerEntry, MemoryAdapter

from .test_telemetry import entry, spans

__all__ = ["spans"]  # the fixture: the one SDK of the process, as test_telemetry.py installs it


async def _refusal(adapter: Any, given: Any) -> BaseException:
    with pytest.raises(BaseException) as caught:
        await adapter.append(given)
    return caught.value


@pytest.mark.parametrize("record", [False, True], ids=["plain", "stamping"])
async def test_stamping_trace_ids_leaves_the_stores_refusals_as_they_are(
    record: bool, spans: InMemorySpanExporter
) -> None:
    """With an SDK and record_trace_ids, an append the store refuses is refused as without
    them: not a LedgerEntry (a dict) and an entry that never was validated (built by
    model_construct) are the store's InvalidInputError, not an AttributeError or pydantic's
    ValidationError out of the re-validation of the stamped copy; a valid entry is stamped
    and otherwise unchanged."""
    adapter = MemoryAdapter()
    adapter.record_trace_ids = record
    wire = entry("as-dict").wire()
    refused = await _refusal(adapter, wire)
    assert isinstance(refused, InvalidInputError), repr(refused)
    assert "expected a LedgerEntry, got dict" in str(refused)
    built = LedgerEntry.model_construct(
        ts=1, name="", sandbox_id="built", step_index=-1, event="sandbox.created"
    )
    refused = await _refusal(adapter, built)
    assert isinstance(refused, InvalidInputError), repr(refused)
    assert "name: must be a non-empty string" in str(refused)
    given = LedgerEntry.model_validate({**entry("ok").wire(), "payload": {"a": None}, "x": 1})
    await adapter.append(given)
    [stored] = await adapter.read_all("build", "ok")
    extra = dict(stored.model_extra or {})
    assert bool(extra.pop("traceId", None)) is record and bool(extra.pop("spanId", None)) is record
    assert extra == {"x": 1} and stored.payload == {"a": None}
    assert "traceId" not in (given.model_extra or {})  # the caller's entry is not touched


def test_a_resource_stores_pages_are_spans_on_the_sync_twin_and_the_async_store(
    moto_endpoint: str, sync_table: str, moto_server: Any, spans: InMemorySpanExporter
) -> None:
    """`scan` and the sync twin's `candidates`, generators listed in RESOURCE_OPERATIONS,
    were skipped by `instrumented` (no span, their requests straight under the caller's:
    the sweep's candidate queries), while the async `candidates` had its span: each page
    read is now a span of the operation, ended before the page is handed out."""
    import asyncio
    from datetime import UTC, datetime, timedelta

    from opentelemetry import trace

    from resources.resource_fixtures import caught_up, record
    from sandbox_ledger.resources import ResourceRecordStore, SyncResourceRecordStore

    now = datetime.now(UTC)
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint, clock=lambda: now)
    put = store.put(record(now=now, age=timedelta(hours=2))).record
    caught_up(moto_server, sync_table)
    spans.clear()
    current: list[Any] = []
    pages = []
    for ids in store.candidates("ready", before=now - timedelta(minutes=1)):
        current.append(trace.get_current_span())
        pages.append(ids)
    assert [put.id] in pages
    found = [f for page in store.scan() for f in page]
    assert [getattr(getattr(f, "record", None), "id", None) for f in found] == [put.id]

    async def scanned() -> int:
        async with ResourceRecordStore(sync_table, endpoint_url=moto_endpoint) as astore:
            return sum([len(page) async for page in astore.scan()])

    assert asyncio.run(scanned()) == 1
    names = [
        s.name
        for s in spans.get_finished_spans()
        if s.instrumentation_scope.name == "sandbox_ledger"
    ]
    assert f"candidates {sync_table}" in names, names
    assert names.count(f"scan {sync_table}") >= 2, names  # the sync twin's and the store's
    assert all(not span.is_recording() for span in current)  # no span open under the consumer


def test_without_an_sdk_a_page_method_is_the_generator_it_makes() -> None:
    """No SDK (a fresh interpreter): `scan` and `candidates` give the method's own generator,
    made at the call (a bad argument raises there), as before they were instrumented."""
    import subprocess
    import sys

    code = (
        "from sandbox_ledger.resources import ResourceRecordStore, SyncResourceRecordStore\n"
        "where = {'endpoint_url': 'http://127.0.0.1:9', 'region_name': 'us-east-1'}\n"
        "S, A = SyncResourceRecordStore, ResourceRecordStore\n"
        "def own_code(method):\n"
        "    return getattr(method, '__wrapped__', method).__code__\n"
        "s, a = S('records', **where), A('records', **where)\n"
        "own = [\n"
        "    s.scan().gi_code is own_code(S.scan),\n"
        "    s.candidates('ready').gi_code is own_code(S.candidates),\n"
        "    a.scan().ag_code is own_code(A.scan),\n"
        "]\n"
        "try:\n"
        "    s.scan(bogus=1)\n"
        "except TypeError:\n"
        "    own.append(True)\n"
        "print(own)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True, True, True, True]"


def test_record_trace_ids_set_on_a_blocking_adapter_is_its_stores(
    spans: InMemorySpanExporter,
) -> None:
    """`record_trace_ids = True` on a BlockingAdapter (a store of the sync contract, as
    docs/observability.md counts it) turns the recording on: on ba1d79d it was an attribute
    of the wrapper that no append read, silently nothing."""
    from sandbox_ledger.blocking import BlockingAdapter

    inner = MemoryAdapter()
    with BlockingAdapter(inner) as blocking:
        assert blocking.record_trace_ids is None  # as the environment says
        blocking.record_trace_ids = True
        assert inner.record_trace_ids is True and blocking.record_trace_ids is True
        blocking.append(entry("blocking"))
        [stored] = blocking.read_all("build", "blocking")
        blocking.record_trace_ids = False
        blocking.append(entry("off"))
        [off] = blocking.read_all("build", "off")
    [span] = [s for s in spans.get_finished_spans() if s.name == "append"][:1]
    assert (stored.model_extra or {}).get("traceId") == format(span.context.trace_id, "032x")
    assert "traceId" not in (off.model_extra or {})


async def test_an_operation_of_a_store_inside_another_of_it_is_not_counted_again(
    moto_endpoint: str,
    sync_table: str,
    moto_server: Any,
    spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The resource store's `get` reads through its own `get_versioned`: on ba1d79d one call
    was two CLIENT spans and two duration points (`get` and `get_versioned`), and the units
    its GetItem consumed were counted under `get_versioned`, the `get` span saying none.
    Now the call is one operation: `get`, with its units."""
    from datetime import UTC, datetime

    from resources.resource_fixtures import record
    from sandbox_ledger.resources import ResourceRecordStore

    from .test_telemetry import _installed, _points

    _, reader = _installed()
    monkeypatch.setenv("SANDBOX_LEDGER_CONSUMED_CAPACITY", "1")
    async with ResourceRecordStore(sync_table, endpoint_url=moto_endpoint) as store:
        put = (await store.put(record(now=datetime.now(UTC)))).record
        before = _count(_points(reader, "db.client.operation.duration"), "get_versioned")
        spans.clear()
        assert (await store.get(put.id)) is not None
    names = [
        s.attributes.get("db.operation.name")
        for s in spans.get_finished_spans()
        if s.instrumentation_scope.name == "sandbox_ledger"
    ]
    assert names == ["get"], names
    [got] = [
        s for s in spans.get_finished_spans() if s.attributes.get("db.operation.name") == "get"
    ]
    assert got.attributes["sandbox_ledger.dynamodb.consumed.read_units"] > 0
    after = _count(_points(reader, "db.client.operation.duration"), "get_versioned")
    assert after == before  # no duration point of an operation the caller did not call


def _count(points: list[Any], operation: str) -> int:
    return sum(p.count for p in points if p.attributes.get("db.operation.name") == operation)


@pytest.mark.parametrize(
    ("setup", "installed"),
    [
        ("", "False"),
        ("metrics.set_meter_provider(MeterProvider())", "True"),
        ("trace.set_tracer_provider(TracerProvider())", "True"),
        ("sdk_installed(); metrics.set_meter_provider(MeterProvider())", "False True"),
    ],
    ids=["none", "meter-only", "tracer-only", "meter-after-first-call"],
)
def test_sdk_installed_tells_the_apis_proxies_without_a_private_import(
    setup: str, installed: str
) -> None:
    """sdk_installed() without importing opentelemetry.metrics._internal (the project's rule,
    tests/project/test_structure.py, failed on ba1d79d): no provider set is no SDK; a meter
    or a tracer provider set, before or after its first call, is one."""
    import subprocess
    import sys

    code = (
        "from opentelemetry import metrics, trace\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from sandbox_ledger.telemetry import sdk_installed\n"
        "seen = []\n"
        f"{setup.replace('sdk_installed();', 'seen.append(sdk_installed());')}\n"
        "seen.append(sdk_installed())\n"
        "print(*seen)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == installed
