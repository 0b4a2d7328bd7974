"""Issue 9: a sweep that always makes progress, and claims that are short leases."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from resource_fixtures import record
from sandbox_ledger import keys as k
from sandbox_ledger.cli import app
from sandbox_ledger.errors import StorageError
from sandbox_ledger.resources import Expiry, SyncResourceRecordStore, sweep
from sandbox_ledger.resources import _items as ri


class Collector:
    """A publisher that keeps what it is given (thread-safe)."""

    def __init__(self) -> None:
        self.published: list[Expiry] = []
        self.lock = threading.Lock()

    def publish(self, expiries: Sequence[Expiry]) -> set[str]:
        with self.lock:
            self.published += list(expiries)
        return set()


def _raw_item(age: timedelta, **change: Any) -> tuple[str, dict[str, Any]]:
    r = record(age=age)
    item = {
        **ri.record_key(r.id),
        k.REVISION: {"N": "1"},
        **ri.write_values(r, horizon_seconds=30 * 86400, shard_count=4),
    }
    body = json.loads(item[k.RECORD_BODY]["S"])
    for key, value in change.items():
        if key == "body":
            body.update(value)
        elif key == "drop_body":
            del body[value]
        elif key == "drop":
            del item[value]
        elif key == "raw_body":
            item[k.RECORD_BODY] = {"S": value}
            continue
    if "raw_body" not in change:
        item[k.RECORD_BODY] = {"S": json.dumps(body)}
    return r.id, item


def test_a_poison_record_among_good_ones_is_reported_and_the_sweep_goes_on(
    moto_endpoint: str, sync_table: str
) -> None:
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    good = [store.put(record(age=timedelta(hours=1))).record.id for _ in range(3)]
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    poison = {}
    for label, change in {
        "no rev": {"drop": k.REVISION},
        "newer writer": {"body": {"gpu": "a100"}},
        "field missing": {"drop_body": "sandboxProvider"},
        "not json": {"raw_body": "{not json"},
    }.items():
        record_id, item = _raw_item(timedelta(hours=2), **change)
        client.put_item(TableName=sync_table, Item=item)
        poison[record_id] = label
    publisher = Collector()
    result = sweep(store, publisher, now=datetime.now(UTC))
    assert sorted(result.expired) == sorted(good) and result.complete
    assert sorted(result.failed) == sorted(poison) == sorted(result.unreadable)
    assert "rev" in result.unreadable[next(i for i, w in poison.items() if w == "no rev")]
    newer = next(i for i, w in poison.items() if w == "newer writer")
    assert "gpu" in result.unreadable[newer] and "a100" not in result.unreadable[newer]
    assert sorted(e.record.id for e in publisher.published) == sorted(good)
    # Reported, never deleted: the next run reports them again, and expires nothing else.
    again = sweep(store, publisher, now=datetime.now(UTC))
    assert sorted(again.unreadable) == sorted(poison) and again.expired == []
    # Listing shows each as one line, never a traceback; a direct read says why.
    page = store.list()
    assert sorted(u.record_id for u in page.unreadable) == sorted(poison)
    with pytest.raises(StorageError, match="unreadable"):
        store.get(newer)
    runner = CliRunner()
    args = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    listed = runner.invoke(app, [*args, "resources", "ls"])
    assert listed.exit_code == 0 and "Traceback" not in listed.output, listed.output
    for record_id in poison:
        [line] = [x for x in listed.output.splitlines() if record_id in x]
        assert "unreadable" in line
    assert "4 unreadable" in listed.output


@pytest.mark.parametrize("skew", [timedelta(minutes=5), timedelta(minutes=-5)])
def test_an_owner_heartbeat_never_fails_because_of_its_clock(
    moto_endpoint: str, sync_table: str, skew: timedelta
) -> None:
    writer = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    r = writer.put(record()).record
    owner = SyncResourceRecordStore(
        sync_table, endpoint_url=moto_endpoint, clock=lambda: datetime.now(UTC) + skew
    )
    for _ in range(3):
        owner.touch(r.id)
    assert writer.get_versioned(r.id) is not None


def test_two_sweepers_at_once_publish_each_record_once(moto_endpoint: str, sync_table: str) -> None:
    seed = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    ids = {seed.put(record(age=timedelta(hours=1))).record.id for _ in range(150)}
    publisher = Collector()
    results = []

    def one() -> None:
        store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
        results.append(sweep(store, publisher, now=datetime.now(UTC), page_size=10))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = Counter(e.record.id for e in publisher.published)
    assert set(counts) == ids and set(counts.values()) == {1}, counts.most_common(3)
    assert sorted(i for r in results for i in r.expired) == sorted(ids)
    assert seed.list(limit=10).records == []


def test_events_stay_within_eventbridge_limits_with_a_300_kb_record(
    moto_endpoint: str, sync_table: str
) -> None:
    """moto accepts any PutEvents: a botocore hook enforces EventBridge's 10 entries and
    256 KB per request, as AWS does, and keeps what was sent."""
    from botocore.exceptions import ClientError

    from sandbox_ledger.resources import EventPublisher
    from sandbox_ledger.resources.events import PUT_EVENTS_MAX_BYTES, entry_size

    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    huge_error = "E" * 300_000
    big = store.put(
        record(
            age=timedelta(hours=1),
            lastFailure={
                "kind": "exec",
                "outcome": "failed",
                "at": "2026-11-30T10:04:00.000Z",
                "error": huge_error,
            },
        )
    ).record
    others = [
        store.put(record(age=timedelta(hours=1), workspace="w" * 60_000)).record.id
        for _ in range(12)
    ]
    events = boto3.client("events", endpoint_url=moto_endpoint)
    sent: list[list[dict[str, Any]]] = []

    def enforce(params: dict[str, Any], **_: Any) -> None:
        entries = params["Entries"]
        total = sum(entry_size(e) for e in entries)
        if len(entries) > 10 or total > PUT_EVENTS_MAX_BYTES:
            raise ClientError(
                {"Error": {"Code": "ValidationException", "Message": f"{total} bytes"}},
                "PutEvents",
            )
        sent.append(entries)

    bus = f"limits-{sync_table}"  # its own bus: other tests' rules on "default" stay out
    events.create_event_bus(Name=bus)
    events.meta.events.register("before-parameter-build.events.PutEvents", enforce)
    result = sweep(store, EventPublisher(events, bus), now=datetime.now(UTC))
    assert sorted(result.expired) == sorted([big.id, *others]) and result.failed == []
    details = {
        json.loads(e["Detail"])["record"]["id"]: json.loads(e["Detail"]) for b in sent for e in b
    }
    assert set(details) == {big.id, *others}
    error = details[big.id]["record"]["lastFailure"]["error"]
    assert error.startswith("EEEE") and error.endswith("[truncated: 300000 characters in all]")
    assert details[others[0]]["record"]["workspace"] == "w" * 60_000  # small enough: intact
    assert all(len(b) <= 10 for b in sent) and len(sent) > 2


def test_claim_protocol_b_and_c_on_dynamodb(moto_endpoint: str, sync_table: str) -> None:
    """(b) a claimed (being published) record is never revived by a touch: its owner gets a
    ConflictError saying a sweeper is expiring it; (c) the claim of a sweeper that died is
    taken over by a later run once its lease ends, and not before."""
    from sandbox_ledger.errors import ConflictError

    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    stored = store.put(record(age=timedelta(hours=1)))
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    store.claim(
        stored.record.id,
        stored.revision,
        "stale",
        owner="dead-run",
        now_ms=now_ms,
        until_ms=now_ms + 60_000,
    )
    with pytest.raises(ConflictError, match="a sweeper is expiring it"):
        store.touch(stored.record.id)
    publisher = Collector()
    early = sweep(store, publisher, now=datetime.now(UTC))
    assert early.skipped == [stored.record.id] and publisher.published == []
    later = sweep(store, publisher, now=datetime.now(UTC) + timedelta(minutes=2))
    assert later.expired == [stored.record.id]
    assert [e.record.id for e in publisher.published] == [stored.record.id]
    with pytest.raises(ConflictError, match="does not exist"):
        store.touch(stored.record.id)
