"""The local server's data file (``sandbox-ledger local --data``): what a save writes, a load
restores, whatever the tables hold (issue 41, items 3 and 4)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from resources.resource_fixtures import record
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.local.persist import load, snapshot
from sandbox_ledger.resources import SyncResourceRecordStore, Unreadable
from sandbox_ledger.resources import _items as ri

Stores = tuple[SyncDynamoDBAdapter, SyncResourceRecordStore]


@pytest.fixture
def tables(moto_endpoint: str, fixture_clients: Any) -> Iterator[Callable[[], Stores]]:
    """Fresh tables (a ledger adapter and a resource store on each), dropped afterwards."""
    from sandbox_ledger.dynamodb import _ops
    from sandbox_ledger.sdk.steps import run_sync

    client = fixture_clients(moto_endpoint)
    made: list[tuple[str, Stores]] = []

    def new() -> Stores:
        name = f"data-{uuid.uuid4().hex[:12]}"
        run_sync(client, _ops.create_table(name, k.DEFAULT_SHARD_COUNT))
        pair = (
            SyncDynamoDBAdapter(name, endpoint_url=moto_endpoint, region_name="us-east-1"),
            SyncResourceRecordStore(name, endpoint_url=moto_endpoint, region_name="us-east-1"),
        )
        made.append((name, pair))
        return pair

    yield new
    for name, (ledger, store) in made:
        ledger.close()
        store.close()
        client.delete_table(TableName=name)


def _round_trip(source: Stores, target: Stores, path: Path) -> None:
    path.write_text("".join(snapshot(*source).lines), encoding="utf-8")
    load(path, *target)


def _newer_writers_item(extra: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A resource record item as a newer writer stores it: a field this version does not
    know in its body, and an attribute of its own."""
    newer = record(age=timedelta(minutes=3))
    item = {**ri.record_key(newer.id), k.REVISION: {"N": "7"}}
    item.update(ri.write_values(newer, expires_at=2**31, shard_count=k.DEFAULT_SHARD_COUNT))
    body = json.loads(item[k.RECORD_BODY]["S"])
    item[k.RECORD_BODY] = {"S": json.dumps({**body, **extra}, ensure_ascii=False)}
    item["newerAttribute"] = {"B": b"\x00\xffbinary"}
    return newer.id, item


def test_a_record_this_version_cannot_read_is_saved_and_loaded_as_stored(
    moto_endpoint: str, fixture_clients: Any, tables: Callable[[], Stores], tmp_path: Path
) -> None:
    """A newer writer's record was left out of the save (the file then lost it for good);
    the save now keeps it as stored, and the load puts it back as it was."""
    source, target = tables(), tables()
    readable = record()
    source[1].put(readable)
    record_id, item = _newer_writers_item({"gpu": "a100", "note": "ünïcode"})
    client = fixture_clients(moto_endpoint)
    client.put_item(TableName=source[0].table_name, Item=item)
    path = tmp_path / "dev.jsonl"

    _round_trip(source, target, path)

    assert target[1].get(readable.id) == readable
    stored = target[1].inspect(record_id)
    assert isinstance(stored, Unreadable) and "gpu" in stored.reason
    assert json.loads(stored.body or "") == json.loads(item[k.RECORD_BODY]["S"])
    again = client.get_item(TableName=target[0].table_name, Key=ri.record_key(record_id))["Item"]
    assert again == item
    # Saved again from the loaded table: the same file.
    second = tmp_path / "again.jsonl"
    _round_trip(target, tables(), second)
    assert second.read_text(encoding="utf-8") == path.read_text(encoding="utf-8")
