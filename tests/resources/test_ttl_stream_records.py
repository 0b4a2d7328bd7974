"""One odd TTL stream record fails alone: every field of a stream record is read for what it
may hold, so a record that holds something odd is published, kept or failed on its own and
the batch's good records are published once (issue 41, item 7)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resources.resource_fixtures import Collector, record
from sandbox_ledger.resources import _items as ri
from sandbox_ledger.resources.stream import created_at, ttl_expiry
from sandbox_ledger.resources.unreported import (
    UnreportedStore,
    report_ttl_removals,
    stream_records_of,
)

TABLE = "ledger"
ODD_TIMES = [
    "1764504000",  # a string, even of a number
    "soon",
    1e300,
    -1e20,
    -1,
    float("nan"),
    float("inf"),
    True,
    None,
    [1764504000],
    {"N": "1764504000"},
    253_402_300_800,  # the year 10000
]


def removal(seq: str, created: Any = 1764504000) -> dict[str, Any]:
    """A TTL removal of a fresh resource record, as Lambda hands it over."""
    r = record(age=timedelta(days=40))
    item = {
        **ri.record_key(r.id),
        "rev": {"N": "4"},
        **ri.write_values(r, expires_at=2**31, shard_count=4),
    }
    body: dict[str, Any] = {"OldImage": item, "SequenceNumber": seq, "Keys": {}}
    if created is not _MISSING:
        body["ApproximateCreationDateTime"] = created
    return {
        "eventID": f"e{seq}",
        "eventName": "REMOVE",
        "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
        "dynamodb": body,
        "eventSourceARN": f"arn:aws:dynamodb:us-east-1:123456789012:table/{TABLE}/stream/1",
    }


_MISSING = object()


def _name(value: Any) -> str:
    """A test id the same in every worker (an object's repr holds its address)."""
    return "missing" if value is _MISSING else repr(value)


def record_id(stream_record: dict[str, Any]) -> str:
    return str(stream_record["dynamodb"]["OldImage"]["PK"]["S"]).split("#")[-1]


class FakeS3:
    """put_object into a dict; ``refuse`` makes every put fail as S3 would."""

    def __init__(self, refuse: bool = False) -> None:
        self.objects: dict[str, bytes] = {}
        self.refuse = refuse

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **_: Any) -> None:
        from botocore.exceptions import ClientError

        if self.refuse:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "x"}}, "PutObject")
        self.objects[Key] = Body


@pytest.mark.parametrize("created", [*ODD_TIMES, _MISSING], ids=_name)
def test_an_implausible_creation_time_is_taken_as_absent(created: Any) -> None:
    odd = removal("2", created)
    assert created_at(odd) is None
    before = datetime.now(UTC)
    expiry = ttl_expiry(odd)
    assert expiry is not None
    assert datetime.fromisoformat(expiry.expired_at) >= before - timedelta(seconds=1)
    # Kept for later under a name of its own, the same for every retry of the batch.
    store = UnreportedStore(FakeS3(), "bucket")
    assert store.key(TABLE, odd) == store.key(TABLE, odd)
    assert store.key(TABLE, odd).endswith("/2.json")


def test_a_plausible_creation_time_is_the_expiry_time() -> None:
    assert created_at(removal("1", 1764504000.5)) == datetime.fromtimestamp(1764504000.5, UTC)
    assert created_at(removal("1", 0)) == datetime.fromtimestamp(0, UTC)
    expiry = ttl_expiry(removal("1", 1764504000))
    assert expiry is not None and expiry.expired_at.startswith("2025-11-30T12:00:00")


@pytest.mark.parametrize("created", ODD_TIMES, ids=repr)
@pytest.mark.parametrize("bus_down", [False, True])
def test_a_batch_with_an_odd_time_publishes_every_record_once(created: Any, bus_down: bool) -> None:
    """The odd record is reported (expired now) like the others; with the bus down it is kept
    like the others: never a failure that makes Lambda retry the good ones."""
    batch = [removal("1"), removal("2", created), removal("3")]

    class Down(Collector):
        def publish(self, expiries: Any) -> set[str]:
            from sandbox_ledger.errors import StorageError

            raise StorageError("the bus is down")

    publisher = Down() if bus_down else Collector()
    s3 = FakeS3()
    report = report_ttl_removals(
        batch, table_name=TABLE, publisher=publisher, store=UnreportedStore(s3, "bucket")
    )
    assert report.failures == []
    if bus_down:
        assert len(s3.objects) == len(report.kept) == 3
    else:
        assert sorted(report.published) == sorted(record_id(r) for r in batch)
        assert sorted(e.record.id for e in publisher.published) == sorted(report.published)


def test_an_undecodable_image_is_the_only_batch_item_failure() -> None:
    """A TTL-removed resource item missing a field (a KeyError in decoding), of another type
    (TypeError), or whose body is no record (ValueError): each fails alone, by its sequence
    number; the good ones are published once."""
    missing_rev = removal("2")
    del missing_rev["dynamodb"]["OldImage"]["rev"]
    wrong_type = removal("3")
    wrong_type["dynamodb"]["OldImage"]["rev"] = "4"
    not_json = removal("4")
    not_json["dynamodb"]["OldImage"]["rec"] = {"S": "{not json"}
    deep = removal("5")
    deep["dynamodb"]["OldImage"]["rec"] = {"S": "[" * 100_000 + "]" * 100_000}
    good = [removal("1"), removal("6")]
    batch = [good[0], missing_rev, wrong_type, not_json, deep, good[1]]
    publisher = Collector()
    report = report_ttl_removals(batch, table_name=TABLE, publisher=publisher, store=None)
    assert report.failures == ["2", "3", "4", "5"]
    assert sorted(e.record.id for e in publisher.published) == sorted(map(record_id, good))
    # With a bucket, each is kept with why.
    s3 = FakeS3()
    kept = report_ttl_removals(
        batch, table_name=TABLE, publisher=Collector(), store=UnreportedStore(s3, "bucket")
    )
    assert kept.failures == [] and len(kept.kept) == 4
    assert all(why.startswith("undecodable: ") for why in kept.kept.values())


def test_records_of_odd_shapes_are_ignored_or_fail_alone() -> None:
    odd: list[Any] = ["a string", 7, None, [1, 2]]
    for path, value in (
        (("dynamodb",), ["a list"]),
        (("dynamodb", "OldImage"), "an image as a string"),
        (("dynamodb", "OldImage", "itemType"), "resource"),
        (("userIdentity",), "dynamodb.amazonaws.com"),
        (("eventSourceARN",), 12),
        (("eventSourceARN",), None),
        (("eventName",), ["REMOVE"]),
    ):
        one = removal("9")
        place = one
        for step in path[:-1]:
            place = place[step]
        place[path[-1]] = value
        odd.append(one)
    no_sequence = [removal("x"), removal("y")]
    for one in no_sequence:
        del one["dynamodb"]["SequenceNumber"]
        del one["eventID"]
        one["dynamodb"]["OldImage"]["rev"] = {"N": "not a number"}
    good = [removal("1"), removal("2")]
    publisher = Collector()
    s3 = FakeS3()
    report = report_ttl_removals(
        [good[0], *odd, *no_sequence, good[1]],
        table_name=TABLE,
        publisher=publisher,
        store=UnreportedStore(s3, "bucket"),
    )
    assert sorted(e.record.id for e in publisher.published) == sorted(map(record_id, good))
    assert report.ignored == len(odd) and report.failures == []
    # Two records without a sequence number are two objects, not one written over.
    assert len(report.kept) == len(s3.objects) == 2


def test_a_kept_object_of_odd_shape_fails_its_replay_alone() -> None:
    with pytest.raises(ValueError, match="not an object"):
        stream_records_of([1, 2])
    assert stream_records_of({"payload": {"Records": ["x", removal("1")]}})[0]["eventID"] == "e1"


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_PATHS = [
    (),
    ("eventName",),
    ("eventSourceARN",),
    ("eventID",),
    ("userIdentity",),
    ("userIdentity", "type"),
    ("userIdentity", "principalId"),
    ("dynamodb",),
    ("dynamodb", "ApproximateCreationDateTime"),
    ("dynamodb", "SequenceNumber"),
    ("dynamodb", "OldImage"),
    ("dynamodb", "OldImage", "itemType"),
    ("dynamodb", "OldImage", "PK"),
    ("dynamodb", "OldImage", "rec"),
    ("dynamodb", "OldImage", "rev"),
    ("dynamodb", "OldImage", "updatedAt"),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(_PATHS), value=_JSON, bus_down=st.booleans())
def test_any_value_in_any_field_fails_alone(
    path: tuple[str, ...], value: Any, bus_down: bool
) -> None:
    """Whatever one field of one record holds, the batch's other records are published (or
    kept) once each, and nothing but that record can be a batch item failure."""
    odd = removal("2")
    if not path:
        odd = value
    else:
        place: Any = odd
        for step in path[:-1]:
            place = place[step]
        place[path[-1]] = copy.deepcopy(value)
    good = [removal("1"), removal("3")]
    publisher = Collector()
    report = report_ttl_removals(
        [good[0], odd, good[1]],
        table_name=TABLE,
        publisher=publisher,
        store=UnreportedStore(FakeS3(refuse=bus_down), "bucket"),
    )
    assert set(report.failures) <= {"2"}
    published = [e.record.id for e in publisher.published]
    for one in good:
        assert published.count(record_id(one)) == 1
