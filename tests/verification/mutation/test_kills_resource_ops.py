"""The owner's side of the DynamoDB record store (``resources/_ops.py`` beyond the claim
protocol, on the moto server): what a put, an operation and a listing refuse, by which field
and with which words, and what an operation stores when the writer's clock is behind."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from resources.resource_fixtures import caught_up, record
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


def test_refusals_say_what_is_wrong_in_words(store: SyncResourceRecordStore) -> None:
    """The words a user reads after the field's name, for each refusal of an operation and
    of a listing (the field alone is asserted above)."""
    rid = stored(store)
    refusals = {
        "kind: must be a non-empty string": lambda: store.record_operation_start(rid, ""),
        "outcome: must be 'completed' or 'failed'": lambda: store.record_operation_finish(
            rid, "exec", "cancelled"
        ),
        "provider: must be a non-empty string": lambda: store.list(provider=""),
        "limit: must be between 1 and 1000": lambda: store.list(limit=0),
    }
    for said, attempt in refusals.items():
        with pytest.raises(InvalidInputError) as refused:
            attempt()
        assert str(refused.value) == said


def test_a_listing_takes_up_to_1000_a_page_and_no_more(
    store: SyncResourceRecordStore, moto_server: Any
) -> None:
    stored(store)
    caught_up(moto_server)  # about the page's size: the listing's settled state
    assert len(store.list(limit=1000).records) == 1
    with pytest.raises(InvalidInputError, match=r"^limit: "):
        store.list(limit=1001)


def test_paging_a_listing_ends_with_every_record_once(
    store: SyncResourceRecordStore, moto_server: Any
) -> None:
    ids = {stored(store, age=timedelta(minutes=m)) for m in (1, 2, 3)}
    caught_up(moto_server)  # every record once: the walk's settled state
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        page = store.list(limit=1, cursor=cursor)
        seen += [r.record.id for r in page.records]
        cursor = page.cursor
        if cursor is None:
            break
    assert cursor is None, "the last page still had a cursor"
    assert sorted(seen) == sorted(ids)


def _store_unreadable(store: SyncResourceRecordStore, moto_endpoint: str) -> str:
    """A record a newer writer stored (a field this version does not know)."""
    import json

    import boto3

    from sandbox_ledger import keys as k
    from sandbox_ledger.resources import _items as ri

    newer = record(age=timedelta(minutes=1), now=NOW)
    item = {**ri.record_key(newer.id), k.REVISION: {"N": "1"}}
    item.update(ri.write_values(newer, expires_at=2**31, shard_count=4))
    body = json.loads(item[k.RECORD_BODY]["S"])
    item[k.RECORD_BODY] = {"S": json.dumps({**body, "gpu": "a100"})}
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    client.put_item(TableName=store.table_name, Item=item)
    return newer.id


def test_an_unreadable_record_is_refused_by_get_and_named_by_a_listing(
    store: SyncResourceRecordStore, moto_endpoint: str, moto_server: Any
) -> None:
    from sandbox_ledger import StorageError

    rid = _store_unreadable(store, moto_endpoint)
    with pytest.raises(StorageError) as refused:
        store.get(rid)
    assert refused.value.code == "Unreadable"
    assert str(refused.value).startswith(f"record {rid} is unreadable: ") and "gpu" in str(
        refused.value
    )
    caught_up(moto_server)  # about naming it: the listing's settled state
    page = store.list()
    assert page.records == [] and [u.record_id for u in page.unreadable] == [rid]


def test_a_delete_on_a_stale_revision_says_it_was_a_delete(
    store: SyncResourceRecordStore,
) -> None:
    rid = stored(store)
    store.touch(rid)
    with pytest.raises(
        ConflictError, match=rf"^delete {rid}: it changed meanwhile \(now revision 2\)$"
    ):
        store.delete(rid, expected_revision=1)
    assert store.get(rid) is not None


def test_an_operation_by_a_writer_ahead_moves_updated_at_to_its_clock(
    store: SyncResourceRecordStore,
) -> None:
    rid = stored(store)  # updated an hour before NOW, the store's clock
    started = store.record_operation_start(rid, "build")
    assert started.record.updated_at == "2026-11-30T12:00:00.000Z"  # NOW


def test_a_touched_record_lists_as_the_newest(
    store: SyncResourceRecordStore, moto_server: Any
) -> None:
    recent = stored(store, age=timedelta(minutes=1))
    old = stored(store, age=timedelta(hours=2))
    caught_up(moto_server)  # both listed; the touch below is listed at once (read fresh)
    assert [r.record.id for r in store.list().records] == [recent, old]
    store.touch(old)  # at NOW: newer than the other's minute-old update
    assert [r.record.id for r in store.list().records] == [old, recent]


def test_sweep_candidates_come_oldest_first_and_those_ahead_newest_first(
    store: SyncResourceRecordStore, moto_server: Any
) -> None:
    """Within each phase shard: records last updated before the bound oldest first (the
    stalest are judged first), records dated ahead of it newest first."""
    from sandbox_ledger import keys as k
    from sandbox_ledger.resources import _ops

    behind = {stored(store, age=timedelta(hours=h)): -h for h in range(1, 9)}
    ahead = {stored(store, age=-timedelta(hours=h)): h for h in range(1, 9)}
    caught_up(moto_server)  # about the candidates' order: the index's settled state
    now_ms = int(NOW.timestamp() * 1000)
    shards = store.run(store._shard_count())
    assert shards < 8  # so some shard holds two of each kind
    two_older = two_newer = False
    for shard in range(shards):
        partition = k.resource_phase_pk("ready", shard)
        older, _ = store.run(_ops.candidate_keys(store.table_name, partition, now_ms, None, 100))
        newer, _ = store.run(
            _ops.candidate_keys(store.table_name, partition, now_ms, None, 100, after=True)
        )
        assert [behind[i] for i in older] == sorted(behind[i] for i in older)
        assert [ahead[i] for i in newer] == sorted((ahead[i] for i in newer), reverse=True)
        two_older, two_newer = two_older or len(older) >= 2, two_newer or len(newer) >= 2
    assert two_older and two_newer


def test_inspect_right_after_a_write_sees_it_on_a_replica_that_lags(
    store: SyncResourceRecordStore,
) -> None:
    """``inspect`` (what ``resources show`` reads) is strongly consistent: a record written a
    moment before is found however far the replicas lag (moto's reads never do; a botocore
    hook answers each read that is not strongly consistent as a replica that has not seen
    the write)."""
    import json

    from botocore.awsrequest import AWSResponse

    def lagging(model: Any, params: dict[str, Any], **_: Any) -> Any:
        sent = json.loads(params["body"] or b"{}")
        if model.name == "GetItem" and not sent.get("ConsistentRead"):
            return AWSResponse("https://dynamodb", 200, {}, None), {
                "ResponseMetadata": {"HTTPStatusCode": 200}
            }
        return None

    rid = stored(store)
    store.client().meta.events.register("before-call.dynamodb.GetItem", lagging)
    found = store.inspect(rid)
    assert found is not None and found == store.get_versioned(rid)  # the record, readable
