"""Issue 9: a sweep that always makes progress, claims that are short leases, and staleness
judged by the sweeper's own clock."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from resources.resource_fixtures import Collector, caught_up, record
from sandbox_ledger import keys as k
from sandbox_ledger.cli import app
from sandbox_ledger.errors import ConflictError, StorageError
from sandbox_ledger.resources import Expiry, ExpiryPolicy, SyncResourceRecordStore, sweep
from sandbox_ledger.resources import _items as ri

# The default stale_after, and a minute: a sweeper's clock is ``now`` plus its run's elapsed
# time, so a run one window after another judges a record observed late in the first run (a
# slow, loaded first run) a little short of the window. With one second of margin, two
# sweepers at once on a loaded machine left records unpublished (40 of 40 observed, some
# never expired): the margin must exceed any run's own duration.
WINDOW = timedelta(minutes=16)


def _raw_item(age: timedelta, **change: Any) -> tuple[str, dict[str, Any]]:
    r = record(age=age)
    item = {
        **ri.record_key(r.id),
        k.REVISION: {"N": "1"},
        **ri.write_values(r, expires_at=2**31, shard_count=4),
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
    moto_endpoint: str, sync_table: str, tmp_path: Path, moto_server: Any
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
        "nested too deep": {"raw_body": "[" * 50_000 + "]" * 50_000},  # the decoder recurses
    }.items():
        record_id, item = _raw_item(timedelta(hours=2), **change)
        client.put_item(TableName=sync_table, Item=item)
        poison[record_id] = label
    args = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    exported = CliRunner().invoke(app, [*args, "resources", "export", str(tmp_path / "out")])
    assert exported.exit_code == 4, exported.output
    assert sorted(p.stem for p in (tmp_path / "out").iterdir()) == sorted(good)
    publisher = Collector()
    caught_up(moto_server, sync_table)  # about what a sweep does with what it finds: settled
    observing = sweep(store, publisher, now=datetime.now(UTC))
    assert sorted(observing.observed) == sorted(good) and observing.complete
    assert sorted(observing.unreadable) == sorted(poison)
    result = sweep(store, publisher, now=datetime.now(UTC) + WINDOW)
    assert sorted(result.expired) == sorted(good) and result.complete
    assert sorted(result.failed) == sorted(poison) == sorted(result.unreadable)
    assert "rev" in result.unreadable[next(i for i, w in poison.items() if w == "no rev")]
    newer = next(i for i, w in poison.items() if w == "newer writer")
    assert "gpu" in result.unreadable[newer] and "a100" not in result.unreadable[newer]
    assert sorted(e.record.id for e in publisher.published) == sorted(good)
    # Reported, never deleted: the next run reports them again, and expires nothing else.
    again = sweep(store, publisher, now=datetime.now(UTC) + 2 * WINDOW)
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
    assert "5 unreadable" in listed.output


def test_a_stored_record_whose_id_is_not_canonical_is_reported_never_expired(
    moto_endpoint: str, sync_table: str, moto_server: Any
) -> None:
    # Written by an older version, which took any spelling uuid.UUID() read: reported as
    # unreadable (visible, never deleted), not expired beside its canonical twin.
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    twin = store.put(record(age=timedelta(hours=2))).record
    legacy_id = twin.id.upper()
    _, item = _raw_item(timedelta(hours=2), body={"id": legacy_id})
    item[k.PARTITION_KEY] = {"S": k.RESOURCE_PREFIX + legacy_id}
    boto3.client("dynamodb", endpoint_url=moto_endpoint).put_item(TableName=sync_table, Item=item)
    publisher = Collector()
    caught_up(moto_server, sync_table)  # about what a sweep does with what it finds: settled
    first = sweep(store, publisher, now=datetime.now(UTC))
    assert first.observed == [twin.id] and list(first.unreadable) == [legacy_id]
    assert "canonical" in first.unreadable[legacy_id]
    second = sweep(store, publisher, now=datetime.now(UTC) + WINDOW)
    assert second.expired == [twin.id] and list(second.unreadable) == [legacy_id]
    assert [e.record.id for e in publisher.published] == [twin.id]


class SimClock:
    """The true time of a simulation; the sweeper reads it exactly, owners with a skew."""

    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, tzinfo=UTC)

    def skewed(self, skew: timedelta) -> Any:
        return lambda: self.now + skew


SWEEP_EVERY = timedelta(minutes=5)
STALE_AFTER = timedelta(minutes=15)
# docs/resource-expiry.md ("Clocks"): a dead record expires no sooner than one window after
# its owner's last write and no later than two windows and three sweep intervals after it.
LATEST = 2 * STALE_AFTER + 3 * SWEEP_EVERY
TWENTY_YEARS = timedelta(days=365 * 20)


def _stores(endpoint: str, table: str, skew: timedelta) -> tuple[Any, Any, SimClock]:
    clock = SimClock()
    sweeper = SyncResourceRecordStore(table, endpoint_url=endpoint, clock=clock.skewed(ZERO))
    owner = SyncResourceRecordStore(table, endpoint_url=endpoint, clock=clock.skewed(skew))
    return sweeper, owner, clock


ZERO = timedelta(0)


@pytest.mark.parametrize(
    "skew",
    [timedelta(minutes=5), timedelta(minutes=-5), -TWENTY_YEARS],
    ids=["ahead-5min", "behind-5min", "behind-20y"],
)
def test_a_live_owner_is_never_expired_nor_refused_whatever_its_clock(
    moto_endpoint: str, sync_table: str, skew: timedelta
) -> None:
    """An owner heartbeating within its window (every 12 minutes for a 15-minute window),
    its clock 5 minutes ahead, 5 minutes behind or 20 years behind: every touch succeeds and
    no sweep (every 5 minutes, on the sweeper's clock) expires it. By updatedAt alone, the
    record looks 17 minutes stale before each heartbeat (5 minutes behind) or 20 years stale."""
    sweeper, owner, clock = _stores(moto_endpoint, sync_table, skew)
    policy = ExpiryPolicy(stale_after=STALE_AFTER)
    live = owner.put(record(now=owner.clock())).record
    publisher = Collector()
    for minute in range(1, 62):
        clock.now += timedelta(minutes=1)
        if minute % 12 == 0:
            owner.touch(live.id)  # never a ConflictError
        if minute % 5 == 0:
            result = sweep(sweeper, publisher, now=clock.now, policy=policy)
            assert result.expired == [] and result.failed == [], (minute, result)
    assert publisher.published == []
    assert owner.get_versioned(live.id) is not None


@pytest.mark.parametrize(
    "skew",
    [ZERO, TWENTY_YEARS, timedelta(minutes=5), -TWENTY_YEARS],
    ids=["right", "ahead-20y", "ahead-5min", "behind-20y"],
)
def test_a_dead_record_expires_within_the_documented_latency_by_the_sweepers_clock(
    moto_endpoint: str, sync_table: str, skew: timedelta, moto_server: Any
) -> None:
    """The owner's last write, then silence: the record expires no sooner than a window and
    no later than two windows and three sweep intervals after it, by the sweeper's clock,
    whether the owner's clock was right, 20 years ahead (updatedAt in the future), a few
    minutes ahead, or 20 years behind."""
    sweeper, owner, clock = _stores(moto_endpoint, sync_table, skew)
    policy = ExpiryPolicy(stale_after=STALE_AFTER)
    dead = owner.put(record(now=owner.clock())).record
    # Simulated sweeps minutes apart follow at once in real time; DynamoDB's indexes take
    # well under one interval: the latency bound is checked on settled indexes.
    caught_up(moto_server, sync_table)
    last_write = clock.now
    publisher = Collector()
    expired_at = None
    while clock.now - last_write <= LATEST + SWEEP_EVERY:
        clock.now += SWEEP_EVERY
        result = sweep(sweeper, publisher, now=clock.now, policy=policy)
        if result.expired:
            assert result.expired == [dead.id]
            expired_at = clock.now
            break
    assert expired_at is not None, "never expired"
    assert STALE_AFTER <= expired_at - last_write <= LATEST
    assert [e.record.id for e in publisher.published] == [dead.id]
    with pytest.raises(ConflictError, match="does not exist"):
        owner.touch(dead.id)


# 40 records are four pages of 10 for each sweeper, so their claims interleave page after
# page; the soak run (150 records, 15 pages) is behind the slow marker.
@pytest.mark.parametrize("records", [40, pytest.param(150, marks=pytest.mark.slow)])
def test_two_sweepers_at_once_publish_each_record_once(
    moto_endpoint: str, sync_table: str, records: int, moto_server: Any
) -> None:
    seed = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    ids = {seed.put(record(age=timedelta(hours=1))).record.id for _ in range(records)}
    caught_up(moto_server, sync_table)  # every record a candidate of both runs: settled
    publisher = Collector()
    results = []

    start = datetime.now(UTC)

    def one(now: datetime) -> None:
        store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
        results.append(sweep(store, publisher, now=now, page_size=10))

    # Both observe at once (each record observed once), then both expire at once.
    for now in (start, start + WINDOW):
        results.clear()
        threads = [threading.Thread(target=one, args=(now,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if now == start:
            observed = [i for r in results for i in r.observed]
            assert sorted(observed) == sorted(ids) and publisher.published == []
    counts = Counter(e.record.id for e in publisher.published)
    assert set(counts) == ids and set(counts.values()) == {1}, counts.most_common(3)
    assert sorted(i for r in results for i in r.expired) == sorted(ids)
    assert seed.list(limit=10).records == []


def test_a_sweep_between_anothers_claim_and_its_publish_leaves_the_claims_alone(
    moto_endpoint: str, sync_table: str, moto_server: Any
) -> None:
    """The interleaving that the two-sweeper test above reaches only by chance, made certain:
    sweeper B runs a whole sweep while sweeper A holds its claims, after A claimed and before A
    publishes. B must skip every record A claimed (A's lease is live), so each record is
    published once, by A."""
    seed = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    ids = {seed.put(record(age=timedelta(hours=1))).record.id for _ in range(5)}
    caught_up(moto_server, sync_table)  # about an interleaving of claims, not finding them: settled
    start = datetime.now(UTC)
    collector = Collector()
    b_results = []

    def sweeper_b() -> None:
        store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
        b_results.append(sweep(store, collector, now=start + WINDOW))

    held: set[str] = set()

    class BThenPublish:
        """A's publisher: at A's first publish (one per page of claims), B sweeps first."""

        def publish(self, expiries: Sequence[Expiry]) -> set[str]:
            if not b_results:
                held.update(e.record.id for e in expiries)
                sweeper_b()
            return collector.publish(expiries)

    a_store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    assert sorted(sweep(a_store, collector, now=start).observed) == sorted(ids)
    a_result = sweep(a_store, BThenPublish(), now=start + WINDOW)
    [b_result] = b_results
    assert held and held <= set(b_result.skipped) and not held & set(b_result.expired)
    assert held <= set(a_result.expired)
    assert sorted([*a_result.expired, *b_result.expired]) == sorted(ids)
    counts = Counter(e.record.id for e in collector.published)
    assert set(counts) == ids and set(counts.values()) == {1}, counts
    assert seed.list(limit=10).records == []


def test_events_stay_within_eventbridge_limits_with_a_300_kb_record(
    moto_endpoint: str, sync_table: str, moto_server: Any
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
    caught_up(moto_server, sync_table)  # about the events' sizes, not finding the records: settled
    sweep(store, EventPublisher(events, bus), now=datetime.now(UTC))
    result = sweep(store, EventPublisher(events, bus), now=datetime.now(UTC) + WINDOW)
    assert sorted(result.expired) == sorted([big.id, *others]) and result.failed == []
    details = {
        json.loads(e["Detail"])["record"]["id"]: json.loads(e["Detail"]) for b in sent for e in b
    }
    assert set(details) == {big.id, *others}
    error = details[big.id]["record"]["lastFailure"]["error"]
    assert error.startswith("EEEE") and error.endswith("[truncated: 300000 characters in all]")
    assert details[others[0]]["record"]["workspace"] == "w" * 60_000  # small enough: intact
    assert all(len(b) <= 10 for b in sent) and len(sent) > 2


def test_claim_protocol_b_and_c_on_dynamodb(
    moto_endpoint: str, sync_table: str, moto_server: Any
) -> None:
    """(b) a claimed (being published) record is never revived by a touch: its owner gets a
    ConflictError saying a sweeper is expiring it; (c) the claim of a sweeper that died is
    taken over by a later run once its lease ends, and not before."""
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    stored = store.put(record(age=timedelta(hours=1)))
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    store.claim(stored, "stale", owner="dead-run", now_ms=now_ms, until_ms=now_ms + 60_000)
    with pytest.raises(ConflictError, match="a sweeper is expiring it"):
        store.touch(stored.record.id)
    publisher = Collector()
    caught_up(moto_server, sync_table)  # about the claim's lease, not finding the record: settled
    early = sweep(store, publisher, now=datetime.now(UTC))
    assert early.skipped == [stored.record.id] and publisher.published == []
    later = sweep(store, publisher, now=datetime.now(UTC) + timedelta(minutes=2))
    assert later.expired == [stored.record.id]
    assert [e.record.id for e in publisher.published] == [stored.record.id]
    with pytest.raises(ConflictError, match="does not exist"):
        store.touch(stored.record.id)


class DiesAfterPublishing(Collector):
    """Its events are put, then the run dies before deleting the records."""

    def publish(self, expiries: Sequence[Expiry]) -> set[str]:
        super().publish(expiries)
        raise SystemExit("the run died after PutEvents")


def _ttl_removal(item: dict[str, Any]) -> dict[str, Any]:
    """The stream record DynamoDB's TTL process writes when it deletes ``item``."""
    return {
        "eventName": "REMOVE",
        "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
        "dynamodb": {"ApproximateCreationDateTime": 1764504000, "OldImage": item},
    }


def test_every_publication_of_one_expiry_has_one_idempotency_key(
    moto_endpoint: str, sync_table: str, moto_server: Any
) -> None:
    """docs/resource-expiry.md: ``idempotencyKey`` is the same for every publication of one
    expiry: a run that published then died before deleting, the run that takes its claim over,
    and a TTL removal of the claimed record (its stream image) all carry one key."""
    from sandbox_ledger.resources.stream import ttl_expiry

    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    stored = store.put(record(age=timedelta(hours=1)))
    rid = stored.record.id
    # An unclaimed record removed by TTL is reported at the revision a sweeper would claim.
    raw = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    item = raw.get_item(TableName=sync_table, Key=ri.record_key(rid), ConsistentRead=True)["Item"]
    unclaimed = ttl_expiry(_ttl_removal(item))
    assert unclaimed is not None
    now = datetime.now(UTC)
    caught_up(moto_server, sync_table)  # about idempotency keys, not finding the record: settled
    sweep(store, Collector(), now=now)  # observes
    dead = DiesAfterPublishing()
    with pytest.raises(SystemExit):
        sweep(store, dead, now=now + WINDOW)
    item = raw.get_item(TableName=sync_table, Key=ri.record_key(rid), ConsistentRead=True)["Item"]
    assert k.CLAIM in item  # published, not deleted: the claim stays for a takeover
    claimed = ttl_expiry(_ttl_removal(item))
    takeover = Collector()
    result = sweep(store, takeover, now=now + WINDOW + timedelta(minutes=3))
    assert result.expired == [rid]
    keys = {e.idempotency_key for e in dead.published + takeover.published}
    assert claimed is not None and keys == {claimed.idempotency_key, unclaimed.idempotency_key}
    assert keys == {f"{rid}/{stored.record.created_at}/{stored.revision}"}
    assert len(dead.published) == len(takeover.published) == 1
