"""DynamoDB Streams under the strict profile (sandbox_ledger/local/strict/streams.py): each
rule as DynamoDB's documentation states it, checked through boto3's dynamodbstreams client;
then the product's ``changes()`` read across closing, splitting shards and expiring
iterators."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from sandbox_ledger.changes import Change
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.local import LocalDynamoDB, LocalDynamoDBProcess
from sandbox_ledger.local.dynamodb import _profile_from_text, _profile_text
from sandbox_ledger.local.strict import StrictProfile
from sandbox_ledger.local.strict.streams import MAX_OPEN
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.testing._build import entry

ONE_TRY = Config(retries={"max_attempts": 1, "mode": "standard"})


def clients(endpoint: str) -> tuple[Any, Any]:
    return (
        boto3.client("dynamodb", endpoint_url=endpoint, config=ONE_TRY),
        boto3.client("dynamodbstreams", endpoint_url=endpoint, config=ONE_TRY),
    )


def make_table(ddb: Any, view: str = "NEW_AND_OLD_IMAGES") -> tuple[str, str]:
    name = f"streams-{uuid.uuid4().hex[:8]}"
    made = ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": view},
    )
    return name, made["TableDescription"]["LatestStreamArn"]


def put(ddb: Any, table: str, pk: str, value: int, pad: int = 0) -> None:
    item = {"PK": {"S": pk}, "v": {"N": str(value)}}
    if pad:
        item["pad"] = {"S": "x" * pad}
    ddb.put_item(TableName=table, Item=item)


def shards(streams: Any, arn: str, **params: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        page = streams.describe_stream(StreamArn=arn, **params)["StreamDescription"]
        out += page["Shards"]
        if "LastEvaluatedShardId" not in page:
            return out
        params["ExclusiveStartShardId"] = page["LastEvaluatedShardId"]


def read_shard(streams: Any, arn: str, shard: str) -> tuple[list[dict[str, Any]], bool]:
    """Every record of ``shard`` from its trim horizon; whether it ended (no next iterator)."""
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    out: list[dict[str, Any]] = []
    while True:
        page = streams.get_records(ShardIterator=it)
        out += page["Records"]
        if "NextShardIterator" not in page:
            return out, True
        if not page["Records"]:
            return out, False
        it = page["NextShardIterator"]


def read_lineage(streams: Any, arn: str) -> list[dict[str, Any]]:
    """Every record, each shard after its parent."""
    listed = shards(streams, arn)
    ids = {s["ShardId"] for s in listed}
    done: set[str] = set()
    out: list[dict[str, Any]] = []
    while len(done) < len(listed):
        for shard in listed:
            parent = shard.get("ParentShardId")
            if shard["ShardId"] in done or (parent in ids and parent not in done):
                continue
            out += read_shard(streams, arn, shard["ShardId"])[0]
            done.add(shard["ShardId"])
    return out


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def seq(record: dict[str, Any]) -> int:
    return int(record["dynamodb"]["SequenceNumber"])


class Clock:
    """The stream views' clock, moved by the test (no sleeping, nothing timing-sensitive)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def strict_server(clock: Clock, stream_records: int | None = 1000, **profile: Any) -> Any:
    """A started in-process strict server whose streams run on ``clock``."""
    one = LocalDynamoDB(
        stream_records=stream_records, strict=StrictProfile(conflict_hold=0, **profile)
    )
    one.start()
    assert one._front is not None
    one._front.streams.clock = clock
    return one


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def server(clock: Clock) -> Iterator[Any]:
    servers: list[LocalDynamoDB] = []

    def start(**settings: Any) -> tuple[Any, Any]:
        servers.append(strict_server(clock, **settings))
        return clients(servers[-1].endpoint_url)

    yield start
    for one in servers:
        one.stop()


# -- shards that close, open successors and split -------------------------------------------


def test_a_shard_closes_after_its_records_and_a_child_takes_the_next(server: Any) -> None:
    ddb, streams = server(shard_records=3, shard_split=0)
    table, arn = make_table(ddb)
    for i in range(7):
        put(ddb, table, f"k{i}", i)
    listed = shards(streams, arn)
    assert len(listed) == 3
    root, middle, last = listed
    assert "ParentShardId" not in root
    assert middle["ParentShardId"] == root["ShardId"]
    assert last["ParentShardId"] == middle["ShardId"]
    # "If both StartingSequenceNumber and EndingSequenceNumber are present, then that shard
    # is closed"; the open one has no EndingSequenceNumber.
    assert "EndingSequenceNumber" in root["SequenceNumberRange"]
    assert "EndingSequenceNumber" not in last["SequenceNumberRange"]
    seen: list[int] = []
    for shard in listed:
        records, ended = read_shard(streams, arn, shard["ShardId"])
        span = shard["SequenceNumberRange"]
        numbers = [seq(r) for r in records]
        assert numbers == sorted(numbers)
        assert all(int(span["StartingSequenceNumber"]) <= n for n in numbers)
        if "EndingSequenceNumber" in span:
            assert ended  # a closed shard read to its end: no NextShardIterator
            assert all(n <= int(span["EndingSequenceNumber"]) for n in numbers)
        else:
            assert not ended
        seen += [int(r["dynamodb"]["NewImage"]["v"]["N"]) for r in records]
    assert seen == list(range(7))


def test_a_shard_closes_after_its_seconds_records_or_not(server: Any, clock: Clock) -> None:
    ddb, streams = server(shard_seconds=60)
    table, arn = make_table(ddb)
    put(ddb, table, "a", 1)
    [first] = shards(streams, arn)
    assert "EndingSequenceNumber" not in first["SequenceNumberRange"]
    clock.advance(59)
    assert len(shards(streams, arn)) == 1
    clock.advance(1)
    listed = shards(streams, arn)
    assert listed[0]["ShardId"] == first["ShardId"]
    assert "EndingSequenceNumber" in listed[0]["SequenceNumberRange"]
    assert listed[1]["ParentShardId"] == first["ShardId"]
    put(ddb, table, "a", 2)
    records, _ = read_shard(streams, arn, listed[-1]["ShardId"])
    assert [r["dynamodb"]["NewImage"]["v"]["N"] for r in records] == ["2"]


def test_shards_split_and_each_items_records_stay_in_order(server: Any) -> None:
    ddb, streams = server(shard_records=4, shard_split=1)
    table, arn = make_table(ddb)
    for i in range(120):
        put(ddb, table, f"item{i % 6}", i)
    listed = shards(streams, arn)
    children: dict[str, list[str]] = {}
    for shard in listed:
        if "ParentShardId" in shard:
            children.setdefault(shard["ParentShardId"], []).append(shard["ShardId"])
    assert any(len(kids) == 2 for kids in children.values()), "no split"
    open_now = [s for s in listed if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
    assert 1 < len(open_now) <= MAX_OPEN
    records = read_lineage(streams, arn)
    assert len(records) == 120
    by_item: dict[str, list[int]] = {}
    for record in records:
        pk = record["dynamodb"]["Keys"]["PK"]["S"]
        by_item.setdefault(pk, []).append(int(record["dynamodb"]["NewImage"]["v"]["N"]))
    # "the stream records appear in the same sequence as the actual modifications to the item"
    for pk, values in by_item.items():
        assert values == sorted(values), pk
        assert values == list(range(int(pk[4:]), 120, 6))


def test_by_partition_key_the_items_of_one_partition_stay_in_one_line(server: Any) -> None:
    ddb, streams = server(shard_records=4, shard_split=1, shard_key="partition")
    name = f"streams-{uuid.uuid4().hex[:8]}"
    arn = ddb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )["TableDescription"]["LatestStreamArn"]
    for i in range(120):
        item = {"PK": {"S": f"p{i % 4}"}, "SK": {"S": f"s{i}"}, "v": {"N": str(i)}}
        ddb.put_item(TableName=name, Item=item)
    assert any(
        "EndingSequenceNumber" not in s["SequenceNumberRange"] for s in shards(streams, arn)[2:]
    )
    by_partition: dict[str, list[int]] = {}
    for record in read_lineage(streams, arn):
        pk = record["dynamodb"]["Keys"]["PK"]["S"]
        by_partition.setdefault(pk, []).append(int(record["dynamodb"]["NewImage"]["v"]["N"]))
    assert by_partition == {f"p{j}": list(range(j, 120, 4)) for j in range(4)}


def test_describe_stream_pages_by_its_limit(server: Any) -> None:
    ddb, streams = server(shard_records=1, shard_split=0)
    table, arn = make_table(ddb)
    for i in range(5):
        put(ddb, table, "a", i)
    every = shards(streams, arn)
    assert len(every) == 5
    assert shards(streams, arn, Limit=2) == every
    with pytest.raises(ClientError) as info:
        streams.describe_stream(StreamArn=arn, Limit=101)
    assert code(info) == "ValidationException"
    children = streams.describe_stream(
        StreamArn=arn, ShardFilter={"Type": "CHILD_SHARDS", "ShardId": every[1]["ShardId"]}
    )["StreamDescription"]["Shards"]
    assert children == [every[2]]


# -- iterators that expire -------------------------------------------------------------------


def test_an_iterator_expires_after_its_seconds(server: Any, clock: Clock) -> None:
    ddb, streams = server()
    table, arn = make_table(ddb)
    put(ddb, table, "a", 1)
    [shard] = shards(streams, arn)
    it = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    page = streams.get_records(ShardIterator=it)
    assert len(page["Records"]) == 1
    # The iterator itself stays good until it expires (no single use); so does the next.
    assert len(streams.get_records(ShardIterator=it)["Records"]) == 1
    following = page["NextShardIterator"]
    clock.advance(15 * 60)  # DynamoDB's 15 minutes: still good
    assert streams.get_records(ShardIterator=following)["Records"] == []
    clock.advance(0.01)
    for old in (it, following):
        with pytest.raises(ClientError) as info:
            streams.get_records(ShardIterator=old)
        assert code(info) == "ExpiredIteratorException"
    fresh = streams.get_shard_iterator(
        StreamArn=arn,
        ShardId=shard["ShardId"],
        ShardIteratorType="AFTER_SEQUENCE_NUMBER",
        SequenceNumber=page["Records"][0]["dynamodb"]["SequenceNumber"],
    )["ShardIterator"]
    put(ddb, table, "a", 2)
    assert [
        r["dynamodb"]["NewImage"]["v"]["N"]
        for r in streams.get_records(ShardIterator=fresh)["Records"]
    ] == ["2"]


def test_a_forged_iterator_or_sequence_number_is_refused(server: Any) -> None:
    ddb, streams = server()
    table, arn = make_table(ddb)
    put(ddb, table, "a", 1)
    [shard] = shards(streams, arn)
    with pytest.raises(ClientError) as info:
        streams.get_records(ShardIterator="not-an-iterator")
    assert code(info) == "ValidationException"
    for number in ("0" * 20 + "1", "9" * 24):
        with pytest.raises(ClientError) as info:
            streams.get_shard_iterator(
                StreamArn=arn,
                ShardId=shard["ShardId"],
                ShardIteratorType="AT_SEQUENCE_NUMBER",
                SequenceNumber=number,
            )
        assert code(info) == "ValidationException"
    with pytest.raises(ClientError) as info:
        streams.get_shard_iterator(
            StreamArn=arn,
            ShardId="shardId-00000000000000000000-ffffffff",
            ShardIteratorType="TRIM_HORIZON",
        )
    assert code(info) == "ResourceNotFoundException"


# -- records trimmed after the retention -----------------------------------------------------


def test_records_past_the_retention_are_trimmed_and_their_shards_leave(
    server: Any, clock: Clock
) -> None:
    ddb, streams = server(shard_records=2, shard_split=0, shard_seconds=10**6)
    table, arn = make_table(ddb)
    for i in range(3):
        put(ddb, table, "a", i)
    root, child = shards(streams, arn)
    old = read_shard(streams, arn, root["ShardId"])[0][0]["dynamodb"]["SequenceNumber"]
    clock.advance(24 * 3600 - 1)  # DynamoDB's 24 hours: all still there
    assert len(read_shard(streams, arn, root["ShardId"])[0]) == 2
    early = streams.get_shard_iterator(
        StreamArn=arn, ShardId=child["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    clock.advance(1)
    put(ddb, table, "a", 3)
    # The iterator was handed out before its shard's first record was trimmed.
    with pytest.raises(ClientError) as info:
        streams.get_records(ShardIterator=early)
    assert code(info) == "TrimmedDataAccessException"
    # The closed root, all trimmed, is gone; a sequence number older than the trim point:
    listed = shards(streams, arn)
    assert root["ShardId"] not in {s["ShardId"] for s in listed}
    with pytest.raises(ClientError) as info:
        streams.get_shard_iterator(
            StreamArn=arn, ShardId=root["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )
    assert code(info) == "ResourceNotFoundException"
    trimmed = child["SequenceNumberRange"]["StartingSequenceNumber"]
    with pytest.raises(ClientError) as info:
        streams.get_shard_iterator(
            StreamArn=arn,
            ShardId=child["ShardId"],
            ShardIteratorType="AFTER_SEQUENCE_NUMBER",
            SequenceNumber=trimmed,
        )
    assert code(info) == "TrimmedDataAccessException"
    # TRIM_HORIZON starts at the oldest record kept.
    records, _ = read_shard(streams, arn, listed[-1]["ShardId"])
    assert [r["dynamodb"]["NewImage"]["v"]["N"] for r in records][-1:] == ["3"]
    assert int(old) < seq(records[-1])


def test_the_servers_stream_records_bound_trims_the_oldest(server: Any) -> None:
    ddb, streams = server(stream_records=3, shard_records=2, shard_split=0)
    table, arn = make_table(ddb)
    for i in range(7):
        put(ddb, table, "a", i)
    values = [r["dynamodb"]["NewImage"]["v"]["N"] for r in read_lineage(streams, arn)]
    assert values == ["4", "5", "6"]


# -- GetRecords pages ------------------------------------------------------------------------


def test_get_records_returns_at_most_1000_records(server: Any) -> None:
    ddb, streams = server(shard_records=5000, stream_records=None)
    table, arn = make_table(ddb, "KEYS_ONLY")
    for start in range(0, 1200, 25):
        ddb.batch_write_item(
            RequestItems={
                table: [
                    {"PutRequest": {"Item": {"PK": {"S": f"k{i}"}}}}
                    for i in range(start, start + 25)
                ]
            }
        )
    [shard] = shards(streams, arn)
    it = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    first = streams.get_records(ShardIterator=it)
    assert len(first["Records"]) == 1000
    assert len(streams.get_records(ShardIterator=first["NextShardIterator"])["Records"]) == 200
    with pytest.raises(ClientError) as info:
        streams.get_records(ShardIterator=it, Limit=1001)
    assert code(info) == "ValidationException"
    assert len(streams.get_records(ShardIterator=it, Limit=7)["Records"]) == 7


def test_get_records_returns_at_most_1_mb(server: Any) -> None:
    ddb, streams = server()
    table, arn = make_table(ddb, "NEW_IMAGE")
    for i in range(5):
        put(ddb, table, f"k{i}", i, pad=300_000)
    [shard] = shards(streams, arn)
    it = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    first = streams.get_records(ShardIterator=it)
    assert len(first["Records"]) == 3
    assert sum(r["dynamodb"]["SizeBytes"] for r in first["Records"]) <= 1024 * 1024
    assert len(streams.get_records(ShardIterator=first["NextShardIterator"])["Records"]) == 2


def test_a_cancelled_transactions_records_never_reach_the_stream(server: Any) -> None:
    ddb, streams = server(shard_records=2)
    table, arn = make_table(ddb)
    put(ddb, table, "a", 1)
    with pytest.raises(ClientError):
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": {"PK": {"S": "b"}, "v": {"N": "2"}}}},
                {
                    "Put": {
                        "TableName": table,
                        "Item": {"PK": {"S": "a"}, "v": {"N": "3"}},
                        "ConditionExpression": "attribute_not_exists(PK)",
                    }
                },
            ]
        )
    put(ddb, table, "c", 4)
    values = [r["dynamodb"]["NewImage"]["v"]["N"] for r in read_lineage(streams, arn)]
    assert values == ["1", "4"]


# -- the profile's fields --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("shard_records", 0),
        ("shard_records", 1.5),
        ("shard_split", -1),
        ("shard_split", True),
        ("shard_seconds", 0),
        ("iterator_seconds", -1),
        ("stream_retention", 0),
        ("shard_key", "table"),
    ],
)
def test_a_wrong_stream_setting_is_refused_naming_it(field: str, value: Any) -> None:
    with pytest.raises(InvalidInputError) as info:
        StrictProfile(**{field: value})
    assert info.value.field == field


def test_the_stream_defaults_are_dynamodbs() -> None:
    profile = StrictProfile()
    assert profile.iterator_seconds == 15 * 60
    assert profile.stream_retention == 24 * 3600
    assert (profile.shard_records, profile.shard_seconds, profile.shard_split) == (
        1000,
        4 * 3600,
        4,
    )


def test_a_child_process_serves_the_same_stream_settings() -> None:
    profile = StrictProfile(conflict_hold=0, shard_records=2, iterator_seconds=0.5)
    assert _profile_from_text(_profile_text(profile)) == profile
    server = LocalDynamoDBProcess(strict=profile)
    try:
        ddb, streams = clients(server.start())
        table, arn = make_table(ddb)
        for i in range(3):
            put(ddb, table, "a", i)
        assert len(shards(streams, arn)) == 2
    finally:
        server.stop()


# -- the product's changes() on it -----------------------------------------------------------


def take(stream: Iterator[Change], count: int, within: float = 60.0) -> list[Change]:
    """The next ``count`` changes of ``stream``, or fail after ``within`` seconds (a change
    never coming must fail the test, not hang it)."""
    got: list[Change] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            for _ in range(count):
                got.append(next(stream))
        except BaseException as exc:  # handed to the test
            failed.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(within)
    if failed:
        raise failed[0]
    assert not worker.is_alive(), f"{len(got)} of {count} changes came within {within} s"
    return got


@pytest.fixture
def stream_errors() -> list[str]:
    """The error codes the ``ledger`` fixture's Streams calls were answered with."""
    return []


@pytest.fixture
def ledger(clock: Clock, stream_errors: list[str]) -> Iterator[SyncDynamoDBAdapter]:
    """A ledger table on a strict server whose shards close every 3 records (every second
    closing a split), its streams on ``clock``."""
    server = strict_server(clock, shard_records=3, shard_split=2)
    session = boto3.session.Session()

    def seen(parsed: dict[str, Any], **_: Any) -> None:
        if "Error" in parsed:
            stream_errors.append(str(parsed["Error"].get("Code")))

    session.events.register("after-call.dynamodbstreams", seen)
    with SyncDynamoDBAdapter(
        f"changes-{uuid.uuid4().hex[:8]}", endpoint_url=server.endpoint_url, session=session
    ) as one:
        one.create_table()
        yield one
    server.stop()


def created(ledger: SyncDynamoDBAdapter, count: int, first: int = 0) -> None:
    for i in range(first, first + count):
        ledger.append(entry("f", f"s{i}", LedgerEvent.SandboxCreated, i + 1))


def test_changes_come_once_each_across_closing_and_splitting_shards(
    ledger: SyncDynamoDBAdapter,
) -> None:
    created(ledger, 24)
    ledger.delete_sandbox("f", "s3")
    ledger.append(entry("f", "s3", LedgerEvent.SandboxCreated, 100))
    ledger.delete_sandbox("f", "s3")
    stream = ledger.changes()
    seen = take(stream, 27)
    stream.close()
    assert len({c.id for c in seen}) == 27
    assert sorted(c.sandbox_id for c in seen if c.kind.value == "session.created") == sorted(
        [f"s{i}" for i in range(24)] + ["s3"]
    )
    # The two deletes of one summary item: in the order they were made.
    deletes = [c for c in seen if c.kind.value == "session.deleted"]
    assert [c.sandbox_id for c in deletes] == ["s3", "s3"]
    assert deletes[0].at <= deletes[1].at


def test_changes_resume_from_every_position_losing_and_repeating_nothing(
    ledger: SyncDynamoDBAdapter,
) -> None:
    created(ledger, 20)
    stream = ledger.changes()
    seen = take(stream, 20)
    stream.close()
    for at, one in enumerate(seen):
        resumed = ledger.changes(after=one.position)
        rest = take(resumed, len(seen) - at - 1)
        resumed.close()
        assert sorted(c.id for c in rest) == sorted(c.id for c in seen[at + 1 :]), at
    created(ledger, 4, first=20)
    resumed = ledger.changes(after=seen[-1].position)
    assert sorted(c.sandbox_id for c in take(resumed, 4)) == ["s20", "s21", "s22", "s23"]
    resumed.close()


def test_changes_carry_on_past_expired_iterators_and_new_shards(
    ledger: SyncDynamoDBAdapter, clock: Clock, stream_errors: list[str]
) -> None:
    created(ledger, 5)
    stream = ledger.changes()
    first = take(stream, 5)
    for round_ in range(3):
        clock.advance(15 * 60 + 1)  # every iterator the reader keeps expires
        created(ledger, 5, first=5 * (round_ + 1))
        first += take(stream, 5)
    stream.close()
    assert sorted(c.sandbox_id for c in first) == sorted(f"s{i}" for i in range(20))
    assert len({c.id for c in first}) == 20
    assert stream_errors.count("ExpiredIteratorException") >= 3


def test_a_resumed_position_reports_records_trimmed_from_a_shard_it_never_met() -> None:
    """Found here: a position that had read a split's parent and one child, resumed once the
    parent was gone and the other child's first records were trimmed, read that child from
    its trim horizon and lost those records without a word; it must say changes were lost."""
    from sandbox_ledger import keys as k
    from sandbox_ledger.changes import ChangesTrimmedError
    from sandbox_ledger.keys import LedgerAttr as A
    from sandbox_ledger.local.strict.streams import _key_hash

    clock = Clock()
    server = strict_server(clock, shard_records=2, shard_split=1, stream_retention=100)
    endpoint = server.endpoint_url
    ddb, streams = clients(endpoint)
    table = f"trim-{uuid.uuid4().hex[:8]}"

    def head(sandbox_id: str) -> dict[str, Any]:
        return {
            k.PARTITION_KEY: {"S": k.session_pk("f", sandbox_id)},
            k.SORT_KEY: {"S": k.event_sk(1, "0000")},
        }

    def half(sandbox_id: str) -> str:
        return "low" if _key_hash(head(sandbox_id)) < 2**63 else "high"

    ids = [f"s{i}" for i in range(40)]
    low = [i for i in ids if half(i) == "low"]
    high = [i for i in ids if half(i) == "high"]

    def create(sandbox_id: str) -> None:
        item = {**head(sandbox_id), A.EVENT: {"S": "sandbox.created"}, A.TS: {"N": "1"}}
        ddb.put_item(TableName=table, Item=item)

    try:
        with SyncDynamoDBAdapter(table, endpoint_url=endpoint) as ledger:
            ledger.create_table()
            arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
            while len(shards(streams, arn)) == 1:  # the root fills and splits in two
                create(low.pop())
            root = shards(streams, arn)[0]["ShardId"]
            create(high[0])  # t=0, the second child's first record
            clock.advance(50)
            create(low[0])  # t=50, in the first child, which the reader reads first
            stream = ledger.changes()
            seen = take(stream, len(ids) - len(low) - len(high) + 2)
            stream.close()
            position = next(c for c in seen if c.sandbox_id == low[0]).position
            state = json.loads(base64.urlsafe_b64decode(position + "=="))["s"]["at"]
            assert state["done"] == [root] and len(state["at"]) == 1  # one child met
            clock.advance(70)  # the root and the second child's first record are trimmed
            create(high[1])
            assert root not in {s["ShardId"] for s in shards(streams, arn)}
            resumed = ledger.changes(after=position)
            with pytest.raises(ChangesTrimmedError):
                take(resumed, 1, within=20)
            resumed.close()
    finally:
        server.stop()


def test_one_sessions_changes_come_in_the_order_they_were_made(
    ledger: SyncDynamoDBAdapter,
) -> None:
    """A session's items are many (its summary, each entry's head), and DynamoDB orders the
    stream records of one item only: across shards that close and split, a session's
    changes must still come in the order they were made (created before closed before
    deleted), as every other store gives them."""
    sessions = [f"s{i}" for i in range(8)]
    for sid in sessions:
        ledger.append(entry("f", sid, LedgerEvent.SandboxCreated, 1))
        ledger.append(entry("f", sid, LedgerEvent.ExecComplete, 2, step=0))
        ledger.append(entry("f", sid, LedgerEvent.SandboxClosed, 3))
        ledger.delete_sandbox("f", sid)
        ledger.append(entry("f", sid, LedgerEvent.SandboxCreated, 4))
        ledger.append(entry("f", sid, LedgerEvent.SandboxCreated, 5))  # a second one: a change
    stream = ledger.changes()
    seen = take(stream, 5 * len(sessions))
    stream.close()
    assert len({c.id for c in seen}) == len(seen)
    for sid in sessions:
        mine = [(c.kind.value, c.at) for c in seen if c.sandbox_id == sid]
        assert [kind for kind, _ in mine] == [
            "session.created",
            "session.closed",
            "session.deleted",
            "session.created",
            "session.created",
        ], sid
        assert [at for kind, at in mine if kind != "session.deleted"] == [1, 3, 4, 5], sid


def test_changes_of_one_import_transaction_come_in_order_and_resume_inside_it(
    ledger: SyncDynamoDBAdapter,
) -> None:
    """An import stores a session's entries in one transaction: one summary write, one
    stream record, that holds several changes. Each is handed out once, in the file's
    order, and a position between two of them resumes with the next."""
    from sandbox_ledger.transfer import entry_line, import_entries, parse_lines

    lines = [
        entry_line(entry("f", sid, event, ts)).encode()
        for sid in ("a", "b", "c")
        for event, ts in (
            (LedgerEvent.SandboxCreated, 1),
            (LedgerEvent.ExecComplete, 2),
            (LedgerEvent.SandboxClosed, 3),
            (LedgerEvent.SandboxCreated, 4),
        )
    ]
    assert import_entries(ledger, parse_lines(lines)).new == 12
    stream = ledger.changes()
    seen = take(stream, 9)
    stream.close()
    assert len({c.id for c in seen}) == 9
    assert sum("." in c.id for c in seen) == 6  # each session's three: one record
    for sid in ("a", "b", "c"):
        mine = [(c.kind.value, c.at) for c in seen if c.sandbox_id == sid]
        assert mine == [("session.created", 1), ("session.closed", 3), ("session.created", 4)]
    for at, one in enumerate(seen):
        resumed = ledger.changes(after=one.position)
        rest = take(resumed, len(seen) - at - 1)
        resumed.close()
        assert [c.id for c in rest] == [c.id for c in seen[at + 1 :]], at
    ledger.append(entry("f", "d", LedgerEvent.SandboxCreated, 5))
    resumed = ledger.changes(after=seen[-1].position)
    [after] = take(resumed, 1)
    resumed.close()
    assert (after.kind.value, after.sandbox_id) == ("session.created", "d")
