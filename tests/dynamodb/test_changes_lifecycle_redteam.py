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


def test_a_sessions_changes_across_expiry_come_in_order_on_split_shards() -> None:
    """Created, closed, expired (TTL removed the summary: its TTL moved to the past here, a
    retention's end come early), created again: in that order for each session, on a strict
    server whose shards close every 3 records and split and whose TTL deletes at once."""
    import uuid
    from datetime import timedelta

    from tests.local.test_strict_streams import Clock, strict_server, take

    server = strict_server(Clock(), shard_records=3, shard_split=2, ttl_delay=0, ttl_every=0.001)
    sessions = [f"s{i}" for i in range(6)]
    try:
        with SyncDynamoDBAdapter(
            f"expiry-{uuid.uuid4().hex[:8]}",
            endpoint_url=server.endpoint_url,
            retention=timedelta(days=1),
        ) as ledger:
            ledger.create_table()
            now = int(time.time() * 1000)
            client = ledger.client()
            for sid in sessions:
                ledger.append(e(sid, LedgerEvent.SandboxCreated, now))
                ledger.append(e(sid, LedgerEvent.SandboxClosed, now + 1))
                key = {"PK": {"S": k.session_pk("red", sid)}, "SK": {"S": k.SUMMARY_SK}}
                client.update_item(
                    TableName=ledger.table_name,
                    Key=key,
                    UpdateExpression="SET #ttl = :past",
                    ExpressionAttributeNames={"#ttl": k.TTL_ATTRIBUTE},
                    ExpressionAttributeValues={":past": {"N": str(now // 1000 - 10)}},
                )
                deadline = time.monotonic() + 30
                while client.get_item(TableName=ledger.table_name, Key=key).get("Item"):
                    assert time.monotonic() < deadline, "TTL never removed the summary"
                    time.sleep(0.01)
                ledger.append(e(sid, LedgerEvent.SandboxCreated, now + 2))
            stream = ledger.changes()
            seen = take(stream, 4 * len(sessions))
            stream.close()
    finally:
        server.stop()
    assert len({c.id for c in seen}) == len(seen)
    for sid in sessions:
        assert [c.kind.value for c in seen if c.sandbox_id == sid] == [
            "session.created",
            "session.closed",
            "session.expired",
            "session.created",
        ], sid


def test_a_write_after_the_sessions_marks_expired_is_a_change_though_its_sq_is_the_same() -> None:
    """A session longer than the retention: its created's mark (0) expired and TTL removed
    it, its summary kept (a day past its last write). The closed after the quiet spell starts
    the marks again at 0, so the summary's ``sq`` is 0 again: the write still folded in a
    closed, and the feed says so (the reference: created, closed)."""
    import uuid
    from datetime import timedelta

    from tests.local.test_strict_streams import Clock, strict_server, take

    server = strict_server(Clock(), ttl_delay=0, ttl_every=0.001)
    try:
        with SyncDynamoDBAdapter(
            f"quiet-{uuid.uuid4().hex[:8]}",
            endpoint_url=server.endpoint_url,
            retention=timedelta(days=1),
        ) as ledger:
            ledger.create_table()
            now = int(time.time() * 1000)
            ledger.append(e("q", LedgerEvent.SandboxCreated, now - 2 * 86_400_000))
            client = ledger.client()
            mark = {"PK": {"S": k.session_pk("red", "q")}, "SK": {"S": k.sequence_sk(0)}}
            deadline = time.monotonic() + 30
            while client.get_item(TableName=ledger.table_name, Key=mark).get("Item"):
                assert time.monotonic() < deadline, "TTL never removed mark 0"
                time.sleep(0.01)
            ledger.append(e("q", LedgerEvent.SandboxClosed, now))
            stream = ledger.changes()
            seen = take(stream, 2, within=20)
            stream.close()
    finally:
        server.stop()
    assert [(c.kind.value, c.at) for c in seen] == [
        ("session.created", now - 2 * 86_400_000),
        ("session.closed", now),
    ]


def test_a_delete_of_a_session_whose_marks_ttl_removed_deletes_it_and_says_so() -> None:
    """A session past its retention: TTL removed every mark (each append, its mark expired
    on arrival, began the marks again at 0), its summary kept a day longer. delete_sandbox
    sealed at 0, read the summary's sq (0) as a next session's write after the seal, found
    no such entry and raised IndexError, leaving the session. It deletes it, and the feed
    says session.deleted."""
    import uuid
    from datetime import timedelta

    from tests.local.test_strict_streams import Clock, strict_server, take

    server = strict_server(Clock(), ttl_delay=0, ttl_every=0.001)
    try:
        with SyncDynamoDBAdapter(
            f"gone-{uuid.uuid4().hex[:8]}",
            endpoint_url=server.endpoint_url,
            retention=timedelta(days=1),
        ) as ledger:
            ledger.create_table()
            client, pk = ledger.client(), k.session_pk("red", "q")
            old = int(time.time() * 1000) - 3 * 86_400_000
            ledger.append(e("q", LedgerEvent.SandboxCreated, old))
            ledger.append(e("q", LedgerEvent.ExecComplete, old + 1, step=0))
            ledger.append(e("q", LedgerEvent.SandboxClosed, old + 2))

            def items() -> list[dict[str, Any]]:
                return list(
                    client.query(
                        TableName=ledger.table_name,
                        KeyConditionExpression="PK = :pk",
                        ExpressionAttributeValues={":pk": {"S": pk}},
                    )["Items"]
                )

            deadline = time.monotonic() + 30
            while [i["SK"]["S"] for i in items()] != [k.SUMMARY_SK]:
                assert time.monotonic() < deadline, "TTL never removed the entries"
                time.sleep(0.01)
            ledger.delete_sandbox("red", "q")
            assert k.SUMMARY_SK not in [i["SK"]["S"] for i in items()]
            stream = ledger.changes()
            seen = take(stream, 3, within=20)
            stream.close()
    finally:
        server.stop()
    assert [(c.kind.value, c.at) for c in seen][:2] == [
        ("session.created", old),
        ("session.closed", old + 2),
    ]
    assert seen[2].kind.value == "session.deleted"
