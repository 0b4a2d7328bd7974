"""A checkpoint whose ``snapshotId`` and ``name`` are long (compressible, so its entry's
head is small) would make a marker item past DynamoDB's 400 KB item limit: it is refused as
bad input before anything is written, alone (found by the red team, rt12)."""

from __future__ import annotations

import pytest

from sandbox_ledger import InvalidInputError, LedgerEntry, LedgerEvent
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import _items
from sandbox_ledger.dynamodb import _packing as p
from sandbox_ledger.sdk.attributes import MAX_ITEM_BYTES


def _checkpoint(snapshot: int, name: int, sandbox_id: str = "s") -> LedgerEntry:
    return LedgerEntry(
        ts=1,
        name="n",
        sandbox_id=sandbox_id,
        step_index=0,
        event=LedgerEvent.CheckpointCreated,
        payload={"snapshotId": "a" * snapshot, "name": "é" * name},  # é: 2 bytes in UTF-8
    )


def test_a_checkpoint_at_the_limit_fits_and_one_byte_more_is_refused_by_name() -> None:
    half = _items.MARKER_TEXT_BYTES // 2
    longest = "n" * 255
    at_limit = _checkpoint(half, half // 2).model_copy(update={"name": longest})
    unit = p.new_unit(0, at_limit, k.claim_sk("0" * 32, 1), 1_900_000_000)
    items = [unit.head, unit.claim, *unit.parts] + ([unit.marker] if unit.marker else [])
    assert unit.marker is not None
    assert all(p.item_bytes(item) <= MAX_ITEM_BYTES for item in items)
    with pytest.raises(InvalidInputError, match=r"payload: .* 400,001 bytes"):
        p.new_unit(0, _checkpoint(half + 1, half // 2), k.claim_sk("0" * 32, 1), None)


def test_appending_a_checkpoint_with_long_ids_is_refused_and_writes_nothing(
    moto_endpoint: str, sync_table: str
) -> None:
    from dynamodb.test_import_batches import sync_adapter

    adapter = sync_adapter(moto_endpoint, sync_table)
    with pytest.raises(InvalidInputError, match="payload"):
        adapter.append(_checkpoint(300_000, 100_000))
    key = {":pk": {"S": k.session_pk("n", "s")}}
    found = adapter.client().query(
        TableName=sync_table, KeyConditionExpression="PK = :pk", ExpressionAttributeValues=key
    )
    assert found["Items"] == []  # no part, head, summary or marker


def test_an_import_with_one_long_checkpoint_stores_the_other_sessions(
    moto_endpoint: str, sync_table: str
) -> None:
    """One entry DynamoDB cannot hold does not take the other sessions of its transaction
    down with it: they are stored, it alone is reported failed, with its line."""
    from dynamodb.test_import_batches import lines, session, sync_adapter
    from sandbox_ledger.transfer import import_lines

    others = [e for i in range(4) for e in session("job", f"s{i:02d}", 2)]
    big = _checkpoint(300_000, 100_000).model_copy(update={"name": "job", "sandbox_id": "s00"})
    entries = [*others[:3], big, *others[3:]]
    adapter = sync_adapter(moto_endpoint, sync_table)
    report = import_lines(adapter, lines(entries))
    assert (report.new, report.present) == (len(others), 0)
    assert [(f.number, "payload" in f.reason) for f in report.failed] == [(4, True)]
    assert len(adapter.read_all("job", "s00")) == len(session("job", "s00", 2))
