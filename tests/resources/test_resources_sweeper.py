"""The sweep against an in-memory store and publisher: the SweepStore protocol is all the
sweep needs, so its decisions are tested without DynamoDB."""

from __future__ import annotations

import types
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from resources.resource_fixtures import record
from sandbox_ledger.errors import ConflictError
from sandbox_ledger.resources import (
    Expiry,
    ExpiryPolicy,
    ResourceActivityRecord,
    SweepStore,
    VersionedRecord,
    sweep,
)
from sandbox_ledger.resources import sweeper as sweeper_module

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=15)  # one window (stale_after) after NOW, the sweeper's clock


@pytest.fixture(autouse=True)
def _no_elapsed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweeper's clock is ``now`` plus the run's own elapsed time: freeze the elapsed part, so
    that a run judged exactly one window after an observation sees exactly that window. (On
    a loaded machine, a first run slower than the second made ``LATER`` judge some records a
    few milliseconds short of the window: they expired one run later, and the test flaked.)"""
    monkeypatch.setattr(sweeper_module, "time", types.SimpleNamespace(monotonic=lambda: 0.0))


@dataclass
class FakeStore:
    records: dict[str, VersionedRecord] = field(default_factory=dict)
    claims: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    before_claim: dict[str, int] = field(default_factory=dict)
    """Record id -> revision an owner writes just before the sweeper's claim."""

    def add(self, age: timedelta, phase: str = "ready") -> str:
        r = record(age=age, phase=phase, now=NOW)
        self.allocate(r.id, r)
        return r.id

    def allocate(self, record_id: str, r: ResourceActivityRecord | None = None) -> None:
        """A new allocation under ``record_id`` (a plain put where none is stored): another
        incarnation, whose revision starts again at 1."""
        assert record_id not in self.records
        r = r or record(age=timedelta(0), now=NOW, id=record_id)
        inc = uuid.uuid4().hex
        self.records[record_id] = VersionedRecord(r, revision=1, expires_at=2**40, incarnation=inc)

    def write(self, record_id: str, revision: int) -> None:
        """An owner write: a new revision (which voids a sweeper's observation)."""
        self.records[record_id] = replace(self.records[record_id], revision=revision)

    def candidates(
        self,
        phase: str,
        *,
        before: datetime | None = None,
        after: datetime | None = None,
        page_size: int = 100,
    ) -> Iterator[list[str]]:
        def hint(ms: int) -> bool:
            later = after is not None and ms > after.timestamp() * 1000
            return (before is not None and ms < before.timestamp() * 1000) or later

        ids = sorted(
            (v.record.updated_at_ms, i)
            for i, v in self.records.items()
            if v.record.phase == phase and hint(v.record.updated_at_ms)
        )
        for start in range(0, len(ids), page_size):
            yield [i for _, i in ids[start : start + page_size]]

    def observe(self, seen: VersionedRecord, at_ms: int) -> bool:
        record_id, revision = seen.record.id, seen.revision
        current = self.records.get(record_id)
        if current is None or current.incarnation != seen.incarnation:
            return False
        if current.revision != revision or current.expiring or current.observed_rev == revision:
            return False
        self.records[record_id] = replace(current, observed_rev=revision, observed_at_ms=at_ms)
        self.observations.append(record_id)
        return True

    def get_many(self, record_ids: list[str]) -> dict[str, VersionedRecord]:
        return {i: self.records[i] for i in record_ids if i in self.records}

    def claim(
        self, judged: VersionedRecord, reason: str, *, owner: str, now_ms: int, until_ms: int
    ) -> VersionedRecord:
        record_id, revision = judged.record.id, judged.revision
        if record_id in self.before_claim:
            self.write(record_id, self.before_claim.pop(record_id))
        current = self.records.get(record_id)
        if current is None:
            raise ConflictError(f"expire {record_id}: it does not exist")
        held = current.expiring and (current.claim_until_ms or 0) >= now_ms
        same = (current.incarnation, current.observed_at_ms, current.claimed_by) == (
            judged.incarnation,
            judged.observed_at_ms,
            judged.claimed_by,
        )
        if current.revision != revision or held or not same:
            raise ConflictError(f"expire {record_id}: it changed meanwhile")
        self.claims.append(record_id)
        claimed = replace(
            current,
            revision=revision + 1,
            expiring=reason,
            claimed_by=owner,
            claim_until_ms=until_ms,
            claim_rev=revision if current.claim_rev is None else current.claim_rev,
        )
        self.records[record_id] = claimed
        return claimed

    def _holds(self, claimed: VersionedRecord) -> bool:
        current = self.records.get(claimed.record.id)
        return current is not None and (
            current.claimed_by,
            current.revision,
            current.incarnation,
        ) == (claimed.claimed_by, claimed.revision, claimed.incarnation)

    def release(self, claimed: VersionedRecord) -> bool:
        record_id = claimed.record.id
        if not self._holds(claimed):
            return False
        current = self.records[record_id]
        self.records[record_id] = replace(
            current,
            revision=current.revision + 1,
            expiring=None,
            claimed_by=None,
            claim_until_ms=None,
            claim_rev=None,
        )
        return True

    def delete_claimed(self, claims: list[VersionedRecord]) -> list[str]:
        deleted = [c.record.id for c in claims if self._holds(c)]
        for i in deleted:
            assert self.records[i].expiring, f"{i} deleted without a claim"
            del self.records[i]
        return deleted


@dataclass
class FakePublisher:
    refuse: set[str] = field(default_factory=set)
    published: list[Expiry] = field(default_factory=list)

    def publish(self, expiries: Sequence[Expiry]) -> set[str]:
        failed = {e.record.id for e in expiries if e.record.id in self.refuse}
        self.published += [e for e in expiries if e.record.id not in failed]
        return failed


def test_the_fake_is_a_sweep_store() -> None:
    store: SweepStore = FakeStore()
    assert store is not None


def test_claims_publishes_then_deletes_only_stale_records() -> None:
    store = FakeStore()
    stale = [store.add(timedelta(minutes=20 + i)) for i in range(5)]
    fresh = store.add(timedelta(minutes=1))
    kept_failed = store.add(timedelta(days=2), phase="cleanup-failed")
    publisher = FakePublisher()
    # The first run only observes (on its own clock); nothing is judged by updatedAt alone.
    first = sweep(store, publisher, now=NOW, page_size=2)
    assert first.expired == [] and sorted(first.observed) == sorted(stale) and first.complete
    assert store.claims == [] and publisher.published == []
    result = sweep(store, publisher, now=LATER, page_size=2)
    assert sorted(result.expired) == sorted(stale) and result.complete
    assert sorted(e.record.id for e in publisher.published) == sorted(stale)
    assert set(store.records) == {fresh, kept_failed}


def test_a_record_expires_only_a_whole_window_after_the_first_observation() -> None:
    store = FakeStore()
    rid = store.add(timedelta(hours=1))
    publisher = FakePublisher()
    assert sweep(store, publisher, now=NOW).observed == [rid]
    # Later runs within the window neither expire it nor restart its window.
    for minutes in (5, 10, 14):
        run = sweep(store, publisher, now=NOW + timedelta(minutes=minutes))
        assert run.expired == [] and run.observed == [] and run.skipped == [rid]
    assert store.observations == [rid]
    assert sweep(store, publisher, now=LATER).expired == [rid]


def test_an_owner_write_voids_the_observation() -> None:
    store = FakeStore()
    rid = store.add(timedelta(hours=1))
    publisher = FakePublisher()
    sweep(store, publisher, now=NOW)
    store.write(rid, 2)  # a heartbeat whose updatedAt (the owner's clock) still looks old
    run = sweep(store, publisher, now=LATER)
    assert run.expired == [] and run.observed == [rid] and publisher.published == []
    assert sweep(store, publisher, now=LATER + timedelta(minutes=15)).expired == [rid]


def test_a_record_dated_ahead_of_the_sweepers_clock_is_a_candidate() -> None:
    store = FakeStore()
    ahead = store.add(-timedelta(days=365 * 20))  # updatedAt 20 years ahead
    near = store.add(-timedelta(minutes=3))  # a few minutes ahead: a live owner's skew
    publisher = FakePublisher()
    assert sweep(store, publisher, now=NOW).observed == [ahead]
    assert sweep(store, publisher, now=LATER).expired == [ahead] and near in store.records


def test_an_owner_write_before_the_claim_wins() -> None:
    store = FakeStore()
    victim, other = store.add(timedelta(hours=1)), store.add(timedelta(hours=1))
    sweep(store, FakePublisher(), now=NOW)
    store.before_claim[victim] = 7
    publisher = FakePublisher()
    result = sweep(store, publisher, now=LATER)
    assert result.skipped == [victim] and result.expired == [other]
    assert victim in store.records and [e.record.id for e in publisher.published] == [other]


def test_an_unpublished_record_is_released_and_the_next_run_reports_it() -> None:
    store = FakeStore()
    rid = store.add(timedelta(hours=1))
    sweep(store, FakePublisher(), now=NOW)
    first = sweep(store, FakePublisher(refuse={rid}), now=LATER)
    # The claim is given back at once: the owner is not locked out by a bus that is down.
    assert first.failed == [rid] and store.records[rid].expiring is None
    publisher = FakePublisher()
    # The release bumped the revision: observed again, then expired a window later.
    assert sweep(store, publisher, now=LATER).observed == [rid]
    second = sweep(store, publisher, now=LATER + timedelta(minutes=15))
    assert second.expired == [rid] and rid not in store.records
    assert [e.record.id for e in publisher.published] == [rid]
    assert store.claims == [rid, rid]


def test_a_live_claim_of_another_run_is_left_to_it_and_a_dead_ones_taken_over() -> None:
    store = FakeStore()
    live, dead = store.add(timedelta(hours=1)), store.add(timedelta(hours=1))
    now_ms = int(NOW.timestamp() * 1000)
    for rid, until in ((live, now_ms + 60_000), (dead, now_ms - 1)):
        v = store.records[rid]
        store.records[rid] = VersionedRecord(v.record, 2, v.expires_at, "stale", "other", until)
    publisher = FakePublisher()
    result = sweep(store, publisher, now=NOW)
    assert result.skipped == [live] and result.expired == [dead]
    assert [e.record.id for e in publisher.published] == [dead] and live in store.records


@dataclass
class DiesAfterPublishing(FakePublisher):
    """Its events are put, then the run dies before deleting the records."""

    def publish(self, expiries: Sequence[Expiry]) -> set[str]:
        super().publish(expiries)
        raise SystemExit("the run died after PutEvents")


def test_a_takeover_republishes_under_the_same_idempotency_key() -> None:
    store = FakeStore()
    rid = store.add(timedelta(hours=1))
    sweep(store, FakePublisher(), now=NOW)
    dead = DiesAfterPublishing()
    with pytest.raises(SystemExit):
        sweep(store, dead, now=LATER)
    assert store.records[rid].expiring is not None and store.records[rid].revision == 2
    later = FakePublisher()
    result = sweep(store, later, now=LATER + timedelta(minutes=3))  # the lease ended
    assert result.expired == [rid] and store.claims == [rid, rid]
    keys = [e.idempotency_key for e in dead.published + later.published]
    assert len(keys) == 2 and len(set(keys)) == 1
    assert dead.published[0].revision == later.published[0].revision == 1  # the revision judged


def test_dry_run_claims_nothing() -> None:
    store = FakeStore()
    rid = store.add(timedelta(hours=1))
    first = sweep(store, None, now=NOW, dry_run=True)
    # A dry run observes as a real run does (an observation bumps no revision), so a dry
    # run a window later reports what a real run then expires.
    assert first.observed == [rid] and first.expired == [] and store.observations == [rid]
    result = sweep(store, None, now=LATER, dry_run=True)
    assert result.expired == [rid] and store.claims == [] and rid in store.records


def test_a_dry_run_that_observes_nothing_writes_nothing_and_forecasts_each_candidate() -> None:
    """The console's forecast: what a real run now would expire, and when a sweep would
    expire the stale records none observes yet (a window after this run's clock)."""
    store = FakeStore()
    watched = store.add(timedelta(hours=1))
    sweep(store, None, now=NOW, dry_run=True)  # a sweep observed it at NOW
    stale = store.add(timedelta(hours=1))
    fresh = store.add(timedelta(minutes=-14))  # written a minute before LATER
    before = dict(store.records)
    result = sweep(store, None, now=LATER, dry_run=True, observe=False)
    assert store.records == before and store.observations == [watched] and store.claims == []
    assert result.expired == [watched] and result.reasons[watched].startswith("stale")
    assert result.unobserved == [stale] and result.observed == []
    assert stale in result.skipped and fresh not in result.skipped + result.expired
    due = datetime.fromisoformat(result.due[stale].replace("Z", "+00:00"))
    assert LATER + timedelta(minutes=15) <= due < LATER + timedelta(minutes=16)
    # The forecast is what a real run then does: it expires the watched record only.
    real = sweep(store, FakePublisher(), now=LATER)
    assert real.expired == [watched] and real.observed == [stale]


def test_a_sweep_that_expires_records_must_observe_them() -> None:
    with pytest.raises(ValueError, match="observe"):
        sweep(FakeStore(), FakePublisher(), now=NOW, observe=False)


@pytest.mark.parametrize("phase", ["ready", "cleanup-failed"])
def test_the_earliest_expiry_is_when_sweeps_a_minute_apart_first_expire_the_record(
    phase: str,
) -> None:
    policy = ExpiryPolicy(stale_after=timedelta(minutes=15), retain_failed=timedelta(hours=1))
    store = FakeStore()
    rid = store.add(timedelta(0), phase=phase)  # written at NOW
    earliest = policy.earliest_expiry(store.records[rid].record)
    assert earliest is not None
    moment = NOW
    while not sweep(store, FakePublisher(), now=moment, policy=policy).expired:
        moment += timedelta(minutes=1)
    assert earliest <= moment <= earliest + timedelta(minutes=1)  # the next sweep at most


def test_a_phase_the_policy_keeps_forever_has_no_earliest_expiry() -> None:
    store = FakeStore()
    rid = store.add(timedelta(days=30), phase="cleanup-failed")
    keep = ExpiryPolicy(retain_failed=timedelta(0))
    assert keep.earliest_expiry(store.records[rid].record) is None
    assert ExpiryPolicy().earliest_expiry(store.records[rid].record) is not None
