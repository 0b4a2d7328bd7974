"""The strict profile of the embedded DynamoDB: each rule as DynamoDB's documentation states
it (quoted in sandbox_ledger/local/strict), checked through plain boto3 requests."""

from __future__ import annotations

import dataclasses
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
from sandbox_ledger.local.strict import StrictProfile
from sandbox_ledger.local.strict.parse import profile_text
from sandbox_ledger.local.strict.sizes import NumberError, item_size, significant_digits

ONE_TRY = Config(retries={"max_attempts": 1, "mode": "standard"})


def client(endpoint: str) -> Any:
    return boto3.client("dynamodb", endpoint_url=endpoint, config=ONE_TRY)


def make_table(ddb: Any) -> str:
    name = f"strict-{uuid.uuid4().hex[:8]}"
    ddb.create_table(
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
    )
    return name


def key(pk: str, sk: str = "a") -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": sk}}


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def reasons(exc: pytest.ExceptionInfo[ClientError]) -> list[str]:
    return [r["Code"] for r in exc.value.response.get("CancellationReasons", [])]


@pytest.fixture(scope="module")
def strict() -> Iterator[str]:
    server = LocalDynamoDB(strict=StrictProfile(conflict_hold=0.0))
    yield server.start()
    server.stop()


# -- sizes and numbers, as the Developer Guide counts them -----------------------------------


def test_item_sizes_follow_the_documented_formula() -> None:
    assert item_size({"name": {"S": "héllo"}}) == 4 + 6  # UTF-8 bytes of name and value
    assert item_size({"n": {"N": "12345"}}) == 1 + 3 + 1  # 5 digits: 3 bytes, plus 1
    assert item_size({"n": {"N": "100.000"}}) == 1 + 1 + 1  # zeros trimmed: "1"
    assert item_size({"b": {"B": "AAEC"}}) == 1 + 3  # raw bytes of the base64
    assert item_size({"t": {"BOOL": True}, "z": {"NULL": True}}) == 2 + 2
    assert item_size({"l": {"L": []}}) == 1 + 3  # an empty list: 3 bytes
    # each element 1 byte more, a map's names counted
    assert item_size({"l": {"L": [{"S": "ab"}, {"N": "1"}]}}) == 1 + 3 + (2 + 1) + (2 + 1)
    assert item_size({"m": {"M": {"k": {"S": "v"}}}}) == 1 + 3 + (1 + 1 + 1)


def test_numbers_of_more_than_38_significant_digits_or_out_of_range_are_refused() -> None:
    assert significant_digits("1" * 38) == 38
    assert significant_digits("1" + "0" * 100) == 1
    with pytest.raises(NumberError, match="38 significant digits"):
        significant_digits("1" * 39)
    with pytest.raises(NumberError, match="overflow"):
        significant_digits("1E+126")
    with pytest.raises(NumberError, match="underflow"):
        significant_digits("1E-131")
    with pytest.raises(NumberError):
        significant_digits("NaN")


def test_a_profile_out_of_range_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInputError, match="rate_scale"):
        StrictProfile(rate_scale=0)
    with pytest.raises(InvalidInputError, match="conflict_hold"):
        StrictProfile(conflict_hold=-1)
    with pytest.raises(InvalidInputError, match="strict"):
        LocalDynamoDB(strict="yes")  # type: ignore[arg-type]


# -- the profile as text ---------------------------------------------------------------------

# Each field of the profile, a value written as a user writes it, and the value it reads as.
EVERY_FIELD = [
    ("rate_scale", "0.01", 0.01),
    ("conflict_hold", "0", 0.0),
    ("token_seconds", "1e3", 1000.0),
    ("index_delay", "0:0.5", (0.0, 0.5)),
    ("ttl_delay", "none", None),
    ("ttl_delay", "NONE", None),
    ("ttl_delay", "3600", 3600.0),
    ("ttl_every", "0.25", 0.25),
    ("shard_records", "10", 10),
    ("shard_seconds", "30", 30.0),
    ("shard_split", "0", 0),
    ("iterator_seconds", "2.5", 2.5),
    ("stream_retention", "60", 60.0),
    ("shard_key", "partition", "partition"),
    ("shard_key", "item", "item"),
]


@pytest.mark.parametrize(("name", "text", "value"), EVERY_FIELD)
def test_each_field_is_read_by_its_type(name: str, text: str, value: object) -> None:
    profile = StrictProfile.parse(f"{name}={text}")
    assert getattr(profile, name) == value
    assert type(getattr(profile, name)) is type(value)
    others = {f.name for f in dataclasses.fields(StrictProfile)} - {name}
    assert all(getattr(profile, f) == getattr(StrictProfile(), f) for f in others)


def test_every_field_is_covered_and_fields_join_with_commas() -> None:
    assert {name for name, _, _ in EVERY_FIELD} == {
        f.name for f in dataclasses.fields(StrictProfile)
    }
    given = ", ".join(
        f"{name} = {text}" for name, text, _ in EVERY_FIELD if text not in ("NONE", "3600", "item")
    )
    profile = StrictProfile.parse(given)
    assert profile == StrictProfile(
        rate_scale=0.01,
        conflict_hold=0,
        token_seconds=1000,
        index_delay=(0, 0.5),
        ttl_delay=None,
        ttl_every=0.25,
        shard_records=10,
        shard_seconds=30,
        shard_split=0,
        iterator_seconds=2.5,
        stream_retention=60,
        shard_key="partition",
    )


@pytest.mark.parametrize(
    "profile",
    [
        StrictProfile(),
        StrictProfile(rate_scale=0.1 + 0.2, index_delay=(0, 0), ttl_delay=None),
        StrictProfile(shard_key="partition", shard_records=7, stream_retention=1e-3),
    ],
)
def test_a_profile_written_as_text_reads_back_as_itself(profile: StrictProfile) -> None:
    assert StrictProfile.parse(profile_text(profile, every=True)) == profile
    changed = profile_text(profile)
    assert (StrictProfile.parse(changed) if changed else StrictProfile()) == profile


def test_the_text_of_a_profile_names_the_fields_that_differ_from_the_defaults() -> None:
    assert profile_text(StrictProfile()) == ""
    changed = StrictProfile(rate_scale=0.5, index_delay=(0, 0), ttl_delay=None, shard_records=9)
    assert profile_text(changed) == "rate_scale=0.5,index_delay=0:0,ttl_delay=none,shard_records=9"


@pytest.mark.parametrize(
    ("text", "field", "says"),
    [
        ("", "strict", "'' is not name=value"),
        ("rate_scale", "strict", "'rate_scale' is not name=value"),
        ("rate_scale=1,,", "strict", "'' is not name=value"),
        ("=1", "strict", "'=1' is not name=value"),
        ("rate=1", "rate", "not a field of the strict profile"),
        ("rate_scale=1,rate_scale=2", "rate_scale", "given twice"),
        ("rate_scale=fast", "rate_scale", "'fast' is not a finite number"),
        ("rate_scale=", "rate_scale", "'' is not a finite number"),
        ("rate_scale=inf", "rate_scale", "'inf' is not a finite number"),
        ("rate_scale=0", "rate_scale", "must be above 0, not '0'"),
        ("conflict_hold=nan", "conflict_hold", "'nan' is not a finite number"),
        ("conflict_hold=11", "conflict_hold", "must be from 0 to 10 seconds, not '11'"),
        ("token_seconds=-1", "token_seconds", "must be above 0, not '-1'"),
        ("index_delay=0.1", "index_delay", "'0.1' is not LOW:HIGH seconds"),
        ("index_delay=0:x", "index_delay", "'0:x' is not LOW:HIGH seconds"),
        ("index_delay=0.2:0.1", "index_delay", "not '0.2:0.1'"),
        ("index_delay=0:61", "index_delay", "not '0:61'"),
        ("ttl_delay=never", "ttl_delay", "'never' is not a finite number of seconds or none"),
        ("ttl_delay=-1", "ttl_delay", "must be None or from 0 to 30 days in seconds, not '-1'"),
        ("ttl_every=0", "ttl_every", "must be above 0 and at most a day in seconds, not '0'"),
        ("shard_records=1.5", "shard_records", "'1.5' is not a whole number"),
        ("shard_records=0", "shard_records", "must be at least 1, not '0'"),
        ("shard_seconds=0", "shard_seconds", "must be above 0 seconds, not '0'"),
        ("shard_split=-1", "shard_split", "must be a count >= 0, not '-1'"),
        ("shard_split=two", "shard_split", "'two' is not a whole number"),
        ("iterator_seconds=0", "iterator_seconds", "must be above 0 seconds, not '0'"),
        ("stream_retention=-5", "stream_retention", "must be above 0 seconds, not '-5'"),
        ("shard_key=row", "shard_key", "must be 'item' or 'partition', not 'row'"),
    ],
)
def test_a_bad_field_is_refused_naming_it_and_the_text(text: str, field: str, says: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        StrictProfile.parse(text)
    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}: ") and says in str(refused.value)
    assert repr(text) in str(refused.value)  # the whole text given, quoted


def test_the_test_sessions_variable_reads_fields_with_the_librarys_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``SANDBOX_LEDGER_TEST_STRICT`` (tests/conftest.py): fields by name as the library reads
    them (counts and ``shard_key`` too), the positional forms, ``off``; a bad field refused."""
    from conftest import TEST_PROFILE, _strict_profile

    def session(given: str) -> object:
        monkeypatch.setenv("SANDBOX_LEDGER_TEST_STRICT", given)
        return _strict_profile()

    assert session("shard_records=10,shard_key=partition,ttl_delay=none") == StrictProfile(
        shard_records=10, shard_key="partition", ttl_delay=None
    )
    assert session("rate_scale=1,conflict_hold=0.005,index_delay=0:0,ttl_delay=3600") == (
        StrictProfile(conflict_hold=0.005, index_delay=(0, 0), ttl_delay=3600)
    )
    assert session("0.5,0.01") == StrictProfile(rate_scale=0.5, conflict_hold=0.01)
    assert session("1,0.02,0,0") == StrictProfile(index_delay=(0, 0))
    assert session("off") is False
    assert session("") == StrictProfile(**TEST_PROFILE)
    with pytest.raises(InvalidInputError, match="shard_split"):
        session("shard_split=often")
    with pytest.raises(InvalidInputError, match="conflict_hold: 'soon' is not a finite number"):
        session("1,soon")
    with pytest.raises(InvalidInputError, match="index_delay"):
        session("1,0.02,0.5,0.1")
    with pytest.raises(ValueError, match="SANDBOX_LEDGER_TEST_STRICT"):
        session("1,0.02,0")


# -- limits ------------------------------------------------------------------------------


def test_a_batch_of_26_writes_is_refused_and_25_pass(strict: str) -> None:
    ddb = client(strict)
    table = make_table(ddb)
    puts = [{"PutRequest": {"Item": key("p", f"{i:02d}")}} for i in range(26)]
    with pytest.raises(ClientError) as refused:
        ddb.batch_write_item(RequestItems={table: puts})
    assert code(refused) == "ValidationException" and "25" in str(refused.value)
    assert ddb.scan(TableName=table)["Count"] == 0  # nothing of it written
    ddb.batch_write_item(RequestItems={table: puts[:25]})
    assert ddb.scan(TableName=table)["Count"] == 25


def test_an_item_of_400_kb_passes_and_one_byte_more_is_refused(strict: str) -> None:
    ddb = client(strict)
    table = make_table(ddb)
    base = key("p")
    room = 400 * 1024 - item_size({**base, "d": {"S": ""}})
    ddb.put_item(TableName=table, Item={**base, "d": {"S": "x" * room}})
    with pytest.raises(ClientError) as refused:
        ddb.put_item(TableName=table, Item={**key("q"), "d": {"S": "x" * (room + 1)}})
    assert code(refused) == "ValidationException"
    assert "maximum allowed size" in str(refused.value)


@pytest.mark.parametrize("how", ["update_item", "transaction"])
def test_an_update_to_400_kb_passes_and_one_byte_more_is_refused(strict: str, how: str) -> None:
    """DynamoDB's limit holds for the item an update leaves, by DynamoDB's formula: an update
    that grows an item to exactly 400 KB (which moto's own check, 405,000 bytes by its own
    count, refuses) lands; one byte more is refused, the item left as it was."""
    ddb = client(strict)
    table = make_table(ddb)
    base = {**key("p"), "n": {"N": "1"}}
    ddb.put_item(TableName=table, Item={**base, "d": {"S": "x" * 1000}})
    room = 400 * 1024 - item_size({**base, "d": {"S": ""}, "e": {"S": ""}}) - 1000

    def update(size: int) -> None:
        fields = {
            "TableName": table,
            "Key": key("p"),
            "UpdateExpression": "SET e = :e ADD n :one",
            "ExpressionAttributeValues": {":e": {"S": "y" * size}, ":one": {"N": "1"}},
        }
        if how == "update_item":
            ddb.update_item(**fields)
        else:
            ddb.transact_write_items(TransactItems=[{"Update": fields}])

    with pytest.raises(ClientError) as refused:
        update(room + 1)
    assert code(refused) == "ValidationException"
    assert "maximum allowed size" in str(refused.value)
    stored = ddb.get_item(TableName=table, Key=key("p"), ConsistentRead=True)["Item"]
    assert stored == {**base, "d": {"S": "x" * 1000}}  # nothing of it applied
    update(room)
    stored = ddb.get_item(TableName=table, Key=key("p"), ConsistentRead=True)["Item"]
    assert item_size(stored) == 400 * 1024 and stored["n"] == {"N": "2"}


def test_a_transaction_of_101_actions_or_over_4_mb_is_refused(strict: str) -> None:
    ddb = client(strict)
    table = make_table(ddb)
    actions = [{"Put": {"TableName": table, "Item": key("p", f"{i:03d}")}} for i in range(101)]
    with pytest.raises(ClientError) as refused:
        ddb.transact_write_items(TransactItems=actions)
    assert code(refused) == "ValidationException" and "100" in str(refused.value)
    big = "x" * 400_000
    heavy = [
        {"Put": {"TableName": table, "Item": {**key("p", f"{i:03d}"), "d": {"S": big}}}}
        for i in range(11)  # 11 x 400,000 bytes: over 4 MB (4,194,304)
    ]
    with pytest.raises(ClientError) as refused:
        ddb.transact_write_items(TransactItems=heavy)
    assert code(refused) == "ValidationException" and "4 MB" in str(refused.value)
    ddb.transact_write_items(TransactItems=heavy[:10])
    pages = ddb.get_paginator("scan").paginate(TableName=table, Select="COUNT")
    assert sum(page["Count"] for page in pages) == 10


def test_a_number_of_39_digits_is_refused(strict: str) -> None:
    ddb = client(strict)
    table = make_table(ddb)
    with pytest.raises(ClientError) as refused:
        ddb.put_item(TableName=table, Item={**key("p"), "n": {"N": "1" * 39}})
    assert code(refused) == "ValidationException" and "38" in str(refused.value)
    ddb.put_item(TableName=table, Item={**key("p"), "n": {"N": "1" * 38}})


# -- idempotent transactions ---------------------------------------------------------------


def add_one(table: str) -> list[dict[str, Any]]:
    return [
        {
            "Update": {
                "TableName": table,
                "Key": key("counter"),
                "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}},
            }
        }
    ]


def test_a_transaction_resent_with_its_token_is_applied_once(strict: str) -> None:
    ddb = client(strict)
    table = make_table(ddb)
    token = uuid.uuid4().hex
    for _ in range(3):
        ddb.transact_write_items(TransactItems=add_one(table), ClientRequestToken=token)
    stored = ddb.get_item(TableName=table, Key=key("counter"), ConsistentRead=True)["Item"]
    assert stored["n"] == {"N": "1"}
    ddb.transact_write_items(TransactItems=add_one(table), ClientRequestToken=uuid.uuid4().hex)
    stored = ddb.get_item(TableName=table, Key=key("counter"), ConsistentRead=True)["Item"]
    assert stored["n"] == {"N": "2"}  # another token: another transaction
    other = add_one(table)
    other[0]["Update"]["ExpressionAttributeValues"][":one"] = {"N": "5"}
    with pytest.raises(ClientError) as mismatch:
        ddb.transact_write_items(TransactItems=other, ClientRequestToken=token)
    assert code(mismatch) == "IdempotentParameterMismatchException"


def test_a_token_is_forgotten_after_its_window() -> None:
    server = LocalDynamoDB(strict=StrictProfile(token_seconds=0.2, conflict_hold=0))
    ddb = client(server.start())
    try:
        table = make_table(ddb)
        token = uuid.uuid4().hex
        ddb.transact_write_items(TransactItems=add_one(table), ClientRequestToken=token)
        time.sleep(0.3)
        ddb.transact_write_items(TransactItems=add_one(table), ClientRequestToken=token)
        stored = ddb.get_item(TableName=table, Key=key("counter"), ConsistentRead=True)["Item"]
        assert stored["n"] == {"N": "2"}
    finally:
        server.stop()


# -- throughput --------------------------------------------------------------------------


def test_a_partition_over_its_write_rate_is_throttled_and_recovers() -> None:
    """rate_scale 0.001: 1 write unit a second per partition key, 4 per table."""
    server = LocalDynamoDB(strict=StrictProfile(rate_scale=0.001, conflict_hold=0))
    ddb = client(server.start())
    try:
        table = make_table(ddb)
        ddb.put_item(TableName=table, Item=key("hot", "1"))  # the key's bucket is empty now
        with pytest.raises(ClientError) as throttled:
            ddb.put_item(TableName=table, Item=key("hot", "2"))
        assert code(throttled) == "ProvisionedThroughputExceededException"
        ddb.put_item(TableName=table, Item=key("cold", "1"))  # another partition key: its own
        with pytest.raises(ClientError) as cancelled:
            ddb.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": table, "Item": key("warm", "1")}},
                    {"Put": {"TableName": table, "Item": key("hot", "4")}},
                ]
            )
        assert code(cancelled) == "TransactionCanceledException"
        assert reasons(cancelled) == ["None", "ThrottlingError"]
        time.sleep(1.1)  # refilled
        ddb.put_item(TableName=table, Item=key("hot", "2"))
        stored = ddb.query(
            TableName=table,
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": {"S": "hot"}},
            ConsistentRead=True,
        )["Items"]
        assert [i["SK"]["S"] for i in stored] == ["1", "2"]
    finally:
        server.stop()


def test_a_large_item_costs_a_write_unit_per_kb() -> None:
    server = LocalDynamoDB(strict=StrictProfile(rate_scale=0.001, conflict_hold=0))
    ddb = client(server.start())  # 1 write unit a second per partition key
    try:
        table = make_table(ddb)
        # 5 KB: 5 units, more than the bucket ever holds: it runs, 4 units into debt
        ddb.put_item(TableName=table, Item={**key("p", "1"), "d": {"S": "x" * 5000}})
        with pytest.raises(ClientError) as throttled:
            ddb.put_item(TableName=table, Item=key("p", "2"))
        assert code(throttled) == "ProvisionedThroughputExceededException"
    finally:
        server.stop()


# -- transaction conflicts -----------------------------------------------------------------


def test_writes_on_an_item_in_an_ongoing_transaction_conflict() -> None:
    server = LocalDynamoDB(strict=StrictProfile(conflict_hold=0.6))
    endpoint = server.start()
    ddb, other = client(endpoint), client(endpoint)
    try:
        table = make_table(ddb)
        done: list[Any] = []

        def long_transaction() -> None:
            done.append(ddb.transact_write_items(TransactItems=add_one(table)))

        thread = threading.Thread(target=long_transaction)
        thread.start()
        time.sleep(0.2)  # the transaction is in flight now
        with pytest.raises(ClientError) as single:
            other.put_item(TableName=table, Item=key("counter"))
        assert code(single) == "TransactionConflictException"
        with pytest.raises(ClientError) as second:
            other.transact_write_items(
                TransactItems=[{"Put": {"TableName": table, "Item": key("else")}}, *add_one(table)]
            )
        assert code(second) == "TransactionCanceledException"
        assert reasons(second) == ["None", "TransactionConflict"]
        other.put_item(TableName=table, Item=key("unrelated"))  # other items are free
        thread.join()
        assert done  # the first transaction applied
        other.transact_write_items(TransactItems=add_one(table))  # and released its item
        stored = other.get_item(TableName=table, Key=key("counter"), ConsistentRead=True)["Item"]
        assert stored["n"] == {"N": "2"}
        assert "else" not in {i["PK"]["S"] for i in other.scan(TableName=table)["Items"]}
    finally:
        server.stop()


def test_the_child_process_server_applies_the_profile() -> None:
    server = LocalDynamoDBProcess(strict=StrictProfile(conflict_hold=0))
    ddb = client(server.start())
    try:
        table = make_table(ddb)
        puts = [{"PutRequest": {"Item": key("p", f"{i:02d}")}} for i in range(26)]
        with pytest.raises(ClientError) as refused:
            ddb.batch_write_item(RequestItems={table: puts})
        assert code(refused) == "ValidationException"
    finally:
        server.stop()
