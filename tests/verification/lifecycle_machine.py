"""The resource-record lifecycle as a Hypothesis state machine: owners (heartbeats, operations,
crashes, skewed clocks), sweepers (one, two at once, one dying mid-run) and EventBridge (its
256 KB / 10-entry limits enforced by a hook), on the embedded server with a controllable clock.

What EventBridge accepted is recorded by an ``after-call`` hook on the events client: the
checker sees exactly what reclaimers would receive. Every store follows the machine's expiry
policy. Invariants (the claim protocol of docs/resource-expiry.md: staleness judged by the
sweeper's own clock, claims at the revision read, publication at least once, a claimed record
refuses its owner):

- L1 nothing is published while its policy keeps it, by the sweeper or by the TTL backstop:
  judged on the true time since its owner's last acknowledged write (live phase: within
  ``stale_after``; failed phase: within ``retain_failed``, or ever when that is 0);
- L2 an owner who heartbeated within ``stale_after`` of a sweep is never published by that
  sweep, whatever its clock (skews of minutes either way);
- L3 a published record is never revived: no owner write is acknowledged after its claim, and the
  owner's next write fails with ConflictError;
- L4 every record a sweep removed was published (at least once), and a record published is gone;
  a sweep that completes without a sweeper dying publishes each record at most once, even with
  two sweepers running at once;
- L5 after a complete sweep by a live sweeper, no record is left claimed;
- L6 no claim outlives its lease (two minutes from the sweep that made it).
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from botocore.exceptions import ClientError
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from sandbox_ledger import ConflictError, LedgerError
from sandbox_ledger import keys as k
from sandbox_ledger.resources import SyncResourceRecordStore
from sandbox_ledger.resources._items import record_key
from sandbox_ledger.resources.events import EventPublisher
from sandbox_ledger.resources.models import FAILED_PHASES, LIVE_PHASES, to_iso
from sandbox_ledger.resources.policy import ExpiryPolicy
from sandbox_ledger.resources.stream import TTL_PRINCIPAL, ttl_expiry
from sandbox_ledger.resources.sweeper import DEFAULT_LEASE, sweep

from . import checks
from .stores import ClientDied

if TYPE_CHECKING:
    from collections.abc import Callable

STALE_AFTER = timedelta(minutes=15)
SKEWS = (timedelta(0), timedelta(minutes=-4), timedelta(minutes=3))
PUT_EVENTS_MAX_BYTES = 256 * 1024
PUT_EVENTS_MAX_ENTRIES = 10
START = datetime(2026, 12, 1, tzinfo=UTC)
ZERO = timedelta(0)


class Clock:
    """The true time of the simulation; every participant reads it, some with a skew."""

    def __init__(self) -> None:
        self.now = START

    def skewed(self, skew: timedelta) -> Callable[[], datetime]:
        return lambda: self.now + skew


def entry_size(entry: dict[str, Any]) -> int:
    """PutEvents entry size as EventBridge counts it (UTF-8 bytes of the text fields)."""
    size = 14 if entry.get("Time") else 0
    for name in ("Source", "DetailType", "Detail", "EventBusName"):
        size += len(str(entry.get(name, "")).encode())
    return size + sum(len(r.encode()) for r in entry.get("Resources", []))


class EventBus:
    """Hooks on an events client: enforce PutEvents' limits, record what was accepted."""

    def __init__(self, client: Any) -> None:
        self.accepted: list[dict[str, Any]] = []
        self.refused = 0
        self._lock = threading.Lock()
        client.meta.events.register("before-parameter-build.events.PutEvents", self._limits)
        client.meta.events.register("after-call.events.PutEvents", self._record)

    def _limits(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        entries = params.get("Entries", [])
        total = sum(entry_size(e) for e in entries)
        if len(entries) > PUT_EVENTS_MAX_ENTRIES or total > PUT_EVENTS_MAX_BYTES:
            with self._lock:
                self.refused += 1
            raise ClientError(
                {
                    "Error": {
                        "Code": "ValidationException",
                        "Message": f"{len(entries)} entries, {total} bytes: over the limit",
                    }
                },
                "PutEvents",
            )
        context["entries"] = entries

    def _record(self, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        for sent, result in zip(
            context.get("entries", []), parsed.get("Entries", []), strict=False
        ):
            if result.get("EventId"):
                with self._lock:
                    self.accepted.append(json.loads(sent["Detail"]))


class SweeperDeath:
    """``before-call`` hook on a sweeper's DynamoDB client: dies before its k-th call."""

    def __init__(self, client: Any) -> None:
        self.at: int | None = None
        self.calls = 0
        client.meta.events.register("before-call.dynamodb", self)

    def arm(self, k: int | None) -> None:
        self.at, self.calls = k, 0

    def __call__(self, model: Any, **_: Any) -> None:
        if self.at is None:
            return
        self.calls += 1
        if self.calls >= self.at:
            self.at = None
            raise ClientDied(f"sweeper died before {model.name}")


class BeforeClaim:
    """``before-parameter-build`` hook on a sweeper's client: runs ``action`` once, just before
    the sweeper's UpdateItem on ``key`` (its claim), i.e. between its read and its claim."""

    def __init__(self, client: Any) -> None:
        self.key: dict[str, Any] | None = None
        self.action: Callable[[], None] | None = None
        client.meta.events.register("before-parameter-build.dynamodb.UpdateItem", self)

    def arm(self, key: dict[str, Any] | None, action: Callable[[], None] | None) -> None:
        self.key, self.action = key, action

    def __call__(self, params: dict[str, Any], **_: Any) -> None:
        if self.action is not None and params.get("Key") == self.key:
            action, self.action = self.action, None
            action()


@dataclass
class Owner:
    skew: timedelta
    phase: str
    alive: bool = True
    reclaimed: bool = False
    last_ack: datetime = START  # true time of the last acknowledged write
    revisions: list[int] = field(default_factory=list)
    oversized: bool = False


@dataclass
class Rig:
    """Per test run: a table, owner stores per clock skew, two sweepers, the bus."""

    clock: Clock
    owners: dict[timedelta, SyncResourceRecordStore]
    sweepers: list[tuple[SyncResourceRecordStore, EventPublisher, SweeperDeath]]
    before_claim: BeforeClaim
    bus: EventBus
    table: str
    empty: Callable[[], None]


class LifecycleMachine(RuleBasedStateMachine):
    rig: ClassVar[Rig]
    retain_failed: ClassVar[timedelta] = timedelta(days=7)
    # The claim protocol of issue 9 (the default): staleness by the sweeper's own clock (L2 for
    # every owner, whatever its clock), two sweepers at once publish each record once, records
    # past EventBridge's size limits are still reported. False: the older, weaker protocol.
    strict: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.rig.empty()
        self.rig.clock.now = START
        self.rig.bus.accepted.clear()
        self.owners: dict[str, Owner] = {}
        self.published: dict[str, list[dict[str, Any]]] = {}
        self.policy = ExpiryPolicy(stale_after=STALE_AFTER, retain_failed=self.retain_failed)
        self.messy = False  # a sweeper died or raced since the last clean sweep
        # Records published while a sweep was messy: at least once, so maybe more than once.
        self.excused: set[str] = set()
        self.log: list[str] = []
        # While a sweep runs beside owner writes: refused writes to check once it ends.
        self.in_flight: list[str] | None = None

    @property
    def now(self) -> datetime:
        return self.rig.clock.now

    def _note(self, text: str) -> None:
        self.log.append(f"[{self.now:%H:%M:%S}] {text}")

    def _fail(self, message: str) -> checks.Violation:
        history = "\n  ".join(self.log)
        return checks.Violation(f"{message}\nhistory:\n  {history}")

    # -- owners ------------------------------------------------------------------------------

    @rule(
        skew=st.sampled_from(SKEWS),
        phase=st.sampled_from([*LIVE_PHASES, *FAILED_PHASES]),
        oversized=st.booleans(),
    )
    def create(self, skew: timedelta, phase: str, oversized: bool) -> None:
        """A new record; oversized ones (a 300 KB error text) only under the strict protocol,
        which promises to report them within EventBridge's limits."""
        from resources.resource_fixtures import record

        store = self.rig.owners[skew]
        extra: dict[str, Any] = {}
        if oversized and self.strict:
            extra["lastFailure"] = {
                "kind": "exec",
                "outcome": "failed",
                "at": to_iso(store.clock()),
                "error": "x" * 300_000,
            }
        new = record(phase=phase, now=store.clock(), **extra)
        stored = store.put(new)
        self.owners[new.id] = Owner(
            skew, phase, last_ack=self.now, revisions=[stored.revision], oversized=bool(extra)
        )
        self._note(f"create {new.id[:8]} phase={phase} skew={skew}")

    def _live(self) -> list[str]:
        # Creation order, not the ids' order: the ids are random, so sorting them made a
        # replay draw other records than the run it replays (Hypothesis: flaky).
        return [i for i, o in self.owners.items() if o.alive and not o.reclaimed]

    @precondition(lambda self: self._live())
    @rule(data=st.data(), action=st.sampled_from(["touch", "start", "finish"]))
    def owner_writes(self, data: st.DataObject, action: str) -> None:
        self._owner_write(data.draw(st.sampled_from(self._live())), action)

    def _owner_write(self, record_id: str, action: str) -> None:
        owner = self.owners[record_id]
        store = self.rig.owners[owner.skew]
        if owner.oversized:
            # moto refuses an UpdateItem that rewrites a ~300 KB body ("Item size to update
            # has exceeded the maximum allowed size", DynamoDB's limit being 400 KB for the
            # item): the owner of an oversized record only heartbeats.
            action = "touch"
        try:
            if action == "touch":
                stored = store.touch(record_id)
            elif action == "start":
                stored = store.record_operation_start(record_id, "exec")
            else:
                stored = store.record_operation_finish(record_id, "exec", "completed")
        except ConflictError:
            # The documented signal: the record was claimed (reclaimed) by a sweeper.
            if not self.published.get(record_id) and self._claimed(record_id) is None:
                if self.in_flight is None:
                    raise self._fail(
                        f"{action} on {record_id[:8]} refused, yet not claimed"
                    ) from None
                # A sweep running meanwhile may have claimed, published and deleted it: its
                # events are absorbed when it ends, and checked then.
                self.in_flight.append(record_id)
            owner.reclaimed = True
            self._note(f"{action} {record_id[:8]}: reclaimed")
            return
        if self.published.get(record_id):
            raise self._fail(f"L3: {action} on {record_id[:8]} acknowledged after publication")
        owner.last_ack = self.now
        owner.revisions.append(stored.revision)
        self._note(f"{action} {record_id[:8]} rev={stored.revision}")

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def owner_crashes(self, data: st.DataObject) -> None:
        record_id = data.draw(st.sampled_from(self._live()))
        self.owners[record_id].alive = False
        self._note(f"owner of {record_id[:8]} crashed")

    @rule(minutes=st.sampled_from([1, 5, 14, 16, 60, 60 * 24 * 8, 60 * 24 * 31]))
    def advance(self, minutes: int) -> None:
        self.rig.clock.now += timedelta(minutes=minutes)
        self._note(f"clock +{minutes} min")

    # -- sweepers ----------------------------------------------------------------------------

    def _sweep(self, which: int, die_at: int | None = None, *, absorb: bool = True) -> bool:
        """One sweep by sweeper ``which``; with ``absorb``, check what it published. Sweeps run
        concurrently pass ``absorb=False`` and their caller absorbs the bus once: each
        thread's slice of the bus also holds the events of the other."""
        store, publisher, death = self.rig.sweepers[which]
        death.arm(die_at)
        before = len(self.rig.bus.accepted)
        now = self.now
        try:
            result = sweep(store, publisher, now=now, policy=self.policy)
            complete = result.complete and not result.failed
        except (ClientDied, LedgerError) as exc:
            self._note(f"sweeper {which} died/failed: {exc}")
            complete = False
        finally:
            death.arm(None)
        if absorb:
            self._absorb(self.rig.bus.accepted[before:], now)
        self._note(f"sweep {which} complete={complete}")
        return complete

    def _absorb(self, details: list[dict[str, Any]], now: datetime) -> None:
        for detail in details:
            record = detail["record"]
            record_id = record["id"]
            self.published.setdefault(record_id, []).append(detail)
            if self.messy:
                self.excused.add(record_id)
            self._note(f"published {record_id[:8]} rev={detail['revision']}")
            owner = self.owners.get(record_id)
            if owner is None:
                raise self._fail(f"published {record_id[:8]}, which no owner created")
            # The true time since its owner's last acknowledged write: the owner's clock (and
            # so updatedAt) may be skewed, the policy is judged on the sweeper's clock.
            age = now - owner.last_ack
            phase = record["phase"]
            # L1: the policy no longer keeps it.
            window = self.policy.window(phase)
            if window is None or age < window:
                raise self._fail(f"L1: {record_id[:8]} ({phase}, age {age}) published while kept")
            # L2: an owner with a right clock who heartbeated in time is never published.
            right_clock = owner.skew == ZERO or self.strict
            if right_clock and owner.alive and now - owner.last_ack < STALE_AFTER:
                raise self._fail(f"L2: {record_id[:8]} heartbeated {now - owner.last_ack} ago")
            # L3: nothing the owner wrote after the claim was acknowledged: the detail's
            # revision is the one the claim was made at, so no acknowledged write is later (a
            # TTL removal has no claim: its revision is the last one written).
            claimed = detail.get("trigger") == "sweeper"
            if claimed and owner.revisions and max(owner.revisions) > detail["revision"]:
                raise self._fail(f"L3: owner write at rev {max(owner.revisions)} after claim")

    @rule()
    def sweep_once(self) -> None:
        """A sweep by a live sweeper with nothing injected must complete (the sweep makes
        progress whatever the records hold)."""
        complete = self._sweep(0)
        if not complete:
            raise self._fail("a sweep by a live sweeper did not complete")
        self._after_sweep(complete)

    @rule(k=st.integers(1, 6))
    def sweep_dies(self, k: int) -> None:
        """A sweeper dies before its k-th DynamoDB call (after a claim, before a delete…)."""
        self.messy = True
        self._sweep(1, die_at=k)

    @precondition(lambda self: self._live())
    @rule(data=st.data(), touches=st.integers(1, 4))
    def sweep_while_owners_write(self, data: st.DataObject, touches: int) -> None:
        """Owners heartbeat while a sweep runs: a claim must lose to a touch it did not see."""
        ids = data.draw(st.lists(st.sampled_from(self._live()), min_size=1, max_size=touches))
        self.messy = True
        self.in_flight = []
        sweeper = threading.Thread(target=self._sweep, args=(0,))
        sweeper.start()
        try:
            for record_id in ids:
                if not self.owners[record_id].reclaimed:
                    self._owner_write(record_id, "touch")
        finally:
            sweeper.join()
            refused, self.in_flight = self.in_flight, None
        for record_id in refused:
            if not self.published.get(record_id) and self._claimed(record_id) is None:
                raise self._fail(f"touch on {record_id[:8]} refused, yet not claimed")

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def touch_between_read_and_claim(self, data: st.DataObject) -> None:
        """The owner heartbeats after the sweeper read its record and before it claims it: the
        claim must lose (it is conditional on the revision the sweeper read)."""
        record_id = data.draw(st.sampled_from(self._live()))
        self._note(f"arm: {record_id[:8]} touched just before its claim")
        self.rig.before_claim.arm(
            record_key(record_id), lambda: self._owner_write(record_id, "touch")
        )
        try:
            complete = self._sweep(0)
        finally:
            self.rig.before_claim.arm(None, None)
        self._after_sweep(complete)

    @rule()
    def two_sweepers_at_once(self) -> None:
        self.messy = self.messy or not self.strict
        before, now = len(self.rig.bus.accepted), self.now
        threads = [
            threading.Thread(target=self._sweep, args=(i,), kwargs={"absorb": False})
            for i in (0, 1)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._absorb(self.rig.bus.accepted[before:], now)

    def _claimed(self, record_id: str) -> Any:
        stored = self.rig.sweepers[0][0].get_versioned(record_id)
        return stored if stored is not None and stored.expiring else None

    def _after_sweep(self, complete: bool) -> None:
        """L4, L5 and L6 after a sweep by a live sweeper."""
        self.ttl_backstop()
        store = self.rig.sweepers[0][0]
        lease_ends = int((self.now + DEFAULT_LEASE).timestamp() * 1000) + 60_000
        for record_id in self.owners:
            stored = store.get_versioned(record_id)
            # L6: a claim is a lease, never longer than the lease from the sweep that made it
            # (a minute of slack for the run's own elapsed time).
            if stored is not None and stored.expiring and (stored.claim_until_ms or 0) > lease_ends:
                raise self._fail(f"L6: {record_id[:8]} claimed past the lease")
            published = self.published.get(record_id, [])
            if stored is None and not published:
                raise self._fail(f"L4: {record_id[:8]} removed but never published")
            if complete and stored is not None and published:
                raise self._fail(f"L4: {record_id[:8]} published but still stored")
            if complete and stored is not None and stored.expiring:
                raise self._fail(f"L5: {record_id[:8]} still claimed after a complete sweep")
            if complete and record_id not in self.excused and len(published) > 1:
                raise self._fail(f"L4: {record_id[:8]} published {len(published)} times")
        if complete:
            self.messy = False

    @rule()
    def ttl_backstop(self) -> None:
        """DynamoDB's TTL deletes what is past its TTL attribute and the stream handler reports
        it (moto never deletes: the deletion and the stream record are made here, and the
        handler's library functions report it through the same bus)."""
        client = self.rig.sweepers[0][0].client()
        now_s = int(self.now.timestamp())
        pages = client.get_paginator("scan").paginate(
            TableName=self.rig.table,
            FilterExpression="#ttl <= :now",
            ExpressionAttributeNames={"#ttl": k.TTL_ATTRIBUTE},
            ExpressionAttributeValues={":now": {"N": str(now_s)}},
        )
        for item in [i for page in pages for i in page.get("Items", [])]:
            key = {name: item[name] for name in (k.PARTITION_KEY, k.SORT_KEY)}
            old = client.delete_item(TableName=self.rig.table, Key=key, ReturnValues="ALL_OLD")
            stream_record = {
                "eventName": "REMOVE",
                "userIdentity": {"type": "Service", "principalId": TTL_PRINCIPAL},
                "dynamodb": {"OldImage": old["Attributes"], "ApproximateCreationDateTime": now_s},
            }
            expiry = ttl_expiry(stream_record)
            if expiry is None:
                continue
            before = len(self.rig.bus.accepted)
            self._note(f"ttl removed {expiry.record.id[:8]}")
            if self.rig.sweepers[0][1].publish([expiry]):
                raise self._fail(f"ttl: the expiry of {expiry.record.id[:8]} was not accepted")
            self._absorb(self.rig.bus.accepted[before:], self.now)

    def teardown(self) -> None:
        self._after_sweep(self._sweep(0))


def build_rig(
    endpoint: str, *, retain_failed: timedelta = timedelta(days=7)
) -> tuple[Rig, Callable[[], None]]:
    """A fresh table and bus on the moto server; returns the rig and its disposer. Every store
    follows the machine's expiry policy (their TTLs honour it)."""
    import boto3

    from .stores import _empty

    table = f"lifecycle-{uuid.uuid4().hex[:10]}"
    clock = Clock()
    maker = SyncResourceRecordStore(table, endpoint_url=endpoint, clock=clock.skewed(timedelta(0)))
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    ledger = SyncDynamoDBAdapter(table, endpoint_url=endpoint)
    ledger.create_table()
    events = boto3.client("events", endpoint_url=endpoint)
    bus_name = f"bus-{uuid.uuid4().hex[:8]}"
    events.create_event_bus(Name=bus_name)
    bus = EventBus(events)
    policy = ExpiryPolicy(stale_after=STALE_AFTER, retain_failed=retain_failed)
    owners = {
        skew: SyncResourceRecordStore(
            table, endpoint_url=endpoint, clock=clock.skewed(skew), policy=policy
        )
        for skew in SKEWS
    }
    sweepers = []
    for _ in range(2):
        store = SyncResourceRecordStore(
            table, endpoint_url=endpoint, clock=clock.skewed(timedelta(0)), policy=policy
        )
        sweepers.append(
            (store, EventPublisher(events, bus_name, attempts=2), SweeperDeath(store.client()))
        )
    before_claim = BeforeClaim(sweepers[0][0].client())
    rig = Rig(
        clock, owners, sweepers, before_claim, bus, table, lambda: _empty(ledger.client(), table)
    )

    def dispose() -> None:
        for store in [maker, *owners.values(), *(s for s, _, _ in sweepers)]:
            store.close()
        ledger.client().delete_table(TableName=table)
        ledger.close()
        events.delete_event_bus(Name=bus_name)

    return rig, dispose
