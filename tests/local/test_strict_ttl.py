"""TTL as the strict profile applies it (sandbox_ledger/local/strict/ttl.py): expired items
served until the TTL service deletes them, late, each deletion a REMOVE stream record with
the service's identity, which the product's stream consumers recognise."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from sandbox_ledger.local import LocalDynamoDB
from sandbox_ledger.local.strict.ttl import TTL_IDENTITY, TtlDeleter
from sandbox_ledger.resources.stream import is_ttl_removal


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = LocalDynamoDB()
    yield server.start()
    server.stop()


def _table(ddb: Any, *, ttl: bool = True, index: bool = False) -> str:
    name = f"ttl-{uuid.uuid4().hex[:8]}"
    extra: dict[str, Any] = {}
    definitions = [
        {"AttributeName": "PK", "AttributeType": "S"},
        {"AttributeName": "SK", "AttributeType": "S"},
    ]
    if index:
        definitions.append({"AttributeName": "G", "AttributeType": "S"})
        extra["GlobalSecondaryIndexes"] = [
            {
                "IndexName": "byG",
                "KeySchema": [{"AttributeName": "G", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ]
    ddb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=definitions,
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        **extra,
    )
    if ttl:
        ddb.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiresAt"},
        )
    return name


def _put(ddb: Any, table: str, sk: str, **attrs: Any) -> None:
    ddb.put_item(TableName=table, Item={"PK": {"S": "p"}, "SK": {"S": sk}, **attrs})


def _keys(ddb: Any, table: str) -> list[str]:
    items = ddb.query(
        TableName=table,
        KeyConditionExpression="PK = :p",
        ExpressionAttributeValues={":p": {"S": "p"}},
        ConsistentRead=True,
    )["Items"]
    return [i["SK"]["S"] for i in items]


def _records(ddb: Any, endpoint: str, table: str) -> list[dict[str, Any]]:
    streams = boto3.client("dynamodbstreams", endpoint_url=endpoint)
    arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records: list[dict[str, Any]] = streams.get_records(ShardIterator=iterator)["Records"]
    return records


def test_expired_items_are_served_until_deleted_late_by_the_ttl_service(endpoint: str) -> None:
    ddb = boto3.client("dynamodb", endpoint_url=endpoint)
    table = _table(ddb)
    now = time.time()
    _put(ddb, table, "a-expired", expiresAt={"N": str(int(now - 30))})
    _put(ddb, table, "b-just-expired", expiresAt={"N": str(int(now - 2))})
    _put(ddb, table, "c-later", expiresAt={"N": str(int(now + 3600))})
    _put(ddb, table, "d-not-a-number", expiresAt={"S": str(int(now - 30))})
    _put(ddb, table, "e-six-years-ago", expiresAt={"N": str(int(now - 6 * 365 * 86_400))})
    _put(ddb, table, "f-none")
    # "Items that have expired and not been deleted will still show up in reads".
    assert len(_keys(ddb, table)) == 6
    deleter = TtlDeleter(delay=10, every=60, clock=lambda: now)
    # The deleter looks at every table of the process (other tests' too): its counts are
    # at least this table's, and this table's keys say exactly what it deleted here.
    assert deleter.tick() >= 1  # here only the item expired more than the delay ago
    assert deleter.tick() == 0  # the next look is a minute away
    assert _keys(ddb, table) == [
        "b-just-expired",
        "c-later",
        "d-not-a-number",
        "e-six-years-ago",
        "f-none",
    ]
    assert deleter.sweep(now + 10) >= 1
    assert _keys(ddb, table) == ["c-later", "d-not-a-number", "e-six-years-ago", "f-none"]
    removals = [r for r in _records(ddb, endpoint, table) if r["eventName"] == "REMOVE"]
    assert [r["dynamodb"]["Keys"]["SK"]["S"] for r in removals] == ["a-expired", "b-just-expired"]
    assert all(r.get("userIdentity") == TTL_IDENTITY for r in removals), removals
    assert all(is_ttl_removal(r) for r in removals)
    assert all("OldImage" in r["dynamodb"] for r in removals)


def test_a_long_look_puts_the_next_one_off_so_ttl_takes_a_twentieth_of_the_time() -> None:
    """A look reads every item of the tables with TTL, under the server's lock: after one
    that took ``t`` seconds the next is due no sooner than ``t / BUSY_SHARE`` (and never
    sooner than ``every``). Before, a look every second on a table of a hundred thousand
    items took most of the server's time: an import into it went at tens of entries a
    second."""
    from sandbox_ledger.local.strict.ttl import BUSY_SHARE

    now, spent = 1000.0, [0.0]
    looks: list[float] = []

    class Counted(TtlDeleter):
        def sweep(self, at: float) -> int:
            looks.append(at)
            spent[0] += took  # the time this look takes, as the timer sees it
            return 0

    def timer() -> float:
        return spent[0]

    deleter = Counted(delay=0, every=1, clock=lambda: now, timer=timer)
    took = 0.01  # a twentieth of 0.2 s: the next look a second on, as asked
    deleter.tick()
    now += 0.999
    deleter.tick()
    now += 0.001
    deleter.tick()
    assert looks == [1000.0, 1001.0]
    took = 0.5  # a look of half a second: the next ten seconds on
    now += 1
    deleter.tick()
    now += 0.5 / BUSY_SHARE - 0.001
    deleter.tick()
    now += 0.001
    deleter.tick()
    assert looks == [1000.0, 1001.0, 1002.0, 1002.0 + 0.5 / BUSY_SHARE]


def test_a_caller_delete_is_no_ttl_removal_and_a_table_without_ttl_is_left(
    endpoint: str,
) -> None:
    ddb = boto3.client("dynamodb", endpoint_url=endpoint)
    table = _table(ddb, ttl=False)
    _put(ddb, table, "a", expiresAt={"N": "1"})
    _put(ddb, table, "b")
    ddb.delete_item(TableName=table, Key={"PK": {"S": "p"}, "SK": {"S": "b"}})
    deleted: list[str] = []
    deleter = TtlDeleter(delay=0, every=0, removed=lambda t, item: deleted.append(t))
    deleter.sweep(time.time())
    assert table not in deleted
    assert _keys(ddb, table) == ["a"]
    [removal] = [r for r in _records(ddb, endpoint, table) if r["eventName"] == "REMOVE"]
    assert not is_ttl_removal(removal) and "userIdentity" not in removal


def test_changes_reports_a_session_the_ttl_service_removed_as_expired(endpoint: str) -> None:
    """Read through the SDK (GetRecords), a TTL removal's identity is ``{"Type",
    "PrincipalId"}`` (the Streams API's Identity); a Lambda event spells it ``{"type",
    "principalId"}``. changes() read only the second: a session the TTL service removed
    came out as ``session.deleted``, as if a caller had deleted it."""
    from datetime import timedelta

    from sandbox_ledger import LedgerEvent
    from sandbox_ledger.changes import ChangeKind
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.testing._build import entry

    table = f"ttl-{uuid.uuid4().hex[:8]}"
    with SyncDynamoDBAdapter(table, endpoint_url=endpoint, retention=timedelta(days=30)) as ledger:
        ledger.create_table()
        ledger.append(entry("f", "s", LedgerEvent.SandboxCreated, int(time.time() * 1000)))
        removed: list[str] = []
        deleter = TtlDeleter(
            delay=0,
            every=0,
            clock=lambda: time.time() + 40 * 86_400,
            removed=lambda name, item: removed.append(item["SK"]["S"]),
        )
        assert deleter.tick() >= 2 and "#SUMMARY" in removed
        flow = ledger.changes()
        kinds = [next(flow).kind for _ in range(2)]
        flow.close()
    assert kinds == [ChangeKind.SESSION_CREATED, ChangeKind.SESSION_EXPIRED]


def test_a_strict_server_deletes_expired_items_on_its_own_and_its_index_lags_them() -> None:
    """StrictProfile(ttl_delay=0): an item expired is deleted at the server's next look,
    which a request brings; the index still answers with it until its delay passes, as it
    does for a caller's DeleteItem."""
    from sandbox_ledger.local import StrictProfile

    profile = StrictProfile(conflict_hold=0, ttl_delay=0, ttl_every=0.05, index_delay=(0.3, 0.3))
    server = LocalDynamoDB(strict=profile)
    endpoint = server.start()
    try:
        ddb = boto3.client("dynamodb", endpoint_url=endpoint)
        table = _table(ddb, index=True)
        soon = int(time.time()) + 1  # not expired while the table is set up
        _put(ddb, table, "old", expiresAt={"N": str(soon)}, G={"S": "g"})
        _put(ddb, table, "new", expiresAt={"N": str(int(time.time()) + 3600)}, G={"S": "g"})
        # Both in the index (0.3 s), "old" expired, and a look due: the next request (the
        # first since) brings the deletion.
        time.sleep(max(0.5, soon - time.time() + 0.1))
        started = time.monotonic()
        assert _keys(ddb, table) == ["new"]
        by_g = ddb.query(
            TableName=table,
            IndexName="byG",
            KeyConditionExpression="G = :g",
            ExpressionAttributeValues={":g": {"S": "g"}},
        )["Items"]
        if time.monotonic() - started < 0.3:  # the index's delay has not passed yet
            assert sorted(i["SK"]["S"] for i in by_g) == ["new", "old"]
        [removal] = [r for r in _records(ddb, endpoint, table) if r["eventName"] == "REMOVE"]
        assert is_ttl_removal(removal) and removal["dynamodb"]["Keys"]["SK"]["S"] == "old"
    finally:
        server.stop()


def test_a_strict_server_without_ttl_deletion_keeps_expired_items_and_the_child_takes_it() -> None:
    from sandbox_ledger.local import LocalDynamoDBProcess, StrictProfile

    profile = StrictProfile(conflict_hold=0, ttl_delay=None, index_delay=(0, 0))
    for server in (LocalDynamoDB(strict=profile), LocalDynamoDBProcess(strict=profile)):
        endpoint = server.start()
        try:
            ddb = boto3.client("dynamodb", endpoint_url=endpoint)
            table = _table(ddb)
            _put(ddb, table, "old", expiresAt={"N": "1000000000"})
            time.sleep(0.05)
            assert _keys(ddb, table) == ["old"]
        finally:
            server.stop()
    child = LocalDynamoDBProcess(strict=StrictProfile(ttl_delay=0, ttl_every=0.05))
    endpoint = child.start()
    try:
        ddb = boto3.client("dynamodb", endpoint_url=endpoint)
        table = _table(ddb)
        _put(ddb, table, "old", expiresAt={"N": str(int(time.time()) - 1)})
        time.sleep(0.1)
        assert _keys(ddb, table) == []
    finally:
        child.stop()


@pytest.mark.parametrize(
    ("field", "value"), [("ttl_delay", -1.0), ("ttl_every", 0.0), ("ttl_delay", 10**9)]
)
def test_bad_ttl_settings_are_refused_naming_the_field(field: str, value: float) -> None:
    from sandbox_ledger.errors import InvalidInputError
    from sandbox_ledger.local import StrictProfile

    with pytest.raises(InvalidInputError, match=field):
        StrictProfile(**{field: value})  # type: ignore[arg-type]
