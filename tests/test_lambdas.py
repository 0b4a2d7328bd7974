"""Both Lambda handlers, invoked with real-shaped events against moto (DynamoDB, EventBridge,
SQS): the ResourceExpired events are read back through a rule and an SQS target."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

from resource_fixtures import FakeContext, record
from sandbox_ledger.ddb.batching import batch_write
from sandbox_ledger.ddb.steps import run_sync
from sandbox_ledger.handlers import expire_stale_resources, on_ttl_expiry
from sandbox_ledger.resources import DETAIL_TYPE, SOURCE, SyncResourceRecordStore
from sandbox_ledger.resources import _items as ri

SCHEDULED_EVENT = {
    "version": "0",
    "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2026-11-30T12:00:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/sweep"],
    "detail": {},
}


HANDLERS = {"expire_stale_resources": expire_stale_resources, "on_ttl_expiry": on_ttl_expiry}


def load_handler(name: str) -> ModuleType:
    """A handler module after a cold start: its dependencies are built afresh from the
    environment on the next invocation (and validated now, as the first invocation would)."""
    module = HANDLERS[name]
    module.dependencies.cache_clear()  # type: ignore[attr-defined]
    module.dependencies()  # type: ignore[attr-defined]
    return module


@pytest.fixture(autouse=True)
def _cold_starts() -> Iterator[None]:
    yield
    for module in HANDLERS.values():
        module.dependencies.cache_clear()  # type: ignore[attr-defined]


class Wiring:
    def __init__(self, endpoint: str, table: str) -> None:
        self.endpoint, self.table = endpoint, table
        self.bus = f"bus-{uuid.uuid4().hex[:8]}"
        self.events = boto3.client("events", endpoint_url=endpoint)
        self.sqs = boto3.client("sqs", endpoint_url=endpoint)
        self.events.create_event_bus(Name=self.bus)
        self.queue_url = self.sqs.create_queue(QueueName=f"q-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.events.put_rule(
            Name="expired",
            EventBusName=self.bus,
            EventPattern=json.dumps({"source": [SOURCE], "detail-type": [DETAIL_TYPE]}),
        )
        self.events.put_targets(
            Rule="expired", EventBusName=self.bus, Targets=[{"Id": "q", "Arn": arn}]
        )
        self.store = SyncResourceRecordStore(table, endpoint_url=endpoint)

    def received(self) -> list[dict[str, Any]]:
        out = []
        while True:
            msgs = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
            batch = msgs.get("Messages", [])
            if not batch:
                return out
            for m in batch:
                out.append(json.loads(m["Body"]))
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])


@pytest.fixture
def wiring(moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch) -> Wiring:
    w = Wiring(moto_endpoint, sync_table)
    monkeypatch.setenv("TABLE_NAME", sync_table)
    monkeypatch.setenv("EVENT_BUS_NAME", w.bus)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "SandboxLedgerTest")
    monkeypatch.delenv("DRY_RUN", raising=False)
    return w


def emf(captured: str) -> list[dict[str, Any]]:
    """The CloudWatch embedded-metric documents a handler printed."""
    out = []
    for line in captured.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            out.append(json.loads(line))
    return out


def test_sweeper_expires_stale_records_and_reports_each(
    wiring: Wiring, capsys: pytest.CaptureFixture[str]
) -> None:
    now = datetime.now(UTC)
    stale = wiring.store.put(record(age=timedelta(minutes=20), now=now)).record
    allocating = wiring.store.put(
        record(age=timedelta(hours=3), phase="allocating", now=now)
    ).record
    fresh = wiring.store.put(record(age=timedelta(minutes=2), now=now)).record
    failed_recent = wiring.store.put(
        record(age=timedelta(days=2), phase="cleanup-failed", now=now)
    ).record
    failed_old = wiring.store.put(
        record(age=timedelta(days=9), phase="allocation-uncertain", now=now)
    ).record
    sweeper = load_handler("expire_stale_resources")
    # Powertools keeps metrics in state shared by every Metrics instance of the process.
    sweeper.metrics.clear_metrics()
    capsys.readouterr()
    summary = sweeper.handler(SCHEDULED_EVENT, FakeContext())
    assert json.loads(json.dumps(summary)) == summary
    assert sorted(summary["expired"]) == sorted([stale.id, allocating.id, failed_old.id])
    assert summary["remaining"] == 0 and summary["complete"] is True
    [metrics] = emf(capsys.readouterr().out)
    assert (metrics["Expired"], metrics["Skipped"], metrics["Failed"]) == ([3.0], [0.0], [0.0])
    assert metrics["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "SandboxLedgerTest"
    assert wiring.store.get(fresh.id) == fresh
    assert wiring.store.get(failed_recent.id) == failed_recent
    assert wiring.store.get(stale.id) is None
    events = wiring.received()
    assert sorted(e["detail"]["record"]["id"] for e in events) == sorted(summary["expired"])
    by_id = {e["detail"]["record"]["id"]: e for e in events}
    assert by_id[stale.id]["detail"]["record"] == stale.wire()
    assert by_id[stale.id]["detail-type"] == DETAIL_TYPE
    assert "stale" in by_id[stale.id]["detail"]["reason"]
    assert "retention" in by_id[failed_old.id]["detail"]["reason"]
    # A second run finds nothing more to do.
    again = sweeper.handler(SCHEDULED_EVENT, FakeContext())
    assert again["expired"] == [] and wiring.received() == []


def test_dry_run_reports_and_changes_nothing(
    wiring: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRY_RUN", "true")
    stale = wiring.store.put(record(age=timedelta(hours=1)))
    sweeper = load_handler("expire_stale_resources")
    summary = sweeper.handler(SCHEDULED_EVENT, FakeContext())
    assert summary["dryRun"] is True and summary["expired"] == [stale.record.id]
    assert wiring.store.get_versioned(stale.record.id) == stale
    assert wiring.received() == []


def test_owner_touch_between_read_and_delete_wins(wiring: Wiring) -> None:
    victim = wiring.store.put(record(age=timedelta(hours=1))).record
    other = wiring.store.put(record(age=timedelta(hours=1))).record
    sweeper = load_handler("expire_stale_resources")
    owner = SyncResourceRecordStore(wiring.table, endpoint_url=wiring.endpoint)
    touched: list[str] = []

    def owner_heartbeat_first(params: dict[str, Any], **_: Any) -> None:
        if ":reason" in params.get("ExpressionAttributeValues", {}) and not touched:
            record_id = params["Key"]["PK"]["S"][2:]
            if record_id == victim.id:
                owner.touch(record_id)
                touched.append(record_id)

    sweeper.dependencies().store.client().meta.events.register(
        "before-parameter-build.dynamodb.UpdateItem", owner_heartbeat_first
    )
    summary = sweeper.handler(SCHEDULED_EVENT, FakeContext())
    assert touched == [victim.id]
    assert summary["skipped"] == [victim.id] and summary["expired"] == [other.id]
    kept = wiring.store.get(victim.id)
    assert kept is not None and kept.updated_at_ms > victim.updated_at_ms
    assert [e["detail"]["record"]["id"] for e in wiring.received()] == [other.id]


def test_cold_start_names_the_missing_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TABLE_NAME", raising=False)
    with pytest.raises(ValueError, match="TABLE_NAME"):
        load_handler("expire_stale_resources")
    with pytest.raises(ValueError, match="TABLE_NAME"):
        load_handler("on_ttl_expiry")
    monkeypatch.setenv("TABLE_NAME", "t")
    with pytest.raises(ValueError, match="TABLE_NAME"):
        load_handler("expire_stale_resources")
    monkeypatch.setenv("TABLE_NAME", "ledger")
    monkeypatch.setenv("STALE_AFTER_SECONDS", "-1")
    with pytest.raises(ValueError, match="STALE_AFTER_SECONDS"):
        load_handler("expire_stale_resources")


def test_each_handler_validates_exactly_the_settings_it_uses() -> None:
    """build(environ) reads the mapping it is given, not the process environment."""
    sweeper_only = {"STALE_AFTER_SECONDS": "-1", "SHARD_COUNT": "x", "DRY_RUN": "maybe"}
    reporter = on_ttl_expiry.build({"TABLE_NAME": "ledger", **sweeper_only})
    assert reporter.settings.table_name == "ledger"
    assert reporter.publisher.event_bus_name == "default"
    for name in sweeper_only:
        with pytest.raises(ValueError, match=name):
            expire_stale_resources.build({"TABLE_NAME": "ledger", name: sweeper_only[name]})
    built = expire_stale_resources.build(
        {"TABLE_NAME": "ledger", "EVENT_BUS_NAME": "bus", "SHARD_COUNT": "8"}
    )
    assert (built.store.table_name, built.store.shard_count) == ("ledger", 8)
    assert built.settings.event_bus_name == "bus" and built.settings.explicit == {"EVENT_BUS_NAME"}


def test_dependencies_are_built_once_per_cold_start(wiring: Wiring) -> None:
    sweeper = load_handler("expire_stale_resources")
    first = sweeper.dependencies()
    sweeper.handler(SCHEDULED_EVENT, FakeContext())
    sweeper.handler(SCHEDULED_EVENT, FakeContext())
    assert sweeper.dependencies() is first


@pytest.mark.slow
def test_sweep_of_five_thousand_records_over_several_invocations(wiring: Wiring) -> None:
    now = datetime.now(UTC)
    records = [
        record(age=timedelta(hours=2), now=now, phase="ready" if i % 4 else "closing")
        for i in range(5000)
    ]
    requests = [
        {
            "PutRequest": {
                "Item": {
                    **ri.record_key(r.id),
                    "rev": {"N": "1"},
                    **ri.write_values(r, horizon_seconds=30 * 86400, shard_count=4),
                }
            }
        }
        for r in records
    ]
    run_sync(wiring.store.client(), batch_write(wiring.table, requests))
    sweeper = load_handler("expire_stale_resources")
    runs, events = [], []
    for _ in range(60):
        # 10 s of safety margin + 4 s of work per invocation.
        summary = sweeper.handler(SCHEDULED_EVENT, FakeContext(budget_ms=14_000))
        runs.append(summary)
        # Drain the queue as a reclaimer would (moto's SQS slows down as a queue grows).
        events += wiring.received()
        if summary["complete"]:
            break
    assert len(runs) >= 3, "the deadline should have split the work"
    assert all(not r["complete"] for r in runs[:-1]) and runs[-1]["complete"]
    expired = [i for r in runs for i in r["expired"]]
    assert len(expired) == 5000 and set(expired) == {r.id for r in records}
    assert wiring.store.list(limit=10).records == []
    assert len(events) == 5000
    assert {e["detail"]["record"]["id"] for e in events} == {r.id for r in records}


def _stream_record(
    item: dict[str, Any], *, ttl: bool, seq: str, table: str = "t"
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "eventID": seq,
        "eventName": "REMOVE",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1764504000,
            "Keys": {"PK": item["PK"], "SK": item["SK"]},
            "OldImage": item,
            "SequenceNumber": seq,
            "SizeBytes": 512,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
        "eventSourceARN": f"arn:aws:dynamodb:us-east-1:123456789012:table/{table}/stream/2026",
    }
    if ttl:
        out["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    return out


def test_ttl_stream_handler(wiring: Wiring) -> None:
    r = record(age=timedelta(days=40))
    item = {
        **ri.record_key(r.id),
        "rev": {"N": "4"},
        **ri.write_values(r, horizon_seconds=30 * 86400, shard_count=4),
    }
    broken = {**item, "rec": {"S": "{not json"}}
    summary = {"PK": {"S": "S#1#n#s"}, "SK": {"S": "#SUMMARY"}, "itemType": {"S": "session"}}
    own = wiring.table
    event = {
        "Records": [
            _stream_record(item, ttl=True, seq="100", table=own),
            _stream_record(item, ttl=False, seq="101", table=own),  # an ordinary delete
            _stream_record(summary, ttl=True, seq="102", table=own),  # not a resource record
            _stream_record(broken, ttl=True, seq="103", table=own),  # undecodable: failed
            # Another table's stream wired to this function by mistake: never published.
            _stream_record(item, ttl=True, seq="104", table=f"{own}-other"),
            _stream_record(item, ttl=True, seq="105", table=own[:-1]),
        ]
    }
    ttl = load_handler("on_ttl_expiry")
    response = ttl.handler(event, FakeContext())
    assert response == {"batchItemFailures": [{"itemIdentifier": "103"}]}
    [published] = wiring.received()
    assert published["detail"]["record"] == r.wire()
    assert published["detail"]["trigger"] == "ttl"
