"""Issue 42, items 1 and 2: every write of the sweep lands only on the record it read. A
sweeper whose claim another run took over deletes nothing, and a claim (or an observation)
never lands on a record deleted and allocated again under the same id, although that record's
revision starts again at 1.

Each scenario runs on every store that keeps resource records: the DynamoDB store (on the
moto server) and the in-memory SweepStore that the sweep's own tests use (its rules the same:
tests/resources/test_resources_sweeper.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import boto3
import pytest

from resources.resource_fixtures import Collector, caught_up, record
from resources.test_resources_sweeper import FakeStore
from sandbox_ledger import keys as k
from sandbox_ledger.errors import ConflictError
from sandbox_ledger.resources import (
    Expiry,
    ResourceActivityRecord,
    SweepStore,
    SyncResourceRecordStore,
    VersionedRecord,
    sweep,
)
from sandbox_ledger.resources import _items as ri

# The default stale_after and a minute (see WINDOW in test_resources_expiry.py).
WINDOW = timedelta(minutes=16)
# Past the default two-minute lease of a claim made at ``now + WINDOW``.
TAKEOVER = WINDOW + timedelta(minutes=3)


class World(Protocol):
    store: SweepStore

    def put(self, r: ResourceActivityRecord) -> VersionedRecord:
        """The owner's plain put (a new allocation where none is stored)."""
        ...

    def delete(self, record_id: str) -> None:
        """The owner's delete."""
        ...

    def get(self, record_id: str) -> VersionedRecord | None: ...

    def settle(self) -> None:
        """Return once the store's index shows every write made so far."""
        ...


class MemoryWorld:
    def __init__(self) -> None:
        self.store = FakeStore()

    def put(self, r: ResourceActivityRecord) -> VersionedRecord:
        current = self.store.records.get(r.id)
        if current is None:
            self.store.allocate(r.id, r)
        else:
            assert current.expiring is None
            self.store.records[r.id] = replace(current, record=r, revision=current.revision + 1)
        return self.store.records[r.id]

    def delete(self, record_id: str) -> None:
        self.store.records.pop(record_id, None)

    def get(self, record_id: str) -> VersionedRecord | None:
        return self.store.records.get(record_id)

    def settle(self) -> None:
        pass  # the in-memory store has no index to lag


class DynamoDBWorld:
    def __init__(self, endpoint: str, table: str, server: Any) -> None:
        self.store = SyncResourceRecordStore(table, endpoint_url=endpoint)
        self.owner = SyncResourceRecordStore(table, endpoint_url=endpoint)
        self.server, self.table = server, table

    def put(self, r: ResourceActivityRecord) -> VersionedRecord:
        return self.owner.put(r)

    def delete(self, record_id: str) -> None:
        self.owner.delete(record_id)

    def get(self, record_id: str) -> VersionedRecord | None:
        return self.owner.get_versioned(record_id)

    def settle(self) -> None:
        caught_up(self.server, self.table)


@pytest.fixture(params=["memory", "dynamodb"])
def world(request: pytest.FixtureRequest) -> World:
    if request.param == "memory":
        return MemoryWorld()
    return DynamoDBWorld(
        request.getfixturevalue("moto_endpoint"),
        request.getfixturevalue("sync_table"),
        request.getfixturevalue("moto_server"),
    )


class Interposed:
    """``store`` with ``action`` run once, ahead of its first ``method`` call about the record
    ``record_id`` (its first argument is that record)."""

    def __init__(self, store: SweepStore, method: str, record_id: str, action: Any) -> None:
        self._store = store
        self._method = method
        self._record_id = record_id
        self._action: Any = action

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if name != self._method:
            return method

        def interposed(about: VersionedRecord, *args: Any, **kwargs: Any) -> Any:
            if self._action is not None and about.record.id == self._record_id:
                self._action, action = None, self._action
                action()
            return method(about, *args, **kwargs)

        return interposed


def test_a_sweeper_whose_claim_was_taken_over_deletes_nothing(world: World) -> None:
    """Sweeper A claims X and stalls inside publish past its lease; B, three minutes later on
    its clock, takes the claim over, publishes and deletes X; the owner, told its sandbox was
    reclaimed, allocates again under the id (a plain put); then A's publish returns. A must
    not delete the owner's new record, and must not report X as expired: B did."""
    old = world.put(record(age=timedelta(hours=1)))
    rid = old.record.id
    world.settle()  # the scenario is about the claim, not finding the record: settled index
    now = datetime.now(UTC)
    assert sweep(world.store, Collector(), now=now).observed == [rid]
    events = Collector()
    b_results = []
    again: list[VersionedRecord] = []

    class StallsPastItsLease:
        def publish(self, expiries: Sequence[Expiry]) -> set[str]:
            b_results.append(sweep(world.store, events, now=now + TAKEOVER))
            again.append(world.put(record(age=timedelta(0), id=rid, workspace="/again")))
            return events.publish(expiries)  # A's PutEvents lands at last

    a = sweep(world.store, StallsPastItsLease(), now=now + WINDOW)
    [b] = b_results
    assert (b.expired, b.lost, b.failed) == ([rid], [], [])
    assert (a.expired, a.lost, a.failed) == ([], [rid], []) and rid not in a.reasons
    assert a.to_dict()["lost"] == [rid]
    live = world.get(rid)
    assert live is not None and live.record.workspace == "/again" and live.expiring is None
    assert (live.revision, live.incarnation) == (again[0].revision, again[0].incarnation)
    # Both PutEvents landed (nothing takes an accepted event back): one expiry, one
    # idempotency key, the old record's; the sweeps' results report it once, B's.
    assert [e.record.id for e in events.published] == [rid, rid]
    assert {e.idempotency_key for e in events.published} == {
        f"{rid}/{old.record.created_at}/{old.revision}"
    }
    assert sum(r.expired.count(rid) for r in (a, b)) == 1


def test_a_claim_is_never_on_a_new_record_at_the_revision_judged(world: World) -> None:
    """The sweeper reads X at revision 1, observed a window ago (due); before its claim the
    owner deletes X and allocates again under the id, the new record at revision 1 too. The
    claim must fail: nothing published, nothing deleted."""
    old = world.put(record(age=timedelta(hours=1)))
    rid = old.record.id
    world.settle()  # the scenario is about the claim, not finding the record: settled index
    now = datetime.now(UTC)
    assert sweep(world.store, Collector(), now=now).observed == [rid]
    again: list[VersionedRecord] = []

    def reallocate() -> None:
        world.delete(rid)
        again.append(world.put(record(age=timedelta(hours=1), id=rid, workspace="/again")))

    events = Collector()
    result = sweep(Interposed(world.store, "claim", rid, reallocate), events, now=now + WINDOW)  # type: ignore[arg-type]
    assert again and again[0].revision == old.revision == 1  # the revision repeats
    assert (result.expired, result.skipped, result.lost) == ([], [rid], [])
    assert events.published == []
    live = world.get(rid)
    assert live is not None and live.record.workspace == "/again" and live.expiring is None
    assert live.incarnation is not None and live.incarnation != old.incarnation
    assert live.observed_ms is None  # nobody has observed the new record yet


def test_a_takeover_is_never_of_a_new_record_at_the_revision_read(world: World) -> None:
    """Sweeper C reads X claimed by a run whose lease ended (revision 2); before C takes the
    claim over, X is deleted and allocated again, and its owner writes once (revision 2
    again, unclaimed). C's takeover must fail: nothing published, nothing deleted."""
    old = world.put(record(age=timedelta(hours=1)))
    rid = old.record.id
    now = datetime.now(UTC)
    now_ms = int(now.timestamp() * 1000)
    claimed = world.store.claim(old, "stale", owner="run-a", now_ms=now_ms, until_ms=now_ms + 1)
    assert claimed.revision == 2
    world.settle()  # the scenario is about the claim, not finding the record: settled index

    def reallocate() -> None:
        world.delete(rid)
        world.put(record(age=timedelta(hours=1), id=rid, workspace="/again"))
        world.put(record(age=timedelta(minutes=59), id=rid, workspace="/again"))

    events = Collector()
    later = now + timedelta(minutes=3)
    result = sweep(Interposed(world.store, "claim", rid, reallocate), events, now=later)  # type: ignore[arg-type]
    assert (result.expired, result.skipped, result.lost) == ([], [rid], [])
    assert events.published == []
    live = world.get(rid)
    assert live is not None and live.revision == claimed.revision and live.expiring is None
    assert live.record.workspace == "/again"


def test_an_observation_is_never_of_a_new_record_at_the_revision_read(world: World) -> None:
    """The sweeper reads X at revision 1; before its observation the owner allocates X again
    (revision 1 again). The observation must fail: the window of the new record has not
    begun, so a sweep a window later expires nothing."""
    old = world.put(record(age=timedelta(hours=1)))
    rid = old.record.id

    def reallocate() -> None:
        world.delete(rid)
        world.put(record(age=timedelta(hours=1), id=rid, workspace="/again"))

    world.settle()  # the scenario is about the claim, not finding the record: settled index
    now = datetime.now(UTC)
    first = sweep(Interposed(world.store, "observe", rid, reallocate), Collector(), now=now)  # type: ignore[arg-type]
    assert first.observed == [] and first.skipped == [rid]
    live = world.get(rid)
    assert live is not None and live.revision == 1 and live.observed_ms is None
    events = Collector()
    world.settle()  # the next run is to find the record allocated again: settled index
    # The next run observes the new record; only a window after that does it expire.
    assert sweep(world.store, events, now=now + WINDOW).observed == [rid]
    assert events.published == [] and world.get(rid) is not None


def test_a_record_written_before_incarnations_expires_and_is_never_taken_for_another(
    moto_endpoint: str, sync_table: str, moto_server: Any
) -> None:
    """A record with no incarnation (written by an older version) still expires; one deleted
    and allocated again by an older writer (no incarnation either, revision 1 again) is told
    apart by the observation the claim rests on. An owner's heartbeat gives a record without
    an incarnation one."""
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    raw = boto3.client("dynamodb", endpoint_url=moto_endpoint)

    def old_writer_put(r: ResourceActivityRecord) -> None:
        raw.put_item(
            TableName=sync_table,
            Item={
                **ri.record_key(r.id),
                k.REVISION: {"N": "1"},
                **ri.write_values(r, expires_at=2**31, shard_count=4),
            },
        )

    legacy, reused = record(age=timedelta(hours=1)), record(age=timedelta(hours=1))
    for r in (legacy, reused):
        old_writer_put(r)
        assert store.get_versioned(r.id).incarnation is None  # type: ignore[union-attr]
    caught_up(moto_server, sync_table)  # about incarnations, not finding them: settled index
    now = datetime.now(UTC)
    assert sorted(sweep(store, Collector(), now=now).observed) == sorted([legacy.id, reused.id])

    def reallocate() -> None:
        store.delete(reused.id)
        old_writer_put(reused.model_copy(update={"workspace": "/again"}))

    events = Collector()
    result = sweep(Interposed(store, "claim", reused.id, reallocate), events, now=now + WINDOW)  # type: ignore[arg-type]
    assert result.expired == [legacy.id] and result.skipped == [reused.id]
    assert [e.record.id for e in events.published] == [legacy.id]
    live = store.get_versioned(reused.id)
    assert live is not None and live.record.workspace == "/again" and live.expiring is None
    assert store.touch(reused.id).incarnation is not None


def test_an_operation_never_writes_an_old_incarnation_over_a_new_one(
    moto_endpoint: str, sync_table: str
) -> None:
    """record_operation reads the record and writes it back changed on the revision read: a
    record deleted and allocated again in between, at the same revision, is read again, never
    overwritten with the old one's fields."""
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    other = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    old = store.put(record(workspace="/old", operations=[]))
    rid = old.record.id
    again: list[VersionedRecord] = []

    def reallocate_first(params: dict[str, Any], **_: Any) -> None:
        if ":expected" in params.get("ExpressionAttributeValues", {}) and not again:
            other.delete(rid)
            again.append(other.put(record(workspace="/again", operations=[], id=rid)))

    store.client().meta.events.register(
        "before-parameter-build.dynamodb.UpdateItem", reallocate_first
    )
    done = store.record_operation_start(rid, "exec")
    assert again and again[0].revision == old.revision  # the same revision, another record
    assert done.record.workspace == "/again" and done.incarnation == again[0].incarnation
    assert [(o.kind, o.count) for o in done.record.operations] == [("exec", 1)]
    assert store.get(rid) == done.record


def test_an_owners_write_on_the_record_it_read_refuses_a_new_allocation(
    moto_endpoint: str, sync_table: str
) -> None:
    """An owner's put or delete with the revision and incarnation it read is refused once the
    record was deleted and allocated again, even at the same revision."""
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    read = store.put(record(workspace="/old"))
    rid = read.record.id
    store.delete(rid)
    again = store.put(record(workspace="/again", id=rid))
    assert again.revision == read.revision and again.incarnation != read.incarnation
    changed = read.record.model_copy(update={"phase": "closing"})
    for write in (
        lambda: store.put(
            changed, expected_revision=read.revision, expected_incarnation=read.incarnation
        ),
        lambda: store.delete(
            rid, expected_revision=read.revision, expected_incarnation=read.incarnation
        ),
    ):
        with pytest.raises(
            ConflictError,
            match=rf"^(put|delete) {rid}: it was deleted and allocated again since it was read",
        ):
            write()
    assert store.get(rid) == again.record
    with pytest.raises(ValueError, match="expected_incarnation: needs expected_revision"):
        store.put(changed, expected_incarnation=again.incarnation)
    done = store.put(
        changed, expected_revision=again.revision, expected_incarnation=again.incarnation
    )
    assert done.record.phase == "closing" and done.incarnation == again.incarnation
    assert store.delete(rid, expected_revision=done.revision, expected_incarnation=done.incarnation)


@pytest.mark.parametrize("as_json", [True, False])
def test_resources_sweep_shows_a_lost_claim(
    moto_endpoint: str,
    sync_table: str,
    event_bus: str,
    monkeypatch: pytest.MonkeyPatch,
    as_json: bool,
    moto_server: Any,
) -> None:
    """`resources sweep` whose PutEvents stalls past its lease while another sweep takes the
    claim over: its output says the claim was lost, and counts nothing as expired."""
    from typer.testing import CliRunner

    import sandbox_ledger.resources as resources
    from resources.resource_fixtures import observed_earlier
    from sandbox_ledger.cli import app

    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    stored = store.put(record(age=timedelta(hours=1)))
    rid = stored.record.id
    observed_earlier(store, stored, timedelta(minutes=16))
    caught_up(moto_server, sync_table)  # about the lost claim, not finding it: settled index
    taken_over = []

    class Stalls(resources.EventPublisher):
        def publish(self, expiries: Sequence[Expiry]) -> set[str]:
            later = datetime.now(UTC) + timedelta(minutes=3)
            taken_over.append(sweep(store, Collector(), now=later))
            return super().publish(expiries)

    monkeypatch.setattr(resources, "EventPublisher", Stalls)
    monkeypatch.delenv("SANDBOX_LEDGER_TABLE", raising=False)
    args = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    flags = ["--event-bus", event_bus, "--stale-after", "900", "--retain-failed", "604800"]
    shown = CliRunner().invoke(
        app, [*args, "resources", "sweep", *flags, *(["--json"] if as_json else [])]
    )
    assert shown.exit_code == 0, shown.output
    assert [r.expired for r in taken_over] == [[rid]]
    if as_json:
        doc = json.loads(shown.stdout)
        assert (doc["expired"], doc["lost"], doc["failed"]) == ([], [rid], [])
    else:
        assert f"expired {rid}" not in shown.output
        assert "0 expired" in shown.output
        assert "1 claim(s) lost" in shown.output and rid in shown.output


def test_the_sweeper_handler_counts_a_lost_claim(
    moto_endpoint: str, sync_table: str, event_bus: str, moto_server: Any
) -> None:
    """The scheduled handler's summary lists a lost claim and its Lost metric counts it."""
    from resources.resource_fixtures import FakeContext, observed_earlier
    from sandbox_ledger.handlers import expire_stale_resources as handler

    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    stored = store.put(record(age=timedelta(hours=1)))
    observed_earlier(store, stored, timedelta(minutes=16))
    caught_up(moto_server, sync_table)  # about the lost claim, not finding it: settled index
    environ = {
        "TABLE_NAME": sync_table,
        "EVENT_BUS_NAME": event_bus,
        "AWS_ENDPOINT_URL": moto_endpoint,
    }
    sweeper = handler.build(environ)
    taken_over = []

    def stall(**_: Any) -> None:
        if not taken_over:
            later = datetime.now(UTC) + timedelta(minutes=3)
            taken_over.append(sweep(store, Collector(), now=later))

    sweeper.events.meta.events.register("before-call.events.PutEvents", stall)
    handler.metrics.clear_metrics()
    try:
        summary = handler.run(sweeper, FakeContext().get_remaining_time_in_millis)
        lost = handler.metrics.metric_set["Lost"]["Value"]
    finally:
        handler.metrics.clear_metrics()
    assert [r.expired for r in taken_over] == [[stored.record.id]]
    assert (summary["expired"], summary["lost"]) == ([], [stored.record.id])
    assert lost == [1.0]
