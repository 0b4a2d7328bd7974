"""The strict profile's consumed capacity, 1 MB pages and meter: each rule as DynamoDB's
documentation states it (quoted in sandbox_ledger/local/strict/consumed.py and front.py),
checked with sizes computed by hand from the Developer Guide's item size formula."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.local import LocalDynamoDB
from sandbox_ledger.local.strict import StrictProfile, Usage
from sandbox_ledger.local.strict.sizes import item_size

ONE_TRY = Config(retries={"max_attempts": 1, "mode": "standard"})
TOTAL = {"ReturnConsumedCapacity": "TOTAL"}
INDEXES = {"ReturnConsumedCapacity": "INDEXES"}


@pytest.fixture(scope="module")
def server() -> Iterator[LocalDynamoDB]:
    local = LocalDynamoDB(
        strict=StrictProfile(conflict_hold=0.0, index_delay=(0.0, 0.0), rate_scale=100.0)
    )
    local.start()
    yield local
    local.stop()


@pytest.fixture
def ddb(server: LocalDynamoDB) -> Any:
    return boto3.client("dynamodb", endpoint_url=server.endpoint_url, config=ONE_TRY)


def make_table(ddb: Any, *, index: str | None = None) -> str:
    """A table keyed PK, SK (strings); ``index``: a global secondary index on ``owner``, its
    projection (``ALL`` or ``KEYS_ONLY``)."""
    name = f"cap-{uuid.uuid4().hex[:8]}"
    extra: dict[str, Any] = {}
    attributes = [
        {"AttributeName": "PK", "AttributeType": "S"},
        {"AttributeName": "SK", "AttributeType": "S"},
    ]
    if index is not None:
        attributes.append({"AttributeName": "owner", "AttributeType": "S"})
        extra["GlobalSecondaryIndexes"] = [
            {
                "IndexName": "byOwner",
                "KeySchema": [{"AttributeName": "owner", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": index},
            }
        ]
    ddb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=attributes,
        BillingMode="PAY_PER_REQUEST",
        **extra,
    )
    return name


def item(pk: str, sk: str, size: int, **more: str) -> dict[str, Any]:
    """An item of exactly ``size`` bytes by DynamoDB's formula: its keys, ``more`` (strings)
    and an attribute ``d`` filling the rest."""
    out: dict[str, Any] = {"PK": {"S": pk}, "SK": {"S": sk}}
    out.update({name: {"S": value} for name, value in more.items()})
    out["d"] = {"S": "x" * (size - item_size(out) - 1)}
    assert item_size(out) == size
    return out


def key(pk: str, sk: str) -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": sk}}


def units(answer: dict[str, Any]) -> Any:
    return answer["ConsumedCapacity"]


# -- writes ------------------------------------------------------------------------------


def test_a_write_costs_a_unit_per_kb_started_and_only_when_asked(ddb: Any) -> None:
    table = make_table(ddb)
    answer = ddb.put_item(TableName=table, Item=item("p", "a", 2049), **TOTAL)
    assert units(answer) == {"TableName": table, "CapacityUnits": 3.0}  # 2049 B: 3 KB started
    answer = ddb.put_item(TableName=table, Item=item("p", "b", 1024), **TOTAL)
    assert units(answer) == {"TableName": table, "CapacityUnits": 1.0}  # exactly 1 KB
    assert "ConsumedCapacity" not in ddb.put_item(TableName=table, Item=item("p", "c", 100))
    none = ddb.put_item(TableName=table, Item=item("p", "c", 100), ReturnConsumedCapacity="NONE")
    assert "ConsumedCapacity" not in none


def test_a_put_over_a_larger_item_costs_the_larger(ddb: Any) -> None:
    table = make_table(ddb)
    ddb.put_item(TableName=table, Item=item("p", "a", 3000))
    answer = ddb.put_item(TableName=table, Item=item("p", "a", 100), **TOTAL)
    assert units(answer)["CapacityUnits"] == 3.0  # the replaced item's 3000 B


def test_an_update_costs_the_larger_of_its_before_and_after_images(ddb: Any) -> None:
    table = make_table(ddb)
    ddb.put_item(TableName=table, Item=key("p", "a"))  # 6 B
    grow = ddb.update_item(
        TableName=table,
        Key=key("p", "a"),
        UpdateExpression="SET big = :v",
        ExpressionAttributeValues={":v": {"S": "y" * 2500}},
        **TOTAL,
    )
    assert units(grow)["CapacityUnits"] == 3.0  # after: 6 + 3 + 2500 = 2509 B
    shrink = ddb.update_item(
        TableName=table, Key=key("p", "a"), UpdateExpression="REMOVE big", **TOTAL
    )
    assert units(shrink)["CapacityUnits"] == 3.0  # before: 2509 B


def test_a_delete_costs_the_deleted_item_and_a_missing_one_a_unit(ddb: Any) -> None:
    table = make_table(ddb)
    ddb.put_item(TableName=table, Item=item("p", "a", 1500))
    gone = ddb.delete_item(TableName=table, Key=key("p", "a"), **TOTAL)
    assert units(gone)["CapacityUnits"] == 2.0
    missing = ddb.delete_item(TableName=table, Key=key("p", "a"), **TOTAL)
    assert units(missing)["CapacityUnits"] == 1.0


def test_a_write_failing_its_condition_still_consumes(server: LocalDynamoDB, ddb: Any) -> None:
    table = make_table(ddb)
    ddb.put_item(TableName=table, Item=item("p", "a", 1500))
    server.reset_meter()
    with pytest.raises(ClientError) as failed:
        ddb.put_item(
            TableName=table,
            Item=item("p", "a", 100),
            ConditionExpression="attribute_not_exists(PK)",
            **TOTAL,
        )
    assert failed.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    # the stored item's 1500 B, the larger of it and the item sent
    assert server.meter() == {(table, "", '{"S":"p"}'): Usage(write=2.0)}


def test_a_batch_write_counts_each_item_and_answers_per_table(ddb: Any) -> None:
    one, two = make_table(ddb), make_table(ddb)
    answer = ddb.batch_write_item(
        RequestItems={
            one: [
                {"PutRequest": {"Item": item("p", "a", 100)}},
                {"PutRequest": {"Item": item("p", "b", 1500)}},
            ],
            two: [{"DeleteRequest": {"Key": key("p", "a")}}],
        },
        **TOTAL,
    )
    assert units(answer) == [
        {"TableName": one, "CapacityUnits": 3.0},  # 1 + 2: each item rounded
        {"TableName": two, "CapacityUnits": 1.0},
    ]


def test_a_transaction_costs_twice(ddb: Any) -> None:
    table = make_table(ddb)
    ddb.put_item(TableName=table, Item=item("p", "b", 5000))
    written = ddb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": table, "Item": item("p", "a", 1500)}},
            {
                "ConditionCheck": {
                    "TableName": table,
                    "Key": key("p", "b"),
                    "ConditionExpression": "attribute_exists(PK)",
                }
            },
        ],
        **TOTAL,
    )
    assert units(written) == [{"TableName": table, "CapacityUnits": 2 * 2.0 + 2 * 5.0}]
    read = ddb.transact_get_items(
        TransactItems=[{"Get": {"TableName": table, "Key": key("p", "b")}}], **TOTAL
    )
    assert units(read) == [{"TableName": table, "CapacityUnits": 2 * 2.0}]  # 5000 B: 2 x 4 KB


# -- global secondary indexes --------------------------------------------------------------


def test_writes_to_a_global_secondary_index_are_charged_to_it(ddb: Any) -> None:
    table = make_table(ddb, index="ALL")
    put = ddb.put_item(TableName=table, Item=item("p", "a", 1500, owner="ann"), **INDEXES)
    assert units(put) == {
        "TableName": table,
        "CapacityUnits": 4.0,
        "Table": {"CapacityUnits": 2.0},
        "GlobalSecondaryIndexes": {"byOwner": {"CapacityUnits": 2.0}},  # the entry: 1500 B
    }
    # An index key changed: a delete and a put in the index.
    moved = ddb.update_item(
        TableName=table,
        Key=key("p", "a"),
        UpdateExpression="SET #o = :o",
        ExpressionAttributeNames={"#o": "owner"},
        ExpressionAttributeValues={":o": {"S": "bob"}},
        **INDEXES,
    )
    assert units(moved)["GlobalSecondaryIndexes"] == {"byOwner": {"CapacityUnits": 4.0}}
    # A projected attribute changed, the index key not: one write.
    ddb.update_item(
        TableName=table,
        Key=key("p", "a"),
        UpdateExpression="SET small = :s",
        ExpressionAttributeValues={":s": {"S": "z"}},
    )
    # The index key removed: one write, the old entry's delete.
    removed = ddb.update_item(
        TableName=table,
        Key=key("p", "a"),
        UpdateExpression="REMOVE #o",
        ExpressionAttributeNames={"#o": "owner"},
        **INDEXES,
    )
    assert units(removed)["GlobalSecondaryIndexes"] == {"byOwner": {"CapacityUnits": 2.0}}
    # Not in the index before nor after: nothing for it.
    plain = ddb.put_item(TableName=table, Item=item("p", "b", 100), **INDEXES)
    assert units(plain) == {
        "TableName": table,
        "CapacityUnits": 1.0,
        "Table": {"CapacityUnits": 1.0},
    }


def test_an_index_write_is_the_entry_s_size_and_an_unprojected_change_costs_nothing(
    server: LocalDynamoDB, ddb: Any
) -> None:
    table = make_table(ddb, index="KEYS_ONLY")
    put = ddb.put_item(TableName=table, Item=item("p", "a", 1500, owner="ann"), **INDEXES)
    # the entry: PK, SK and owner: 3 + 3 + 8 = 14 B
    assert units(put)["GlobalSecondaryIndexes"] == {"byOwner": {"CapacityUnits": 1.0}}
    server.reset_meter()
    ddb.update_item(
        TableName=table,
        Key=key("p", "a"),
        UpdateExpression="SET small = :s",
        ExpressionAttributeValues={":s": {"S": "z"}},
    )
    assert server.meter() == {(table, "", '{"S":"p"}'): Usage(write=2.0)}


# -- reads ---------------------------------------------------------------------------------


def test_a_get_costs_the_whole_item_per_4_kb_half_when_eventually_consistent(ddb: Any) -> None:
    table = make_table(ddb)
    ddb.put_item(TableName=table, Item=item("p", "a", 5000))
    strong = ddb.get_item(TableName=table, Key=key("p", "a"), ConsistentRead=True, **TOTAL)
    assert units(strong)["CapacityUnits"] == 2.0
    projected = ddb.get_item(TableName=table, Key=key("p", "a"), ProjectionExpression="PK", **TOTAL)
    assert units(projected)["CapacityUnits"] == 1.0  # the whole item, eventually consistent
    missing = ddb.get_item(TableName=table, Key=key("p", "zz"), **TOTAL)
    assert units(missing)["CapacityUnits"] == 0.5


def test_a_batch_get_rounds_each_item(ddb: Any) -> None:
    table = make_table(ddb)
    for sk in "ab":
        ddb.put_item(TableName=table, Item=item("p", sk, 100))
    answer = ddb.batch_get_item(
        RequestItems={table: {"Keys": [key("p", "a"), key("p", "b")], "ConsistentRead": True}},
        **TOTAL,
    )
    assert units(answer) == [{"TableName": table, "CapacityUnits": 2.0}]  # not one 4 KB


def test_a_query_sums_what_it_read_before_rounding_and_before_its_filter(ddb: Any) -> None:
    table = make_table(ddb)
    for sk in "abc":
        ddb.put_item(TableName=table, Item=item("p", sk, 1500))
    query = {
        "TableName": table,
        "KeyConditionExpression": "PK = :p",
        "ExpressionAttributeValues": {":p": {"S": "p"}},
        "ConsistentRead": True,
    }
    # 4500 B: 2 units (3 items rounded one by one would be 3)
    assert units(ddb.query(**query, **TOTAL))["CapacityUnits"] == 2.0
    filtered = ddb.query(
        **{**query, "ExpressionAttributeValues": {":p": {"S": "p"}, ":n": {"S": "none"}}},
        FilterExpression="d = :n",
        **TOTAL,
    )
    assert (filtered["Count"], filtered["ScannedCount"]) == (0, 3)
    assert units(filtered)["CapacityUnits"] == 2.0
    with pytest.raises(ClientError) as refused:  # read unfiltered, refused all the same
        ddb.query(**query, FilterExpression="d = :p", ExpressionAttributeNames={"#u": "unused"})
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    counted = ddb.query(**query, Select="COUNT", **TOTAL)
    assert (counted["Count"], "Items" in counted) == (3, False)
    assert units(counted)["CapacityUnits"] == 2.0  # a count reads the items all the same
    scan = ddb.scan(TableName=table, **TOTAL)
    assert units(scan)["CapacityUnits"] == 1.0  # 4500 B, eventually consistent


def test_a_query_of_an_index_is_charged_to_the_index(ddb: Any) -> None:
    table = make_table(ddb, index="KEYS_ONLY")
    for sk in "ab":
        ddb.put_item(TableName=table, Item=item("p", sk, 3000, owner="ann"))
    answer = ddb.query(
        TableName=table,
        IndexName="byOwner",
        KeyConditionExpression="#o = :o",
        ExpressionAttributeNames={"#o": "owner"},
        ExpressionAttributeValues={":o": {"S": "ann"}},
        **INDEXES,
    )
    # two entries of 14 B read, not the items' 6000 B: half a unit
    assert units(answer) == {
        "TableName": table,
        "CapacityUnits": 0.5,
        "Table": {"CapacityUnits": 0.0},
        "GlobalSecondaryIndexes": {"byOwner": {"CapacityUnits": 0.5}},
    }


# -- 1 MB pages ----------------------------------------------------------------------------


PAGE_ITEM = 300_000
"""Four of them reach 1 MB (1,048,576 B) by DynamoDB's measure; moto would stop at three
(1,000,000 B of its own)."""


def test_a_page_ends_where_its_data_reaches_1_mb_and_paging_returns_each_item_once(
    ddb: Any,
) -> None:
    table = make_table(ddb, index="ALL")
    for n in range(7):
        ddb.put_item(TableName=table, Item=item("q", f"{n:02d}", PAGE_ITEM, owner="o"))
    query: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "PK = :p",
        "ExpressionAttributeValues": {":p": {"S": "q"}},
    }
    first = ddb.query(**query, **TOTAL)
    assert [i["SK"]["S"] for i in first["Items"]] == ["00", "01", "02", "03"]
    assert first["LastEvaluatedKey"] == key("q", "03")
    assert units(first)["CapacityUnits"] == 146.5  # 1,200,000 B: 293 x 4 KB, halved
    second = ddb.query(**query, ExclusiveStartKey=first["LastEvaluatedKey"])
    assert [i["SK"]["S"] for i in second["Items"]] == ["04", "05", "06"]
    assert "LastEvaluatedKey" not in second
    # A filter keeping nothing: the same page read, the same key to go on from.
    filtered = ddb.query(
        **{**query, "ExpressionAttributeValues": {":p": {"S": "q"}, ":n": {"S": "none"}}},
        FilterExpression="d = :n",
    )
    assert (filtered["Items"], filtered["Count"], filtered["ScannedCount"]) == ([], 0, 4)
    assert filtered["LastEvaluatedKey"] == key("q", "03")
    # An index's page: its key includes the index key.
    seen: list[str] = []
    start: dict[str, Any] | None = None
    while True:
        extra = {"ExclusiveStartKey": start} if start else {}
        page = ddb.query(
            TableName=table,
            IndexName="byOwner",
            KeyConditionExpression="#o = :o",
            ExpressionAttributeNames={"#o": "owner"},
            ExpressionAttributeValues={":o": {"S": "o"}},
            **extra,
        )
        seen += [i["SK"]["S"] for i in page["Items"]]
        start = page.get("LastEvaluatedKey")
        if start is None:
            break
        assert set(start) == {"PK", "SK", "owner"}
    assert sorted(seen) == [f"{n:02d}" for n in range(7)]
    scanned: list[str] = []
    start = None
    while True:
        page = ddb.scan(TableName=table, **({"ExclusiveStartKey": start} if start else {}))
        assert len(page["Items"]) <= 4
        scanned += [i["SK"]["S"] for i in page["Items"]]
        start = page.get("LastEvaluatedKey")
        if start is None:
            break
    assert sorted(scanned) == [f"{n:02d}" for n in range(7)]


# -- the meter and the buckets -------------------------------------------------------------


def test_the_meter_adds_up_what_the_answers_say(server: LocalDynamoDB, ddb: Any) -> None:
    table = make_table(ddb, index="KEYS_ONLY")
    server.reset_meter()
    answers = [
        ddb.put_item(TableName=table, Item=item("p", "a", 1500, owner="ann"), **INDEXES),
        ddb.put_item(TableName=table, Item=item("r", "a", 100), **INDEXES),
        ddb.get_item(TableName=table, Key=key("p", "a"), **INDEXES),
        ddb.query(
            TableName=table,
            KeyConditionExpression="PK = :p",
            ExpressionAttributeValues={":p": {"S": "p"}},
            **INDEXES,
        ),
    ]
    ddb.get_item(TableName=table, Key=key("r", "a"))  # not asked: metered all the same
    assert server.meter() == {
        (table, "", '{"S":"p"}'): Usage(read=0.5 + 0.5, write=2.0),
        (table, "byOwner", '{"S":"ann"}'): Usage(write=1.0),
        (table, "", '{"S":"r"}'): Usage(read=0.5, write=1.0),
    }
    asked = sum(a["ConsumedCapacity"]["CapacityUnits"] for a in answers)
    metered = sum(u.read + u.write for u in server.meter().values())
    assert metered == asked + 0.5
    server.reset_meter()
    assert server.meter() == {}


def test_the_meter_needs_the_strict_profile() -> None:
    with pytest.raises(InvalidInputError, match="strict"):
        LocalDynamoDB().meter()


def test_an_update_growing_its_item_takes_the_after_image_from_the_bucket() -> None:
    """rate_scale 0.001: 1 write unit a second per partition key."""
    local = LocalDynamoDB(strict=StrictProfile(rate_scale=0.001, conflict_hold=0))
    ddb = boto3.client("dynamodb", endpoint_url=local.start(), config=ONE_TRY)
    try:
        table = make_table(ddb)
        ddb.put_item(TableName=table, Item=key("p", "a"))
        time.sleep(1.1)  # full again: 1 unit
        ddb.update_item(  # 6 B before, 5009 B after: 5 units, 4 into debt
            TableName=table,
            Key=key("p", "a"),
            UpdateExpression="SET big = :v",
            ExpressionAttributeValues={":v": {"S": "y" * 5000}},
        )
        time.sleep(1.1)  # 1.1 units back: still in debt
        with pytest.raises(ClientError) as throttled:
            ddb.put_item(TableName=table, Item=key("p", "b"))
        assert throttled.value.response["Error"]["Code"] == (
            "ProvisionedThroughputExceededException"
        )
    finally:
        local.stop()


def test_what_the_profile_refused_is_counted_by_code() -> None:
    """rate_scale 0.001: 1 write unit a second per partition key; a transaction's throttle
    counts as its cancellation and its reason."""
    local = LocalDynamoDB(strict=StrictProfile(rate_scale=0.001, conflict_hold=0))
    once = Config(retries={"total_max_attempts": 1, "mode": "standard"})  # each refusal: one
    ddb = boto3.client("dynamodb", endpoint_url=local.start(), config=once)
    try:
        table = make_table(ddb)
        assert local.refusals() == {}
        ddb.put_item(TableName=table, Item=key("p", "a"))
        with pytest.raises(ClientError, match="ProvisionedThroughputExceeded"):
            ddb.put_item(TableName=table, Item=key("p", "b"))
        with pytest.raises(ClientError, match="TransactionCanceled"):
            ddb.transact_write_items(
                TransactItems=[{"Put": {"TableName": table, "Item": key("p", "c")}}]
            )
        with pytest.raises(ClientError, match="ValidationException"):
            ddb.put_item(TableName=table, Item=item("q", "a", 410_000))
        assert local.refusals() == {
            "ProvisionedThroughputExceededException": 1,
            "TransactionCanceledException": 1,
            "ThrottlingError": 1,
            "ValidationException": 1,
        }
    finally:
        local.stop()
    assert LocalDynamoDB().refusals() == {}
