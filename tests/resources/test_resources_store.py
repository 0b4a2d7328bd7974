"""Resource record stores on a moto server: CRUD, concurrency, TTL, listing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from resources.resource_fixtures import caught_up, record, record_in_shard_of
from sandbox_ledger import ConflictError, InvalidInputError
from sandbox_ledger.cursor import seal, unseal
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.dynamodb.instrument import RequestCounter
from sandbox_ledger.resources import (
    ResourceActivityRecord,
    ResourceRecordStore,
    SyncResourceRecordStore,
)
from sandbox_ledger.resources.models import to_iso
from sandbox_ledger.testing.cursors import state_paths, with_value, wrong_types


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(moto_endpoint: str, sync_table: str, clock: Clock) -> SyncResourceRecordStore:
    return SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint, clock=clock)


def test_put_get_delete(store: SyncResourceRecordStore) -> None:
    r = record()
    assert store.get(r.id) is None
    stored = store.put(r)
    assert stored.revision == 1 and stored.record == r
    assert store.get(r.id) == r
    replaced = r.model_copy(update={"phase": "closing"})
    assert store.put(replaced).revision == 2
    assert store.get(r.id) == replaced
    assert store.delete(r.id) is True
    assert store.get(r.id) is None
    assert store.delete(r.id) is False


def test_the_ledger_table_serves_both(
    moto_endpoint: str, sync_table: str, store: SyncResourceRecordStore, moto_server: Any
) -> None:
    from sandbox_ledger import LedgerEntry

    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    ledger.append(
        LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=-1, event="sandbox.created")
    )
    r = store.put(record())
    caught_up(moto_server, sync_table)  # both listings' settled state (lag: their own tests)
    assert [d.sandbox_id for d in ledger.list_all_sandbox_details()] == ["s"]
    assert [v.record.id for v in store.list().records] == [r.record.id]


def test_every_write_is_optimistic(store: SyncResourceRecordStore, clock: Clock) -> None:
    r = record()
    first = store.put(r)
    with pytest.raises(ConflictError, match="revision"):
        store.put(r.model_copy(update={"phase": "closing"}), expected_revision=first.revision + 5)
    # A stale writer cannot go back in time over a newer record.
    older = r.model_copy(update={"updated_at": r.created_at})
    with pytest.raises(ConflictError):
        store.put(older)
    second = store.put(r.model_copy(update={"phase": "closing"}), expected_revision=first.revision)
    assert second.revision == first.revision + 1
    with pytest.raises(ConflictError, match="revision"):
        store.delete(r.id, expected_revision=first.revision)
    assert store.delete(r.id, expected_revision=second.revision)


def test_touch_is_one_request_and_refreshes(store: SyncResourceRecordStore, clock: Clock) -> None:
    r = store.put(record(age=timedelta(minutes=10), now=clock.now))
    counter = RequestCounter().attach(store.client())
    clock.now += timedelta(seconds=5)
    touched = store.touch(r.record.id)
    assert dict(counter.calls) == {"UpdateItem": 1}
    assert touched.revision == r.revision + 1
    assert touched.record.updated_at_ms == int(clock.now.timestamp() * 1000)
    # Two windows of its phase (the latest the sweep expires it) plus the 30-day horizon.
    assert touched.expires_at == int(clock.now.timestamp()) + 30 * 60 + 30 * 86400
    with pytest.raises(ConflictError, match="does not exist"):
        store.touch("6b0a3c1e-0000-4000-8000-000000000000")


def test_operations_follow_the_seed(store: SyncResourceRecordStore, clock: Clock) -> None:
    r = store.put(record(operations=[]))
    rid = r.record.id
    store.record_operation_start(rid, "exec")
    store.record_operation_start(rid, "exec")
    store.record_operation_start(rid, "sync")
    current = store.get(rid)
    assert current is not None
    assert [(o.kind, o.count) for o in current.operations] == [("exec", 2), ("sync", 1)]
    store.record_operation_finish(rid, "exec", "failed", error="exit 2")
    store.record_operation_finish(rid, "sync", "completed")
    current = store.get(rid)
    assert current is not None
    assert [(o.kind, o.count) for o in current.operations] == [("exec", 1)]
    assert current.last_operation is not None and current.last_operation.kind == "sync"
    assert current.last_failure is not None and current.last_failure.error == "exit 2"
    store.record_operation_finish(rid, "exec", "completed")
    current = store.get(rid)
    assert current is not None and current.operations == []
    assert current.last_failure is not None and current.last_failure.kind == "exec"  # retained
    with pytest.raises(ValueError, match="outcome"):
        store.record_operation_finish(rid, "exec", "maybe")


def test_concurrent_operations_lose_no_count(store: SyncResourceRecordStore) -> None:
    rid = store.put(record(operations=[])).record.id
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda _: store.record_operation_start(rid, "exec"), range(16)))
    current = store.get(rid)
    assert current is not None and [(o.kind, o.count) for o in current.operations] == [("exec", 16)]


def test_reads_hide_records_past_their_ttl(
    moto_endpoint: str, sync_table: str, clock: Clock
) -> None:
    short = SyncResourceRecordStore(
        sync_table, endpoint_url=moto_endpoint, clock=clock, ttl_horizon=timedelta(hours=1)
    )
    r = short.put(record(now=clock.now))
    assert short.get(r.record.id) is not None
    clock.now += timedelta(hours=2)  # DynamoDB may take up to two days to delete it
    assert short.get(r.record.id) is None
    assert short.list().records == []
    # A heartbeat is judged by the record's state, never the owner's clock: while DynamoDB has
    # not removed it (and so nothing reported it expired), the owner's touch keeps it.
    touched = short.touch(r.record.id)
    assert touched.expires_at == int(clock.now.timestamp()) + 30 * 60 + 3600
    assert short.get(r.record.id) is not None


def test_operations_on_a_record_past_its_ttl_are_judged_by_its_state(
    moto_endpoint: str, sync_table: str, clock: Clock
) -> None:
    """Operations, like a heartbeat, are the owner's while DynamoDB has not removed the record
    (nothing has reported it expired): they succeed and give it a new TTL. The deep lifecycle
    profile found them refused ("does not exist") while a touch of the same record succeeded."""
    short = SyncResourceRecordStore(
        sync_table, endpoint_url=moto_endpoint, clock=clock, ttl_horizon=timedelta(hours=1)
    )
    r = short.put(record(now=clock.now, operations=[]))
    rid = r.record.id
    clock.now += timedelta(hours=2)
    assert short.get(rid) is None
    started = short.record_operation_start(rid, "exec")
    assert started.revision == r.revision + 1
    assert started.expires_at == int(clock.now.timestamp()) + 30 * 60 + 3600
    clock.now += timedelta(hours=2)
    assert short.get(rid) is None
    finished = short.record_operation_finish(rid, "exec", "completed")
    assert finished.record.operations == []
    assert finished.record.last_operation is not None
    assert short.get(rid) is not None
    # An owner whose clock is 20 years ahead of the one that wrote the record: still its own.
    ahead = Clock()
    ahead.now = clock.now + timedelta(days=365 * 20)
    far = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint, clock=ahead)
    assert far.record_operation_start(rid, "exec").revision == finished.revision + 1


def test_operations_on_a_claimed_record_refuse_at_once(
    store: SyncResourceRecordStore, clock: Clock
) -> None:
    """A claimed record refuses its owner after one read, without retrying its write."""
    r = store.put(record(now=clock.now))
    now_ms = int(clock.now.timestamp() * 1000)
    store.claim(r, "stale", owner="sweep-1", now_ms=now_ms, until_ms=now_ms + 120_000)
    counter = RequestCounter().attach(store.client())
    with pytest.raises(ConflictError, match="a sweeper is expiring it"):
        store.record_operation_finish(r.record.id, "exec", "completed")
    with pytest.raises(ConflictError, match="a sweeper is expiring it"):
        store.record_operation_start(r.record.id, "exec")
    assert dict(counter.calls) == {"GetItem": 2}
    with pytest.raises(ConflictError, match="does not exist"):
        store.record_operation_start("6b0a3c1e-0000-4000-8000-000000000000", "exec")


def test_list_by_phase_and_provider_newest_first_paginated(
    store: SyncResourceRecordStore, clock: Clock, moto_server: Any
) -> None:
    made = []
    for i in range(23):
        phase = "ready" if i % 2 else "allocating"
        provider = "docker" if i % 3 else "vercel"
        made.append(
            store.put(
                record(
                    age=timedelta(seconds=100 - i), phase=phase, provider=provider, now=clock.now
                )
            ).record
        )
    newest_first = [r.id for r in reversed(made)]
    caught_up(moto_server)  # the listings' settled state (during lag: test_resources_index_lag)
    pages, cursor = [], None
    while True:
        page = store.list(limit=5, cursor=cursor)
        pages.append([v.record.id for v in page.records])
        cursor = page.cursor
        if cursor is None:
            break
    assert [i for p in pages for i in p] == newest_first
    assert all(len(p) <= 5 for p in pages)
    ready = store.list(phase="ready", limit=100).records
    assert [v.record.id for v in ready] == [r.id for r in reversed(made) if r.phase == "ready"]
    vercel = store.list(provider="vercel", limit=100).records
    assert [v.record.id for v in vercel] == [
        r.id for r in reversed(made) if r.sandbox_provider == "vercel"
    ]
    both = store.list(provider="vercel", phase="ready", limit=100).records
    assert {v.record.id for v in both} == {
        r.id for r in made if r.sandbox_provider == "vercel" and r.phase == "ready"
    }
    for bad, field in [
        ({"limit": 0}, "limit"),
        ({"phase": "nope"}, "phase"),
        ({"cursor": "%%%"}, "cursor"),
        ({"provider": ""}, "provider"),
    ]:
        with pytest.raises(ValueError, match=field):
            store.list(**bad)  # type: ignore[arg-type]


def test_damaged_altered_or_foreign_list_cursors_are_refused(
    store: SyncResourceRecordStore, clock: Clock, moto_server: Any
) -> None:
    """As the ledger's listings (the conformance suite's cursor tests); on 5b0f498 a cursor
    with a character changed was accepted."""
    from sandbox_ledger import keys as k

    made = [record(age=timedelta(seconds=100 - i), phase="ready", now=clock.now) for i in range(12)]
    # The newest record's shard holds another one (random ids left it alone one time in 24,
    # and the cursor then had no position to alter: that shard was drained).
    newest_shard = k.shard_of(k.resource_pk(made[-1].id), 4)
    while sum(k.shard_of(k.resource_pk(r.id), 4) == newest_shard for r in made) < 2:
        made.insert(0, record(age=timedelta(seconds=200), phase="ready", now=clock.now))
    for r in made:
        store.put(r)
    caught_up(moto_server)  # the cursor must hold a position in the newest record's shard
    cursor = store.list(phase="ready", limit=1).cursor
    assert cursor is not None
    body = unseal(cursor)
    assert any(path[-1:] == ("gsk",) for path, _ in state_paths(body["s"])), body

    def refused(bad: str, **opts: Any) -> None:
        with pytest.raises(InvalidInputError, match="cursor") as info:
            store.list(limit=1, cursor=bad, **{"phase": "ready", **opts})
        assert info.value.field == "cursor"

    for i in range(0, len(cursor), 5):
        refused(cursor[:i] + ("A" if cursor[i] != "A" else "B") + cursor[i + 1 :])
    for path, value in state_paths(body["s"]):
        for wrong in wrong_types(value) if path else []:
            refused(seal({**body, "s": with_value(body["s"], path, wrong)}))
    for opts in ({"phase": "allocating"}, {"phase": None}, {"provider": "docker"}):
        refused(cursor, **opts)
    # The listing's own cursor still pages on, with another limit too.
    assert len(store.list(phase="ready", limit=50, cursor=cursor).records) == len(made) - 1


def test_bad_records_write_nothing(store: SyncResourceRecordStore) -> None:
    with pytest.raises(ValueError, match="record"):
        store.put({"id": "x"})  # type: ignore[arg-type]
    assert store.list().records == []


def test_one_uuid_is_one_record_however_it_is_spelled(
    store: SyncResourceRecordStore, moto_server: Any
) -> None:
    r = record()
    store.put(r)
    spellings = [r.id.upper(), "{" + r.id + "}", "urn:uuid:" + r.id, r.id.replace("-", "")]
    for spelling in spellings:
        with pytest.raises(ValueError, match=r"id: .* canonical form"):
            ResourceActivityRecord.model_validate({**r.wire(), "id": spelling})
        # model_copy(update=...) skips validation: the store refuses the key itself.
        with pytest.raises(InvalidInputError, match=r"^id: "):
            store.put(r.model_copy(update={"id": spelling}))
        for call in (store.get, store.touch, store.delete):
            with pytest.raises(InvalidInputError, match=r"^id: ") as refused:
                call(spelling)
            assert refused.value.field == "id"
        with pytest.raises(InvalidInputError, match=r"^id: "):
            store.record_operation_start(spelling, "exec")
    caught_up(moto_server)  # the listing's settled state: one record, listed once
    listed = store.list()
    assert [v.record.id for v in listed.records] == [r.id] and listed.unreadable == []
    stored = store.get_versioned(r.id)
    assert stored is not None and stored.revision == 1 and stored.record == r


async def test_async_store(
    moto_endpoint: str, sync_table: str, indexes_caught_up: Callable[[str | None], Awaitable[None]]
) -> None:
    async with ResourceRecordStore(sync_table, endpoint_url=moto_endpoint) as store:
        r = record(operations=[])
        await store.put(r)
        await asyncio.gather(*(store.record_operation_start(r.id, "exec") for _ in range(10)))
        current = await store.get(r.id)
        assert current is not None and current.operations[0].count == 10
        touched = await store.touch(r.id)
        assert touched.record.updated_at_ms >= r.updated_at_ms
        await indexes_caught_up(sync_table)  # the listing's settled state
        page = await store.list(phase="ready")
        assert [v.record.id for v in page.records] == [r.id]
        assert await store.delete(r.id)
        assert await store.get(r.id) is None


DAY = timedelta(days=1)
NO_AGE = timedelta(0)


def _ttl_attribute(store: SyncResourceRecordStore, record_id: str) -> int | None:
    item = store.client().get_item(
        TableName=store.table_name,
        Key={"PK": {"S": f"R#{record_id}"}, "SK": {"S": "RECORD"}},
        ConsistentRead=True,
    )["Item"]
    return int(item["expiresAt"]["N"]) if "expiresAt" in item else None


def test_a_record_kept_forever_has_no_ttl_and_is_readable_40_days_later(
    moto_endpoint: str, sync_table: str, clock: Clock, moto_server: Any
) -> None:
    """retain_failed 0 keeps failed records forever: no TTL attribute for DynamoDB to act on,
    through put, touch and operations, and every read (get, list, ls) shows it 40 days on.
    A record that goes back to a live phase gets a TTL again."""
    from typer.testing import CliRunner

    from sandbox_ledger.cli import app
    from sandbox_ledger.resources import ExpiryPolicy, sweep

    forever = ExpiryPolicy(retain_failed=timedelta(0))
    store = SyncResourceRecordStore(
        sync_table, endpoint_url=moto_endpoint, clock=clock, policy=forever
    )
    written = clock.now
    kept = store.put(record(phase="cleanup-failed", now=clock.now))
    rid = kept.record.id
    assert kept.expires_at is None and _ttl_attribute(store, rid) is None
    counter = RequestCounter().attach(store.client())
    store.touch(rid)  # assumes a live phase first, then writes the failed phase's (none)
    assert dict(counter.calls) == {"UpdateItem": 2}
    store.record_operation_start(rid, "cleanup")
    assert _ttl_attribute(store, rid) is None
    clock.now += 40 * DAY
    assert store.get(rid) is not None
    caught_up(moto_server)  # about the TTL, not the index: the listing's settled state
    assert [r.record.id for r in store.list(phase="cleanup-failed").records] == [rid]
    result = sweep(store, None, now=clock.now, policy=forever, dry_run=True)
    assert result.expired == [] and result.observed == []
    # `resources ls` (the real clock: the record was written 40 days before it).
    old = SyncResourceRecordStore(
        sync_table, endpoint_url=moto_endpoint, clock=lambda: written - 40 * DAY, policy=forever
    )
    ancient = old.put(record(phase="allocation-uncertain", now=written - 40 * DAY)).record
    caught_up(moto_server)  # as above
    args = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    listed = CliRunner().invoke(app, [*args, "resources", "ls"])
    assert listed.exit_code == 0 and ancient.id in listed.output, listed.output
    # Back to a live phase: a TTL again (two stale windows and the horizon after the write).
    live = store.put(kept.record.model_copy(update={"phase": "ready"}))
    assert live.expires_at == int(clock.now.timestamp()) + 30 * 60 + 30 * 86400


def test_retention_longer_than_the_horizon_is_honoured_by_the_ttl(
    moto_endpoint: str, sync_table: str, clock: Clock
) -> None:
    """retain_failed 60 days: a failed record's TTL lies beyond the latest the sweep could
    expire it (two windows after its last write), plus the horizon, never at 30 days."""
    from sandbox_ledger.resources import ExpiryPolicy

    policy = ExpiryPolicy(retain_failed=timedelta(days=60))
    store = SyncResourceRecordStore(
        sync_table, endpoint_url=moto_endpoint, clock=clock, policy=policy
    )
    failed = store.put(record(phase="cleanup-failed", now=clock.now))
    updated_s = failed.record.updated_at_ms // 1000
    assert failed.expires_at is not None and failed.expires_at > updated_s + 60 * 86400
    assert failed.expires_at == int(clock.now.timestamp()) + (120 + 30) * 86400
    clock.now += 59 * DAY
    touched = store.touch(failed.record.id)
    assert touched.expires_at == int(clock.now.timestamp()) + (120 + 30) * 86400
    clock.now += 59 * DAY
    assert store.get(failed.record.id) is not None


def test_the_writer_takes_the_policy_from_the_deployment_and_refuses_another(
    moto_endpoint: str, sync_table: str, clock: Clock
) -> None:
    """A deployed table's descriptor names the windows: a store without a policy writes TTLs
    by them; one given a policy that disagrees is refused before it writes anything."""
    import boto3

    from sandbox_ledger.deployment import DeploymentMismatchError, TableDescriptor, descriptor_item
    from sandbox_ledger.resources import ExpiryPolicy

    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    client.delete_item(
        TableName=sync_table, Key={"PK": {"S": "DEPLOYMENT"}, "SK": {"S": "DESCRIPTOR"}}
    )
    deployed = TableDescriptor(
        shard_count=4, event_bus_name="b", stale_after_seconds=600, retain_failed_seconds=0
    )
    client.put_item(TableName=sync_table, Item=descriptor_item(deployed))
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint, clock=clock)
    kept = store.put(record(phase="cleanup-failed", now=clock.now))
    assert kept.expires_at is None and store.policy == ExpiryPolicy(
        stale_after=timedelta(seconds=600), retain_failed=timedelta(0)
    )
    live = store.put(record(now=clock.now))
    assert live.expires_at == int(clock.now.timestamp()) + 2 * 600 + 30 * 86400
    other = SyncResourceRecordStore(
        sync_table, endpoint_url=moto_endpoint, clock=clock, policy=ExpiryPolicy()
    )
    with pytest.raises(DeploymentMismatchError, match="stale_after_seconds"):
        other.put(record(phase="cleanup-failed", now=clock.now))
    agreeing = SyncResourceRecordStore(
        sync_table,
        endpoint_url=moto_endpoint,
        clock=clock,
        policy=ExpiryPolicy(stale_after=timedelta(minutes=10), retain_failed=timedelta(0)),
    )
    assert agreeing.put(record(phase="allocation-uncertain", now=clock.now)).expires_at is None


def test_list_cursors_are_bound_to_the_table_not_its_name(
    moto_endpoint: str,
    sync_table: str,
    store: SyncResourceRecordStore,
    clock: Clock,
    moto_server: Any,
) -> None:
    """The same table name in another region (or account) refuses a cursor; another client
    of the same table pages on with it."""
    with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint, region_name="eu-west-1") as t:
        t.create_table()
    elsewhere = SyncResourceRecordStore(
        sync_table, endpoint_url=moto_endpoint, region_name="eu-west-1", clock=clock
    )
    for target in (store, elsewhere):
        for i in range(3):
            target.put(record(age=timedelta(seconds=100 - i), phase="ready", now=clock.now))
    caught_up(moto_server)  # about whose cursor it is: the listings' settled state
    cursor = store.list(phase="ready", limit=1).cursor
    assert cursor is not None
    with pytest.raises(InvalidInputError, match="cursor") as refused:
        elsewhere.list(phase="ready", limit=10, cursor=cursor)
    assert refused.value.field == "cursor"
    other_client = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint, clock=clock)
    assert len(other_client.list(phase="ready", limit=10, cursor=cursor).records) == 2


def test_a_walk_of_pages_lists_a_record_moved_between_pages_once(
    store: SyncResourceRecordStore, clock: Clock, moto_server: Any
) -> None:
    """Settled indexes, and a write between two pages: X (ready) is listed on the first page
    after A and B (closing); its owner, whose clock is a little behind B's, moves it to
    closing dated between B and X, below where B's partition resumes. The walk lists it once
    (it listed it twice on 62044f1)."""
    b = record(phase="closing", age=timedelta(minutes=2), now=clock.now)
    x = record_in_shard_of("ready", b.id)
    c = record_in_shard_of("closing", b.id)
    a = record(phase="ready", age=timedelta(minutes=1), now=clock.now)
    ages = {x.id: timedelta(minutes=3), c.id: timedelta(minutes=10)}
    for r in (a, b, x, c):
        stored = r.model_copy(update={"updated_at": to_iso(clock.now - ages.get(r.id, NO_AGE))})
        store.put(stored if r.id in ages else r)
    caught_up(moto_server)  # a walk over settled indexes: the move alone is at stake
    first = store.list(limit=3)
    assert [v.record.id for v in first.records] == [a.id, b.id, x.id]
    behind = to_iso(clock.now - timedelta(seconds=150))
    store.put(x.model_copy(update={"phase": "closing", "updated_at": behind}))
    caught_up(moto_server)  # as above
    walked = [v.record.id for v in first.records]
    cursor = first.cursor
    while cursor is not None:
        page = store.list(limit=3, cursor=cursor)
        walked += [v.record.id for v in page.records]
        cursor = page.cursor
    assert walked == [a.id, b.id, x.id, c.id]
    assert [v.record.id for v in store.list(limit=10).records] == [a.id, b.id, x.id, c.id]


def test_a_cursor_of_an_earlier_version_still_pages_on(
    store: SyncResourceRecordStore, clock: Clock, moto_server: Any
) -> None:
    """A cursor made before cursors carried the walk's position (its state a position per
    partition only) still pages on, as it did."""
    made = [record(age=timedelta(seconds=100 - i), now=clock.now) for i in range(5)]
    for r in made:
        store.put(r)
    caught_up(moto_server)  # about the cursor's form: the listing's settled state
    first = store.list(limit=2)
    assert first.cursor is not None
    body = unseal(first.cursor)
    assert set(body["s"]) == {"p", "f"}
    earlier = seal({**body, "s": {"p": body["s"]["p"]}})
    rest = store.list(limit=10, cursor=earlier)
    listed = [v.record.id for v in [*first.records, *rest.records]]
    assert listed == [r.id for r in reversed(made)] and rest.cursor is None
