"""delete_sandbox under a concurrent writer, on the serialized local server (moto_endpoint).

The promise: after delete_sandbox returns, an append that raced it either landed before it
(and is deleted) or after it (and belongs to a new session whose summary counts exactly its
own entries). So whatever the interleaving, re-creating the session shows an execCount equal
to the number of exec.complete entries that exist.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

import pytest

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

from .faults import ResendAfterSuccess


def e(sid: str, event: str, ts: int, step: int = -1) -> LedgerEntry:
    return LedgerEntry(ts=ts, name="race", sandbox_id=sid, step_index=step, event=event)


def agrees(ledger: SyncDynamoDBAdapter, sid: str) -> tuple[int, int]:
    """Re-create the session, then (execCount, number of exec.complete entries)."""
    ledger.append(e(sid, LedgerEvent.SandboxCreated, 10**9))
    details = ledger.get_sandbox_details("race", sid)
    assert details is not None
    entries = ledger.read_all("race", sid)
    return details.exec_count, sum(x.event == LedgerEvent.ExecComplete for x in entries)


def test_an_append_between_the_delete_query_and_its_writes(
    moto_endpoint: str, sync_table: str
) -> None:
    """The interleaving that broke the summary: an exec.complete lands after the delete has
    read the partition and before it deletes the summary."""
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    deleter.append(e("s", LedgerEvent.SandboxCreated, 1))
    deleter.append(e("s", LedgerEvent.ExecComplete, 2, step=0))
    landed = threading.Event()
    threads: list[threading.Thread] = []
    failures: list[BaseException] = []

    def append_late() -> None:
        try:
            writer.append(e("s", LedgerEvent.ExecComplete, 3, step=1))
            landed.set()
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    def race(**_: Any) -> None:
        if threads:
            return
        thread = threading.Thread(target=append_late)
        threads.append(thread)
        thread.start()
        landed.wait(timeout=0.5)  # the old delete let it land here; the new one holds it off

    deleter.client().meta.events.register("after-call.dynamodb.Query", race)
    deleter.delete_sandbox("race", "s")
    threads[0].join()
    assert failures == [] and landed.is_set()
    count, entries = agrees(deleter, "s")
    assert count == entries == 1  # the raced append formed the new session alone


@pytest.mark.parametrize("trial", range(4))
def test_a_concurrent_writer_never_leaves_a_disagreeing_summary(
    moto_endpoint: str, sync_table: str, trial: int
) -> None:
    sid = f"w{trial}"
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    ledger.append(e(sid, LedgerEvent.SandboxCreated, 1))
    started = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for i in range(24):
                writer.append(e(sid, LedgerEvent.ExecStarted, 10 + i, step=i))
                writer.append(e(sid, LedgerEvent.ExecComplete, 10 + i, step=i))
                if i == 2 + trial:
                    started.set()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=write)
    thread.start()
    started.wait(timeout=30)
    ledger.delete_sandbox("race", sid)
    thread.join()
    assert errors == []
    count, entries = agrees(ledger, sid)
    assert count == entries


@pytest.mark.parametrize("event", [LedgerEvent.ExecComplete, LedgerEvent.ExecStarted])
def test_a_large_append_whose_parts_were_written_before_the_delete(
    moto_endpoint: str, sync_table: str, event: str
) -> None:
    """An entry split into parts is written parts first, head last. A delete_sandbox that
    runs between the two must not take the parts of the head that lands after it: the raced
    entry then belongs to the new session whole (read_all raised 'missing part' before)."""
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer.append(e("p", LedgerEvent.SandboxCreated, 1))
    payload = secrets.token_hex(400_000)  # 800 KB, incompressible: a head and two parts
    ran: list[bool] = []

    def delete_between_parts_and_head(**_: Any) -> None:
        if not ran:
            ran.append(True)
            deleter.delete_sandbox("race", "p")

    writer.client().meta.events.register(
        "after-call.dynamodb.BatchWriteItem", delete_between_parts_and_head
    )
    writer.append(
        LedgerEntry(ts=2, name="race", sandbox_id="p", step_index=0, event=event, payload=payload)
    )
    assert ran
    [landed] = deleter.read_all("race", "p")
    assert (landed.event, landed.payload) == (event, payload)
    count, entries = agrees(deleter, "p")
    assert count == entries == (1 if event == LedgerEvent.ExecComplete else 0)


def test_delete_removes_the_parts_a_dead_writer_left(moto_endpoint: str, sync_table: str) -> None:
    """Parts without a head older than the grace (a writer that died between them) still go
    with the session; a young one (an append in flight) stays for its head."""
    from sandbox_ledger import keys as k
    from sandbox_ledger.dynamodb._delete import ORPHAN_PART_GRACE_MS

    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    ledger.append(e("o", LedgerEvent.SandboxCreated, 1))
    pk = k.session_pk("race", "o")
    now = time.time_ns()
    old = k.part_sk(k.event_sk(5, f"{now - 2 * ORPHAN_PART_GRACE_MS * 10**6:020d}abcd0123"), 1)
    young = k.part_sk(k.event_sk(5, f"{now:020d}abcd0123"), 1)
    for sk in (old, young):
        ledger.client().put_item(
            TableName=sync_table, Item={"PK": {"S": pk}, "SK": {"S": sk}, "d": {"B": b"x"}}
        )
    ledger.delete_sandbox("race", "o")
    left = ledger.client().query(
        TableName=sync_table,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": pk}},
        ConsistentRead=True,
    )["Items"]
    # What stays besides the young part: mark 0, spent, and the seal, spent (a mark number
    # is never taken twice: _sequence).
    assert [item["SK"]["S"] for item in left] == [young, k.sequence_sk(0), k.sequence_sk(1)]
    assert all(item["spent"] == {"N": "1"} and "ref" not in item for item in left[1:])


def test_a_delete_longer_than_its_lease_still_holds_off_summary_appends(
    moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete of many entries can outlast its lease (60 s in production; 1 s here, with
    each BatchWriteItem slowed to 150 ms): it renews the lease as it goes, so an exec.complete
    appended meanwhile still waits for it. Without renewal the append landed once the lease
    ran out, outside the page already read, and survived the summary's deletion: the
    re-created session counted fewer exec.complete than it stored."""
    from sandbox_ledger.dynamodb import _ops

    # Renewed once half the lease has passed, before a batch: the lease holds as long as no
    # batch takes over half of it (0.15 s of 0.5 s here, a margin for a loaded machine; with
    # 400 ms, a batch 50 ms late let an append through).
    monkeypatch.setattr(_ops, "DELETE_LEASE_MS", 1000)
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    deleter.append(e("long", LedgerEvent.SandboxCreated, 1))
    for i in range(210):  # nine batches of deletes: over 1.35 s
        deleter.append(e("long", LedgerEvent.ExecStarted, 2 + i, step=i))
    deleting = threading.Event()
    done = threading.Event()
    errors: list[BaseException] = []

    def slow_batch(**_: Any) -> None:
        deleting.set()
        time.sleep(0.15)

    deleter.client().meta.events.register("before-send.dynamodb.BatchWriteItem", slow_batch)

    def write() -> None:
        deleting.wait(timeout=30)
        time.sleep(1.1)  # past the first lease: only a renewed one holds this append off
        step = 1000
        try:
            while not done.is_set():
                writer.append(e("long", LedgerEvent.ExecComplete, 5000 + step, step=step))
                step += 1
                time.sleep(0.02)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    started = time.monotonic()
    deleter.delete_sandbox("race", "long")
    took = time.monotonic() - started
    done.set()
    thread.join()
    assert errors == []
    assert took > 1.3  # the delete really outlasted its 1 s lease
    count, entries = agrees(deleter, "long")
    assert count == entries


def _large_session(ledger: SyncDynamoDBAdapter, sid: str) -> list[LedgerEntry]:
    """Two small entries, then one of 1.1 MB once compressed (a head and three parts), so a
    read needs two Query pages (1 MB each) and the first ends inside the large entry."""
    small = [e(sid, LedgerEvent.SandboxCreated, 1), e(sid, LedgerEvent.ExecStarted, 2, step=0)]
    for entry in small:
        ledger.append(entry)
    ledger.append(
        LedgerEntry(
            ts=3,
            name="race",
            sandbox_id=sid,
            step_index=0,
            event=LedgerEvent.ExecComplete,
            payload=secrets.token_urlsafe(1_100_000),
        )
    )
    return small


def _delete_after_first_page(deleter: SyncDynamoDBAdapter, sid: str) -> tuple[Any, list[bool]]:
    """An ``after-call`` hook that deletes the session once a Query page with more to come has
    been read: the delete lands between two pages of the read."""
    ran: list[bool] = []

    def hook(parsed: dict[str, Any], **_: Any) -> None:
        if not ran and parsed.get("LastEvaluatedKey"):
            ran.append(True)
            deleter.delete_sandbox("race", sid)

    return hook, ran


@pytest.mark.parametrize("read", ["read_all", "read_in_append_order"])
def test_a_read_racing_a_delete_returns_whole_entries_sync(
    moto_endpoint: str, sync_table: str, read: str
) -> None:
    """A read whose Query pages straddle a delete returns the entries it read whole and leaves
    out the one the delete cut (it raised 'entry ... is missing part 2 of 3' before). The
    export's read (``read_in_append_order``) returns the session whole or not at all
    (tests/dynamodb/test_export_whole.py): here, deleted, nothing."""
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    reader = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    small = _large_session(deleter, "big")
    hook, ran = _delete_after_first_page(deleter, "big")
    reader.client().meta.events.register("after-call.dynamodb.Query", hook)
    got = getattr(reader, read)("race", "big")
    assert ran  # the delete did land between two pages
    assert got == (small if read == "read_all" else [])
    assert reader.read_all("race", "big") == []


async def test_a_read_racing_a_delete_returns_whole_entries_async(
    moto_endpoint: str, sync_table: str
) -> None:
    from sandbox_ledger.dynamodb import DynamoDBAdapter

    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    reader = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    small = _large_session(deleter, "big")
    hook, ran = _delete_after_first_page(deleter, "big")
    (await reader.client()).meta.events.register("after-call.dynamodb.Query", hook)
    got = await reader.read_all("race", "big")
    assert ran
    assert got == small
    await reader.close()


def test_a_missing_part_outside_a_delete_is_still_an_error(
    moto_endpoint: str, sync_table: str
) -> None:
    """A part gone from a session nobody deletes (its head still stored) is corruption, not a
    race: the read says which entry, as before. Once a delete holds the session (its mark on
    the summary), the same half entry is left out."""
    from sandbox_ledger import keys as k

    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    _large_session(ledger, "bad")
    pk = k.session_pk("race", "bad")
    items = ledger.client().query(
        TableName=sync_table,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": pk}},
        ProjectionExpression="PK, SK",
        ConsistentRead=True,
    )["Items"]
    head = next(item["SK"]["S"] for item in items if item["SK"]["S"].startswith(k.event_sk(3, "")))
    part = {"PK": {"S": pk}, "SK": {"S": k.part_sk(head, 2)}}
    assert "Item" in ledger.client().get_item(TableName=sync_table, Key=part)
    ledger.client().delete_item(TableName=sync_table, Key=part)
    with pytest.raises(ValueError, match="missing part 2 of 3"):
        ledger.read_all("race", "bad")
    ledger.client().update_item(
        TableName=sync_table,
        Key={"PK": {"S": pk}, "SK": {"S": k.SUMMARY_SK}},
        UpdateExpression="SET deleting = :d",
        ExpressionAttributeValues={":d": {"N": "1"}},
    )
    assert [x.event for x in ledger.read_all("race", "bad")] == [
        LedgerEvent.SandboxCreated,
        LedgerEvent.ExecStarted,
    ]


def test_with_a_retention_a_summary_append_still_waits_for_a_delete(
    moto_endpoint: str, table_name: str
) -> None:
    """With a retention the summary update has two conditions (no delete holds it; its
    expiry moves forward only): a cancellation on the delete's lease is still told apart
    (from the stored summary) and waited out with backoff, then the append lands once."""
    from datetime import timedelta

    from sandbox_ledger import keys as k

    ledger = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=timedelta(1))
    ledger.create_table()
    now = time.time_ns() // 1_000_000
    ledger.append(e("held", LedgerEvent.SandboxCreated, now))
    ledger.client().update_item(
        TableName=table_name,
        Key={"PK": {"S": k.session_pk("race", "held")}, "SK": {"S": k.SUMMARY_SK}},
        UpdateExpression="SET deleting = :d",
        ExpressionAttributeValues={":d": {"N": str(now + 300)}},  # a lease just running out
    )
    sent: list[str] = []
    ledger.client().meta.events.register(
        "before-call.dynamodb.TransactWriteItems", lambda **_: sent.append("t")
    )
    ledger.append(e("held", LedgerEvent.ExecComplete, now + 1, step=0))
    details = ledger.get_sandbox_details("race", "held")
    assert details is not None and details.exec_count == 1
    assert len(sent) > 1  # refused while the lease ran, then landed


async def test_a_session_left_with_only_a_dead_writers_parts_is_not_scanned(
    moto_endpoint: str, sync_table: str
) -> None:
    """A delete leaves young headless parts (they may be an append in flight). A writer that
    died between its parts and its head left the session with nothing but those: the
    export's scan_sessions listed it (sync and async), and an export counted a session with
    0 entries. Only heads count now."""
    from sandbox_ledger import keys as k
    from sandbox_ledger.dynamodb import DynamoDBAdapter

    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    ledger.append(e("dead", LedgerEvent.SandboxCreated, 1))
    ledger.append(e("kept", LedgerEvent.ExecStarted, 1, step=0))
    pk = k.session_pk("race", "dead")
    young = k.part_sk(k.event_sk(5, f"{time.time_ns():020d}abcd0123"), 1)
    ledger.client().put_item(
        TableName=sync_table, Item={"PK": {"S": pk}, "SK": {"S": young}, "d": {"B": b"x"}}
    )
    ledger.delete_sandbox("race", "dead")
    assert ledger.read_all("race", "dead") == []
    assert ledger.scan_sessions() == [("race", "kept")]
    assert ledger.scan_sessions("race") == [("race", "kept")]
    async with DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as reader:
        assert await reader.scan_sessions() == [("race", "kept")]


def test_an_import_batch_whose_parts_were_written_before_a_delete_lands_whole(
    moto_endpoint: str, sync_table: str
) -> None:
    """An import batch writes every part first (BatchWriteItem), then its transactions: a
    delete_sandbox between the two leaves the young parts for the heads that land after it,
    so the batch's entries are whole in the session that begins again, and its summary
    counts them (issue 41, item 9)."""
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    deleter.append(e("imp", LedgerEvent.SandboxCreated, 1))
    deleter.append(e("imp", LedgerEvent.ExecComplete, 2, step=0))
    large = LedgerEntry(
        ts=3,
        name="race",
        sandbox_id="imp",
        step_index=1,
        event=LedgerEvent.ExecComplete,
        payload=secrets.token_hex(400_000),  # 800 KB, incompressible: a head and two parts
    )
    small = e("imp", LedgerEvent.ExecStarted, 4, step=2)
    ran: list[bool] = []

    def delete_between_parts_and_heads(**_: Any) -> None:
        if not ran:
            ran.append(True)
            deleter.delete_sandbox("race", "imp")

    writer.client().meta.events.register(
        "after-call.dynamodb.BatchWriteItem", delete_between_parts_and_heads
    )
    assert writer.append_once_many([(large, 1), (small, 1)]) == [True, True]
    assert ran
    assert deleter.read_all("race", "imp") == [large, small]
    assert deleter.read_in_append_order("race", "imp") == [large, small]
    count, entries = agrees(deleter, "imp")
    assert count == entries == 1


def test_an_append_between_the_pages_of_a_delete_is_followed_and_exported(
    moto_endpoint: str, sync_table: str
) -> None:
    """A session over one Query page (1 MB) is deleted page by page. An exec.started (no
    summary change: not held off) that lands between two pages belongs to the new session:
    its head sorts behind the first page and its sequence mark ahead of it. The delete must
    not take one and leave the other: a head without its mark is an entry a follower never
    hands out, a mark without its head ends every follower of the new session."""
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer.append(e("m", LedgerEvent.SandboxCreated, 1))
    for ts in range(2, 10):  # eight entries of 200 KB compressed: the partition is 1.6 MB
        writer.append(
            LedgerEntry(
                ts=ts,
                name="race",
                sandbox_id="m",
                step_index=ts,
                event=LedgerEvent.ExecStarted,
                payload=secrets.token_hex(200_000),
            )
        )
    raced = e("m", LedgerEvent.ExecStarted, 3, step=99)
    pages: list[bool] = []

    def append_between_pages(parsed: dict[str, Any], **_: Any) -> None:
        # The delete's read of the partition (not the one-item read of the last mark).
        if "LastEvaluatedKey" in parsed and len(parsed["Items"]) > 1 and not pages:
            pages.append(True)
            writer.append(raced)

    deleter.client().meta.events.register("after-call.dynamodb.Query", append_between_pages)
    deleter.delete_sandbox("race", "m")
    deleter.client().meta.events.unregister("after-call.dynamodb.Query", append_between_pages)
    assert pages, "the delete read the session in one page: make the session larger"
    assert deleter.read_all("race", "m") == [raced]
    assert deleter.read_in_append_order("race", "m") == [raced]
    later = e("m", LedgerEvent.ExecStarted, 2, step=100)
    closed = e("m", LedgerEvent.SandboxClosed, 4)
    writer.append(later)
    writer.append(closed)
    followed = [f.entry for f in deleter.follow("race", "m")]  # ends at sandbox.closed
    assert followed == [raced, later, closed]
    assert deleter.read_in_append_order("race", "m") == [raced, later, closed]


def test_appends_that_land_while_a_delete_runs_are_a_new_session_followed_whole(
    moto_endpoint: str, sync_table: str
) -> None:
    """A writer that knows the session (its next-mark guess is the old incarnation's) appends
    while the delete runs: its entries go on after the delete's seal, in the seal's
    incarnation; a follower of the old session ends, one from the start of the new session
    hands out exactly them."""
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer.append(e("n", LedgerEvent.SandboxCreated, 1))
    writer.append(e("n", LedgerEvent.ExecStarted, 2, step=0))
    old = deleter.follow("race", "n", until_closed=False)
    position = [next(old), next(old)][-1].position
    old.close()
    raced = [e("n", LedgerEvent.ExecStarted, 3, step=s) for s in (1, 2)]
    ran: list[bool] = []

    def append_after_the_seal(**_: Any) -> None:
        if not ran:
            ran.append(True)
            for entry in raced:
                writer.append(entry)

    deleter.client().meta.events.register(
        "after-call.dynamodb.TransactWriteItems", append_after_the_seal
    )
    deleter.delete_sandbox("race", "n")
    assert ran
    assert deleter.read_in_append_order("race", "n") == raced
    assert list(deleter.follow("race", "n", after=position, until_closed=False)) == []
    writer.append(e("n", LedgerEvent.SandboxClosed, 4))
    followed = [f.entry for f in deleter.follow("race", "n")]
    assert followed == [*raced, e("n", LedgerEvent.SandboxClosed, 4)]


def test_a_seal_whose_answer_was_lost_is_recognised_and_deleted(
    moto_endpoint: str, sync_table: str
) -> None:
    """The SDK resends the seal's TransactWriteItems after its first answer was lost: the
    resend fails the seal's condition, the delete reads the mark back, knows its own seal and
    goes on; nothing of
    the session is left but mark 0 and the seal, both spent."""
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    ledger.append(e("r", LedgerEvent.SandboxCreated, 1))
    resent = ResendAfterSuccess(1.0, {"TransactWriteItems"}).attach(ledger.client())
    ledger.delete_sandbox("race", "r")
    assert resent.resent == 1
    raw = ledger.client()
    left = raw.query(
        TableName=sync_table,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": k.session_pk("race", "r")}},
        ConsistentRead=True,
    )["Items"]
    assert [item["SK"]["S"] for item in left] == [k.sequence_sk(0), k.sequence_sk(1)]
    assert all(item["spent"] == {"N": "1"} and "ref" not in item for item in left)
    again = [e("r", LedgerEvent.SandboxCreated, 2), e("r", LedgerEvent.SandboxClosed, 3)]
    for entry in again:
        ledger.append(entry)
    assert [f.entry for f in ledger.follow("race", "r")] == again


def test_a_follower_meeting_the_seal_of_a_running_delete_ends(
    moto_endpoint: str, sync_table: str
) -> None:
    """A follower that polls while a delete runs meets its seal, finds the summary held by
    the delete's lease, and ends (it would pass a seal of a delete that died)."""
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    reader = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    deleter.append(e("f", LedgerEvent.SandboxCreated, 1))
    deleter.append(e("f", LedgerEvent.ExecStarted, 2, step=0))
    follower = reader.follow("race", "f", until_closed=False)
    assert [next(follower).entry.ts, next(follower).entry.ts] == [1, 2]
    rest: list[Any] = []
    ran: list[bool] = []

    def follow_after_the_seal(**_: Any) -> None:
        if ran:
            return
        ran.append(True)
        thread = threading.Thread(target=lambda: rest.extend(follower), daemon=True)
        thread.start()
        thread.join(timeout=20)
        assert not thread.is_alive(), "the follower did not end at the running delete's seal"

    deleter.client().meta.events.register(
        "after-call.dynamodb.TransactWriteItems", follow_after_the_seal
    )
    deleter.delete_sandbox("race", "f")
    assert ran and rest == []
