"""``changes()`` over a DynamoDB stream of many shards: lineage across splits and closed
shards, parents before children, resuming, expired iterators, trimmed positions.

moto's stream has one shard that never closes, never expires an iterator and never trims
(see /work/shared/NOTES-emulators.md), so these tests drive the stream reader
(:mod:`sandbox_ledger.dynamodb._stream`) against a fake DynamoDB Streams client that behaves
as the service does where moto is lenient: shards close (no ``NextShardIterator`` at their
end) and split (children name their ``ParentShardId``), ``DescribeStream`` pages, iterators
expire, and trimmed records answer ``TrimmedDataAccessException``.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sandbox_ledger import keys as k
from sandbox_ledger.changes import Change, ChangesTrimmedError, start_changes
from sandbox_ledger.dynamodb._stream import StreamReader, check_state
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.follow import PollSettings, drive
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.sdk.steps import run_sync

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2026-01-01T00:00:00.000"
FAST = PollSettings(first=0.001, longest=0.002)
SHARD = {"a": "shardId-9", "b": "shardId-5", "c": "shardId-7", "d": "shardId-1", "e": "shardId-0"}
"""The shard ids the tests' names stand for: children sort before their parents."""


def _error(code: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "fake"}}, operation)


def created(name: str, sandbox_id: str, ts: int) -> dict[str, Any]:
    pk, sk = k.session_pk(name, sandbox_id), k.event_sk(ts, "0000")
    return {
        "eventName": "INSERT",
        "dynamodb": {
            "Keys": {"PK": {"S": pk}, "SK": {"S": sk}},
            "NewImage": {A.EVENT: {"S": "sandbox.created"}, A.TS: {"N": str(ts)}},
        },
    }


def deleted(name: str, sandbox_id: str) -> dict[str, Any]:
    pk = k.session_pk(name, sandbox_id)
    return {
        "eventName": "REMOVE",
        "dynamodb": {
            "Keys": {"PK": {"S": pk}, "SK": {"S": k.SUMMARY_SK}},
            "OldImage": {A.ITEM_TYPE: {"S": "session"}},
        },
    }


def noise(name: str) -> dict[str, Any]:
    """An exec.started entry: a record that is no change."""
    pk, sk = k.session_pk(name, "x"), k.event_sk(1, "0001")
    return {
        "eventName": "INSERT",
        "dynamodb": {
            "Keys": {"PK": {"S": pk}, "SK": {"S": sk}},
            "NewImage": {A.EVENT: {"S": "exec.started"}, A.TS: {"N": "1"}},
        },
    }


class FakeStreams:
    """A DynamoDB Streams client over shards the test lays out: ``shards[id] = (parent,
    records, closed)``; sequence numbers are global and increasing."""

    def __init__(self, *, page: int = 2, records_per_call: int = 2) -> None:
        self.arn = ARN
        self.shards: dict[str, dict[str, Any]] = {}
        self.page, self.per_call = page, records_per_call
        self.seq = itertools.count(1000)
        self.calls: list[str] = []
        self.expired: set[str] = set()
        self.trimmed_before = 0  # sequence numbers below are trimmed
        self._served: dict[str, int] = {}

    def shard(self, name: str, parent: str | None = None) -> None:
        parent_id = SHARD[parent] if parent else None
        self.shards[SHARD[name]] = {"parent": parent_id, "records": [], "closed": False}

    def put(self, name: str, record: dict[str, Any]) -> dict[str, Any]:
        shard_id = SHARD[name]
        assert not self.shards[shard_id]["closed"], "a closed shard takes no records"
        seq = str(next(self.seq))
        record = {**record, "eventID": f"ev-{seq}"}
        record["dynamodb"] = {**record["dynamodb"], "SequenceNumber": seq}
        self.shards[shard_id]["records"].append(record)
        return record

    def expire(self) -> None:
        """Every iterator handed out so far expires (as after 15 minutes)."""
        self.expired |= set(self._served)

    def close(self, name: str) -> None:
        self.shards[SHARD[name]]["closed"] = True

    def describe_stream(self, **params: Any) -> dict[str, Any]:
        self.calls.append("DescribeStream")
        assert params["StreamArn"] == self.arn
        ids = sorted(self.shards)
        start = (
            ids.index(params["ExclusiveStartShardId"]) + 1
            if "ExclusiveStartShardId" in params
            else 0
        )
        chosen = ids[start : start + self.page]
        shards = []
        for shard_id in chosen:
            shard = self.shards[shard_id]
            described: dict[str, Any] = {"ShardId": shard_id}
            if shard["parent"]:
                described["ParentShardId"] = shard["parent"]
            shards.append(described)
        body: dict[str, Any] = {"StreamArn": self.arn, "Shards": shards}
        if start + self.page < len(ids):
            body["LastEvaluatedShardId"] = chosen[-1]
        return {"StreamDescription": body}

    def get_shard_iterator(self, **params: Any) -> dict[str, Any]:
        self.calls.append("GetShardIterator")
        shard_id = params["ShardId"]
        if params["StreamArn"] != self.arn or shard_id not in self.shards:
            raise _error("ResourceNotFoundException", "GetShardIterator")
        records = self.shards[shard_id]["records"]
        kind = params["ShardIteratorType"]
        if kind == "TRIM_HORIZON":
            index = 0
        else:
            assert kind == "AFTER_SEQUENCE_NUMBER"
            after = int(params["SequenceNumber"])
            if after < self.trimmed_before:
                raise _error("TrimmedDataAccessException", "GetShardIterator")
            seqs = [int(r["dynamodb"]["SequenceNumber"]) for r in records]
            if after not in seqs:
                raise _error("ValidationException", "GetShardIterator")  # not of this shard
            index = seqs.index(after) + 1
        return {"ShardIterator": self._iterator(shard_id, index)}

    def _iterator(self, shard_id: str, index: int) -> str:
        it = f"{shard_id}|{index}|{next(self.seq)}"
        self._served[it] = 0
        return it

    def get_records(self, **params: Any) -> dict[str, Any]:
        self.calls.append("GetRecords")
        it = params["ShardIterator"]
        if it not in self._served:
            raise _error("ValidationException", "GetRecords")
        if it in self.expired:
            raise _error("ExpiredIteratorException", "GetRecords")
        self._served[it] += 1
        shard_id, index_text, _ = it.split("|")
        shard, index = self.shards[shard_id], int(index_text)
        records = shard["records"][index : index + self.per_call]
        body: dict[str, Any] = {"Records": records}
        end = index + len(records)
        if not (shard["closed"] and end >= len(shard["records"])):
            body["NextShardIterator"] = self._iterator(shard_id, end)
        return body


def read(
    fake: FakeStreams, count: int, after: str | None = None, *, arn: str = ARN
) -> list[Change]:
    """The first ``count`` changes from ``after``, as ``SyncDynamoDBAdapter.changes`` reads."""
    reader = StreamReader(arn)
    flow = start_changes("store", after, check_state, settings=FAST)
    stream = drive(flow, lambda request: run_sync(fake, reader.poll(request)))
    out = [change for _, change in zip(range(count), stream, strict=False)]
    stream.close()
    return out


def sandbox_ids(changes: list[Change]) -> list[str | None]:
    return [c.sandbox_id for c in changes]


@pytest.fixture
def split() -> FakeStreams:
    """A closed root ``a`` split into ``b`` (closed, then split into ``d``) and ``c`` (open);
    the describe pages hold two shards each. Shard ids sort children before their parents
    (``SHARD``), so reading in id order alone would break the lineage."""
    return lay_out(FakeStreams())


def lay_out(fake: FakeStreams) -> FakeStreams:
    """The ``split`` fixture's shards and records, in ``fake``."""
    for shard, parent in (("a", None), ("b", "a"), ("c", "a"), ("d", "b")):
        fake.shard(shard, parent)
    fake.put("a", created("n", "a1", 1))
    fake.put("a", noise("n"))
    fake.put("a", created("n", "a2", 2))
    fake.close("a")
    fake.put("b", created("n", "b1", 3))
    fake.close("b")
    fake.put("c", created("n", "c1", 4))
    fake.put("d", deleted("n", "a1"))
    return fake


def test_parents_are_read_before_their_children(split: FakeStreams) -> None:
    changes = read(split, 5)
    ids = sandbox_ids(changes)
    assert sorted(ids, key=str) == ["a1", "a1", "a2", "b1", "c1"]
    assert ids[:2] == ["a1", "a2"]  # the root first
    assert ids.index("b1") < ids.index("a1", 2)  # b before its child d (a1's delete)
    assert [c.kind.value for c in changes].count("session.deleted") == 1
    assert len({c.id for c in changes}) == 5


def test_a_new_shard_after_a_rollover_is_followed(split: FakeStreams) -> None:
    reader = StreamReader(ARN)
    flow = start_changes("store", None, check_state, settings=FAST)
    stream = drive(flow, lambda request: run_sync(split, reader.poll(request)))
    first = [next(stream) for _ in range(5)]
    split.put("c", created("n", "c2", 5))
    split.close("c")  # c rolls over into e, which takes the next records
    split.shard("e", "c")
    split.put("e", created("n", "e1", 6))
    later = [next(stream) for _ in range(2)]
    stream.close()
    assert sandbox_ids(later) == ["c2", "e1"]
    assert len({c.id for c in first + later}) == 7


def test_resuming_from_every_position_loses_and_repeats_nothing(split: FakeStreams) -> None:
    changes = read(split, 5)
    for at, one in enumerate(changes):
        rest = read(split, len(changes) - at - 1, after=one.position)
        assert [c.id for c in rest] == [c.id for c in changes[at + 1 :]]
    split.put("c", created("n", "c9", 9))
    assert sandbox_ids(read(split, 1, after=changes[-1].position)) == ["c9"]


class StartsRefused(FakeStreams):
    """A service that lists each shard's StartingSequenceNumber but hands out no iterator at
    a sequence number no record has (ValidationException)."""

    def describe_stream(self, **params: Any) -> dict[str, Any]:
        body = super().describe_stream(**params)
        for shard in body["StreamDescription"]["Shards"]:
            shard["SequenceNumberRange"] = {"StartingSequenceNumber": "1"}
        return body

    def get_shard_iterator(self, **params: Any) -> dict[str, Any]:
        if params["ShardIteratorType"] == "AT_SEQUENCE_NUMBER":
            self.calls.append("GetShardIterator")
            raise _error("ValidationException", "GetShardIterator")
        return super().get_shard_iterator(**params)


def test_a_shard_never_met_is_read_from_its_start_or_else_its_trim_horizon() -> None:
    """A resumed position asks for a shard it never met at its StartingSequenceNumber (so a
    trimmed start says changes were lost); a service refusing that position reads it from
    its trim horizon, as before."""
    fake = lay_out(StartsRefused())
    changes = read(fake, 5)
    for at, one in enumerate(changes):
        rest = read(fake, len(changes) - at - 1, after=one.position)
        assert [c.id for c in rest] == [c.id for c in changes[at + 1 :]]


def test_an_expired_iterator_is_fetched_again_from_the_last_record(split: FakeStreams) -> None:
    reader = StreamReader(ARN)
    flow = start_changes("store", None, check_state, settings=FAST)
    stream = drive(flow, lambda request: run_sync(split, reader.poll(request)))
    first = [next(stream) for _ in range(5)]
    split.expire()  # the iterators the reader keeps between polls expire
    split.put("c", created("n", "c2", 5))
    split.put("d", created("n", "d2", 6))
    later = sorted(str(next(stream).sandbox_id) for _ in range(2))
    stream.close()
    assert later == ["c2", "d2"]
    assert len(first) == 5


def test_a_position_of_a_trimmed_shard_says_so(split: FakeStreams) -> None:
    [first] = read(split, 1)  # in shard a
    del split.shards[SHARD["a"]]  # a is older than the stream's 24 hours
    with pytest.raises(ChangesTrimmedError, match="no longer in the stream"):
        read(split, 1, after=first.position)


def test_a_position_past_the_trim_horizon_says_so(split: FakeStreams) -> None:
    changes = read(split, 5)
    in_c = next(c for c in changes if c.sandbox_id == "c1")
    split.trimmed_before = 10**9  # every record so far is older than 24 hours
    with pytest.raises(ChangesTrimmedError, match="older than the changes"):
        read(split, 1, after=in_c.position)


def test_a_position_of_an_earlier_stream_says_so(split: FakeStreams) -> None:
    [first] = read(split, 1)
    split.arn = ARN.replace("2026", "2027")  # the stream was turned off and on
    with pytest.raises(ChangesTrimmedError, match="stream"):
        read(split, 1, after=first.position, arn=split.arn)


def test_an_idle_poll_is_one_get_records_per_open_shard(split: FakeStreams) -> None:
    reader = StreamReader(ARN)
    flow = start_changes("store", None, check_state, settings=FAST)
    idle: list[list[str]] = []

    def poll(request: Any) -> Any:
        before = len(split.calls)
        batch = run_sync(split, reader.poll(request))
        if request.idle and not batch.found:
            idle.append(split.calls[before:])
        if len(idle) == 30:
            split.put("c", created("n", "late", 7))
        return batch

    stream = drive(flow, poll)
    changes = [next(stream) for _ in range(6)]
    stream.close()
    assert changes[-1].sandbox_id == "late"
    # c and d are open: a GetRecords each per idle poll; every 20th poll also describes
    # the stream (two pages of two shards).
    each = ["GetRecords", "GetRecords"]
    assert [calls for calls in idle if calls != each] == [["DescribeStream"] * 2 + each]


@pytest.mark.parametrize(
    "state",
    [
        {"arn": "nope", "at": {}, "done": []},
        {"arn": ARN, "at": {"a": "x1"}, "done": []},
        # Inside a record of many changes: handed out at least one, both numbers in ASCII
        # digits (str.isdigit takes "²", which int() refuses, and "١٢", which it reads).
        *(
            {"arn": ARN, "at": {"a": at}, "done": []}
            for at in ("12/0", "12/x", "12/", "/1", "12//1", "12/1/2", "12/²", "12/-1", "12/ 1")
        ),
        *({"arn": ARN, "at": {"a": at}, "done": []} for at in ("²", "١٢", "١٢/1", "12/\u0661")),
        {"arn": ARN, "at": {}, "done": "a"},
        {"arn": ARN, "at": {}},
    ],
)
def test_a_forged_state_is_refused_naming_after(state: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError) as info:
        check_state(state)
    assert info.value.field == "after"


def test_throttled_and_failing_stream_reads_lose_and_repeat_nothing(
    moto_endpoint: str, sync_table: str, fast_sdk_backoff: None
) -> None:
    """On the moto server, a quarter of the Streams calls throttled (LimitExceededException,
    as DynamoDB answers a shard read by too many readers) and a tenth failing with 500: the
    SDK's retries carry them, and every change comes once, in order."""
    import boto3

    from dynamodb.faults import FailShare
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.testing._build import entry

    streams = {"DescribeStream", "GetShardIterator", "GetRecords"}
    session = boto3.session.Session()
    throttled = FailShare(0.25, "LimitExceededException", operations=streams, aio=False)
    broken = FailShare(0.1, "InternalServerError", status=500, operations=streams, aio=False)
    for hook in (throttled, broken):
        session.events.register_first("before-send.dynamodbstreams", hook)
    with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint, session=session) as ledger:
        for i in range(12):
            ledger.append(entry("f", f"s{i}", LedgerEvent.SandboxCreated, i))
        first = ledger.changes()
        seen = [next(first) for _ in range(6)]
        first.close()
        resumed = ledger.changes(after=seen[-1].position)
        seen += [next(resumed) for _ in range(6)]
        resumed.close()
    assert [c.sandbox_id for c in seen] == [f"s{i}" for i in range(12)]
    assert len({c.id for c in seen}) == 12
    assert throttled.injected and broken.injected


@pytest.mark.parametrize(
    "when", ["soon", "nan", float("inf"), -1e20, 1e300, True, None, [1], "1700000000.5"]
)
def test_an_odd_creation_time_or_ts_is_read_as_absent_not_raised(when: object) -> None:
    """A stream record whose ApproximateCreationDateTime or entry ts is not a plausible number
    is still a change (its time: the entry's ts, or 0), never an exception for its batch."""
    from sandbox_ledger.dynamodb._changes import changes_of

    pk = k.session_pk("job", "sb-1")
    record = {
        "eventName": "INSERT",
        "eventID": "e1",
        "dynamodb": {
            "Keys": {k.PARTITION_KEY: {"S": pk}, k.SORT_KEY: {"S": "E#0000000000000007#x"}},
            "ApproximateCreationDateTime": when,
            "NewImage": {"ev": {"S": "sandbox.created"}, "ts": {"N": "not a number"}},
        },
    }
    [change] = changes_of(record)
    assert change.sandbox_id == "sb-1"
    expected = 1_700_000_000_500 if when == "1700000000.5" else 0
    assert change.at == expected
    record["dynamodb"]["NewImage"]["ts"] = {"N": "7"}  # type: ignore[index]
    assert [c.at for c in changes_of(record)] == [7]
