"""Red team of the changes feed's session changes read off the summary (``lc``,
dynamodb/_changes.py): every writer of the summary makes exactly the changes the reference
makes for the same operations, none more."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.dynamodb._changes import changes_of
from sandbox_ledger.keys import LedgerAttr as A


def e(sid: str, event: str, ts: int, step: int = -1) -> LedgerEntry:
    return LedgerEntry(ts=ts, name="red", sandbox_id=sid, step_index=step, event=event)


def feed(endpoint: str, table: str) -> list[tuple[str, str, int | None]]:
    """Every change the table's stream holds so far, read record by record: (kind,
    sandbox id, its time for created and closed)."""
    ddb = boto3.client("dynamodb", endpoint_url=endpoint)
    streams = boto3.client("dynamodbstreams", endpoint_url=endpoint)
    arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    out: list[tuple[str, str, int | None]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = streams.get_records(ShardIterator=iterator)
            for record in page["Records"]:
                for change in changes_of(record):
                    at = (
                        change.at
                        if change.kind.value in ("session.created", "session.closed")
                        else None
                    )
                    out.append((change.kind.value, str(change.sandbox_id), at))
            if not page["Records"]:
                break
            iterator = page.get("NextShardIterator")
    return out


def _earlier_version_write(ledger: SyncDynamoDBAdapter, sid: str, event: str, ts: int) -> None:
    """What a writer of the version before ``lc`` stores for ``event`` (an exec.complete, or a
    created or closed whose head carries no ``cs``): its head, and the summary updated with
    its ``sq`` moved and ``lc`` left as it was (that version never wrote it)."""
    client = ledger.client()
    pk = k.session_pk("red", sid)
    summary = client.get_item(
        TableName=ledger.table_name, Key={"PK": {"S": pk}, "SK": {"S": k.SUMMARY_SK}}
    )["Item"]
    number = int(summary[A.SUMMARY_SEQUENCE]["N"]) + 1
    head = {
        "PK": {"S": pk},
        "SK": {"S": k.event_sk(ts, f"old{number:04d}")},
        A.TS: {"N": str(ts)},
        A.EVENT: {"S": event},
        A.SEQUENCE: {"N": str(number)},
    }
    client.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": ledger.table_name, "Item": head}},
            {
                "Update": {
                    "TableName": ledger.table_name,
                    "Key": {"PK": {"S": pk}, "SK": {"S": k.SUMMARY_SK}},
                    "UpdateExpression": "SET #sq = :sq ADD #ex :one",
                    "ExpressionAttributeNames": {"#sq": A.SUMMARY_SEQUENCE, "#ex": A.EXEC_COUNT},
                    "ExpressionAttributeValues": {":sq": {"N": str(number)}, ":one": {"N": "1"}},
                }
            },
        ]
    )


def test_a_summary_write_of_an_earlier_version_repeats_no_change_a_later_one_listed(
    moto_endpoint: str, sync_table: str
) -> None:
    """A fleet upgraded writer by writer: after a writer of this version stored a created
    (``lc`` lists it), a writer of the earlier version updates the summary (an exec.complete,
    a closed), moving its ``sq`` and leaving that ``lc`` in place. Its record is no created
    again: the feed holds the created once and the earlier writer's closed once (its head's
    change), as the reference."""
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    ledger.append(e("m", LedgerEvent.SandboxCreated, 1))
    _earlier_version_write(ledger, "m", LedgerEvent.ExecComplete, 2)
    _earlier_version_write(ledger, "m", LedgerEvent.SandboxClosed, 3)
    assert feed(moto_endpoint, sync_table) == [
        ("session.created", "m", 1),
        ("session.closed", "m", 3),
    ]


def test_a_delete_that_stalled_past_its_lease_still_says_the_session_was_deleted(
    moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete stalls past its lease; the next session's sandbox.created lands on the
    deleted session's summary, which the delete then builds again from it (_delete.
    _drop_summary) instead of removing it. The reference's feed: created, closed, deleted,
    created again. The next session's created came before the delete finished (the delete
    could have died instead, the session then never deleted): the deletion comes when the
    summary is built again, followed by that created again, so the feed's last word is what
    is stored (was: no session.deleted at all, a reader left with the deleted session)."""
    from sandbox_ledger.dynamodb import _ops

    monkeypatch.setattr(_ops, "DELETE_LEASE_MS", 1_000)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer.append(e("v", LedgerEvent.SandboxCreated, 100))
    writer.append(e("v", LedgerEvent.SandboxClosed, 101))
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    ran: list[bool] = []

    def stall_then_append(**_: Any) -> None:
        if not ran:
            ran.append(True)
            time.sleep(1.2)  # the lease (1 s) is over
            writer.append(e("v", LedgerEvent.SandboxCreated, 500))

    deleter.client().meta.events.register("before-call.dynamodb.BatchWriteItem", stall_then_append)
    deleter.delete_sandbox("red", "v")
    assert ran
    assert feed(moto_endpoint, sync_table) == [
        ("session.created", "v", 100),
        ("session.closed", "v", 101),
        ("session.created", "v", 500),
        ("session.deleted", "v", None),
        ("session.created", "v", 500),
    ]


@pytest.mark.parametrize("began", [False, True], ids=["never-begun", "begun"])
def test_a_stalled_delete_whose_next_session_was_imported_says_what_the_reference_does(
    moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch, began: bool
) -> None:
    """As above, the next session's whole life imported during the stall (one transaction:
    created, exec.complete, closed). A delete of a session that had not begun (no summary:
    its lease made one) deletes no session: no session.deleted, however the stall ends."""
    from sandbox_ledger.dynamodb import _ops
    from sandbox_ledger.transfer import entry_line, import_entries, parse_lines

    monkeypatch.setattr(_ops, "DELETE_LEASE_MS", 1_000)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer.append(e("v", LedgerEvent.ExecStarted, 99, step=0))  # no summary
    if began:
        writer.append(e("v", LedgerEvent.SandboxCreated, 100))
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    again = [
        e("v", LedgerEvent.SandboxCreated, 500),
        e("v", LedgerEvent.ExecComplete, 501, step=0),
        e("v", LedgerEvent.SandboxClosed, 502),
    ]
    ran: list[bool] = []

    def stall_then_import(**_: Any) -> None:
        if not ran:
            ran.append(True)
            time.sleep(1.2)  # the lease (1 s) is over
            lines = [entry_line(one).encode() for one in again]
            assert import_entries(writer, parse_lines(lines)).new == 3

    deleter.client().meta.events.register("before-call.dynamodb.BatchWriteItem", stall_then_import)
    deleter.delete_sandbox("red", "v")
    assert ran and writer.read_all("red", "v") == again
    next_session = [("session.created", "v", 500), ("session.closed", "v", 502)]
    before = [("session.created", "v", 100)] if began else []
    deleted = [("session.deleted", "v", None), *next_session] if began else []
    assert feed(moto_endpoint, sync_table) == before + next_session + deleted
