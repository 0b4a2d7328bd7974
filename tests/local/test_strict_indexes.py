"""The strict profile's global secondary indexes lag behind their table, as DynamoDB's do
(the rules quoted in sandbox_ledger/local/strict/indexes.py), checked through plain boto3.

Timing: a write becomes visible in an index ``DELAY`` seconds after the server took it, so a
read whose answer arrives less than ``DELAY`` after the write was sent was served before then
and must not see it (asserted only when the read was that fast: a loaded machine makes the
check vacuous, never false), and a read sent ``DELAY`` after the write's answer arrived is
served after it and must see it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.local import LocalDynamoDB, LocalDynamoDBProcess
from sandbox_ledger.local.dynamodb import _profile_from_text, _profile_text
from sandbox_ledger.local.strict import StrictProfile

DELAY = 0.25
MARGIN = 0.05
ONE_TRY = Config(retries={"max_attempts": 1, "mode": "standard"})


def client(endpoint: str) -> Any:
    return boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1", config=ONE_TRY)


def make_table(ddb: Any, name: str | None = None, stream: bool = False) -> str:
    """PK/SK; ``byOwner`` (owner, rank; KEYS_ONLY), ``byOwnerAll`` (owner; ALL) and the local
    index ``byRank`` (PK, rank)."""
    name = name or f"lag-{uuid.uuid4().hex[:8]}"
    extra = {"StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"}}
    ddb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": n, "AttributeType": "S"} for n in ("PK", "SK", "owner", "rank")
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "byOwner",
                "KeySchema": [
                    {"AttributeName": "owner", "KeyType": "HASH"},
                    {"AttributeName": "rank", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            },
            {
                "IndexName": "byOwnerAll",
                "KeySchema": [{"AttributeName": "owner", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            },
        ],
        LocalSecondaryIndexes=[
            {
                "IndexName": "byRank",
                "KeySchema": [
                    {"AttributeName": "PK", "KeyType": "HASH"},
                    {"AttributeName": "rank", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
        **(extra if stream else {}),
    )
    return name


def item(sk: str, owner: str | None = "alice", rank: str = "1", **more: str) -> dict[str, Any]:
    found: dict[str, Any] = {"PK": {"S": "p"}, "SK": {"S": sk}, "rank": {"S": rank}}
    if owner is not None:
        found["owner"] = {"S": owner}
    found.update({k: {"S": v} for k, v in more.items()})
    return found


def key(sk: str) -> dict[str, Any]:
    return {"PK": {"S": "p"}, "SK": {"S": sk}}


def owned(ddb: Any, table: str, owner: str, index: str = "byOwner") -> list[dict[str, Any]]:
    """The items a Query of ``index`` finds for ``owner``, as returned."""
    return list(
        ddb.query(
            TableName=table,
            IndexName=index,
            KeyConditionExpression="#o = :o",
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues={":o": {"S": owner}},
        )["Items"]
    )


def sks(items: list[dict[str, Any]]) -> list[str]:
    return [i["SK"]["S"] for i in items]


class Clock:
    """When a write was sent and when its answer came."""

    def __init__(self) -> None:
        self.sent = self.done = 0.0

    def write(self, call: Any, **kwargs: Any) -> Any:
        self.sent = time.monotonic()
        answer = call(**kwargs)
        self.done = time.monotonic()
        return answer

    def early(self) -> bool:
        """Whether now is still before the last write can have reached an index."""
        return time.monotonic() - self.sent < DELAY

    def wait_past(self) -> None:
        """Until every index has surely taken the last write."""
        time.sleep(max(0.0, self.done + DELAY + MARGIN - time.monotonic()))


@pytest.fixture(scope="module")
def server() -> Iterator[LocalDynamoDB]:
    lagging = LocalDynamoDB(strict=StrictProfile(conflict_hold=0, index_delay=(DELAY, DELAY)))
    lagging.start()
    yield lagging
    lagging.stop()


@pytest.fixture
def ddb(server: LocalDynamoDB) -> Any:
    return client(server.endpoint_url)


def behind(server: LocalDynamoDB, table: str) -> int:
    """The entries of ``table``'s indexes behind the table now."""
    assert server._front is not None
    return server._front.indexes.behind(table)


# -- a write reaches the index after its delay -------------------------------------------


def test_a_put_is_missing_from_the_index_until_its_delay_passed(ddb: Any) -> None:
    table = make_table(ddb)
    clock = Clock()
    clock.write(ddb.put_item, TableName=table, Item=item("a"))
    found, early = owned(ddb, table, "alice"), clock.early()
    assert found == [] or not early
    # The table itself has it at once (a strongly consistent read, and an eventual one here).
    assert ddb.get_item(TableName=table, Key=key("a"), ConsistentRead=True)["Item"] == item("a")
    assert ddb.get_item(TableName=table, Key=key("a"))["Item"] == item("a")
    clock.wait_past()
    assert sks(owned(ddb, table, "alice")) == ["a"]
    assert sks(owned(ddb, table, "alice", "byOwnerAll")) == ["a"]


def test_an_update_moving_an_item_leaves_it_under_its_old_key_until_the_delay(ddb: Any) -> None:
    table = make_table(ddb)
    clock = Clock()
    clock.write(ddb.put_item, TableName=table, Item=item("a"))
    clock.wait_past()
    clock.write(
        ddb.update_item,
        TableName=table,
        Key=key("a"),
        UpdateExpression="SET #o = :bob",
        ExpressionAttributeNames={"#o": "owner"},
        ExpressionAttributeValues={":bob": {"S": "bob"}},
    )
    old, new, early = owned(ddb, table, "alice"), owned(ddb, table, "bob"), clock.early()
    assert (sks(old), new) == (["a"], []) or not early
    clock.wait_past()
    assert owned(ddb, table, "alice") == []
    assert owned(ddb, table, "bob") == [
        {"PK": {"S": "p"}, "SK": {"S": "a"}, "owner": {"S": "bob"}, "rank": {"S": "1"}}
    ]


def test_an_index_shows_the_old_projection_until_the_delay(ddb: Any) -> None:
    table = make_table(ddb)
    clock = Clock()
    clock.write(ddb.put_item, TableName=table, Item=item("a", note="first"))
    clock.wait_past()
    clock.write(ddb.put_item, TableName=table, Item=item("a", note="second"))
    found, early = owned(ddb, table, "alice", "byOwnerAll"), clock.early()
    assert found == [item("a", note="first")] or not early
    clock.wait_past()
    assert owned(ddb, table, "alice", "byOwnerAll") == [item("a", note="second")]


def test_a_deleted_item_is_still_returned_by_the_index_until_the_delay(ddb: Any) -> None:
    table = make_table(ddb)
    clock = Clock()
    clock.write(ddb.put_item, TableName=table, Item=item("a"))
    clock.wait_past()
    clock.write(ddb.delete_item, TableName=table, Key=key("a"))
    found, early = owned(ddb, table, "alice"), clock.early()
    assert sks(found) == ["a"] or not early
    assert "Item" not in ddb.get_item(TableName=table, Key=key("a"), ConsistentRead=True)
    scanned, early = ddb.scan(TableName=table, IndexName="byOwner")["Items"], clock.early()
    assert sks(scanned) == ["a"] or not early  # a Scan of the index lags as its Query does
    clock.wait_past()
    assert owned(ddb, table, "alice") == []
    assert ddb.scan(TableName=table, IndexName="byOwner")["Items"] == []


def test_every_kind_of_write_lags(ddb: Any) -> None:
    """BatchWriteItem, TransactWriteItems and PartiQL's INSERT, as PutItem."""
    table = make_table(ddb)
    clock = Clock()
    clock.write(
        ddb.batch_write_item,
        RequestItems={table: [{"PutRequest": {"Item": item("batch")}}]},
    )
    found, early = owned(ddb, table, "alice"), clock.early()
    assert found == [] or not early
    clock.write(
        ddb.transact_write_items,
        TransactItems=[{"Put": {"TableName": table, "Item": item("transaction")}}],
    )
    found, early = owned(ddb, table, "alice"), clock.early()
    assert "transaction" not in sks(found) or not early
    clock.write(
        ddb.execute_statement,
        Statement=f"INSERT INTO \"{table}\" VALUE {{'PK': 'p', 'SK': 'partiql', 'owner': "
        "'alice', 'rank': '1'}",
    )
    found, early = owned(ddb, table, "alice"), clock.early()
    assert "partiql" not in sks(found) or not early
    clock.wait_past()
    assert sks(owned(ddb, table, "alice")) == ["batch", "partiql", "transaction"]


# -- each item's writes in order; the table and local indexes at once ---------------------


def test_an_items_writes_reach_the_index_in_order() -> None:
    """Delays drawn from 0 to 0.2 s: a later write, drawn a shorter delay, still waits for
    the item's earlier ones. A reader polling the index never sees a version go back."""
    server = LocalDynamoDB(strict=StrictProfile(conflict_hold=0, index_delay=(0.0, 0.2)))
    ddb = client(server.start())
    try:
        table = make_table(ddb)
        writes = 30
        seen: list[int] = []
        stop = threading.Event()

        def poll() -> None:
            reader = client(server.endpoint_url)
            while not stop.is_set():
                for found in owned(reader, table, "alice", "byOwnerAll"):
                    seen.append(int(found["v"]["S"]))

        reader = threading.Thread(target=poll)
        reader.start()
        for version in range(writes):
            ddb.put_item(TableName=table, Item=item("a", v=str(version)))
        time.sleep(0.2 + MARGIN)
        stop.set()
        reader.join()
        assert seen == sorted(seen), seen
        assert owned(ddb, table, "alice", "byOwnerAll") == [item("a", v=str(writes - 1))]
    finally:
        server.stop()


def test_the_table_and_its_local_indexes_are_consistent_at_once(ddb: Any) -> None:
    table = make_table(ddb)
    ddb.put_item(TableName=table, Item=item("a", rank="5"))
    on_table = ddb.query(
        TableName=table,
        KeyConditionExpression="PK = :p",
        ExpressionAttributeValues={":p": {"S": "p"}},
        ConsistentRead=True,
    )["Items"]
    on_local = ddb.query(
        TableName=table,
        IndexName="byRank",
        KeyConditionExpression="PK = :p AND #r = :r",
        ExpressionAttributeNames={"#r": "rank"},
        ExpressionAttributeValues={":p": {"S": "p"}, ":r": {"S": "5"}},
        ConsistentRead=True,
    )["Items"]
    assert sks(on_table) == sks(on_local) == ["a"]
    assert ddb.scan(TableName=table, ConsistentRead=True)["Count"] == 1


def test_a_consistent_read_of_a_global_index_is_refused(ddb: Any) -> None:
    table = make_table(ddb)
    for call, extra in (
        (ddb.query, {"KeyConditionExpression": "#o = :o"}),
        (ddb.scan, {}),
    ):
        names = {"ExpressionAttributeNames": {"#o": "owner"}} if extra else {}
        values = {"ExpressionAttributeValues": {":o": {"S": "alice"}}} if extra else {}
        with pytest.raises(ClientError) as refused:
            call(
                TableName=table,
                IndexName="byOwner",
                ConsistentRead=True,
                **extra,
                **names,
                **values,
            )
        assert refused.value.response["Error"]["Code"] == "ValidationException"
        assert "Consistent reads are not supported on global secondary indexes" in str(
            refused.value
        )
    ddb.scan(TableName=table, IndexName="byRank", ConsistentRead=True)  # a local index: fine


# -- nothing hidden shows; nothing stays -------------------------------------------------


def test_the_lag_shows_in_no_table_description_stream_or_count(
    server: LocalDynamoDB, ddb: Any
) -> None:
    table = make_table(ddb, stream=True)
    tables = set(ddb.list_tables()["TableNames"])
    described = ddb.describe_table(TableName=table)["Table"]
    clock = Clock()
    clock.write(ddb.put_item, TableName=table, Item=item("a"))
    clock.write(ddb.put_item, TableName=table, Item=item("b"))
    owned(ddb, table, "alice")  # served with the lagging entries in place, then put back
    assert set(ddb.list_tables()["TableNames"]) == tables
    now = ddb.describe_table(TableName=table)["Table"]
    assert [i["IndexName"] for i in now["GlobalSecondaryIndexes"]] == [
        i["IndexName"] for i in described["GlobalSecondaryIndexes"]
    ]
    assert now["ItemCount"] == 2
    streams = boto3.client(
        "dynamodbstreams", endpoint_url=server.endpoint_url, region_name="us-east-1"
    )
    arn = now["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    clock.wait_past()
    owned(ddb, table, "alice")
    records = streams.get_records(ShardIterator=iterator)["Records"]
    assert [r["eventName"] for r in records] == ["INSERT", "INSERT"]  # the writes', no more


def test_the_lag_keeps_nothing_once_every_delay_passed(server: LocalDynamoDB, ddb: Any) -> None:
    table = make_table(ddb)
    clock = Clock()
    for n in range(5):
        clock.write(ddb.put_item, TableName=table, Item=item(f"{n}"))
    clock.write(ddb.put_item, TableName=table, Item=item("sparse", owner=None))
    clock.wait_past()
    # No request since: nothing caught up. 5 items in 2 global indexes; the item without
    # the indexes' key attributes is in neither (the local index does not lag).
    assert behind(server, table) == 5 * 2
    ddb.describe_table(TableName=table)  # any request lets the indexes catch up
    assert behind(server, table) == 0


def test_a_deleted_tables_lag_is_dropped_with_it(server: LocalDynamoDB, ddb: Any) -> None:
    table = make_table(ddb)
    clock = Clock()
    clock.write(ddb.put_item, TableName=table, Item=item("a"))
    clock.wait_past()
    clock.write(ddb.delete_item, TableName=table, Key=key("a"))
    ddb.delete_table(TableName=table)
    assert behind(server, table) == 0
    make_table(ddb, table)  # the same name, within the delay
    assert owned(ddb, table, "alice") == []  # the old table's entries are gone with it


# -- the profile -------------------------------------------------------------------------


def test_a_delay_of_zero_is_as_fresh_as_moto() -> None:
    server = LocalDynamoDB(strict=StrictProfile(conflict_hold=0, index_delay=(0, 0)))
    ddb = client(server.start())
    try:
        table = make_table(ddb)
        ddb.put_item(TableName=table, Item=item("a"))
        assert sks(owned(ddb, table, "alice")) == ["a"]
        ddb.delete_item(TableName=table, Key=key("a"))
        assert owned(ddb, table, "alice") == []
    finally:
        server.stop()


def test_an_index_delay_out_of_range_is_refused_naming_the_field() -> None:
    for wrong in ((0.2, 0.1), (-1.0, 0.0), (0.0, 61.0), (0.1,), "0.1", (True, 1.0)):
        with pytest.raises(InvalidInputError, match="index_delay"):
            StrictProfile(index_delay=wrong)  # type: ignore[arg-type]
    assert StrictProfile().index_delay == (0.0, 0.1)


def test_the_child_process_server_takes_the_index_delay() -> None:
    profile = StrictProfile(conflict_hold=0, index_delay=(DELAY, DELAY))
    assert _profile_from_text(_profile_text(profile)) == profile
    server = LocalDynamoDBProcess(strict=profile)
    ddb = client(server.start())
    try:
        table = make_table(ddb)
        clock = Clock()
        clock.write(ddb.put_item, TableName=table, Item=item("a"))
        found, early = owned(ddb, table, "alice"), clock.early()
        assert found == [] or not early
        clock.wait_past()
        assert sks(owned(ddb, table, "alice")) == ["a"]
    finally:
        server.stop()


def test_a_number_key_written_otherwise_names_the_same_item(
    server: LocalDynamoDB, ddb: Any
) -> None:
    """A numeric key of 10 deleted as 1E1: the same item, in the table and in its lag."""
    table = f"lag-{uuid.uuid4().hex[:8]}"
    ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "n", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "n", "AttributeType": "N"},
            {"AttributeName": "owner", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "byOwner",
                "KeySchema": [{"AttributeName": "owner", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    clock = Clock()
    clock.write(ddb.put_item, TableName=table, Item={"n": {"N": "10"}, "owner": {"S": "alice"}})
    clock.wait_past()
    clock.write(ddb.delete_item, TableName=table, Key={"n": {"N": "1E1"}})
    assert "Item" not in ddb.get_item(TableName=table, Key={"n": {"N": "10"}}, ConsistentRead=True)
    found, early = owned(ddb, table, "alice"), clock.early()
    assert found == [{"n": {"N": "10"}, "owner": {"S": "alice"}}] or not early
    assert ddb.scan(TableName=table)["Count"] == 0  # the entry put back in place is gone again
    clock.wait_past()
    assert owned(ddb, table, "alice") == []
    assert behind(server, table) == 0


def test_a_namesake_in_another_region_lags_on_its_own(server: LocalDynamoDB, ddb: Any) -> None:
    """Two tables of one name in two regions: a write to either lags in its own indexes."""
    table = make_table(ddb)
    other = boto3.client(
        "dynamodb", endpoint_url=server.endpoint_url, region_name="eu-west-1", config=ONE_TRY
    )
    make_table(other, table)
    clock = Clock()
    clock.write(other.put_item, TableName=table, Item=item("there"))
    found, early = owned(other, table, "alice"), clock.early()
    assert found == [] or not early
    clock.write(ddb.put_item, TableName=table, Item=item("here"))
    found, early = owned(ddb, table, "alice"), clock.early()
    assert found == [] or not early
    clock.wait_past()
    assert sks(owned(other, table, "alice")) == ["there"]
    assert sks(owned(ddb, table, "alice")) == ["here"]


def test_a_later_write_drawn_a_shorter_delay_waits_for_the_earlier_one() -> None:
    """The lag on its own, on a clock and delays of the test's choosing: an item's second
    write, drawn no delay, is not seen before its first, drawn 0.3 s."""
    from moto.dynamodb.models.table import Table

    from sandbox_ledger.local.strict.indexes import IndexLag

    table = Table(
        "ordered",
        account_id="123456789012",
        region="us-east-1",
        schema=[{"AttributeName": "PK", "KeyType": "HASH"}],
        attr=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "owner", "AttributeType": "S"},
        ],
        global_indexes=[
            {
                "IndexName": "byOwner",
                "KeySchema": [{"AttributeName": "owner", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )
    now = [0.0]
    delays = iter([0.3, 0.0])

    class Drawn:
        def uniform(self, low: float, high: float) -> float:
            return next(delays)

    lag = IndexLag((0.0, 0.3), rng=Drawn(), clock=lambda: now[0])  # type: ignore[arg-type]

    def put(version: str) -> None:
        written = {"PK": {"S": "p"}, "owner": {"S": "alice"}, "v": {"S": version}}
        request = {"TableName": "ordered", "Item": written}
        with lag.around("PutItem", request, [("ordered", written)], lambda name: table):
            table.put_item(written)

    def seen() -> list[str]:
        request = {"TableName": "ordered", "IndexName": "byOwner"}
        with lag.around("Scan", request, [], lambda name: table):
            found, _, _ = table.scan({}, None, None, index_name="byOwner")  # type: ignore[arg-type]
        return [one.attrs["v"].value for one in found]

    put("1")
    put("2")
    now[0] = 0.1  # the second write's own delay has passed, the first's has not
    assert seen() == []
    assert [i.attrs["v"].value for i in table.all_items()] == ["2"]  # put back
    now[0] = 0.3
    assert seen() == ["2"]
    assert lag.behind() == 0


# -- waiting for the indexes ---------------------------------------------------------------


def test_wait_for_indexes_returns_once_the_delay_passed_never_sooner(
    server: LocalDynamoDB, ddb: Any
) -> None:
    table = make_table(ddb)
    clock = Clock()
    clock.write(ddb.put_item, TableName=table, Item=item("a"))
    server.wait_for_indexes(table)
    # It waited out the lag (never shortened it): the write's delay has passed.
    assert time.monotonic() - clock.sent >= DELAY
    assert behind(server, table) == 0
    assert sks(owned(ddb, table, "alice")) == ["a"]
    server.wait_for_indexes()  # nothing behind anywhere: at once


def test_wait_for_indexes_times_out_naming_what_is_behind(server: LocalDynamoDB, ddb: Any) -> None:
    table = make_table(ddb)
    ddb.put_item(TableName=table, Item=item("a"))
    with pytest.raises(TimeoutError, match="2 index entries still behind"):
        server.wait_for_indexes(table, timeout=0)
    server.wait_for_indexes(table)


def test_wait_for_indexes_needs_a_started_server() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        LocalDynamoDB(strict=True).wait_for_indexes()
