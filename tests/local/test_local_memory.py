"""The embedded DynamoDB's memory follows what its tables hold, not all that was ever
written: moto's list of every model object it made is not kept for a server's requests."""

from __future__ import annotations

import gc
import uuid
from typing import Any

import boto3

from local.test_local import key, needs, stock_server
from sandbox_ledger import LedgerEntry
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

WRITES = 100


def live_items() -> int:
    """moto's item objects alive in this process (the servers run in it)."""
    from moto.dynamodb.models.dynamo_type import Item

    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, Item))


def overwrite_one_item(endpoint: str) -> tuple[int, str, Any]:
    """Write one item WRITES times, update it, and delete a table: how many more item
    objects are alive afterwards, and what the client reads back."""
    client = boto3.client("dynamodb", endpoint_url=endpoint)
    table, gone = f"mem-{uuid.uuid4().hex[:10]}", f"gone-{uuid.uuid4().hex[:10]}"
    client.create_table(**k.table_definition(table))
    client.create_table(**k.table_definition(gone))
    before = live_items()
    for i in range(WRITES):
        client.put_item(TableName=table, Item={**key("p", "s"), "n": {"N": str(i)}})
        client.put_item(TableName=gone, Item={**key("p", str(i))})
    client.update_item(
        TableName=table,
        Key=key("p", "s"),
        UpdateExpression="ADD n :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    client.delete_table(TableName=gone)
    grown = live_items() - before
    read = client.get_item(TableName=table, Key=key("p", "s"), ConsistentRead=True)["Item"]
    client.delete_table(TableName=table)
    return grown, table, read


def test_overwritten_items_and_deleted_tables_are_freed(moto_endpoint: str) -> None:
    needs("instances")
    grown, _, read = overwrite_one_item(moto_endpoint)
    assert read["n"] == {"N": str(WRITES)}
    assert grown < 10  # the one item the table holds (and the stream's images, bounded)


def test_stock_moto_keeps_every_item_it_ever_made() -> None:
    """The same writes on a server with the adjustment off: every overwritten item and every
    item of the deleted table stays alive (what the adjustment removes)."""
    needs("instances")
    with stock_server("instances") as endpoint:
        grown, _, read = overwrite_one_item(endpoint)
    assert read["n"] == {"N": str(WRITES)}
    assert grown >= 2 * WRITES


def test_moto_outside_a_server_still_lists_its_objects(moto_endpoint: str, sync_table: str) -> None:
    """Objects made outside an embedded server's request (``mock_aws``, a test calling a
    backend) are still listed for moto's dashboard."""
    needs("instances")
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    listed = len(Item.instances_tracked)
    Item(DynamoType({"S": "p"}), DynamoType({"S": "s"}), {"PK": {"S": "p"}, "SK": {"S": "s"}})
    assert len(Item.instances_tracked) == listed + 1
    with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as adapter:
        adapter.append(
            LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=-1, event="sandbox.created")
        )
        assert adapter.read_all("n", "s")
    assert len(Item.instances_tracked) == listed + 1  # none for the server's requests
