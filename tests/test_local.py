"""The embedded DynamoDB (sandbox_ledger.local): moto's semantics, with transactions that
roll back only what they touch and bounded streams."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from sandbox_ledger import LedgerEntry, LedgerEvent, local
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter


@pytest.fixture
def client(moto_endpoint: str) -> Any:
    return boto3.client("dynamodb", endpoint_url=moto_endpoint)


@pytest.fixture
def table(client: Any) -> str:
    name = f"local-{uuid.uuid4().hex[:10]}"
    client.create_table(**k.table_definition(name))
    return name


def key(pk: str, sk: str) -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": sk}}


def scan(client: Any, table: str) -> list[dict[str, Any]]:
    items = client.scan(TableName=table, ConsistentRead=True)["Items"]
    return sorted(items, key=lambda i: (i["PK"]["S"], i["SK"]["S"]))


def stream_records(moto_endpoint: str, client: Any, table: str, **iterator: Any) -> Any:
    streams = boto3.client("dynamodbstreams", endpoint_url=moto_endpoint)
    arn = client.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    [shard] = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    it = streams.get_shard_iterator(
        StreamArn=arn,
        ShardId=shard["ShardId"],
        **(iterator or {"ShardIteratorType": "TRIM_HORIZON"}),
    )["ShardIterator"]
    return streams.get_records(ShardIterator=it, Limit=1000)["Records"]


def seed(client: Any, table: str) -> None:
    client.put_item(
        TableName=table,
        Item={**key("p", "updated"), "n": {"N": "1"}, "tags": {"SS": ["a", "b"]}},
    )
    client.put_item(TableName=table, Item={**key("p", "deleted"), "v": {"S": "keep me"}})
    client.put_item(
        TableName=table, Item={**key("p", "replaced"), "v": {"M": {"deep": {"L": [{"N": "1"}]}}}}
    )
    client.put_item(TableName=table, Item={**key("other", "guard"), "state": {"S": "open"}})


def cancelled_actions(table: str) -> list[dict[str, Any]]:
    """Every kind of write on existing and absent items, then a failing condition last."""
    return [
        {
            "Update": {
                "TableName": table,
                "Key": key("p", "updated"),
                "UpdateExpression": "SET extra = :x ADD n :one DELETE tags :a",
                "ExpressionAttributeValues": {
                    ":x": {"S": "x"},
                    ":one": {"N": "1"},
                    ":a": {"SS": ["a"]},
                },
            }
        },
        {"Delete": {"TableName": table, "Key": key("p", "deleted")}},
        {"Put": {"TableName": table, "Item": {**key("p", "replaced"), "v": {"S": "new"}}}},
        {"Put": {"TableName": table, "Item": {**key("p", "created"), "v": {"S": "new"}}}},
        {
            "Update": {
                "TableName": table,
                "Key": key("new-partition", "upserted"),
                "UpdateExpression": "SET v = :x",
                "ExpressionAttributeValues": {":x": {"S": "x"}},
            }
        },
        {
            "ConditionCheck": {
                "TableName": table,
                "Key": key("other", "guard"),
                "ConditionExpression": "#s = :closed",
                "ExpressionAttributeNames": {"#s": "state"},
                "ExpressionAttributeValues": {":closed": {"S": "closed"}},
            }
        },
    ]


def test_cancelled_transaction_leaves_every_touched_item_as_it_was(
    moto_endpoint: str, client: Any, table: str
) -> None:
    seed(client, table)
    touched = [a[next(iter(a))] for a in cancelled_actions(table)]
    keys = [t.get("Key") or {n: t["Item"][n] for n in ("PK", "SK")} for t in touched]
    before_items = [client.get_item(TableName=table, Key=kk, ConsistentRead=True) for kk in keys]
    before_scan = scan(client, table)
    before_stream = stream_records(moto_endpoint, client, table)
    assert len(before_stream) == 4

    with pytest.raises(ClientError) as info:
        client.transact_write_items(TransactItems=cancelled_actions(table))

    assert info.value.response["Error"]["Code"] == "TransactionCanceledException"
    reasons = [r["Code"] for r in info.value.response["CancellationReasons"]]
    assert reasons == ["None"] * 5 + ["ConditionalCheckFailed"]
    after_items = [client.get_item(TableName=table, Key=kk, ConsistentRead=True) for kk in keys]
    assert [r.get("Item") for r in after_items] == [r.get("Item") for r in before_items]
    assert scan(client, table) == before_scan
    # The cancelled writes left no stream records either, and numbering goes on from there.
    assert stream_records(moto_endpoint, client, table) == before_stream
    client.transact_write_items(TransactItems=cancelled_actions(table)[:5])
    after = stream_records(moto_endpoint, client, table)
    sequence = [int(r["dynamodb"]["SequenceNumber"]) for r in after]
    assert sequence == list(range(sequence[0], sequence[0] + len(after)))
    assert after[:4] == before_stream
    assert [r["eventName"] for r in after[4:8]] == ["MODIFY", "REMOVE", "MODIFY", "INSERT"]


def test_cancelled_transaction_is_all_or_nothing_through_the_adapter(
    moto_endpoint: str, client: Any, table: str
) -> None:
    adapter = SyncDynamoDBAdapter(table, endpoint_url=moto_endpoint)
    created = LedgerEntry(
        ts=1, name="n", sandbox_id="s", step_index=-1, event=LedgerEvent.SandboxCreated
    )
    adapter.append(created)
    before = scan(client, table)
    # A resent append: the head exists, so the transaction is cancelled on its last action,
    # after moto ran the summary update; the summary must not count it.
    actions = [
        {
            "Update": {
                "TableName": table,
                **_summary_update(adapter, created.model_copy(update={"event": "exec.complete"})),
            }
        },
        {
            "Put": {
                "TableName": table,
                "Item": before[0] if before[0]["SK"]["S"] != k.SUMMARY_SK else before[1],
                "ConditionExpression": "attribute_not_exists(PK)",
            }
        },
    ]
    with pytest.raises(ClientError, match="TransactionCanceled"):
        client.transact_write_items(TransactItems=actions)
    assert scan(client, table) == before
    adapter.close()


def _summary_update(adapter: SyncDynamoDBAdapter, entry: LedgerEntry) -> dict[str, Any]:
    from sandbox_ledger.dynamodb import _items as it

    update = it.summary_update(entry, adapter.table_shard_count())
    assert update is not None
    return update


def test_refused_transactions_change_nothing(client: Any, table: str) -> None:
    seed(client, table)
    before = scan(client, table)
    put = {"Put": {"TableName": table, "Item": {**key("p", "x"), "v": {"S": "1"}}}}
    same_item_twice = [put, {"Delete": {"TableName": table, "Key": key("p", "x")}}]
    bad_update = [
        put,
        {
            "Update": {
                "TableName": table,
                "Key": key("p", "updated"),
                "UpdateExpression": "SET v = :missing",
            }
        },
    ]
    two_operations_in_one_action = [
        put,
        {
            "Put": {"TableName": table, "Item": {**key("p", "y")}},
            "Delete": {"TableName": table, "Key": key("p", "updated")},
        },
    ]
    for actions in (same_item_twice, bad_update, two_operations_in_one_action):
        with pytest.raises(ClientError):
            client.transact_write_items(TransactItems=actions)
        assert scan(client, table) == before


# -- equivalence with stock moto, on the backend itself ------------------------------------------


def _backend(name: str) -> Any:
    from moto.dynamodb.models import DynamoDBBackend

    backend = DynamoDBBackend("us-east-1", "123456789012")
    definition = k.table_definition(name)
    backend.create_table(
        name,
        schema=definition["KeySchema"],
        throughput=None,
        attr=definition["AttributeDefinitions"],
        global_indexes=definition["GlobalSecondaryIndexes"],
        indexes=None,
        streams=dict(definition["StreamSpecification"]),  # type: ignore[call-overload]
        billing_mode="PAY_PER_REQUEST",
        sse_specification=None,
        tags=[],
        deletion_protection_enabled=None,
        warm_throughput=None,
    )
    return backend


def _random_action(rng: random.Random, table: str) -> dict[str, Any]:
    k_ = key(f"p{rng.randrange(2)}", f"s{rng.randrange(4)}")
    condition = rng.choice(
        [None, "attribute_not_exists(PK)", "attribute_exists(PK)", "n < :limit", "n >= :limit"]
    )
    extra: dict[str, Any] = {}
    if condition:
        extra["ConditionExpression"] = condition
        if ":limit" in condition:
            extra["ExpressionAttributeValues"] = {":limit": {"N": "3"}}
    kind = rng.choice(["Put", "Update", "Update", "Delete", "ConditionCheck", "BadUpdate"])
    if kind == "Put":
        item = {**k_, "n": {"N": str(rng.randrange(5))}, "b": {"B": rng.randbytes(8)}}
        return {"Put": {"TableName": table, "Item": item, **extra}}
    if kind in ("Update", "BadUpdate"):
        values = {**extra.get("ExpressionAttributeValues", {}), ":one": {"N": "1"}}
        expression = "ADD n :one SET t = :t" if kind == "Update" else "SET n = n + :missing"
        values[":t"] = {"S": rng.choice(["a", "b"])}
        if kind == "BadUpdate":
            del values[":t"]
        return {
            "Update": {
                "TableName": table,
                "Key": k_,
                "UpdateExpression": expression,
                **extra,
                "ExpressionAttributeValues": values,
            }
        }
    if kind == "ConditionCheck" and not condition:
        extra["ConditionExpression"] = "attribute_exists(PK)"
    return {kind: {"TableName": table, "Key": k_, **extra}}


def _state(backend: Any, table: str) -> tuple[Any, Any]:
    t = backend.tables[table]
    items = sorted((str(i.to_json()) for i in t.all_items()), key=str)
    # Records carry their creation time (and a size computed with it): compare the rest.
    records = [
        {
            n: v
            for n, v in r.to_json()["dynamodb"].items()
            if n not in ("ApproximateCreationDateTime", "SizeBytes")
        }
        | {"eventName": r.to_json()["eventName"]}
        for r in t.stream_shard.items
    ]
    return items, records


def _outcome(call: Any, *args: Any) -> str:
    try:
        call(*args)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


@pytest.fixture
def unbounded_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    local.install_moto_patches()
    monkeypatch.setattr(local, "_stream_limit", None)


@pytest.mark.usefixtures("unbounded_streams")
@pytest.mark.parametrize(
    ("seed", "transactions"), [(2026, 150), pytest.param(7, 500, marks=pytest.mark.slow)]
)
def test_same_results_as_stock_moto_on_random_transactions(seed: int, transactions: int) -> None:
    """Random transactions on a few contended keys: the item-level rollback leaves the same
    items, stream records and errors as moto's whole-table copy."""
    stock, patched = _backend("t"), _backend("t")
    rng = random.Random(seed)
    outcomes: set[str] = set()
    for _ in range(transactions):
        actions = [_random_action(rng, "t") for _ in range(rng.randint(1, 4))]
        expected = _outcome(local._STOCK_TRANSACT_WRITE_ITEMS, stock, actions)
        got = _outcome(patched.transact_write_items, actions)
        assert got == expected
        assert _state(patched, "t") == _state(stock, "t")
        outcomes.add(got.split(":")[0])
    # Every path was taken: commits, cancellations and refusals.
    assert {"ok", "TransactionCanceledException", "MultipleTransactionsException"} <= outcomes


# -- queries ------------------------------------------------------------------------------------


def _fill(client: Any, table: str, rng: random.Random, partitions: int, per: int) -> None:
    """Items in ``partitions`` partitions; some on the indexes (ties on the index sort key
    included), some not."""
    with_index = ["g1pk", "g2pk", "g3pk"]
    for p in range(partitions):
        for _ in range(per):
            item: dict[str, Any] = {**key(f"p{p:03}", f"s{rng.randrange(10**6):07}")}
            if rng.random() < 0.7:
                item["gsk"] = {"N": str(rng.randrange(20))}
                item[rng.choice(with_index)] = {"S": f"g{rng.randrange(3)}"}
            client.put_item(TableName=table, Item=item)


def _queries(table: str, rng: random.Random) -> Iterator[dict[str, Any]]:
    for _ in range(40):
        forward = rng.random() < 0.5
        limit = rng.choice([1, 3, 50])
        if rng.random() < 0.5:
            p = f"p{rng.randrange(12):03}"  # a few partitions that do not exist
            condition, values = "PK = :p", {":p": {"S": p}}
            if rng.random() < 0.5:
                condition += " AND SK > :s"
                values[":s"] = {"S": f"s{rng.randrange(10**6):07}"}
            yield {
                "TableName": table,
                "KeyConditionExpression": condition,
                "ExpressionAttributeValues": values,
                "ScanIndexForward": forward,
                "Limit": limit,
            }
        else:
            index, attribute = rng.choice(
                [("byName", "g1pk"), ("byNameStatus", "g2pk"), ("all", "g3pk")]
            )
            condition = f"{attribute} = :g"
            values = {":g": {"S": f"g{rng.randrange(3)}"}}
            if rng.random() < 0.5:
                condition += " AND gsk < :n"
                values[":n"] = {"N": str(rng.randrange(20))}
            yield {
                "TableName": table,
                "IndexName": index,
                "KeyConditionExpression": condition,
                "ExpressionAttributeValues": values,
                "ScanIndexForward": forward,
                "Limit": limit,
            }


def _all_pages(client: Any, query: dict[str, Any]) -> list[Any]:
    pages, start = [], None
    while True:
        page = client.query(**query, **({"ExclusiveStartKey": start} if start else {}))
        pages.append((page["Items"], page.get("LastEvaluatedKey")))
        start = page.get("LastEvaluatedKey")
        if not start:
            return pages


def test_queries_answer_as_stock_moto(
    client: Any, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Base-table and index queries, forward and backward, with key conditions, limits and
    every page: the same items, pages and LastEvaluatedKeys as moto's own Query."""
    from moto.dynamodb.models.table import Table

    local.install_moto_patches()
    rng = random.Random(2026)
    _fill(client, table, rng, partitions=10, per=12)
    queries = list(_queries(table, rng))
    patched = [_all_pages(client, q) for q in queries]
    monkeypatch.setattr(Table, "query", local._STOCK_QUERY)
    stock = [_all_pages(client, q) for q in queries]
    assert patched == stock
    assert sum(len(items) for pages in stock for items, _ in pages) > 100  # not all empty


def test_a_query_costs_the_same_in_a_bigger_table(
    client: Any, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Comparisons of moto's typed values during one base-table Query of a 5-item
    partition: the same whether the table holds 10 partitions or 200 (stock moto sorts the
    whole table for every Query)."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    local.install_moto_patches()
    comparisons = {"n": 0}
    stock_lt, stock_eq = DynamoType.__lt__, DynamoType.__eq__

    def lt(self: Any, other: Any) -> bool:
        comparisons["n"] += 1
        return bool(stock_lt(self, other))

    def eq(self: Any, other: Any) -> bool:
        comparisons["n"] += 1
        return bool(stock_eq(self, other))

    def cost(partitions: int) -> int:
        name = f"local-{uuid.uuid4().hex[:10]}"
        client.create_table(**k.table_definition(name))
        _fill(client, name, random.Random(1), partitions=partitions, per=5)
        with monkeypatch.context() as m:
            m.setattr(DynamoType, "__lt__", lt)
            m.setattr(DynamoType, "__eq__", eq)
            comparisons["n"] = 0
            items = client.query(
                TableName=name,
                KeyConditionExpression="PK = :p",
                ExpressionAttributeValues={":p": {"S": "p001"}},
            )["Items"]
        assert len(items) == 5
        return comparisons["n"]

    small, big = cost(10), cost(200)
    assert big == small, (small, big)


# -- streams ------------------------------------------------------------------------------------


@pytest.fixture
def five_records(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(local, "_stream_limit", 5)
    yield


@pytest.mark.usefixtures("five_records")
def test_stream_keeps_the_newest_records(moto_endpoint: str, client: Any, table: str) -> None:
    for i in range(8):
        client.put_item(TableName=table, Item={**key("p", f"{i}"), "i": {"N": str(i)}})
    records = stream_records(moto_endpoint, client, table)
    assert [r["dynamodb"]["NewImage"]["i"]["N"] for r in records] == ["3", "4", "5", "6", "7"]
    sequence = [int(r["dynamodb"]["SequenceNumber"]) for r in records]
    assert sequence == list(range(sequence[0], sequence[0] + 5))
    # Reading from a trimmed record is refused, as DynamoDB refuses records past 24 hours.
    with pytest.raises(ClientError, match="TrimmedDataAccessException"):
        stream_records(
            moto_endpoint,
            client,
            table,
            ShardIteratorType="AT_SEQUENCE_NUMBER",
            SequenceNumber=str(sequence[0] - 1),
        )
    latest = stream_records(moto_endpoint, client, table, ShardIteratorType="LATEST")
    assert latest == []


def test_stream_turned_off_stops_records_and_writes_still_work(
    moto_endpoint: str, client: Any, table: str
) -> None:
    adapter = SyncDynamoDBAdapter(table, endpoint_url=moto_endpoint)
    adapter.append(
        LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=-1, event=LedgerEvent.SandboxCreated)
    )
    client.update_table(TableName=table, StreamSpecification={"StreamEnabled": False})
    # Stock moto fails every write after this with KeyError ('StreamViewType').
    adapter.append(
        LedgerEntry(ts=2, name="n", sandbox_id="s", step_index=0, event=LedgerEvent.ExecComplete)
    )
    details = adapter.get_sandbox_details("n", "s")
    assert details is not None and details.exec_count == 1
    adapter.close()


def test_stream_records_must_be_a_count() -> None:
    with pytest.raises(ValueError, match="stream_records"):
        local.LocalDynamoDB(stream_records=-1)


# -- the version check ---------------------------------------------------------------------------


def test_an_unknown_moto_refuses_to_be_patched() -> None:
    import moto

    def transact_write_items(self: Any, transact_items: Any) -> None:
        """Stands for a moto release whose transaction code changed."""

    with pytest.raises(RuntimeError) as info:
        local.check_moto_sources({"DynamoDBBackend.transact_write_items": transact_write_items})
    message = str(info.value)
    assert "DynamoDBBackend.transact_write_items" in message
    assert f"moto {moto.__version__}" in message


def test_the_installed_moto_is_a_known_one() -> None:
    from moto.dynamodb.models import DynamoDBBackend

    local.install_moto_patches()
    local.check_moto_sources(
        {"DynamoDBBackend.transact_write_items": local._STOCK_TRANSACT_WRITE_ITEMS}
    )
    assert DynamoDBBackend.transact_write_items is local._transact_write_items


# -- the server in a child process (the CLI's embedded DynamoDB) --------------------------------


def test_the_server_runs_in_a_child_process_until_stopped() -> None:
    server = local.LocalDynamoDBProcess()
    endpoint = server.start()
    assert server.start() == endpoint  # idempotent
    child = server._child
    assert child is not None
    adapter = SyncDynamoDBAdapter("child-table", endpoint_url=endpoint)
    adapter.create_table()
    adapter.append(
        LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=-1, event=LedgerEvent.SandboxCreated)
    )
    assert [e.ts for e in adapter.read_all("n", "s")] == [1]
    adapter.close()
    server.stop()
    assert child.poll() is not None
    server.stop()  # idempotent


def test_a_child_that_cannot_serve_says_why(moto_endpoint: str) -> None:
    port = int(moto_endpoint.rsplit(":", 1)[1])  # taken by the tests' own server
    with pytest.raises(RuntimeError, match="did not start"):
        local.LocalDynamoDBProcess(port=port).start()
