"""A session's summary outlives DynamoDB's TTL while its session has a live entry.

The summary shows while the latest entry that changed it lives (its expiry, ``eex``), and the
reference keeps it after that: an ``exec.complete`` or ``sandbox.closed`` after a quiet spell
brings back its ``startedAt`` and ``execCount``. TTL may delete an expired item at any time
after its expiry, so the summary's TTL (``expiresAt``) is kept apart, past every entry of its
session and a day past its last write (``_items.SUMMARY_SLACK_S``). Found by the strict
profile with TTL deleting an hour after expiry: the summary went between two appends and the
session vanished from get_sandbox_details and the listings.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.dynamodb._items import SUMMARY_SLACK_S
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.local import LocalDynamoDB, StrictProfile
from sandbox_ledger.transfer import entry_line, import_entries, parse_lines

DAY = 86_400
CREDENTIALS = {
    "region_name": "us-east-1",
    "aws_access_key_id": "test",
    "aws_secret_access_key": "test",
}


@pytest.fixture(scope="module")
def deleting_at_once() -> Iterator[LocalDynamoDB]:
    """A strict server whose TTL deletes an item as soon as it has expired (DynamoDB may)."""
    server = LocalDynamoDB(strict=StrictProfile(conflict_hold=0, ttl_delay=0, ttl_every=0.001))
    server.start()
    yield server
    server.stop()


def _e(sid: str, event: LedgerEvent, ts: int, data: dict[str, Any] | None = None) -> LedgerEntry:
    return LedgerEntry(ts=ts, name="job", sandbox_id=sid, step_index=-1, event=event, payload=data)


def _raw(endpoint: str, table: str, sid: str) -> list[dict[str, Any]]:
    client = boto3.client("dynamodb", endpoint_url=endpoint, **CREDENTIALS)
    return client.query(
        TableName=table,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": k.session_pk("job", sid)}},
        ConsistentRead=True,
    )["Items"]


@pytest.mark.parametrize("writes", ["appends", "imports"])  # of the late entries
def test_a_session_past_its_retention_keeps_its_summary_through_ttl(
    deleting_at_once: LocalDynamoDB, writes: str
) -> None:
    """The ledger contract's own case (a session that ran longer than the retention, its
    early entries expired, here on arrival), with TTL deleting every expired item at once:
    its summary stays, and the later entries bring back what it counted."""
    table = f"ledger-{uuid.uuid4().hex[:12]}"
    endpoint = deleting_at_once.endpoint_url
    with SyncDynamoDBAdapter(
        table, endpoint_url=endpoint, retention=timedelta(seconds=DAY)
    ) as ledger:
        ledger.create_table()
        now = int(time.time() * 1000)
        old = now - 3 * DAY * 1000
        early = [
            _e("s", LedgerEvent.SandboxCreated, old),
            _e("s", LedgerEvent.ExecComplete, old + 1, {"step": 0}),
        ]
        late = [
            _e("s", LedgerEvent.ExecStarted, now - 2, {"step": 1}),
            _e("s", LedgerEvent.ExecComplete, now - 1, {"step": 1}),
        ]
        for batch in (early, late):
            # An import leaves out what has expired already: the early entries are appended.
            if writes == "appends" or batch is early:
                for entry in batch:
                    ledger.append(entry)
            else:
                lines = [entry_line(entry).encode() for entry in batch]
                assert import_entries(ledger, parse_lines(lines)).new == len(batch)
            # TTL has had its pass: a request after the expiry takes the deleted items away.
            deadline = time.monotonic() + 5
            while any(int(i["ts"]["N"]) == old for i in _raw(endpoint, table, "s") if "ts" in i):
                assert time.monotonic() < deadline, "TTL never deleted the expired entries"
                time.sleep(0.01)
        assert [e.ts for e in ledger.read_all("job", "s")] == [now - 2, now - 1]
        details = ledger.get_sandbox_details("job", "s")
        assert details is not None
        assert (details.started_at, details.exec_count) == (old, 2)
        deleting_at_once.wait_for_indexes(table)  # the listing's index has the session
        [listed] = ledger.list_sandbox_details("job")
        assert listed == details


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_summary_ttl_stays_past_every_entry_of_its_session(
    moto_endpoint: str, table_name: str, seed: int
) -> None:
    """Whatever order and age the entries come in, by appends and imports of two writers
    (each knowing only what its own writes left), the summary's TTL is at least the TTL of
    every item of its session, and a day past the last write that changed it; its expiry is
    the latest TTL of the entries that changed it."""
    rng = random.Random(seed)
    retention = 2 * DAY  # past the slack: a live entry's TTL can pass the summary's
    one = SyncDynamoDBAdapter(
        table_name, endpoint_url=moto_endpoint, retention=timedelta(seconds=retention)
    )
    two = SyncDynamoDBAdapter(
        table_name, endpoint_url=moto_endpoint, retention=timedelta(seconds=retention)
    )
    one.create_table()
    now = int(time.time() * 1000)
    events = [
        LedgerEvent.ExecStarted,
        LedgerEvent.ExecComplete,
        LedgerEvent.CheckpointCreated,
        LedgerEvent.SandboxClosed,
    ]
    written: list[LedgerEntry] = []
    sessions = ["a", "b"]
    for sid in sessions:
        entry = _e(sid, LedgerEvent.SandboxCreated, now - rng.randrange(5 * DAY) * 1000)
        one.append(entry)
        written.append(entry)
    for step in range(40):
        sid = rng.choice(sessions)
        event = rng.choice(events)
        data = {"snapshotId": f"snap-{step}"} if event == LedgerEvent.CheckpointCreated else None
        ts = now + rng.randrange(-5 * DAY, 3 * DAY) * 1000 + step
        entry = _e(sid, event, ts, data)
        writer = rng.choice([one, two])
        before = int(time.time())
        expired = ts // 1000 + retention <= before
        if rng.random() < 0.3:
            lines = [entry_line(entry).encode()]
            report = import_entries(writer, parse_lines(lines))
            assert (report.new, report.expired) == ((0, 1) if expired else (1, 0))
            if expired:
                continue  # an import leaves out what has expired already
        else:
            writer.append(entry)
        written.append(entry)
        items = _raw(moto_endpoint, table_name, sid)
        [summary] = [i for i in items if i["SK"]["S"] == k.SUMMARY_SK]
        kept = int(summary[k.TTL_ATTRIBUTE]["N"])
        others = [int(i[k.TTL_ATTRIBUTE]["N"]) for i in items if i is not summary]
        assert kept >= max(others, default=0), (step, kept, others)
        if entry.event not in (LedgerEvent.ExecStarted, LedgerEvent.CheckpointCreated):
            assert kept >= before + SUMMARY_SLACK_S, step
        changed = [
            e.ts // 1000 + retention
            for e in written
            if e.sandbox_id == sid
            and e.event
            in (LedgerEvent.SandboxCreated, LedgerEvent.ExecComplete, LedgerEvent.SandboxClosed)
        ]
        assert summary[A.ENTRY_EXPIRES] == {"N": str(max(changed))}, step
    one.close()
    two.close()
