"""Red team of delete_sandbox's seal (dynamodb/_delete.py) and of ``q`` on heads: the
interleavings of deletes, appends, imports and followers the seal must survive."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from dynamodb.partition import after_delete
from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter


def e(sid: str, event: str, ts: int, step: int = -1) -> LedgerEntry:
    return LedgerEntry(ts=ts, name="red", sandbox_id=sid, step_index=step, event=event)


def _items(ledger: SyncDynamoDBAdapter, sid: str) -> list[dict[str, Any]]:
    return ledger.client().query(
        TableName=ledger.table_name,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": k.session_pk("red", sid)}},
        ConsistentRead=True,
    )["Items"]


class _Died(Exception):
    pass


def _delete_dying_after_its_seal(ledger: SyncDynamoDBAdapter, sid: str) -> None:
    """A delete_sandbox of ``sid`` that dies right after its seal landed."""

    def die(**_: Any) -> None:
        raise _Died

    ledger.client().meta.events.register("after-call.dynamodb.TransactWriteItems", die)
    with pytest.raises(_Died):
        ledger.delete_sandbox("red", sid)
    ledger.client().meta.events.unregister("after-call.dynamodb.TransactWriteItems", die)


def _session(sid: str, n: int, ts: int = 100) -> list[LedgerEntry]:
    return [
        e(sid, LedgerEvent.SandboxCreated, ts),
        *(e(sid, LedgerEvent.ExecStarted, ts + i, step=i) for i in range(1, n - 1)),
        e(sid, LedgerEvent.SandboxClosed, ts + n),
    ]


def test_a_slow_delete_overtaken_by_another_leaves_the_next_session_whole(
    moto_endpoint: str, sync_table: str
) -> None:
    """Two deletes of one session: the first reads the partition, then stalls; the second
    runs whole, and the session begins again (its marks numbered from 0 again, the old ones
    being gone). The first then deletes what it read: the old marks' keys, which are now the
    new session's marks, and its seal's key, also one of them. The new session was left
    with heads and no marks: read_all had its entries, a follower and the next appends did
    not (they began a second sequence at 0). The seal's key is spared now (its delete is
    conditional on the seal's token); the old marks' keys are now never reused: the seal
    stays, spent, and the next session numbers its marks after it."""
    slow = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    fast = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    for entry in _session("d", 4)[:-1]:
        writer.append(entry)  # marks 0..2; the slow delete's seal is mark 3
    again = _session("d", 6, ts=500)
    ran: list[bool] = []

    def overtake(**_: Any) -> None:
        if not ran:
            ran.append(True)
            fast.delete_sandbox("red", "d")
            for entry in again:
                writer.append(entry)

    slow.client().meta.events.register("before-call.dynamodb.BatchWriteItem", overtake)
    slow.delete_sandbox("red", "d")
    assert ran
    assert slow.read_all("red", "d") == again
    assert slow.read_in_append_order("red", "d") == again
    assert [f.entry for f in slow.follow("red", "d")] == again
    details = slow.get_sandbox_details("red", "d")
    assert details is not None and details.completed_at is not None


def test_a_slow_delete_spares_the_claims_of_the_same_lines_imported_again(
    moto_endpoint: str, sync_table: str
) -> None:
    """An imported session is deleted twice at once: the first delete reads the partition
    (the import's claims among it), then stalls; the second runs whole, and the same lines
    are imported again (their claims at the same keys: a claim's key is its line's content).
    The first then deletes what it read. Unconditional, it took the new claims, and the next
    import of those lines stored each of them a second time."""
    slow = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    fast = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    importer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    lines = [(entry, 1) for entry in _session("c", 3)]
    assert importer.append_once_many(lines) == [True, True, True]
    ran: list[bool] = []

    def overtake(**_: Any) -> None:
        if not ran:
            ran.append(True)
            fast.delete_sandbox("red", "c")
            assert importer.append_once_many(lines) == [True, True, True]

    slow.client().meta.events.register("before-call.dynamodb.BatchWriteItem", overtake)
    slow.delete_sandbox("red", "c")
    assert ran
    claims = [i for i in _items(slow, "c") if i[k.SORT_KEY]["S"].startswith(k.CLAIM_PREFIX)]
    assert len(claims) == 3
    assert importer.append_once_many(lines) == [False, False, False]
    assert slow.read_all("red", "c") == [entry for entry, _ in lines]
    assert [f.entry for f in slow.follow("red", "c")] == [entry for entry, _ in lines]


def test_a_follower_of_a_deleted_session_ends_at_its_spent_seal(
    moto_endpoint: str, sync_table: str
) -> None:
    """A follower positioned in a session that is then deleted whole and begun again meets
    the delete's seal (spent: the delete finished) before the new session's marks, which go
    on in the seal's incarnation: it ends there, and never hands out the new session."""
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    for entry in _session("g", 3)[:-1]:
        ledger.append(entry)
    follower = ledger.follow("red", "g", until_closed=False)
    assert [next(follower).entry.ts for _ in range(2)] == [100, 101]
    ledger.delete_sandbox("red", "g")
    again = _session("g", 4, ts=300)
    for entry in again:
        ledger.append(entry)
    assert list(follower) == []
    assert [f.entry for f in ledger.follow("red", "g")] == again


def test_a_resent_delete_of_the_seal_spares_the_mark_that_took_its_number(
    moto_endpoint: str, sync_table: str
) -> None:
    """A session without marks (never written, or written before marks) is sealed at mark 0.
    The delete's last write of its seal lands, its answer is lost, and before the SDK sends
    it again the next session's first append lands. Once, the seal was deleted there and the
    append took mark 0, and the resend, with no condition, deleted that append's mark:
    read_all had the entry, a follower never handed it out. The seal now stays (spent) and
    the append goes after it; the resend must spare it all the same."""
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    first = e("z", LedgerEvent.ExecStarted, 5, step=0)
    resent: list[bool] = []

    def append_then_resend(
        response: Any, attempts: int, request_dict: dict[str, Any], **_: Any
    ) -> float | None:
        body = request_dict["body"]
        body = body.decode() if isinstance(body, bytes) else body
        if resent or attempts > 1 or k.SEQUENCE_PREFIX not in body:
            return None
        if response is None or response[0].status_code != 200:
            return None
        resent.append(True)
        writer.append(first)  # lands between the delete's last seal write and its resend
        return 0.0

    deleter.client().meta.events.register("needs-retry.dynamodb.UpdateItem", append_then_resend)
    deleter.delete_sandbox("red", "z")
    assert resent
    closed = e("z", LedgerEvent.SandboxClosed, 6)
    writer.append(closed)
    assert deleter.read_all("red", "z") == [first, closed]
    assert [f.entry for f in deleter.follow("red", "z")] == [first, closed]


def test_an_import_that_read_the_session_empty_before_a_delete_joins_the_survivors(
    moto_endpoint: str, sync_table: str
) -> None:
    """An import reads the session (empty: its sequencer learns a fresh mark 0), then the
    session is begun, deleted, and an append lands inside the delete (after its seal: it
    survives, marked above the seal). The import's transaction then puts mark 0 with no
    check (a fresh mark): mark 0 is free again, so it lands, in an incarnation of its own,
    below the survivor's. A follower from the start hands out the import's entry, meets the
    survivor's incarnation and ends: the survivor and every later entry are never handed
    out, though read_all has them."""
    importer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    assert importer.read_stored_sessions([("red", "f")]) == [[]]
    writer.append(e("f", LedgerEvent.SandboxCreated, 1))
    survivor = e("f", LedgerEvent.ExecStarted, 10, step=0)
    ran: list[bool] = []

    def append_after_the_seal(**_: Any) -> None:
        if not ran:
            ran.append(True)
            writer.append(survivor)

    deleter.client().meta.events.register(
        "after-call.dynamodb.TransactWriteItems", append_after_the_seal
    )
    deleter.delete_sandbox("red", "f")
    assert ran
    imported = e("f", LedgerEvent.ExecStarted, 20, step=1)
    assert importer.append_once_many([(imported, 1)]) == [True]
    closed = e("f", LedgerEvent.SandboxClosed, 30)
    writer.append(closed)
    assert deleter.read_all("red", "f") == [survivor, imported, closed]
    assert [f.entry for f in deleter.follow("red", "f")] == [survivor, imported, closed]


def test_ties_among_heads_written_before_q_read_in_one_order_everywhere(
    moto_endpoint: str, sync_table: str
) -> None:
    """The previous version wrote marks but no ``q``. Two of its appends of equal ts that
    committed out of their order ids' order (the one that began first committed second)
    are read by read_all in order-id order (no q: by order id), by an export and a follower
    in mark order. Where a head without q ties with another, read_all reads the marks."""
    from sandbox_ledger.dynamodb import _items as it
    from sandbox_ledger.dynamodb import _ops
    from sandbox_ledger.dynamodb._sequence import Sequencer

    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    began_first, began_second = it.order_ids.next(), it.order_ids.next()
    committed = [
        e("l", LedgerEvent.SandboxCreated, 7),
        e("l", LedgerEvent.ExecStarted, 7, step=1),
        e("l", LedgerEvent.ExecStarted, 7, step=2),
        e("l", LedgerEvent.SandboxClosed, 7),
    ]
    orders = [it.order_ids.next(), began_second, began_first, it.order_ids.next()]
    for entry, order in zip(committed, orders, strict=True):
        ledger.run(_ops.append(sync_table, entry, order, 4, Sequencer()))
    for item in _items(ledger, "l"):  # as the version before q stored them
        if "q" in item:
            ledger.client().update_item(
                TableName=sync_table,
                Key={"PK": item["PK"], "SK": item["SK"]},
                UpdateExpression="REMOVE q",
            )
    assert ledger.read_in_append_order("red", "l") == committed
    assert [f.entry for f in ledger.follow("red", "l")] == committed
    assert ledger.read_all("red", "l") == committed
    assert ledger.read_stored("red", "l") == committed


def test_checkpoints_of_equal_ts_are_listed_in_read_all_order(
    moto_endpoint: str, sync_table: str
) -> None:
    """Two checkpoints of equal ts; the one whose append began first committed second (held
    off, or its mark taken by the other). read_all hands them out in commit order;
    last_checkpoint must be the last of them in read_all order (the memory store's
    definition) and list_checkpoints in the same order. Markers sorted by their keys (ts,
    then order id) once gave the other one: each marker now carries its mark's number
    (``q``) as the head does, and last_checkpoint reads the entries of the last ts."""
    from sandbox_ledger.dynamodb import _items as it
    from sandbox_ledger.dynamodb import _ops
    from sandbox_ledger.dynamodb._sequence import Sequencer

    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    ledger.append(e("c", LedgerEvent.SandboxCreated, 1))
    began_first, began_second = it.order_ids.next(), it.order_ids.next()
    checkpoints = [
        LedgerEntry(
            ts=7,
            name="red",
            sandbox_id="c",
            step_index=step,
            event=LedgerEvent.CheckpointCreated,
            payload={"snapshotId": f"snap-{step}", "name": f"tag-{step}"},
        )
        for step in (1, 2)
    ]
    for entry, order in zip(checkpoints, [began_second, began_first], strict=True):
        ledger.run(_ops.append(sync_table, entry, order, 4, Sequencer()))
    read = [x for x in ledger.read_all("red", "c") if x.event == LedgerEvent.CheckpointCreated]
    assert read == checkpoints
    assert ledger.last_checkpoint("red", "c") == checkpoints[-1]
    assert [c.snapshot_id for c in ledger.list_checkpoints("red", "c")] == ["snap-1", "snap-2"]


def test_with_a_retention_a_dead_deletes_seal_expires_with_the_session(
    moto_endpoint: str, table_name: str
) -> None:
    """With a ledger retention every item of a session expires (docs/table-design.md, "What
    gets a TTL"). A delete_sandbox that dies right after its seal (the process killed) leaves
    the session for the next delete, or for TTL: the entries, marks and summary all expire,
    the seal did not. It now expires with the session's last mark, but no sooner than a day
    after it was put (it must outlive its delete)."""
    from datetime import timedelta

    from sandbox_ledger.dynamodb._delete import SEAL_TTL_MARGIN_S

    ledger = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=timedelta(1))
    ledger.create_table()
    old = time.time_ns() // 1_000_000 - 3 * 86_400_000  # expired as it is written
    ledger.append(e("t", LedgerEvent.SandboxCreated, old))
    ledger.append(e("t", LedgerEvent.ExecComplete, old + 1, step=0))
    _delete_dying_after_its_seal(ledger, "t")
    latest = time.time() + SEAL_TTL_MARGIN_S + 60
    left = [
        item["SK"]["S"]
        for item in _items(ledger, "t")
        if "expiresAt" not in item or int(item["expiresAt"]["N"]) > latest
    ]
    assert left == []  # TTL takes everything, the seal a day after it was put


def test_a_delete_that_died_after_its_seal_leaves_a_session_followed_whole(
    moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete_sandbox that dies right after its seal (before it deleted anything) leaves the
    session whole, its summary holding a lease that ends on its own. Appends go on (after the
    seal, in its incarnation). read_all, an export and a follower from the start hand out
    every entry, old and new: the follower finds the seal's delete dead (its lease over) and
    passes the seal, as one positioned before the seal does."""
    from sandbox_ledger.dynamodb import _ops

    monkeypatch.setattr(_ops, "DELETE_LEASE_MS", 1)  # the dead delete's lease is over at once
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    old = [e("x", LedgerEvent.SandboxCreated, 1), e("x", LedgerEvent.ExecStarted, 2, step=0)]
    for entry in old:
        ledger.append(entry)
    _delete_dying_after_its_seal(ledger, "x")
    new = [e("x", LedgerEvent.ExecStarted, 3, step=1), e("x", LedgerEvent.SandboxClosed, 4)]
    for entry in new:
        ledger.append(entry)
    assert ledger.read_all("red", "x") == old + new
    assert ledger.read_in_append_order("red", "x") == old + new
    followed = list(ledger.follow("red", "x"))
    assert [f.entry for f in followed] == old + new
    resumed = ledger.follow("red", "x", after=followed[1].position)
    assert [f.entry for f in resumed] == new


def test_a_writer_that_kept_its_guess_of_mark_1_goes_after_the_spent_seal(
    moto_endpoint: str, sync_table: str
) -> None:
    """A writer stores a session's first entry (mark 0) and keeps its guess of mark 1;
    another writer takes mark 1. The session is deleted (mark 0 kept, spent; mark 1 deleted;
    the seal at 2). The first writer's next append checks mark 0 (its guess's mark before)
    and puts mark 1: mark 0 kept its incarnation, so the check held and the append landed at
    mark 1, in the deleted session's incarnation, below the spent seal. A follower from the
    start handed it out, met the spent seal and ended: every later entry of the new session
    was lost to it, though read_all had them."""
    first = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    other = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    first.append(e("h", LedgerEvent.SandboxCreated, 1))  # mark 0; guesses mark 1
    other.append(e("h", LedgerEvent.ExecStarted, 2, step=0))  # mark 1
    other.delete_sandbox("red", "h")
    again = [
        e("h", LedgerEvent.ExecStarted, 10, step=0),
        e("h", LedgerEvent.ExecStarted, 11, step=1),
        e("h", LedgerEvent.SandboxClosed, 12),
    ]
    first.append(again[0])
    other.append(again[1])
    first.append(again[2])
    assert first.read_all("red", "h") == again
    assert first.read_in_append_order("red", "h") == again
    assert [f.entry for f in first.follow("red", "h")] == again


def _retained(moto_endpoint: str, table_name: str) -> SyncDynamoDBAdapter:
    from datetime import timedelta

    ledger = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=timedelta(1))
    ledger.create_table()
    return ledger


def _expire(ledger: SyncDynamoDBAdapter, sid: str) -> list[str]:
    """Remove what TTL may remove of ``sid`` now (every item whose expiresAt has passed, as
    DynamoDB's TTL does, in its own time); the sort keys removed."""
    gone = [
        item[k.SORT_KEY]
        for item in _items(ledger, sid)
        if "expiresAt" in item and int(item["expiresAt"]["N"]) <= time.time()
    ]
    for sk in gone:
        ledger.client().delete_item(
            TableName=ledger.table_name,
            Key={k.PARTITION_KEY: {"S": k.session_pk("red", sid)}, k.SORT_KEY: sk},
        )
    return [sk["S"] for sk in gone]


def _body(params: dict[str, Any]) -> str:
    """The body of a request (a ``before-call`` hook's ``params``)."""
    body = params["body"]
    return body.decode() if isinstance(body, bytes) else str(body)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _old_ms() -> int:
    """A ts whose entry has expired as it is written (retention one day)."""
    return _now_ms() - 3 * 86_400_000


def test_an_import_that_kept_its_fresh_guess_after_an_expired_mark_goes_after_the_seal(
    moto_endpoint: str, table_name: str
) -> None:
    """With a retention, a session whose last mark has expired is begun again in a new
    incarnation after that mark, with no check of the mark before (a fresh mark). An import
    reads such a session (its guess: mark 1, fresh), then a writer begins it again (marks 1
    and 2) and it is deleted (mark 0 kept, marks 1 and 2 deleted, the seal at 3). The
    import's fresh guess put mark 1 with no check: it was free, and the import's entry
    landed below the spent seal, in an incarnation of its own. A follower from the start
    handed it out, met the spent seal and ended, losing every later entry."""
    ledger = _retained(moto_endpoint, table_name)
    importer = SyncDynamoDBAdapter(
        table_name, endpoint_url=moto_endpoint, retention=ledger.retention
    )
    ledger.append(e("b", LedgerEvent.SandboxCreated, _old_ms()))  # mark 0, expired
    assert len(importer.read_stored_sessions([("red", "b")])[0]) == 1  # guess: mark 1, fresh
    now = _now_ms()
    writer = SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=ledger.retention)
    writer.append(e("b", LedgerEvent.ExecStarted, now, step=0))  # mark 1 (fresh)
    writer.append(e("b", LedgerEvent.ExecStarted, now + 1, step=1))  # mark 2
    writer.delete_sandbox("red", "b")  # the seal at 3
    imported = e("b", LedgerEvent.SandboxCreated, now + 10)
    assert importer.append_once_many([(imported, 1)]) == [True]
    closed = e("b", LedgerEvent.SandboxClosed, now + 11)
    writer.append(closed)
    assert ledger.read_all("red", "b") == [imported, closed]
    assert [f.entry for f in ledger.follow("red", "b")] == [imported, closed]


def test_an_import_that_read_the_session_empty_goes_after_the_seal_once_ttl_ran(
    moto_endpoint: str, table_name: str
) -> None:
    """With a retention, an import reads a session empty (its guess: mark 0, fresh, kept a
    minute); an entry of an old ts (expired as written) and a new one are stored, and the
    session is deleted. Mark 0, kept spent so that no guess of it can land, kept its entry's
    TTL, long past: TTL could remove it at once, and the import's guess then put mark 0
    again, below the spent seal: a follower from the start handed the import out and ended
    at the seal, losing every later entry."""
    ledger = _retained(moto_endpoint, table_name)
    importer = SyncDynamoDBAdapter(
        table_name, endpoint_url=moto_endpoint, retention=ledger.retention
    )
    assert importer.read_stored_sessions([("red", "m")]) == [[]]  # guess: mark 0, fresh
    ledger.append(e("m", LedgerEvent.SandboxCreated, _old_ms()))  # mark 0, expired
    ledger.append(e("m", LedgerEvent.ExecStarted, _now_ms(), step=0))  # mark 1
    ledger.delete_sandbox("red", "m")
    _expire(ledger, "m")
    now = _now_ms()
    imported = e("m", LedgerEvent.SandboxCreated, now)
    assert importer.append_once_many([(imported, 1)]) == [True]
    closed = e("m", LedgerEvent.SandboxClosed, now + 1)
    ledger.append(closed)
    assert ledger.read_all("red", "m") == [imported, closed]
    assert [f.entry for f in ledger.follow("red", "m")] == [imported, closed]


def test_with_a_retention_the_seal_of_a_session_without_marks_expires(
    moto_endpoint: str, table_name: str
) -> None:
    """A delete of a session that has no marks (never written, or every mark removed by TTL)
    seals it at mark 0, and the seal stays: with a ledger retention it must expire as every
    other item does, at least a day after it was put."""
    from sandbox_ledger.dynamodb._delete import SEAL_TTL_MARGIN_S

    ledger = _retained(moto_endpoint, table_name)
    ledger.delete_sandbox("red", "n")
    latest = time.time() + SEAL_TTL_MARGIN_S + 60
    left = _items(ledger, "n")
    assert left, "the seal stays"
    assert all("expiresAt" in item and int(item["expiresAt"]["N"]) <= latest for item in left)


def test_a_delete_that_lost_its_lease_before_its_seal_spares_the_next_session(
    moto_endpoint: str, sync_table: str
) -> None:
    """Two deletes of one session: the first takes the summary's lease, then stalls before
    its seal; the second takes the lease over, runs whole, and the session begins again. The
    first then seals after the new session's marks and deletes what is below its seal: the
    new session's entries, while their summary, which no longer carries the first delete's
    lease, stays (created, closed, counting entries that are gone), and appends that change
    the summary were never held off meanwhile."""
    slow = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    fast = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    for entry in _session("l", 3):
        writer.append(entry)
    again = _session("l", 4, ts=500)
    ran: list[bool] = []

    def overtake(**_: Any) -> None:
        if not ran:
            ran.append(True)
            fast.delete_sandbox("red", "l")
            for entry in again:
                writer.append(entry)

    slow.client().meta.events.register("before-call.dynamodb.Query", overtake)
    slow.delete_sandbox("red", "l")
    assert ran
    assert slow.read_all("red", "l") == again
    assert [f.entry for f in slow.follow("red", "l")] == again
    details = slow.get_sandbox_details("red", "l")
    assert details is not None and details.completed_at is not None


def test_a_delete_that_died_after_spending_mark_0_never_leaves_an_entry_unfollowed(
    moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete_sandbox that dies right after it spent mark 0 (the process killed). Mark 0
    lost its reference first, before anything was deleted: the session was left whole but
    for its first entry's mark, and appends went on after the dead seal. read_all and an
    export had the first entry; a follower from the start passed mark 0 (no entry), handed
    out the rest and never that one. Mark 0 is now spent once the entries are deleted: a
    follower hands out what read_all has, or ends where the dead delete took an entry
    (the session is to be deleted again), never passing one by; and the next delete leaves
    one session everywhere."""
    from sandbox_ledger.dynamodb import _ops

    monkeypatch.setattr(_ops, "DELETE_LEASE_MS", 1)  # the dead delete's lease is over at once
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    for entry in [e("o", LedgerEvent.SandboxCreated, 1), e("o", LedgerEvent.ExecStarted, 2, 0)]:
        ledger.append(entry)

    def spends_mark_0(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        body = _body(params)
        context["spends mark 0"] = k.sequence_sk(0) in body and "REMOVE" in body

    def die(context: dict[str, Any], **_: Any) -> None:
        if context.get("spends mark 0"):
            raise _Died

    events = ledger.client().meta.events
    events.register("before-call.dynamodb.UpdateItem", spends_mark_0)
    events.register("after-call.dynamodb.UpdateItem", die)
    with pytest.raises(_Died):
        ledger.delete_sandbox("red", "o")
    events.unregister("before-call.dynamodb.UpdateItem", spends_mark_0)
    events.unregister("after-call.dynamodb.UpdateItem", die)
    for entry in [e("o", LedgerEvent.ExecStarted, 3, step=1), e("o", LedgerEvent.SandboxClosed, 4)]:
        ledger.append(entry)
    stored = ledger.read_all("red", "o")
    followed = [f.entry for f in ledger.follow("red", "o")]
    assert followed == stored[: len(followed)]
    ledger.delete_sandbox("red", "o")
    again = [e("o", LedgerEvent.SandboxCreated, 5), e("o", LedgerEvent.SandboxClosed, 6)]
    for entry in again:
        ledger.append(entry)
    assert ledger.read_all("red", "o") == again
    assert ledger.read_in_append_order("red", "o") == again
    assert [f.entry for f in ledger.follow("red", "o")] == again


def test_mark_0_leaves_the_sessions_incarnation_before_mark_1_is_deleted(
    moto_endpoint: str, sync_table: str
) -> None:
    """A writer that stored mark 0 keeps its guess of mark 1, which another writer took. It
    appends (an entry the lease does not hold off) right after each batch of the delete's:
    once mark 1 is deleted, its check of mark 0 must fail (mark 0 has left the session's
    incarnation by then), or it puts mark 1 below the seal and a follower from the start
    ends there."""
    first = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    other = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    first.append(e("p", LedgerEvent.SandboxCreated, 1))  # mark 0; guesses mark 1
    other.append(e("p", LedgerEvent.ExecStarted, 2, step=0))  # mark 1
    raced: list[LedgerEntry] = []

    def deletes_mark_1(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["deletes mark 1"] = k.sequence_sk(1) in _body(params)

    def append_with_the_old_guess(context: dict[str, Any], **_: Any) -> None:
        if context.get("deletes mark 1") and not raced:
            raced.append(e("p", LedgerEvent.ExecStarted, 10, step=1))
            first.append(raced[0])

    events = other.client().meta.events
    events.register("before-call.dynamodb.BatchWriteItem", deletes_mark_1)
    events.register("after-call.dynamodb.BatchWriteItem", append_with_the_old_guess)
    other.delete_sandbox("red", "p")
    assert raced
    closed = e("p", LedgerEvent.SandboxClosed, 11)
    other.append(closed)
    assert other.read_all("red", "p") == [*raced, closed]
    assert [f.entry for f in other.follow("red", "p")] == [*raced, closed]


def test_a_guess_of_mark_1_after_a_seal_at_mark_0_goes_after_the_next_seal(
    moto_endpoint: str, sync_table: str
) -> None:
    """A session deleted before anything was written to it is sealed at mark 0, and the
    seal stays. An import reads the session (its guess: mark 1, after the seal, kept as any
    guess is), a writer takes mark 1, and the session is deleted again (mark 1 deleted, the
    seal at 2). The import's guess checks mark 0, the first delete's seal, which kept its
    incarnation: the check held, and the import's entry landed at mark 1 below the spent
    seal, where a follower from the start ended."""
    importer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    writer.delete_sandbox("red", "s")  # the seal at mark 0
    assert importer.read_stored_sessions([("red", "s")]) == [[]]  # guess: mark 1
    writer.append(e("s", LedgerEvent.SandboxCreated, 1))  # mark 1
    writer.delete_sandbox("red", "s")  # the seal at mark 2
    imported = e("s", LedgerEvent.SandboxCreated, 10)
    assert importer.append_once_many([(imported, 1)]) == [True]
    closed = e("s", LedgerEvent.SandboxClosed, 11)
    writer.append(closed)
    assert writer.read_all("red", "s") == [imported, closed]
    assert [f.entry for f in writer.follow("red", "s")] == [imported, closed]


def test_a_delete_whose_lease_a_dead_delete_took_over_deletes_the_session(
    moto_endpoint: str, sync_table: str
) -> None:
    """Two deletes of one session: the second takes the lease over from the first before the
    first's seal, then dies (its lease runs out, its token stays on the summary). The first
    finds the lease not its own at its seal; the delete that holds it is dead, not running
    and not finished: the first takes the lease back and deletes the session, rather than
    return with nothing deleted."""
    from sandbox_ledger.dynamodb import _items as it

    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    for entry in _session("q", 3):
        ledger.append(entry)
    pk = k.session_pk("red", "q")
    died: list[bool] = []

    def a_delete_takes_the_lease_and_dies(**_: Any) -> None:
        if not died:
            died.append(True)
            ledger.client().update_item(
                TableName=sync_table,
                Key=it.summary_key(pk),
                UpdateExpression="SET deleting = :over, deletingToken = :dead",
                ExpressionAttributeValues={
                    ":over": {"N": str(_now_ms() - 1)},
                    ":dead": {"S": "a-delete-that-died"},
                },
            )

    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    deleter.client().meta.events.register(
        "before-call.dynamodb.Query", a_delete_takes_the_lease_and_dies
    )
    deleter.delete_sandbox("red", "q")
    assert died
    assert ledger.read_all("red", "q") == []
    assert ledger.get_sandbox_details("red", "q") is None
    assert after_delete(_items(ledger, "q")) == []


@pytest.mark.slow
def test_a_delete_that_stalled_before_its_seal_holds_the_session_again(
    moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete takes its lease, then stalls longer than the lease before its seal. It went
    on to seal with the lease over: a sandbox.created stored after the seal (the next
    session's) was not held off, updated the summary, and the delete then deleted that
    summary (it still carried its token): the next session had its entry and no summary. The
    lease is renewed before the seal now, and the append waits for the delete."""
    import threading

    from sandbox_ledger.dynamodb import _ops

    monkeypatch.setattr(_ops, "DELETE_LEASE_MS", 3_000)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    for entry in _session("w", 3):
        writer.append(entry)
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    created = e("w", LedgerEvent.SandboxCreated, 500)
    appended = threading.Event()
    writing: list[threading.Thread] = []

    def stall(**_: Any) -> None:
        if not writing:
            time.sleep(3.2)  # the lease (3 s) is over

    def append_after_the_seal(**_: Any) -> None:
        if not writing:
            writing.append(
                threading.Thread(target=lambda: (writer.append(created), appended.set()))
            )
            writing[0].start()
            appended.wait(1.0)  # it lands at once, unless the delete holds it off

    events = deleter.client().meta.events
    events.register("before-call.dynamodb.Query", stall)
    events.register("after-call.dynamodb.TransactWriteItems", append_after_the_seal)
    deleter.delete_sandbox("red", "w")
    writing[0].join(30)
    assert appended.is_set()
    assert writer.read_all("red", "w") == [created]
    details = writer.get_sandbox_details("red", "w")
    assert details is not None and details.started_at == 500


@pytest.mark.slow
def test_a_delete_that_stalled_inside_a_batch_leaves_the_next_sessions_summary(
    moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete stalls inside a BatchWriteItem longer than its lease (a process paused);
    meanwhile the next session's sandbox.created is stored (after the seal: it survives)."""
    from sandbox_ledger.dynamodb import _ops

    monkeypatch.setattr(_ops, "DELETE_LEASE_MS", 1_000)
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    for entry in _session("v", 3):
        writer.append(entry)
    deleter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    created = e("v", LedgerEvent.SandboxCreated, 500)
    ran: list[bool] = []

    def stall_then_append(**_: Any) -> None:
        if not ran:
            ran.append(True)
            time.sleep(1.2)  # the lease (1 s) is over
            writer.append(created)

    deleter.client().meta.events.register("before-call.dynamodb.BatchWriteItem", stall_then_append)
    deleter.delete_sandbox("red", "v")
    assert ran
    assert writer.read_all("red", "v") == [created]
    details = writer.get_sandbox_details("red", "v")
    assert details is not None and details.started_at == 500


@pytest.mark.parametrize("imported", [False, True], ids=["appended", "imported"])
def test_a_summary_the_next_session_changed_during_a_stall_is_built_again_from_it(
    moto_endpoint: str,
    sync_table: str,
    monkeypatch: pytest.MonkeyPatch,
    imported: bool,
    wait_for_indexes: Callable[[], None],
) -> None:
    """As above, with the next session's whole life stored during the stall (created, an
    exec.complete, closed; appended, or imported in one transaction): the summary the delete
    leaves is that session's alone (its start, its one exec, closed), with its retention,
    never the deleted session's counts."""
    from datetime import timedelta

    from sandbox_ledger import SandboxStatus
    from sandbox_ledger.dynamodb import _ops

    monkeypatch.setattr(_ops, "DELETE_LEASE_MS", 1_000)
    kept = timedelta(days=30)
    table = f"{sync_table}-kept"
    writer = SyncDynamoDBAdapter(table, endpoint_url=moto_endpoint, retention=kept)
    writer.create_table()
    old = [e("w", LedgerEvent.SandboxCreated, 100)]
    old += [e("w", LedgerEvent.ExecComplete, 101 + i, step=i) for i in range(3)]
    for entry in old:
        writer.append(entry)
    now = int(time.time() * 1000)
    again = [
        e("w", LedgerEvent.SandboxCreated, now),
        e("w", LedgerEvent.ExecComplete, now + 1, step=0),
        e("w", LedgerEvent.SandboxClosed, now + 2),
    ]
    deleter = SyncDynamoDBAdapter(table, endpoint_url=moto_endpoint, retention=kept)
    ran: list[bool] = []

    def stall_then_write(**_: Any) -> None:
        if not ran:
            ran.append(True)
            time.sleep(1.2)  # the lease (1 s) is over
            if imported:
                assert writer.append_once_many([(entry, 1) for entry in again]) == [True] * 3
            else:
                for entry in again:
                    writer.append(entry)

    deleter.client().meta.events.register("before-call.dynamodb.BatchWriteItem", stall_then_write)
    deleter.delete_sandbox("red", "w")
    assert ran
    assert writer.read_all("red", "w") == again
    details = writer.get_sandbox_details("red", "w")
    assert details is not None
    assert (details.started_at, details.exec_count) == (now, 1)
    assert details.status == SandboxStatus.Completed and details.completed_at == now + 2
    [summary] = [i for i in _items(writer, "w") if i[k.SORT_KEY]["S"] == k.SUMMARY_SK]
    assert "deletingToken" not in summary and "deleting" not in summary
    assert int(summary[k.TTL_ATTRIBUTE]["N"]) >= (now + 2) // 1000 + kept.days * 86_400 - 5
    wait_for_indexes()  # settled listings (index lag waited out)
    listed = writer.list_sandbox_details("red")
    assert [(d.sandbox_id, d.status) for d in listed] == [("w", SandboxStatus.Completed)]
