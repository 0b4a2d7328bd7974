"""The sweep (``resources/sweeper.py``) as an operator meets it, on its own clock: what a run
stores in a claim (the lease), when it stops for its deadline and what it leaves for the next
run, a claim too old to publish left to a takeover, the moment an observed record falls due,
and the handler's summary."""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from resources.test_resources_sweeper import LATER, NOW, FakePublisher, FakeStore
from sandbox_ledger.resources import Expiry, ExpiryPolicy, VersionedRecord, sweep
from sandbox_ledger.resources import sweeper as sweeper_module
from sandbox_ledger.resources._items import Unreadable

NOW_MS = int(NOW.timestamp() * 1000)
LATER_MS = int(LATER.timestamp() * 1000)


@dataclass
class Clock:
    """The sweeper's elapsed time, moved by the test (the run's clock is ``now`` plus it)."""

    seconds: float = 1_000.0

    def monotonic(self) -> float:
        return self.seconds


def freeze(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The sweeper's elapsed time, from now on moved only by the test."""
    clock = Clock()
    monkeypatch.setattr(sweeper_module, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    return clock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return freeze(monkeypatch)


@dataclass
class SlowStore(FakeStore):
    """Each write takes ``write_s`` seconds of the sweeper's clock (a throttled table)."""

    clock: Clock = field(default_factory=Clock)
    write_s: dict[str, float] = field(default_factory=dict)

    def observe(self, seen: VersionedRecord, at_ms: int) -> bool:
        self.clock.seconds += self.write_s.get(seen.record.id, 0.0)
        return super().observe(seen, at_ms)

    def claim(
        self, judged: VersionedRecord, reason: str, *, owner: str, now_ms: int, until_ms: int
    ) -> VersionedRecord:
        self.clock.seconds += self.write_s.get(judged.record.id, 0.0)
        return super().claim(judged, reason, owner=owner, now_ms=now_ms, until_ms=until_ms)


def observed_store(clock: Clock, count: int) -> tuple[SlowStore, list[str]]:
    """``count`` stale records, observed by a first run at NOW (so a run at LATER expires them)."""
    store = SlowStore(clock=clock)
    ids = [store.add(timedelta(hours=1, minutes=i)) for i in range(count)]
    sweep(store, FakePublisher(), now=NOW)
    return store, ids


class Publisher(FakePublisher):
    def __init__(self, store: FakeStore) -> None:
        super().__init__()
        self.claims_seen: list[VersionedRecord] = []
        self.store = store

    def publish(self, expiries: Sequence[Expiry]) -> set[str]:
        self.claims_seen += [self.store.records[e.record.id] for e in expiries]
        return super().publish(expiries)


def test_a_claim_holds_for_the_lease_on_the_sweepers_clock(clock: Clock) -> None:
    store, [rid] = observed_store(clock, 1)
    clock.seconds += 7  # the run has taken 7 s when it claims
    publisher = Publisher(store)
    result = sweep(store, publisher, now=LATER, lease=timedelta(seconds=90))
    assert result.expired == [rid]
    [claim] = publisher.claims_seen
    assert claim.claim_until_ms == LATER_MS + 90_000 and claim.claimed_by
    assert publisher.published[0].expired_at == "2026-11-30T12:15:00.000Z"
    store, [rid] = observed_store(clock, 1)
    publisher = Publisher(store)
    sweep(store, publisher, now=LATER)
    assert publisher.claims_seen[0].claim_until_ms == LATER_MS + 120_000  # two minutes


def test_the_sweepers_clock_runs_on_during_a_run(clock: Clock) -> None:
    store = SlowStore(clock=clock)
    first, second = store.add(timedelta(hours=1)), store.add(timedelta(hours=2))
    store.write_s[second] = 2.5  # observing the older record takes 2.5 s
    result = sweep(store, FakePublisher(), now=NOW)  # candidates come oldest first
    assert result.observed == [second, first]
    assert store.records[second].observed_at_ms == NOW_MS
    assert store.records[first].observed_at_ms == NOW_MS + 2_500
    assert result.due == {
        second: "2026-11-30T12:15:00.000Z",
        first: "2026-11-30T12:15:02.500Z",
    }
    store.write_s.clear()
    # A run exactly one window after an observation expires it; one millisecond short does not.
    early = sweep(store, FakePublisher(), now=LATER + timedelta(milliseconds=2_499))
    assert early.expired == [second] and early.due == {first: "2026-11-30T12:15:02.500Z"}
    late = sweep(store, FakePublisher(), now=LATER + timedelta(milliseconds=2_500))
    assert late.expired == [first] and store.records == {}


def test_a_claim_too_old_to_publish_is_left_to_a_takeover(clock: Clock) -> None:
    store, ids = observed_store(clock, 3)
    # candidates come oldest first: ids[2], ids[1], ids[0]; claiming ids[1] takes 61 s, so
    # the claim of ids[2] is past half its lease when the page is published.
    store.write_s[ids[1]] = 61
    publisher = FakePublisher()
    result = sweep(store, publisher, now=LATER)
    assert sorted(result.expired) == sorted(ids[:2]) and result.failed == [ids[2]]
    assert sorted(e.record.id for e in publisher.published) == sorted(ids[:2])
    assert store.records[ids[2]].expiring is not None  # still claimed: a later run takes over
    # Just under half the lease: every claim is published.
    for took, published in ((59.95, 3), (60.0, 2)):  # half the lease is 60 s
        store, ids = observed_store(clock, 3)
        store.write_s[ids[1]] = took
        assert len(sweep(store, FakePublisher(), now=LATER).expired) == published


def deadline(after_calls: int, left_ms: int = 9_999) -> Callable[[], int]:
    """A deadline that reports 10 s left for ``after_calls`` calls, then ``left_ms``."""
    calls = iter(range(10**6))
    return lambda: 10_000 if next(calls) < after_calls else left_ms


def test_a_run_stops_before_its_deadline_and_counts_what_it_left(clock: Clock) -> None:
    store, ids = observed_store(clock, 5)
    publisher = FakePublisher()
    # Two checks before the first page, then one per record: the third record is not begun.
    result = sweep(store, publisher, now=LATER, remaining_ms=deadline(4))
    assert result.complete is False and result.remaining == 3
    assert len(result.expired) == 2 and len(publisher.published) == 2
    assert sorted(store.records) == sorted(set(ids) - set(result.expired))
    rest = sweep(store, publisher, now=LATER, remaining_ms=deadline(10**6))
    assert rest.complete and rest.remaining == 0
    assert sorted(result.expired + rest.expired) == sorted(ids) and store.records == {}


def test_exactly_the_safety_margin_left_is_enough(clock: Clock) -> None:
    store, ids = observed_store(clock, 2)
    enough = sweep(store, FakePublisher(), now=LATER, remaining_ms=lambda: 10_000)
    assert enough.complete and sorted(enough.expired) == sorted(ids)
    store, ids = observed_store(clock, 2)
    short = sweep(store, FakePublisher(), now=LATER, remaining_ms=lambda: 9_999)
    assert not short.complete and short.expired == [] and short.remaining == 0
    store, ids = observed_store(clock, 2)
    custom = sweep(store, FakePublisher(), now=LATER, remaining_ms=lambda: 500, safety_ms=400)
    assert custom.complete and sorted(custom.expired) == sorted(ids)


def test_a_claim_whose_lease_ends_now_is_still_anothers(clock: Clock) -> None:
    store = SlowStore(clock=clock)
    rid = store.add(timedelta(hours=1))
    v = store.records[rid]
    store.records[rid] = VersionedRecord(v.record, 2, v.expires_at, "stale", "other", NOW_MS)
    assert sweep(store, None, now=NOW, dry_run=True).skipped == [rid]
    assert sweep(store, FakePublisher(), now=NOW).skipped == [rid]
    assert sweep(store, FakePublisher(), now=NOW + timedelta(milliseconds=1)).expired == [rid]


def test_a_real_run_needs_a_publisher() -> None:
    with pytest.raises(ValueError, match=r"^publisher: required unless dry_run$"):
        sweep(FakeStore(), None, now=NOW)


def test_the_summary_names_every_outcome(clock: Clock) -> None:
    store, [rid] = observed_store(clock, 1)
    result = sweep(store, FakePublisher(), now=LATER)
    assert result.to_dict() == {
        "dryRun": False,
        "expired": [rid],
        "skipped": [],
        "observed": [],
        "unobserved": [],
        "due": {},
        "failed": [],
        "reasons": {rid: result.reasons[rid]},
        "unreadable": {},
        "lost": [],
        "remaining": 0,
        "complete": True,
    }
    assert result.reasons[rid]


@dataclass
class LaggingStore(SlowStore):
    """An index that still lists records deleted or refreshed since (it is eventually
    consistent), and records this version cannot read."""

    listed: list[str] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)

    def candidates(self, phase: str, **bounds: Any) -> Iterator[list[str]]:
        if phase == "ready" and bounds.get("before") is not None:
            yield list(self.listed)

    def get_many(self, record_ids: list[str]) -> dict[str, VersionedRecord | Unreadable]:
        found: dict[str, VersionedRecord | Unreadable] = dict(super().get_many(record_ids))
        found |= {i: Unreadable(i, why) for i, why in self.unreadable.items()}
        return found


def test_records_gone_refreshed_or_unreadable_do_not_stop_the_page(clock: Clock) -> None:
    store = LaggingStore(clock=clock)
    gone, fresh = "0123abcd-0000-4000-8000-000000000001", store.add(timedelta(0))
    broken = "0123abcd-0000-4000-8000-000000000002"
    store.unreadable[broken] = "version 9 is newer than this reader"
    stale = store.add(timedelta(hours=1))
    store.listed = [gone, broken, fresh, stale]
    first = sweep(store, FakePublisher(), now=NOW)
    assert first.skipped == [gone, fresh, stale] and first.observed == [stale]
    assert first.failed == [broken]
    assert first.unreadable == {broken: "version 9 is newer than this reader"}
    second = sweep(store, FakePublisher(), now=LATER)
    assert second.expired == [stale] and second.failed == [broken] and fresh in store.records


def test_each_record_of_a_page_is_judged_on_its_own(clock: Clock) -> None:
    store = LaggingStore(clock=clock)
    held, touched, stale = (store.add(timedelta(hours=h)) for h in (3, 2, 1))
    store.listed = [held, touched, stale]
    sweep(store, FakePublisher(), now=NOW)
    v = store.records[held]
    until = LATER_MS + 60_000
    store.records[held] = VersionedRecord(v.record, 2, v.expires_at, "stale", "other", until)
    store.before_claim[touched] = 5
    dry = sweep(store, None, now=LATER, dry_run=True)
    assert dry.expired == [touched, stale] and dry.skipped == [held]
    assert dry.reasons == {touched: dry.reasons[stale], stale: dry.reasons[stale]}
    assert dry.reasons[stale] == "stale: no heartbeat for 15m0s in phase ready"
    publisher = FakePublisher()
    result = sweep(store, publisher, now=LATER)
    assert result.expired == [stale] and result.skipped == [held, touched]
    [expiry] = publisher.published
    assert (expiry.reason, expiry.trigger) == (result.reasons[stale], "sweeper")


def test_a_claim_without_a_lease_is_taken_over_at_once(clock: Clock) -> None:
    store = SlowStore(clock=clock)
    rid = store.add(timedelta(hours=1))
    v = store.records[rid]
    store.records[rid] = VersionedRecord(v.record, 2, v.expires_at, "stale", "other", None)
    assert sweep(store, FakePublisher(), now=NOW).expired == [rid]


def test_the_records_are_judged_by_the_policy_given(clock: Clock) -> None:
    store, [rid] = observed_store(clock, 1)
    five = ExpiryPolicy(stale_after=timedelta(minutes=5))
    assert sweep(store, FakePublisher(), now=NOW + timedelta(minutes=5), policy=five).expired == [
        rid
    ]


def test_a_fresh_record_is_no_candidate(clock: Clock) -> None:
    store = SlowStore(clock=clock)
    store.add(timedelta(minutes=1))
    assert sweep(store, FakePublisher(), now=NOW).to_dict()["skipped"] == []


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The machine's local time is New York's (the sweeper must not depend on it)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("new_york")
def test_the_sweep_is_the_same_in_any_local_time_zone(clock: Clock) -> None:
    # 01:10 in New York, ten minutes after its clocks went back an hour.
    fall_back = datetime(2026, 11, 1, 6, 10, tzinfo=UTC)
    store = SlowStore(clock=clock)
    rid = store.add(NOW - fall_back + timedelta(hours=1))  # an hour old at fall_back
    first = sweep(store, FakePublisher(), now=fall_back)
    assert first.observed == [rid] and first.due == {rid: "2026-11-01T06:25:00.000Z"}
