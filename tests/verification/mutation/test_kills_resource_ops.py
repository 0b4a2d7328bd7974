"""The owner's side of the DynamoDB record store (``resources/_ops.py`` beyond the claim
protocol, on the moto server): what a put, an operation and a listing refuse, by which field
and with which words, and what an operation stores when the writer's clock is behind."""

from __future__ import annotations

from datetime import timedelta

import pytest

from resources.resource_fixtures import record
from sandbox_ledger import ConflictError, InvalidInputError
from sandbox_ledger.resources import SyncResourceRecordStore
from sandbox_ledger.resources.models import FAILED_PHASES, LIVE_PHASES
from verification.mutation.test_kills_resource_claims import NOW, new_store, stored


@pytest.fixture
def store(moto_endpoint: str) -> SyncResourceRecordStore:
    return new_store(moto_endpoint)


def test_a_listing_refuses_an_unknown_phase_naming_the_phases(
    store: SyncResourceRecordStore,
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        store.list(phase="sleeping")
    phases = ", ".join((*LIVE_PHASES, *FAILED_PHASES))
    assert (refused.value.field, str(refused.value)) == ("phase", f"phase: must be one of {phases}")


def test_a_listing_refuses_an_empty_provider_by_name(store: SyncResourceRecordStore) -> None:
    with pytest.raises(InvalidInputError) as refused:
        store.list(provider="")
    assert refused.value.field == "provider"


def test_an_operation_refuses_an_empty_kind_and_an_unknown_outcome_by_name(
    store: SyncResourceRecordStore,
) -> None:
    rid = stored(store)
    with pytest.raises(InvalidInputError) as refused:
        store.record_operation_start(rid, "")
    assert refused.value.field == "kind"
    with pytest.raises(InvalidInputError) as refused:
        store.record_operation_finish(rid, "exec", "cancelled")
    assert refused.value.field == "outcome"
    found = store.get_versioned(rid)
    assert found is not None and found.revision == 1  # nothing written


def test_a_put_on_a_stale_revision_says_it_was_a_put(store: SyncResourceRecordStore) -> None:
    rid = stored(store)
    store.touch(rid)
    again = record(age=timedelta(minutes=5), now=NOW, id=rid)
    with pytest.raises(
        ConflictError, match=rf"^put {rid}: it changed meanwhile \(now revision 2\)$"
    ):
        store.put(again, expected_revision=1)


def test_an_operation_never_moves_updated_at_back_to_a_clock_behind_it(
    store: SyncResourceRecordStore,
) -> None:
    ahead = store.put(record(age=-timedelta(hours=1), now=NOW)).record
    counted = store.record_operation_start(ahead.id, "build")
    again = store.get_versioned(ahead.id)
    assert again == counted and again is not None
    assert again.record.updated_at == ahead.updated_at  # an hour after this writer's clock
    assert {"kind": "build", "count": 1} in [o.model_dump() for o in again.record.operations]
