"""The claim protocol as the DynamoDB record store keeps it (``resources/_ops.py`` and the
sweep's view of ``resources/store.py``, on the moto server): what a claim, a takeover, a
release and an observation store, which of them are refused and why, and what the sweep
reads back."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from resources.resource_fixtures import caught_up, record
from sandbox_ledger import ConflictError
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.resources import SyncResourceRecordStore, VersionedRecord

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)


def new_store(endpoint: str) -> SyncResourceRecordStore:
    """A record store on a fresh table of the moto server at ``endpoint``, at ``NOW``."""
    table = f"claims-{uuid.uuid4().hex[:12]}"
    with SyncDynamoDBAdapter(table, endpoint_url=endpoint) as adapter:
        adapter.create_table()
    return SyncResourceRecordStore(table, endpoint_url=endpoint, clock=lambda: NOW)


@pytest.fixture
def store(moto_endpoint: str) -> SyncResourceRecordStore:
    return new_store(moto_endpoint)


def stored(store: SyncResourceRecordStore, age: timedelta = timedelta(hours=1)) -> str:
    return store.put(record(age=age, now=NOW)).record.id


def read(store: SyncResourceRecordStore, rid: str) -> VersionedRecord:
    found = store.get_versioned(rid)
    assert found is not None
    return found


def test_a_claim_stores_its_sweeper_lease_and_revision(store: SyncResourceRecordStore) -> None:
    rid = stored(store)
    claimed = store.claim(
        read(store, rid), "stale: gone", owner="run-a", now_ms=NOW_MS, until_ms=NOW_MS + 5
    )
    again = store.get_versioned(rid)
    assert claimed == again and again is not None
    assert (again.revision, again.expiring, again.claimed_by) == (2, "stale: gone", "run-a")
    assert (again.claim_until_ms, again.claim_rev, again.expired_revision) == (NOW_MS + 5, 1, 1)
    # An owner can no longer write it, and is told why.
    with pytest.raises(
        ConflictError, match=rf"^touch {rid}: a sweeper is expiring it \(stale: gone\)$"
    ):
        store.touch(rid)


def test_a_live_claim_is_refused_and_an_ended_one_taken_over(
    store: SyncResourceRecordStore,
) -> None:
    rid = stored(store)
    a = store.claim(
        read(store, rid), "stale", owner="run-a", now_ms=NOW_MS, until_ms=NOW_MS + 1_000
    )
    for now_ms in (NOW_MS, NOW_MS + 1_000):  # the lease runs to its last millisecond
        with pytest.raises(ConflictError, match=rf"^expire {rid}: a sweeper is expiring it"):
            store.claim(a, "stale", owner="run-b", now_ms=now_ms, until_ms=now_ms + 9)
    taken = store.claim(a, "later", owner="run-b", now_ms=NOW_MS + 1_001, until_ms=NOW_MS + 7)
    assert (taken.revision, taken.claimed_by, taken.expiring) == (3, "run-b", "later")
    assert (taken.claim_until_ms, taken.claim_rev) == (NOW_MS + 7, 1)  # the first claim's


def test_a_claim_at_another_revision_or_of_nothing_is_refused(
    store: SyncResourceRecordStore,
) -> None:
    rid = stored(store)
    first = read(store, rid)
    store.touch(rid)
    with pytest.raises(
        ConflictError, match=rf"^expire {rid}: it changed meanwhile \(now revision 2\)$"
    ):
        store.claim(first, "stale", owner="run-a", now_ms=NOW_MS, until_ms=NOW_MS)
    gone = "0123abcd-0000-4000-8000-000000000009"
    nothing = replace(first, record=first.record.model_copy(update={"id": gone}))
    with pytest.raises(ConflictError, match=rf"^expire {gone}: it does not exist$") as raised:
        store.claim(nothing, "stale", owner="run-a", now_ms=NOW_MS, until_ms=NOW_MS)
    assert raised.value.code == "ConditionalCheckFailedException"
    assert store.get_versioned(rid).expiring is None  # type: ignore[union-attr]


def test_only_the_claims_sweeper_releases_it(store: SyncResourceRecordStore) -> None:
    rid = stored(store)
    a = store.claim(read(store, rid), "stale", owner="run-a", now_ms=NOW_MS, until_ms=NOW_MS + 10)
    assert store.release(replace(a, claimed_by="run-b")) is False
    assert store.get_versioned(rid).claimed_by == "run-a"  # type: ignore[union-attr]
    assert store.release(a) is True
    back = store.get_versioned(rid)
    assert back is not None and back.revision == 3
    assert (back.expiring, back.claimed_by, back.claim_until_ms, back.claim_rev) == (None,) * 4
    assert store.touch(rid).revision == 4  # its owner writes it again
    assert store.release(a) is False


def test_an_observation_keeps_the_first_sighting_of_a_revision(
    store: SyncResourceRecordStore,
) -> None:
    rid = stored(store)
    first = read(store, rid)
    assert store.observe(first, NOW_MS) is True
    assert store.observe(first, NOW_MS + 60_000) is False  # the window runs from the first
    seen = store.get_versioned(rid)
    assert seen is not None and (seen.revision, seen.observed_rev, seen.observed_ms) == (
        1,
        1,
        NOW_MS,
    )
    assert store.observe(replace(first, revision=2), NOW_MS) is False  # not at that revision
    touched = store.touch(rid)  # an owner write voids the observation
    assert touched.observed_ms is None
    assert store.observe(touched, NOW_MS + 5) is True
    claimed = store.claim(read(store, rid), "stale", owner="run-a", now_ms=NOW_MS, until_ms=NOW_MS)
    assert store.observe(replace(claimed, expiring=None), NOW_MS) is False  # claimed


def test_the_sweep_reads_and_deletes_what_it_claimed(
    store: SyncResourceRecordStore, moto_server: Any
) -> None:
    ids = [stored(store, timedelta(hours=1, seconds=i)) for i in range(27)]
    fresh = stored(store, timedelta(0))
    ahead = stored(store, -timedelta(hours=1))
    gone = "0123abcd-0000-4000-8000-000000000009"
    caught_up(moto_server)  # about which records are candidates: the index's settled state
    found = store.get_many([*ids, gone])
    assert sorted(found) == sorted(ids) and all(found[i].record.id == i for i in ids)
    older = [
        i for page in store.candidates("ready", before=NOW - timedelta(minutes=5)) for i in page
    ]
    assert sorted(older) == sorted(ids)
    newer = [
        i for page in store.candidates("ready", after=NOW + timedelta(minutes=5)) for i in page
    ]
    assert newer == [ahead] and fresh not in older
    pages = list(store.candidates("ready", before=NOW - timedelta(minutes=5), page_size=5))
    assert all(len(p) <= 5 for p in pages) and sorted(i for p in pages for i in p) == sorted(ids)
    claims = [
        store.claim(read(store, rid), "stale", owner="run-a", now_ms=NOW_MS, until_ms=NOW_MS)
        for rid in ids
    ]
    assert sorted(store.delete_claimed(claims)) == sorted(ids)
    assert store.get_many([*ids, fresh]).keys() == {fresh}
