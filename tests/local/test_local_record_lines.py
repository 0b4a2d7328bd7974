"""A resource record's line in ``local --data``'s FILE (its file shape and its whole stored
item), read back as a hostile hand or an older writer may have left it: a line whose two
halves disagree, an item the table refuses, are refused naming the line, never loaded in
part or in silence."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from resources.resource_fixtures import record
from sandbox_ledger.deployment import SweepSettings
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.local import LocalDynamoDB, inprocess
from sandbox_ledger.local.persist import load_state, read_lines, record_line, snapshot
from sandbox_ledger.resources import SyncResourceRecordStore, Unreadable

REGION = "us-east-1"


@pytest.fixture(scope="module")
def server() -> Iterator[LocalDynamoDB]:
    server = LocalDynamoDB()
    server.start()
    yield server
    server.stop()


def _table(server: LocalDynamoDB) -> tuple[SyncDynamoDBAdapter, SyncResourceRecordStore]:
    name = f"r-{uuid.uuid4().hex[:12]}"
    ledger = inprocess.ledger(server, name, REGION)
    ledger.create_table(sweep=SweepSettings())
    return ledger, inprocess.resource_store(server, name, REGION)


def _saved_line(server: LocalDynamoDB) -> dict[str, object]:
    """A record's line as a save writes it (a record touched once: revision 2)."""
    _, store = _table(server)
    kept = record()
    store.put(kept)
    store.touch(kept.id)
    [found] = [found for page in store.scan() for found in page]
    value: dict[str, object] = json.loads(record_line(found))
    return value


def test_a_saved_record_line_loads_as_it_was_with_attributes_of_every_type(
    server: LocalDynamoDB,
) -> None:
    """Attributes a later writer may add, of any DynamoDB type, load and save back as they
    were (held: the loader reads every type)."""
    line = _saved_line(server)
    item = line["item"]
    assert isinstance(item, dict)
    item.update(
        zl={"L": [{"S": "x"}]},
        zm={"M": {"a": {"N": "1"}}},
        zn={"NULL": True},
        zs={"SS": ["a"]},
        zb={"B": "AAE="},
    )
    ledger, store = _table(server)
    load_state(read_lines([json.dumps(line) + "\n"], "FILE"), ledger, store)
    [saved] = [json.loads(text) for text in snapshot(ledger, store).lines]
    assert saved["item"] == item and saved["record"] == line["record"]


def test_a_line_whose_record_and_item_disagree_is_refused_naming_it(
    server: LocalDynamoDB,
) -> None:
    """A hand edit of a line's record (its readable half) that its item does not carry was
    loaded from the item alone: the edit silently dropped. It is refused, naming the line."""
    line = _saved_line(server)
    assert isinstance(line["record"], dict)
    line["record"] = {**line["record"], "phase": "failed"}
    ledger, store = _table(server)
    with pytest.raises(InvalidInputError, match=r"FILE:1.*disagree"):
        load_state(read_lines([json.dumps(line) + "\n"], "FILE"), ledger, store)
    assert [found for page in store.scan() for found in page] == []


@pytest.mark.parametrize(
    "attribute",
    [{"N": "abc"}, {"SS": []}, {"S": "x", "N": "1"}],
    ids=["number-not-a-number", "empty-set", "two-types"],
)
def test_an_item_the_table_refuses_is_refused_naming_its_line(
    server: LocalDynamoDB, attribute: dict[str, object]
) -> None:
    """A stored item the table will not take (a number that is not one, an empty set) was
    put as it was, and the table's refusal came up as a StorageError naming no line: the
    server did not start and did not say where FILE was wrong."""
    line = _saved_line(server)
    assert isinstance(line["item"], dict)
    line["item"]["zz"] = attribute
    ledger, store = _table(server)
    with pytest.raises(InvalidInputError, match=r"^FILE:1: "):
        load_state(read_lines([json.dumps(line) + "\n"], "FILE"), ledger, store)


def test_an_older_files_line_without_its_item_is_stored_anew(server: LocalDynamoDB) -> None:
    """Held: a line an older version wrote (its record only) loads as ``resources import``
    stores a record: revision 1, a new incarnation."""
    line = _saved_line(server)
    del line["item"]
    ledger, store = _table(server)
    load_state(read_lines([json.dumps(line) + "\n"], "FILE"), ledger, store)
    [found] = [found for page in store.scan() for found in page]
    assert not isinstance(found, Unreadable)
    assert found.record.wire() == line["record"] and found.revision == 1
