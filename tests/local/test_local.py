"""The embedded DynamoDB (sandbox_ledger.local): moto's semantics, with transactions that
roll back only what they touch and bounded streams."""

from __future__ import annotations

import contextlib
import copy
import random
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from sandbox_ledger import LedgerEntry, LedgerEvent, local
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.local import adjustments
from sandbox_ledger.local.adjustments import queries, scans, transactions, update_expressions

# The adjustments of moto's per-request work (parser, validator, lexer, serializer).
HOT_PATH = tuple(sorted(adjustments.HOT_PATH))


def off_for_this_moto() -> dict[str, str]:
    """The adjustments that do not fit the installed moto (none on those they were written
    for), each with its warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", local.MotoAdjustmentWarning)
        return adjustments.prepare()[1]


def needs(*names: str) -> None:
    """Skip a test of what adjustments ``names`` do, on a moto they do not fit."""
    missing = sorted(set(names) & set(off_for_this_moto()))
    if missing:
        import moto

        pytest.skip(f"adjustments {missing} are off for moto {moto.__version__}")


def in_order(names: set[str]) -> tuple[str, ...]:
    return tuple(a.name for a in adjustments.all_adjustments() if a.name in names)


def adjusted(*names: str, stream_records: int | None = None) -> Any:
    """A block in which this thread's calls into moto are adjusted as a server's request is."""
    needs(*names)
    return adjustments.serving(
        adjustments.Settings(on=frozenset(names), stream_records=stream_records)
    )


@contextlib.contextmanager
def stock_server(*names: str) -> Iterator[str]:
    """An embedded server without the adjustments ``names`` (moto's own code there)."""
    server = local.LocalDynamoDB(leave_off=names)
    try:
        yield server.start()
    finally:
        server.stop()


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
    needs("transactions")  # stock moto keeps the actions before a second operation's
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


@pytest.mark.parametrize(
    ("seed", "count"), [(2026, 150), pytest.param(7, 500, marks=pytest.mark.slow)]
)
def test_same_results_as_stock_moto_on_random_transactions(seed: int, count: int) -> None:
    """Random transactions on a few contended keys: the item-level rollback leaves the same
    items, stream records and errors as moto's whole-table copy."""
    stock, patched = _backend("t"), _backend("t")
    rng = random.Random(seed)
    outcomes: set[str] = set()
    for _ in range(count):
        actions = [_random_action(rng, "t") for _ in range(rng.randint(1, 4))]
        expected = _outcome(stock.transact_write_items, actions)
        with adjusted("transactions", "streams", *HOT_PATH, stream_records=None):
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
    # A key drawn twice keeps its last item, as one PutItem after another would leave it.
    items: dict[tuple[str, str], dict[str, Any]] = {}
    for p in range(partitions):
        for _ in range(per):
            item: dict[str, Any] = {**key(f"p{p:03}", f"s{rng.randrange(10**6):07}")}
            if rng.random() < 0.7:
                item["gsk"] = {"N": str(rng.randrange(20))}
                item[rng.choice(with_index)] = {"S": f"g{rng.randrange(3)}"}
            items[item["PK"]["S"], item["SK"]["S"]] = item
    requests = [{"PutRequest": {"Item": item}} for item in items.values()]
    while requests:
        batch, requests = requests[:25], requests[25:]
        left = client.batch_write_item(RequestItems={table: batch})["UnprocessedItems"]
        requests += left.get(table, [])


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
    client: Any, table: str, wait_for_indexes: Callable[[], None]
) -> None:
    """Base-table and index queries, forward and backward, with key conditions, limits and
    every page: the same items, pages and LastEvaluatedKeys as moto's own Query."""
    rng = random.Random(2026)
    _fill(client, table, rng, partitions=10, per=12)
    wait_for_indexes()  # the indexes settled, as stock moto's (which never lag) are
    asked = list(_queries(table, rng))
    patched = [_all_pages(client, q) for q in asked]
    with stock_server(queries.NAME) as endpoint:
        stock_client = boto3.client("dynamodb", endpoint_url=endpoint)
        stock = [_all_pages(stock_client, q) for q in asked]
    assert patched == stock
    assert sum(len(items) for pages in stock for items, _ in pages) > 100  # not all empty


def _scans(table: str, rng: random.Random) -> Iterator[dict[str, Any]]:
    for _ in range(12):
        scan: dict[str, Any] = {"TableName": table, "Limit": rng.choice([1, 7, 50, 1000])}
        if rng.random() < 0.5:
            scan["Segment"], scan["TotalSegments"] = rng.randrange(3), 3
        if rng.random() < 0.5:
            scan["FilterExpression"] = "attribute_exists(gsk)"
        yield scan


def _all_scan_pages(client: Any, scan: dict[str, Any]) -> list[Any]:
    pages, start = [], None
    while True:
        page = client.scan(**scan, **({"ExclusiveStartKey": start} if start else {}))
        pages.append((page["Items"], page.get("LastEvaluatedKey")))
        start = page.get("LastEvaluatedKey")
        if not start:
            return pages


def test_scans_answer_as_stock_moto(client: Any, table: str) -> None:
    """Base-table scans, whole or in segments, with limits and filters and every page: the
    same items, pages and LastEvaluatedKeys as moto's own Scan; an item deleted between two
    pages is not returned, as moto's own."""
    needs("scans")
    rng = random.Random(41)
    _fill(client, table, rng, partitions=10, per=12)
    asked = list(_scans(table, rng))
    patched = [_all_scan_pages(client, s) for s in asked]
    with stock_server(scans.NAME) as endpoint:
        stock_client = boto3.client("dynamodb", endpoint_url=endpoint)
        stock = [_all_scan_pages(stock_client, s) for s in asked]
    assert patched == stock
    assert sum(len(items) for pages in stock for items, _ in pages) > 100
    first = client.scan(TableName=table, Limit=5)
    gone = client.scan(TableName=table, Limit=1, ExclusiveStartKey=first["LastEvaluatedKey"])
    client.delete_item(
        TableName=table, Key=key(gone["Items"][0]["PK"]["S"], gone["Items"][0]["SK"]["S"])
    )
    again = client.scan(TableName=table, Limit=1, ExclusiveStartKey=first["LastEvaluatedKey"])
    assert again["Items"] != gone["Items"]


def test_a_query_costs_the_same_in_a_bigger_table(
    client: Any, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Comparisons of moto's typed values during one base-table Query of a 5-item
    partition: the same whether the table holds 10 partitions or 200 (stock moto sorts the
    whole table for every Query)."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    needs("queries")
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


def test_a_scan_page_costs_the_same_in_a_bigger_table(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Comparisons of moto's typed values for the second page of a Scan (stock moto sorts
    the whole table and walks to the page's start for every page: an export of 200,000
    entries from `sandbox-ledger local` timed out): the same whether the table holds 10
    partitions or 200."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    needs("scans")
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
        first = client.scan(TableName=name, Limit=5)
        with monkeypatch.context() as m:
            m.setattr(DynamoType, "__lt__", lt)
            m.setattr(DynamoType, "__eq__", eq)
            comparisons["n"] = 0
            page = client.scan(TableName=name, Limit=5, ExclusiveStartKey=first["LastEvaluatedKey"])
        assert len(page["Items"]) == 5
        return comparisons["n"]

    small, big = cost(10), cost(200)
    assert big == small, (small, big)


def test_a_scan_goes_on_without_sorting_the_table_again_after_a_write(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Scan's later pages go on in the order its first page sorted, though the table was
    written to between them (sorting it again at each page made each page of a scan of a
    busy table cost the whole table: under the soak's fleet, scans held the server for
    seconds); a new scan sorts the table as it is now, the item written included."""
    from sandbox_ledger.local.adjustments import scans

    needs("scans")
    name = f"local-{uuid.uuid4().hex[:10]}"
    client.create_table(**k.table_definition(name))
    _fill(client, name, random.Random(1), partitions=20, per=5)
    first = client.scan(TableName=name, Limit=5)
    client.put_item(TableName=name, Item=key("p999", "new"))
    sorts: list[int] = []

    class Counted(scans._Order):
        def __init__(self, table: Any, signature: tuple[int, int]) -> None:
            sorts.append(1)
            super().__init__(table, signature)

    monkeypatch.setattr(scans, "_Order", Counted)
    page = client.scan(TableName=name, Limit=5, ExclusiveStartKey=first["LastEvaluatedKey"])
    assert len(page["Items"]) == 5 and sorts == []
    everything = client.scan(TableName=name)["Items"]
    assert sorts == [1] and key("p999", "new") in [
        {"PK": i["PK"], "SK": i["SK"]} for i in everything
    ]


def test_a_scan_after_the_key_set_changed_at_the_same_size_reads_the_table_as_it_is(
    client: Any,
) -> None:
    """A new scan of a table whose items were replaced by as many under other keys (a table
    emptied between two test examples and written again) returns the items it holds now:
    a count of items does not tell that the keys changed (the verification run's table
    kept two sessions through its reset, and a scan after it found none of the new ones)."""
    needs("scans")
    name = f"local-{uuid.uuid4().hex[:10]}"
    client.create_table(**k.table_definition(name))

    def keys_scanned() -> set[tuple[str, str]]:
        pages = client.get_paginator("scan").paginate(
            TableName=name, PaginationConfig={"PageSize": 2}
        )
        return {(i["PK"]["S"], i["SK"]["S"]) for page in pages for i in page["Items"]}

    old = {(f"p{i}", "a") for i in range(5)}
    for pk, sk in old:
        client.put_item(TableName=name, Item=key(pk, sk))
    assert keys_scanned() == old
    for pk, sk in old:
        client.delete_item(TableName=name, Key=key(pk, sk))
    new = {(f"q{i}", "b") for i in range(5)}
    for pk, sk in new:
        client.put_item(TableName=name, Item=key(pk, sk))
    assert keys_scanned() == new
    client.delete_item(TableName=name, Key=key("q0", "b"))
    client.put_item(TableName=name, Item=key("a-first", "c"))
    assert keys_scanned() == (new - {("q0", "b")}) | {("a-first", "c")}


# -- the request hot path: parsed update expressions, static checks, the serializer ------------


def _update(table: str, pk: str, expression: str, **extra: Any) -> tuple[str, dict[str, Any]]:
    return (
        "update_item",
        {"TableName": table, "Key": key("p", pk), "UpdateExpression": expression, **extra},
    )


def _hot_path_requests(table: str) -> list[tuple[str, dict[str, Any]]]:
    """The library's update expression shapes, each on new and existing items, with passing
    and failing conditions; every way moto refuses an update expression (most of them twice,
    and some only with names that an earlier request with the same text passed); and
    responses of every attribute type for the serializer."""
    summary = "SET #a0 = :a0, #a1 = :a1, #a2 = :a2, #rev = if_not_exists(#rev, :zero) + :one"
    summary_names = {"#a0": "owner", "#a1": "state", "#a2": "g1pk", "#rev": "rev"}

    def summary_values(owner: str) -> dict[str, Any]:
        return {
            ":a0": {"S": owner},
            ":a1": {"S": "running"},
            ":a2": {"S": f"by-{owner}"},
            ":zero": {"N": "0"},
            ":one": {"N": "1"},
        }

    heartbeat = "SET #u = :u, #gsk = :ms, #rev = #rev + :one, #ttl = :ttl"
    heartbeat_names = {"#u": "until", "#gsk": "gsk", "#rev": "rev", "#ttl": "ttl"}

    def heartbeat_values(rev: str) -> dict[str, Any]:
        return {
            ":u": {"N": "99"},
            ":ms": {"N": "1000"},
            ":one": {"N": "1"},
            ":ttl": {"N": "1234"},
            ":rev": {"N": rev},
        }

    release = "REMOVE #exp, #by SET #rev = #rev + :one"
    names_xy = {"#a": "x", "#b": "y"}
    every_type = {
        **key("p", "types"),
        "s": {"S": "text"},
        "n": {"N": "-1.5e3"},
        "b": {"B": b"\x00\xff"},
        "ss": {"SS": ["a", "b"]},
        "ns": {"NS": ["1", "2"]},
        "bs": {"BS": [b"x", b"y"]},
        "m": {"M": {"deep": {"L": [{"N": "1"}, {"NULL": True}, {"BOOL": False}]}}},
        "l": {"L": [{"M": {"k": {"S": "v"}}}, {"SS": ["z"]}]},
        "null": {"NULL": True},
        "bool": {"BOOL": True},
    }
    requests: list[tuple[str, dict[str, Any]]] = [
        ("put_item", {"TableName": table, "Item": every_type})
    ]
    for pk, return_values in [("s1", "ALL_NEW"), ("s1", "UPDATED_OLD"), ("s2", "UPDATED_NEW")]:
        requests.append(
            _update(
                table,
                pk,
                summary,
                ExpressionAttributeNames=summary_names,
                ExpressionAttributeValues=summary_values(pk),
                ReturnValues=return_values,
            )
        )
    for rev, on_failure in [("2", "ALL_OLD"), ("7", "ALL_OLD"), ("7", "NONE")]:
        requests.append(
            _update(
                table,
                "s1",
                heartbeat,
                ConditionExpression="attribute_exists(#rev) AND #rev = :rev",
                ExpressionAttributeNames=heartbeat_names,
                ExpressionAttributeValues=heartbeat_values(rev),
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure=on_failure,
            )
        )
    values = heartbeat_values("0")
    del values[":rev"]
    requests += [
        # The same text on an item without the attribute it adds to: refused.
        _update(
            table,
            "absent",
            heartbeat,
            ExpressionAttributeNames=heartbeat_names,
            ExpressionAttributeValues=values,
        ),
        _update(
            table,
            "s1",
            "SET #exp = :r, #by = :o",
            ExpressionAttributeNames={"#exp": "expiring", "#by": "by"},
            ExpressionAttributeValues={":r": {"S": "idle"}, ":o": {"S": "me"}},
        ),
        _update(
            table,
            "s1",
            release,
            ExpressionAttributeNames={"#exp": "expiring", "#by": "by", "#rev": "rev"},
            ExpressionAttributeValues={":one": {"N": "1"}},
            ReturnValues="ALL_NEW",
        ),
        # A text and names that pass, then the same text with names that fail each check.
        _update(
            table,
            "s1",
            "SET #x = :v",
            ExpressionAttributeNames={"#x": "note"},
            ExpressionAttributeValues={":v": {"S": "v"}},
        ),
        _update(
            table,
            "s1",
            "SET #x = :v",
            ExpressionAttributeNames={"#x": "PK"},
            ExpressionAttributeValues={":v": {"S": "v"}},
        ),
        _update(
            table,
            "s1",
            "SET #a = :v, #b = :w",
            ExpressionAttributeNames=names_xy,
            ExpressionAttributeValues={":v": {"S": "v"}, ":w": {"S": "w"}},
        ),
        _update(
            table,
            "s1",
            "SET #a = :v, #b = :w",
            ExpressionAttributeNames={"#a": "x", "#b": "x"},
            ExpressionAttributeValues={":v": {"S": "v"}, ":w": {"S": "w"}},
        ),
        _update(
            table,
            "s1",
            "SET #a = :v, #b = :w",
            ExpressionAttributeNames={"#a": "x", "#b": "y", "#c": "unused"},
            ExpressionAttributeValues={":v": {"S": "v"}, ":w": {"S": "w"}},
        ),
        # Values of the wrong type, or empty, for an index key.
        _update(table, "s1", "SET gsk = :v", ExpressionAttributeValues={":v": {"S": "text"}}),
        _update(table, "s1", "SET g2pk = :v", ExpressionAttributeValues={":v": {"S": ""}}),
        _update(
            table,
            "s1",
            "SET #x = :v",
            ExpressionAttributeNames={"#x": "note"},
            ExpressionAttributeValues={":w": {"S": "v"}},
        ),
        _update(table, "s1", "SET #x = :v", ExpressionAttributeValues={":v": {"S": "v"}}),
        _update(
            table,
            "types",
            "SET l = list_append(l, :more), m.deep[1] = :v, ns2 = :ns ADD n :one DELETE ss :a",
            ExpressionAttributeValues={
                ":more": {"L": [{"S": "more"}]},
                ":v": {"S": "replaced"},
                ":ns": {"NS": ["3"]},
                ":one": {"N": "1"},
                ":a": {"SS": ["a"]},
            },
            ReturnValues="ALL_NEW",
        ),
        _update(
            table, "types", "SET absent.deeper = :v", ExpressionAttributeValues={":v": {"N": "1"}}
        ),
        _update(table, "types", "SET s = s + :v", ExpressionAttributeValues={":v": {"N": "1"}}),
    ]
    for _ in range(2):  # refused twice: a refusal is never remembered
        requests += [
            _update(
                table, "s1", "SET a = :v SET b = :v", ExpressionAttributeValues={":v": {"N": "1"}}
            ),
            _update(table, "s1", "ADD a :v ADD b :v", ExpressionAttributeValues={":v": {"N": "1"}}),
            _update(table, "s1", "SET a = ", ExpressionAttributeValues={":v": {"N": "1"}}),
            _update(
                table, "s1", "SET a = :v, a = :v", ExpressionAttributeValues={":v": {"N": "1"}}
            ),
            _update(
                table, "s1", "SET a.b = :v, a = :v", ExpressionAttributeValues={":v": {"N": "1"}}
            ),
            _update(table, "s1", "SET SK = :v", ExpressionAttributeValues={":v": {"S": "x"}}),
            _update(table, "s1", "SET a = :nope", ExpressionAttributeValues={":v": {"N": "1"}}),
            _update(table, "s1", "SET #nope = :v", ExpressionAttributeValues={":v": {"N": "1"}}),
            _update(table, "s1", "   ", ExpressionAttributeValues={":v": {"N": "1"}}),
            _update(table, "s1", "SET name = :v", ExpressionAttributeValues={":v": {"N": "1"}}),
        ]
    requests += [
        (
            "transact_write_items",
            {
                "TransactItems": [
                    {
                        "Update": dict(
                            _update(table, pk, summary)[1],
                            ExpressionAttributeNames=summary_names,
                            ExpressionAttributeValues=summary_values(pk),
                        )
                    }
                    for pk in ("s2", "s3")
                ]
            },
        ),
        (
            "transact_write_items",
            {
                "TransactItems": [
                    {
                        "Update": dict(
                            _update(table, "s3", heartbeat)[1],
                            ConditionExpression="#rev = :rev",
                            ExpressionAttributeNames=heartbeat_names,
                            ExpressionAttributeValues=heartbeat_values("99"),
                            ReturnValuesOnConditionCheckFailure="ALL_OLD",
                        )
                    },
                    {
                        "Update": dict(
                            _update(table, "s4", summary)[1],
                            ExpressionAttributeNames=summary_names,
                            ExpressionAttributeValues=summary_values("s4"),
                        )
                    },
                ]
            },
        ),
        ("get_item", {"TableName": table, "Key": key("p", "types")}),
        *[
            (
                "put_item",
                {
                    "TableName": table,
                    "Item": {**key("p", "s1"), "v": {"S": "x"}},
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": {"#rev": "rev"},
                    "ExpressionAttributeValues": {":r": {"N": "4"}},
                },
            )
            for condition in [
                "attribute_not_exists(#rev) OR #rev < :r",  # fails
                "attribute_not_exists(#rev) OR #rev < :r",
                "#rev = :r AND",  # does not parse: twice
                "#rev = :r AND",
                "#rev = :r OR @",
                "#rev <> :r OR (#rev BETWEEN :r AND :r) OR size(#rev) > :r",
                "#rev IN (:r, :r) AND NOT attribute_type(#rev, :r)",
            ]
        ],
        (
            "query",
            {
                "TableName": table,
                "KeyConditionExpression": "PK = :p",
                "FilterExpression": "attribute_exists(#rev) AND begins_with(#o, :s)",
                "ExpressionAttributeNames": {"#rev": "rev", "#o": "g1pk"},
                "ExpressionAttributeValues": {":p": {"S": "p"}, ":s": {"S": "by-"}},
            },
        ),
        (
            "get_item",
            {"TableName": table, "Key": key("p", "s1"), "ProjectionExpression": "rev, g1pk"},
        ),
        (
            "query",
            {
                "TableName": table,
                "KeyConditionExpression": "PK = :p",
                "ExpressionAttributeValues": {":p": {"S": "p"}},
            },
        ),
        (
            "batch_get_item",
            {"RequestItems": {table: {"Keys": [key("p", "types"), key("p", "s2")]}}},
        ),
    ]
    return requests


def _answers(client: Any, table: str) -> tuple[list[Any], list[Any]]:
    """Each request's raw HTTP status and body, then the table's items."""
    raw: list[Any] = []

    def keep(http_response: Any, **_: Any) -> None:
        raw.append((http_response.status_code, http_response.content))

    client.create_table(**k.table_definition(table))
    client.meta.events.register("after-call.dynamodb.*", keep)
    try:
        for operation, params in _hot_path_requests(table):
            with contextlib.suppress(ClientError):
                getattr(client, operation)(**params)
    finally:
        client.meta.events.unregister("after-call.dynamodb.*", keep)
    items = scan(client, table)
    client.delete_table(TableName=table)
    return raw, items


@pytest.fixture
def once(moto_endpoint: str) -> Any:
    """A client that does not retry: moto answers some refusals with a 500 (a KeyError)."""
    return boto3.client(
        "dynamodb", endpoint_url=moto_endpoint, config=Config(retries={"max_attempts": 1})
    )


def _no_retries(endpoint: str) -> Any:
    return boto3.client(
        "dynamodb", endpoint_url=endpoint, config=Config(retries={"max_attempts": 1})
    )


def test_updates_and_responses_are_stock_moto_s() -> None:
    """Every request above answers byte for byte as with moto's own parser, validator and
    serializer, and leaves the same items: the library's expressions, every refusal, and
    responses of every attribute type. (On servers of their own without the strict profile,
    whose ConsumedCapacity is DynamoDB's, not moto's: tests/local/test_strict_capacity.py.)"""
    update_expressions._parsed.clear()
    update_expressions._source_of.clear()
    update_expressions._checked.clear()
    table = f"local-{uuid.uuid4().hex[:10]}"
    with stock_server() as endpoint:
        patched, patched_items = _answers(_no_retries(endpoint), table)
    # The patched run did take the shortcuts: parsed once, checked once per shape.
    summary = "SET #a0 = :a0, #a1 = :a1, #a2 = :a2, #rev = if_not_exists(#rev, :zero) + :one"
    assert update_expressions._parsed.get(summary) is not None
    assert any(shape[0] == summary for shape in update_expressions._checked._entries)
    with stock_server(*HOT_PATH) as endpoint:
        stock, stock_items = _answers(_no_retries(endpoint), table)
    assert len(patched) == len(_hot_path_requests(table))
    for index, (got, expected) in enumerate(zip(patched, stock, strict=True)):
        assert got == expected, (index, got, expected)
    assert patched_items == stock_items
    statuses = [status for status, _ in stock]
    assert {200, 400, 500} <= set(statuses) and statuses.count(400) > 25


def test_descriptions_are_stock_moto_s(once: Any, table: str) -> None:
    """Responses built from nested dicts and lists of moto's own (table, indexes, stream,
    TTL, tags): byte for byte as moto's serializer makes them, on the same table."""
    once.update_time_to_live(
        TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
    )
    arn = once.describe_table(TableName=table)["Table"]["TableArn"]
    once.tag_resource(ResourceArn=arn, Tags=[{"Key": "k", "Value": "v"}])
    calls: list[tuple[str, dict[str, Any]]] = [
        ("describe_table", {"TableName": table}),
        ("describe_time_to_live", {"TableName": table}),
        ("list_tags_of_resource", {"ResourceArn": arn}),
        ("describe_table", {"TableName": "no-such-table"}),
    ]

    def answers(client: Any) -> list[Any]:
        raw: list[Any] = []

        def keep(http_response: Any, **_: Any) -> None:
            raw.append((http_response.status_code, http_response.content))

        client.meta.events.register("after-call.dynamodb.*", keep)
        try:
            for operation, params in calls:
                with contextlib.suppress(ClientError):
                    getattr(client, operation)(**params)
        finally:
            client.meta.events.unregister("after-call.dynamodb.*", keep)
        return raw

    patched = answers(once)
    with stock_server(*HOT_PATH) as endpoint:
        assert answers(_no_retries(endpoint)) == patched
    assert b"GlobalSecondaryIndexes" in patched[0][1] and patched[3][0] == 400


def _lexed(text: str) -> Any:
    from moto.dynamodb.comparisons import ConditionExpressionParser

    try:
        return list(ConditionExpressionParser(text, {}, {})._lex_condition_expression())
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize(
    "text",
    [
        "attribute_not_exists(#pk)",
        "attribute_not_exists(#dl) OR #dl < :now",
        "#rev = :rev AND (attribute_not_exists(#exp) OR #until < :now)",
        "begins_with(#sk, :e) AND (attribute_not_exists(#ttl) OR #ttl > :now)",
        "a.b[1].c <> :v OR size(#x) >= :n",
        "#rev = :r AND",
        "#rev = :r OR @",
        "",
    ],
)
def test_condition_tokens_are_stock_moto_s(text: str) -> None:
    """A condition's tokens, or the error for a text that does not lex: as moto's lexer
    gives them, each time, and new lists each time (changing one changes no later parse)."""
    with adjusted("conditions"):
        patched = [_lexed(text) for _ in range(2)]
        changed = _lexed(text)
        if isinstance(changed, list) and changed:
            changed[0].children.append("changed")
        patched.append(_lexed(text))
    stock = _lexed(text)  # outside a server's request: moto's own lexer
    assert patched == [stock] * 3


def _tree(node: Any, parent: Any = None) -> Any:
    """A moto expression tree as plain data, checking its parent links."""
    from moto.dynamodb.parsing.ast_nodes import Node

    if not isinstance(node, Node):
        return (type(node).__name__, node)
    assert node.parent is parent
    children = None if node.children is None else [_tree(c, node) for c in node.children]
    return (type(node).__name__, sorted(vars(node)), node.type, children)


def test_remembered_trees_are_fresh_parses_and_copy_as_deepcopy_does(once: Any) -> None:
    """After the requests above, every tree the parser remembers is still what parsing its
    text gives (nothing changed a shared tree), and the validator's copy of each is the
    tree ``copy.deepcopy`` makes."""
    from moto.dynamodb.parsing.ast_nodes import Node
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    table = f"local-{uuid.uuid4().hex[:10]}"
    _answers(once, table)
    entries = update_expressions._parsed._entries
    texts = [text for text in entries if "SET" in text or "REMOVE" in text]
    assert len(texts) >= 8
    for text in texts:
        with adjusted("update_expressions"):
            tree = UpdateExpressionParser.make(text)
            assert UpdateExpressionParser.make(text) is tree  # remembered
        stock = UpdateExpressionParser.make(text)  # outside a server's request: a new parse
        assert stock is not tree
        assert _tree(tree) == _tree(stock)
        assert update_expressions._plain_tree(tree, Node)
        copied = update_expressions._copy_tree(tree, None)
        assert _tree(copied) == _tree(copy.deepcopy(tree))


def _first_inner_node(tree: Any) -> Any:
    from moto.dynamodb.parsing.ast_nodes import Node

    node = tree
    while node.children and isinstance(node.children[0], Node):
        node = node.children[0]
    return node


@pytest.mark.parametrize(
    "spoil",
    [
        lambda tree, node: setattr(node, "extra", 1),  # an attribute of its own
        lambda tree, node: node.children.append([1]),  # a mutable leaf
        lambda tree, node: tree.children.append(node),  # a node reached twice
        lambda tree, node: setattr(node, "parent", None),  # a parent link elsewhere
    ],
)
def test_a_tree_that_is_not_plain_is_left_to_deepcopy(spoil: Any) -> None:
    """The validator's fast copy is only for trees as moto's parser makes them; any other
    (which copy.deepcopy would copy differently) is left to copy.deepcopy."""
    from moto.dynamodb.parsing.ast_nodes import Node
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    tree = copy.deepcopy(UpdateExpressionParser.make("SET a = :v, b = if_not_exists(b, :w)"))
    assert update_expressions._plain_tree(tree, Node)
    spoil(tree, _first_inner_node(tree))
    assert not update_expressions._plain_tree(tree, Node)


def test_the_parse_and_check_caches_are_bounded() -> None:
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    ue = update_expressions
    with adjusted("update_expressions"):
        for i in range(ue.UPDATE_EXPRESSIONS_CACHED + 20):
            UpdateExpressionParser.make(f"SET bounded{i} = :v")
    assert len(ue._parsed) == ue.UPDATE_EXPRESSIONS_CACHED
    assert len(ue._source_of) == ue.UPDATE_EXPRESSIONS_CACHED
    assert len(ue._checked) <= ue.UPDATE_EXPRESSIONS_CACHED
    assert "SET bounded0 = :v" not in ue._parsed._entries  # the oldest forgotten


# -- streams ------------------------------------------------------------------------------------


@pytest.fixture
def five_records() -> Iterator[str]:
    """An embedded server whose streams keep five records."""
    server = local.LocalDynamoDB(stream_records=5)
    yield server.start()
    server.stop()


def test_stream_keeps_the_newest_records(five_records: str) -> None:
    needs("streams")
    moto_endpoint = five_records
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    table = f"local-{uuid.uuid4().hex[:10]}"
    client.create_table(**k.table_definition(table))
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
    needs("streams")
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


def test_a_stream_turned_off_can_be_turned_on_again_as_a_new_stream(
    moto_endpoint: str, client: Any, table: str
) -> None:
    """DynamoDB gives a table whose stream is off a new one (a new ARN, holding only what is
    written after it); stock moto refuses ("Cannot enable stream"). A table whose stream is on
    still refuses a second, with DynamoDB's ValidationException (UpdateTable's
    StreamSpecification: "You receive a ValidationException if you try to enable a stream on
    a table that already has a stream")."""
    needs("streams")
    on = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    with pytest.raises(ClientError, match="ValidationException"):
        client.update_table(TableName=table, StreamSpecification=on)
    client.put_item(TableName=table, Item={**key("p", "before"), "i": {"N": "1"}})
    first = client.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    client.update_table(TableName=table, StreamSpecification={"StreamEnabled": False})
    client.put_item(TableName=table, Item={**key("p", "while off"), "i": {"N": "2"}})
    client.update_table(TableName=table, StreamSpecification=on)
    second = client.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    assert second != first
    client.put_item(TableName=table, Item={**key("p", "after"), "i": {"N": "3"}})
    records = stream_records(moto_endpoint, client, table)
    assert [r["dynamodb"]["NewImage"]["i"]["N"] for r in records] == ["3"]


def test_stream_records_must_be_a_count() -> None:
    with pytest.raises(ValueError, match="stream_records"):
        local.LocalDynamoDB(stream_records=-1)


# -- the check of each adjustment against the installed moto ------------------------------------


def test_an_adjustment_whose_moto_code_differs_is_left_off_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A moto whose transaction code changed: that adjustment alone is left off, the warning
    names it, the function, the moto version and the behaviour that then differs, and the
    server starts and serves."""
    import moto

    monkeypatch.setitem(
        transactions.KNOWN_SOURCES,
        "DynamoDBBackend.transact_write_items",
        frozenset({"0123456789abcdef"}),
    )
    already = set(off_for_this_moto())
    server = local.LocalDynamoDB()
    with pytest.warns(local.MotoAdjustmentWarning) as caught:
        endpoint = server.start()
    try:
        assert server.adjustments_off == in_order(already | {"transactions"})
        assert len(caught) == len(server.adjustments_off)  # one warning each
        (message,) = [str(w.message) for w in caught if "'transactions'" in str(w.message)]
        assert "'transactions'" in message
        assert "DynamoDBBackend.transact_write_items" in message
        assert f"moto {moto.__version__}" in message
        assert "Behaviour differs from DynamoDB" in message
        client = boto3.client("dynamodb", endpoint_url=endpoint)
        assert "TableNames" in client.list_tables()
    finally:
        server.stop()


def test_a_speed_adjustment_left_off_says_the_answers_stay_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    already = set(off_for_this_moto())
    monkeypatch.setitem(queries.KNOWN_SOURCES, "Table.query", frozenset({"0123456789abcdef"}))
    server = local.LocalDynamoDB()
    with pytest.warns(local.MotoAdjustmentWarning) as caught:
        server.start()
    server.stop()
    assert server.adjustments_off == in_order(already | {"queries"})
    (message,) = [str(w.message) for w in caught if "'queries'" in str(w.message)]
    assert "answers the same, slower" in message


def test_adjustments_asked_off_are_reported_without_a_warning() -> None:
    already = set(off_for_this_moto())
    server = local.LocalDynamoDB(leave_off=["queries", "serializer"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", local.MotoAdjustmentWarning)
        server.start()
    server.stop()
    assert server.adjustments_off == in_order(already | {"queries", "serializer"})
    assert len(caught) == len(already - {"queries", "serializer"})  # none for those asked
    with pytest.raises(ValueError, match="leave_off"):
        local.LocalDynamoDB(leave_off=["no-such-adjustment"])


def test_the_installed_moto_is_a_known_one() -> None:
    """On the moto releases the adjustments were written for, every one is on, and its hooks
    are in place of moto's own functions."""
    import moto
    from moto.dynamodb.models import DynamoDBBackend

    if moto.__version__ not in adjustments.WRITTEN_FOR:
        pytest.skip(f"moto {moto.__version__} is not one the fingerprints were taken from")
    on, off = adjustments.prepare()
    assert off == {}
    assert on == {adjustment.name for adjustment in adjustments.all_adjustments()}
    stock = adjustments._stock["transactions"]["DynamoDBBackend.transact_write_items"]
    assert DynamoDBBackend.transact_write_items is not stock


def test_outside_a_server_s_request_moto_is_its_own() -> None:
    """Calls into moto that no embedded server serves (``mock_aws``, a test calling a backend)
    get moto's own code: a stream turned off then fails writes, as stock moto does."""
    needs("streams")
    backend = _backend("t")
    backend.update_table(
        "t",
        billing_mode=None,
        throughput=None,
        attr_definitions=None,
        global_index=None,
        stream_spec={"StreamEnabled": False},
        deletion_protection_enabled=None,
        warm_throughput=None,
    )
    with pytest.raises(KeyError):
        backend.put_item("t", {**key("p", "s")})
    with adjusted("streams"):
        backend.put_item("t", {**key("p", "s")})


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


def test_an_index_query_keeps_every_item_moto_s_own_check_would() -> None:
    """The index Query's pre-filter keeps every item whose key attribute moto's check finds
    equal: the same string, binary, or number however written ("1" and "1.0")."""
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    def item(value: dict[str, str] | None) -> Any:
        attrs = {"PK": {"S": "a"}, **({} if value is None else {"g": value})}
        return Item(DynamoType({"S": "a"}), None, attrs)

    for asked, stored, kept in [
        ({"S": "x"}, {"S": "x"}, True),
        ({"S": "x"}, {"S": "y"}, False),
        ({"N": "1"}, {"N": "1.0"}, True),
        ({"N": "1"}, {"N": "2"}, False),
        ({"N": "1"}, {"S": "1"}, False),
        ({"B": "eA=="}, {"B": "eA=="}, True),
        ({"S": "x"}, None, False),
    ]:
        value = DynamoType(asked)
        found = item(stored)
        moto_keeps = bool(found.attrs.get("g")) and found.attrs["g"] == value
        assert queries._may_equal(found, "g", value) is kept
        assert not moto_keeps or kept  # never drops one moto keeps
