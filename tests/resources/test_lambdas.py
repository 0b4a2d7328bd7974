"""Both Lambda handlers, invoked with real-shaped events against moto (DynamoDB, EventBridge,
SQS): the ResourceExpired events are read back through a rule and an SQS target."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

from resources.resource_fixtures import FakeContext, caught_up, observed_earlier, record
from sandbox_ledger import keys as k
from sandbox_ledger.handlers import expire_stale_resources, on_ttl_expiry
from sandbox_ledger.resources import DETAIL_TYPE, SOURCE, SyncResourceRecordStore
from sandbox_ledger.resources import _items as ri
from sandbox_ledger.sdk.batching import batch_write
from sandbox_ledger.sdk.steps import run_sync

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
    wiring: Wiring,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    moto_server: Any,
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
    caught_up(moto_server, wiring.table)  # about what the handler reports: settled index
    sweeper = load_handler("expire_stale_resources")
    # Powertools keeps metrics in state shared by every Metrics instance of the process.
    sweeper.metrics.clear_metrics()
    # The first run observes the candidates on its own clock and expires nothing.
    first = sweeper.handler(SCHEDULED_EVENT, FakeContext())
    assert sorted(first["observed"]) == sorted([stale.id, allocating.id, failed_old.id])
    assert first["expired"] == [] and wiring.received() == []
    capsys.readouterr()
    # One window (stale_after) later by the sweeper's clock, the unchanged ones expire; the
    # failed one waits for its own window (retain_failed, seven days).
    monkeypatch.setattr(sweeper, "clock", lambda: now + timedelta(minutes=15, seconds=5))
    summary = sweeper.handler(SCHEDULED_EVENT, FakeContext())
    assert json.loads(json.dumps(summary)) == summary
    assert sorted(summary["expired"]) == sorted([stale.id, allocating.id])
    assert summary["remaining"] == 0 and summary["complete"] is True
    [metrics] = emf(capsys.readouterr().out)
    # Skipped: failed_old (within its window) and fresh (now a candidate: observed).
    assert (metrics["Expired"], metrics["Skipped"], metrics["Failed"]) == ([2.0], [2.0], [0.0])
    assert metrics["Observed"] == [1.0] and summary["observed"] == [fresh.id]
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
    week = now + timedelta(days=7, minutes=1)
    monkeypatch.setattr(sweeper, "clock", lambda: week)
    kept = sweeper.handler(SCHEDULED_EVENT, FakeContext())
    # fresh was never touched again: unchanged for a week since observed, it expires too.
    assert sorted(kept["expired"]) == sorted([failed_old.id, fresh.id])
    reasons = {e["detail"]["record"]["id"]: e["detail"]["reason"] for e in wiring.received()}
    assert "retention" in reasons[failed_old.id] and "stale" in reasons[fresh.id]
    assert wiring.store.get(failed_recent.id) == failed_recent
    assert kept["observed"] == [failed_recent.id]
    # A further run finds nothing more to do.
    again = sweeper.handler(SCHEDULED_EVENT, FakeContext())
    assert again["expired"] == [] and wiring.received() == []


def test_dry_run_reports_and_changes_nothing(
    wiring: Wiring, monkeypatch: pytest.MonkeyPatch, moto_server: Any
) -> None:
    monkeypatch.setenv("DRY_RUN", "true")
    new = wiring.store.put(record(age=timedelta(hours=1)))
    stale = wiring.store.put(record(age=timedelta(hours=1)))
    observed_earlier(wiring.store, stale, timedelta(minutes=16))
    observed = wiring.store.get_versioned(stale.record.id)
    caught_up(moto_server, wiring.table)  # about what the handler reports: settled index
    sweeper = load_handler("expire_stale_resources")
    summary = sweeper.handler(SCHEDULED_EVENT, FakeContext())
    assert summary["dryRun"] is True and summary["expired"] == [stale.record.id]
    assert summary["observed"] == [new.record.id]
    assert wiring.store.get_versioned(stale.record.id) == observed
    # Observed as a real run would (its revision and record unchanged): nothing else written.
    now_observed = wiring.store.get_versioned(new.record.id)
    assert now_observed is not None and now_observed.observed_rev == new.revision
    assert (now_observed.record, now_observed.revision) == (new.record, new.revision)
    assert now_observed.expiring is None and now_observed.expires_at == new.expires_at
    assert list(summary["due"]) == [new.record.id]
    assert wiring.received() == []


def test_owner_touch_between_read_and_delete_wins(
    wiring: Wiring, monkeypatch: pytest.MonkeyPatch, moto_server: Any
) -> None:
    victim = wiring.store.put(record(age=timedelta(hours=1))).record
    other = wiring.store.put(record(age=timedelta(hours=1))).record
    caught_up(moto_server, wiring.table)  # about what the handler reports: settled index
    sweeper = load_handler("expire_stale_resources")
    assert len(sweeper.handler(SCHEDULED_EVENT, FakeContext())["observed"]) == 2
    caught_up(moto_server, wiring.table)  # the observations too
    later = datetime.now(UTC) + timedelta(minutes=16)
    monkeypatch.setattr(sweeper, "clock", lambda: later)
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
def test_sweep_of_five_thousand_records_over_several_invocations(
    wiring: Wiring, moto_server: Any
) -> None:
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
                    **ri.write_values(r, expires_at=2**31, shard_count=4),
                    # Observed unchanged by an earlier run, more than a window ago.
                    k.OBSERVED_REV: {"N": "1"},
                    k.OBSERVED_AT: {"N": str(int(now.timestamp() * 1000) - 20 * 60_000)},
                }
            }
        }
        for r in records
    ]
    run_sync(wiring.store.client(), batch_write(wiring.table, requests))
    caught_up(moto_server, wiring.table)  # about splitting the work: every record a candidate
    sweeper = load_handler("expire_stale_resources")
    runs, events = [], []
    for _ in range(60):
        # 10 s of safety margin + 0.8 s of work per invocation, each deadline check spending
        # 2 ms (about 400 records per run, however loaded the machine is: 13 runs). Not more
        # per run: moto's SQS reads every queued message at each send, so the events of one
        # run cost the square of their number (2,000 per run took 9 minutes).
        context = FakeContext(budget_ms=10_800, ms_per_check=2)
        summary = sweeper.handler(SCHEDULED_EVENT, context)
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
        **ri.write_values(r, expires_at=2**31, shard_count=4),
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


def test_one_odd_stream_record_fails_alone(wiring: Wiring) -> None:
    """Issue 41: an ``ApproximateCreationDateTime`` that is no plausible time, or an image
    missing a field, is that record's problem: the good records of its batch are published
    once, and only the undecodable one is a batch item failure (none is retried with it)."""
    own = wiring.table
    records = [_ttl_item() for _ in range(6)]
    batch = [
        _stream_record(item, ttl=True, seq=str(600 + i), table=own)
        for i, (_, item) in enumerate(records)
    ]
    for one, created in zip(batch[1:5], ("soon", 1e300, -1e20, float("nan")), strict=True):
        one["dynamodb"]["ApproximateCreationDateTime"] = created
    _, broken = _ttl_item()
    del broken["rev"]  # a KeyError in decoding
    batch.insert(3, _stream_record(broken, ttl=True, seq="699", table=own))
    ttl = load_handler("on_ttl_expiry")
    assert ttl.handler({"Records": batch}, FakeContext()) == {
        "batchItemFailures": [{"itemIdentifier": "699"}]
    }
    published = [e["detail"]["record"]["id"] for e in wiring.received()]
    assert sorted(published) == sorted(r.id for r, _ in records)


def test_ttl_removals_of_ledger_items_publish_nothing(wiring: Wiring) -> None:
    """Ledger retention expires entries, their parts, checkpoint markers and summaries by
    TTL: the stream handler reports none of them as a ResourceExpired."""
    from sandbox_ledger import LedgerEntry, LedgerEvent
    from sandbox_ledger.dynamodb import _items as it

    def entry(event: str, payload: Any = None) -> LedgerEntry:
        return LedgerEntry(
            ts=1_700_000_000_000,
            name="n",
            sandbox_id="s",
            step_index=-1,
            event=event,
            payload=payload,
        )

    ttl = 1_700_086_400
    checkpoint = entry(LedgerEvent.CheckpointCreated, {"snapshotId": "x"})
    big = it.encode_entry(
        entry(LedgerEvent.ExecComplete, {"b": os.urandom(400_000).hex()}), "o1", ttl
    )
    small = it.encode_entry(entry(LedgerEvent.ExecStarted), "o2", ttl)
    summary = {
        "PK": small.head["PK"],
        "SK": {"S": k.SUMMARY_SK},
        "itemType": {"S": "session"},
        k.TTL_ATTRIBUTE: {"N": str(ttl)},
    }
    items = [big.head, *big.parts, small.head, it.checkpoint_marker(checkpoint, "o3", ttl), summary]
    assert big.parts and all(k.TTL_ATTRIBUTE in item for item in items)
    event = {
        "Records": [
            _stream_record(item, ttl=True, seq=str(200 + i), table=wiring.table)
            for i, item in enumerate(items)
        ]
    }
    response = load_handler("on_ttl_expiry").handler(event, FakeContext())
    assert response == {"batchItemFailures": []}
    assert wiring.received() == []


def _bus_down(**_: Any) -> tuple[Any, dict[str, Any]]:
    """``before-call`` hook: EventBridge answers every PutEvents with a 503."""
    from botocore.awsrequest import AWSResponse

    error = {"Code": "ServiceUnavailable", "Message": "injected: the bus is down"}
    return AWSResponse("https://injected", 503, {}, None), {
        "Error": error,
        "ResponseMetadata": {"HTTPStatusCode": 503},
    }


def _ttl_item(age_days: int = 40) -> tuple[Any, dict[str, Any]]:
    r = record(age=timedelta(days=age_days))
    item = {
        **ri.record_key(r.id),
        "rev": {"N": "4"},
        **ri.write_values(r, expires_at=2**31, shard_count=4),
    }
    return r, item


class Unreported:
    def __init__(self, wiring: Wiring, monkeypatch: pytest.MonkeyPatch) -> None:
        self.s3 = boto3.client("s3", endpoint_url=wiring.endpoint)
        self.bucket = f"unreported-{uuid.uuid4().hex[:8]}"
        self.s3.create_bucket(Bucket=self.bucket)
        monkeypatch.setenv("UNREPORTED_BUCKET", self.bucket)

    def objects(self, prefix: str = "") -> dict[str, dict[str, Any]]:
        listed = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=prefix).get("Contents", [])
        return {
            o["Key"]: json.loads(
                self.s3.get_object(Bucket=self.bucket, Key=o["Key"])["Body"].read()
            )
            for o in listed
        }


@pytest.fixture
def unreported(wiring: Wiring, monkeypatch: pytest.MonkeyPatch) -> Unreported:
    return Unreported(wiring, monkeypatch)


def test_the_stream_handler_with_the_bus_down_leaves_the_images_recoverable(
    wiring: Wiring, unreported: Unreported
) -> None:
    own = wiring.table
    expired = [_ttl_item() for _ in range(12)]
    _, broken = _ttl_item()
    broken["rec"] = {"S": "{not json"}
    batch = [
        _stream_record(item, ttl=True, seq=str(200 + i), table=own)
        for i, (_, item) in enumerate(expired)
    ]
    batch += [
        _stream_record(broken, ttl=True, seq="299", table=own),  # undecodable: kept too
        _stream_record(expired[0][1], ttl=False, seq="300", table=own),  # an ordinary delete
    ]
    ttl = load_handler("on_ttl_expiry")
    events = ttl.dependencies().publisher.client
    events.meta.events.register("before-call.events.PutEvents", _bus_down)
    # Every removal is kept before the batch is acknowledged: nothing for Lambda to retry.
    assert ttl.handler({"Records": batch}, FakeContext()) == {"batchItemFailures": []}
    assert wiring.received() == []
    kept = unreported.objects("unreported/")
    assert len(kept) == 13
    by_sequence = {
        body["streamRecord"]["dynamodb"]["SequenceNumber"]: body for body in kept.values()
    }
    for i, (_, item) in enumerate(expired):
        body = by_sequence[str(200 + i)]
        assert body["streamRecord"]["dynamodb"]["OldImage"] == item  # the whole final image
        assert body["table"] == own and "the bus is down" in body["why"]
    assert by_sequence["299"]["why"].startswith("undecodable")
    # Lambda retrying the same batch overwrites the same objects: none added.
    ttl.handler({"Records": batch}, FakeContext())
    assert set(unreported.objects("unreported/")) == set(kept)

    # The bus is back: the replay publishes each expiry once and removes its object; the
    # undecodable one stays, reported.
    events.meta.events.unregister("before-call.events.PutEvents", _bus_down)
    summary = ttl.handler({"action": "replay-unreported"}, FakeContext())
    published = wiring.received()
    assert sorted(e["detail"]["record"]["id"] for e in published) == sorted(
        r.id for r, _ in expired
    )
    assert {e["detail"]["trigger"] for e in published} == {"ttl"}
    assert {e["detail"]["record"]["id"]: e["detail"]["record"] for e in published} == {
        r.id: r.wire() for r, _ in expired
    }
    assert len(summary["replayed"]) == 12 and summary["complete"] is True
    [(broken_key, why)] = summary["failed"].items()
    assert why.startswith("cannot be replayed: ") and broken_key in unreported.objects()
    # A second replay publishes nothing again.
    again = ttl.handler({"action": "replay-unreported"}, FakeContext())
    assert again["published"] == [] and wiring.received() == []
    assert list(unreported.objects()) == [broken_key]


def test_a_removal_neither_published_nor_kept_is_a_batch_item_failure(
    wiring: Wiring, unreported: Unreported
) -> None:
    """With S3 refusing too, the records are reported failed (by sequence number), for
    Lambda to retry and then hand to the mapping's on-failure destination."""
    own = wiring.table
    items = [_ttl_item() for _ in range(3)]
    batch = [
        _stream_record(item, ttl=True, seq=str(400 + i), table=own)
        for i, (_, item) in enumerate(items)
    ]
    ttl = load_handler("on_ttl_expiry")
    reporter = ttl.dependencies()
    reporter.publisher.client.meta.events.register("before-call.events.PutEvents", _bus_down)
    assert reporter.unreported is not None
    reporter.unreported.client.meta.events.register("before-call.s3.PutObject", _bus_down)
    response = ttl.handler({"Records": batch}, FakeContext())
    assert response == {"batchItemFailures": [{"itemIdentifier": str(400 + i)} for i in range(3)]}
    assert unreported.objects() == {}


def test_replay_reads_the_mappings_on_failure_objects_and_is_at_least_once(
    wiring: Wiring, unreported: Unreported
) -> None:
    """An S3 on-failure destination object (Lambda's invocation record with the batch in
    ``payload``) is replayed like a kept record; one with metadata only is reported. A replay
    that cannot remove an object publishes it again next time, with the same idempotency key."""
    from sandbox_ledger.resources import EventPublisher, replay_failed_expiries

    own = wiring.table
    (r1, item1), (r2, item2) = _ttl_item(), _ttl_item()
    batch_info = {"shardId": "shardId-1", "startSequenceNumber": "500", "batchSize": 2}
    invocation = {
        "requestContext": {"condition": "RetryAttemptsExhausted", "approximateInvokeCount": 6},
        "responseContext": {"statusCode": 200, "functionError": "Unhandled"},
        "version": "1.0",
        "DDBStreamBatchInfo": batch_info,
        "payload": json.dumps(
            {
                "Records": [
                    _stream_record(item1, ttl=True, seq="500", table=own),
                    _stream_record(item2, ttl=True, seq="501", table=own),
                    _stream_record(item1, ttl=False, seq="502", table=own),
                ]
            }
        ),
    }
    esm_key = "aws/lambda/0f1e2d3c/shardId-1/2026/11/30/2026-11-30T12.00.00-9a8b7c"
    meta_key = "aws/lambda/0f1e2d3c/shardId-1/2026/11/30/2026-11-30T12.05.00-1a2b3c"
    put = unreported.s3.put_object
    put(Bucket=unreported.bucket, Key=esm_key, Body=json.dumps(invocation).encode())
    metadata_only = {k: v for k, v in invocation.items() if k != "payload"}
    put(Bucket=unreported.bucket, Key=meta_key, Body=json.dumps(metadata_only).encode())

    publisher = EventPublisher(wiring.events, wiring.bus)
    s3 = unreported.s3

    def no_delete(**_: Any) -> tuple[Any, dict[str, Any]]:
        return _bus_down()

    s3.meta.events.register("before-call.s3.DeleteObject", no_delete)
    first = replay_failed_expiries(s3, publisher, unreported.bucket, table_name=own)
    assert first.ignored == 1 and first.replayed == []
    assert first.failed[esm_key].startswith("published, but not removed")
    assert "metadata only" in first.failed[meta_key]
    s3.meta.events.unregister("before-call.s3.DeleteObject", no_delete)
    second = replay_failed_expiries(s3, publisher, unreported.bucket, table_name=own)
    assert second.replayed == [esm_key] and second.published == first.published
    events = wiring.received()
    assert len(events) == 4  # at least once: each expiry twice, with one key each
    keys = [e["detail"]["idempotencyKey"] for e in events]
    assert sorted(set(keys)) == sorted(first.published) and len(set(keys)) == 2
    assert {e["detail"]["record"]["id"] for e in events} == {r1.id, r2.id}
    third = replay_failed_expiries(s3, publisher, unreported.bucket, table_name=own, dry_run=True)
    assert third.published == [] and list(third.failed) == [meta_key]


def test_replay_needs_the_bucket_and_checks_its_event(wiring: Wiring) -> None:
    from sandbox_ledger.errors import InvalidInputError

    ttl = load_handler("on_ttl_expiry")
    with pytest.raises(InvalidInputError, match="UNREPORTED_BUCKET"):
        ttl.handler({"action": "replay-unreported"}, FakeContext())
    with pytest.raises(InvalidInputError, match="event"):
        ttl.handler({"detail": {}}, FakeContext())


def _import_in_fresh_process(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    import os
    import sys

    base = {k: v for k, v in os.environ.items() if k != "SANDBOX_LEDGER_TRACING"}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**base, "AWS_REGION": "us-east-1", **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


TRACING_PROBE = (
    "import sys\n"
    "from sandbox_ledger.handlers import expire_stale_resources as s, on_ttl_expiry as t\n"
    "def tracer_wraps(f):\n"
    "    return f.__code__.co_filename.endswith('tracing/tracer.py')\n"
    "print('aws_xray_sdk' in sys.modules, tracer_wraps(s.handler), tracer_wraps(t.handler))\n"
)


@pytest.mark.parametrize(("setting", "traced"), [(None, False), ("false", False), ("true", True)])
def test_tracing_is_behind_its_setting(setting: str | None, traced: bool) -> None:
    """Off (unset or false), neither handler loads the X-Ray SDK nor wraps itself in the
    Tracer; on, in a Lambda environment, both do. (The X-Ray SDK knows Lambda by
    LAMBDA_TASK_ROOT; without it, it also builds a sampling client for the X-Ray API.)"""
    env = {"AWS_LAMBDA_FUNCTION_NAME": "fn", "LAMBDA_TASK_ROOT": os.getcwd()}
    if setting is not None:
        env["SANDBOX_LEDGER_TRACING"] = setting
    done = _import_in_fresh_process(env, TRACING_PROBE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(traced)] * 3


def test_a_bad_tracing_setting_names_the_variable() -> None:
    done = _import_in_fresh_process(
        {"SANDBOX_LEDGER_TRACING": "maybe"},
        "import sandbox_ledger.handlers.on_ttl_expiry",
    )
    assert done.returncode != 0
    assert "SANDBOX_LEDGER_TRACING: must be true or false, got 'maybe'" in done.stderr


def test_two_replays_at_once_report_no_false_failures(
    wiring: Wiring, unreported: Unreported
) -> None:
    """Replay A runs whole between replay B's listing and its first GetObject: every object B
    listed is gone when B reads it. B reports them skipped (A replayed them), not failed."""
    from sandbox_ledger.resources import EventPublisher, replay_failed_expiries

    own = wiring.table
    items = [_ttl_item() for _ in range(3)]
    batch = [
        _stream_record(item, ttl=True, seq=str(700 + i), table=own)
        for i, (_, item) in enumerate(items)
    ]
    ttl = load_handler("on_ttl_expiry")
    events_client = ttl.dependencies().publisher.client
    events_client.meta.events.register("before-call.events.PutEvents", _bus_down)
    assert ttl.handler({"Records": batch}, FakeContext()) == {"batchItemFailures": []}
    events_client.meta.events.unregister("before-call.events.PutEvents", _bus_down)
    kept = sorted(unreported.objects("unreported/"))
    assert len(kept) == 3
    publisher = EventPublisher(wiring.events, wiring.bus)
    s3_a = boto3.client("s3", endpoint_url=wiring.endpoint)
    s3_b = unreported.s3
    runs: dict[str, Any] = {}

    def a_runs_now(**_: Any) -> None:
        if "a" not in runs:
            runs["a"] = replay_failed_expiries(s3_a, publisher, unreported.bucket, table_name=own)

    s3_b.meta.events.register("before-call.s3.GetObject", a_runs_now)
    try:
        runs["b"] = replay_failed_expiries(s3_b, publisher, unreported.bucket, table_name=own)
    finally:
        s3_b.meta.events.unregister("before-call.s3.GetObject", a_runs_now)
    a, b = runs["a"], runs["b"]
    assert b.failed == {} and b.replayed == [] and b.published == []
    assert sorted(a.replayed) == kept and a.failed == {} and a.skipped == []
    assert sorted(b.skipped) == kept and b.complete
    assert b.to_dict()["skipped"] == b.skipped
    keys = [e["detail"]["idempotencyKey"] for e in wiring.received()]
    assert sorted(keys) == sorted(a.published) and len(set(keys)) == 3
    assert unreported.objects("unreported/") == {}
