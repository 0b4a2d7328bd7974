"""Red team of DynamoDB's sequence marks (dynamodb/_sequence.py, dynamodb/_follow.py): the
ways the marks stop being dense and unique in one incarnation, and what a follower then
hands out."""

from __future__ import annotations

import itertools
import time
from datetime import timedelta
from typing import Any

import pytest

from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter, _ops
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.testing._build import entry

DAY = timedelta(days=1)
DAY_MS = 86_400_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _marks(ledger: SyncDynamoDBAdapter, name: str, sandbox_id: str) -> list[dict[str, Any]]:
    return ledger.client().query(
        TableName=ledger.table_name,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :q)",
        ExpressionAttributeValues={
            ":pk": {"S": k.session_pk(name, sandbox_id)},
            ":q": {"S": k.SEQUENCE_PREFIX},
        },
        ConsistentRead=True,
    )["Items"]


def _reap_expired(ledger: SyncDynamoDBAdapter, name: str, sandbox_id: str) -> int:
    """What DynamoDB's TTL does, one item at a time: remove the session's items whose
    ``expiresAt`` has passed."""
    items = ledger.client().query(
        TableName=ledger.table_name,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": k.session_pk(name, sandbox_id)}},
        ConsistentRead=True,
    )["Items"]
    now_s = time.time()
    reaped = 0
    for item in items:
        ttl = item.get(k.TTL_ATTRIBUTE)
        if ttl is not None and int(ttl["N"]) < now_s:
            ledger.client().delete_item(
                TableName=ledger.table_name, Key={"PK": item["PK"], "SK": item["SK"]}
            )
            reaped += 1
    return reaped


@pytest.fixture
def ledger(moto_endpoint: str, table_name: str) -> Any:
    with SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint, retention=DAY) as made:
        made.create_table()
        yield made


def test_a_mark_number_freed_by_ttl_is_never_taken_again(ledger: SyncDynamoDBAdapter) -> None:
    """A replay stores an entry whose ts is nearly as old as the retention: the session's
    last mark expires before the ones before it, and TTL removes it. The next append must not
    take the freed number again: a follower that handed the replayed entry out (its position
    is that number) would pass the new entry by."""
    now = _now_ms()
    ledger.append(entry("rt", "ttl", LedgerEvent.SandboxCreated, now))
    ledger.append(entry("rt", "ttl", LedgerEvent.ExecStarted, now + 1, step=0))
    ledger.append(entry("rt", "ttl", LedgerEvent.ExecStarted, now - DAY_MS + 2_000, step=1))
    handed = list(itertools.islice(ledger.follow("rt", "ttl"), 3))
    assert [f.entry.step_index for f in handed] == [-1, 0, 1]
    time.sleep(3.2)
    assert _reap_expired(ledger, "rt", "ttl") >= 1  # the replayed entry's head (and its mark?)
    ledger.append(entry("rt", "ttl", LedgerEvent.ExecStarted, _now_ms(), step=2))
    ledger.append(entry("rt", "ttl", LedgerEvent.SandboxClosed, _now_ms()))
    resumed = ledger.follow("rt", "ttl", after=handed[-1].position)
    assert [f.entry.step_index for f in resumed] == [2, -1]


def test_a_session_whose_first_mark_expired_keeps_one_sequence(
    ledger: SyncDynamoDBAdapter, moto_endpoint: str
) -> None:
    """A session ran longer than the retention: its first entry (and mark 0) expired and
    TTL removed them. Another client (which never wrote the session) imports an entry into
    it: the import must take the next mark of the session's sequence, not begin a second
    sequence at mark 0 beside the first (a follower at the tail would never see the entry;
    one from the start would end at the second sequence)."""
    now = _now_ms()
    ledger.append(entry("rt", "old", LedgerEvent.SandboxCreated, now - DAY_MS + 2_000))
    ledger.append(entry("rt", "old", LedgerEvent.ExecComplete, now, step=0))
    handed = list(itertools.islice(ledger.follow("rt", "old"), 2))
    time.sleep(3.2)
    assert _reap_expired(ledger, "rt", "old") == 2  # the first entry's head and mark 0
    with SyncDynamoDBAdapter(ledger.table_name, endpoint_url=moto_endpoint, retention=DAY) as other:
        late = entry("rt", "old", LedgerEvent.ExecStarted, _now_ms(), step=1)
        assert other.append_once_many([(late, 1)]) == [True]
    ledger.append(entry("rt", "old", LedgerEvent.SandboxClosed, _now_ms()))
    resumed = ledger.follow("rt", "old", after=handed[-1].position)
    assert [f.entry.step_index for f in resumed] == [1, -1]
    assert len({m["inc"]["S"] for m in _marks(ledger, "rt", "old")}) == 1
    assert [f.entry.step_index for f in ledger.follow("rt", "old")] == [0, 1, -1]


def test_an_append_landing_inside_a_delete_leaves_one_sequence(
    moto_endpoint: str, table_name: str
) -> None:
    """delete_sandbox reads the session's keys, then deletes them; an exec.started (which a
    delete does not hold off) lands between the two, with the next mark, and survives the
    delete. The session begun again must still be one sequence: a follower from its start
    hands out every entry read_all has, and reaches sandbox.closed."""
    with (
        SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint) as ledger,
        SyncDynamoDBAdapter(table_name, endpoint_url=moto_endpoint) as writer,
    ):
        ledger.create_table()
        now = _now_ms()
        writer.append(entry("rt", "del", LedgerEvent.SandboxCreated, now))
        writer.append(entry("rt", "del", LedgerEvent.ExecStarted, now + 1, step=0))
        raced: list[bool] = []

        def race(**_: Any) -> None:
            if not raced:
                raced.append(True)
                writer.append(entry("rt", "del", LedgerEvent.ExecStarted, now + 2, step=1))

        ledger.client().meta.events.register("before-call.dynamodb.BatchWriteItem", race)
        ledger.delete_sandbox("rt", "del")
        ledger.client().meta.events.unregister("before-call.dynamodb.BatchWriteItem", race)
        assert raced
        later = _now_ms()
        ledger.append(entry("rt", "del", LedgerEvent.SandboxCreated, later))
        ledger.append(entry("rt", "del", LedgerEvent.ExecStarted, later + 1, step=0))
        ledger.append(entry("rt", "del", LedgerEvent.SandboxClosed, later + 2))
        stored = ledger.read_all("rt", "del")
        followed = [f.entry for f in ledger.follow("rt", "del")]
        assert sorted(map(repr, followed)) == sorted(map(repr, stored))
        assert followed[-1].event == LedgerEvent.SandboxClosed


def test_a_session_expired_whole_and_begun_again_is_a_new_sequence(
    ledger: SyncDynamoDBAdapter, moto_endpoint: str
) -> None:
    """Every entry of a session expired; TTL removes its items in any order, its last mark
    first. Written again (by a client that never wrote it), the session is a new sequence:
    a position in the expired one ends its follower (never resumes inside the new one), and
    a follower from the start hands out the new entries, all of them."""
    old = _now_ms() - DAY_MS + 2_000
    ledger.append(entry("rt", "whole", LedgerEvent.SandboxCreated, old))
    ledger.append(entry("rt", "whole", LedgerEvent.ExecComplete, old + 1, step=0))
    handed = list(itertools.islice(ledger.follow("rt", "whole"), 2))
    time.sleep(3.2)
    last = _marks(ledger, "rt", "whole")[-1]
    ledger.client().delete_item(
        TableName=ledger.table_name, Key={"PK": last["PK"], "SK": last["SK"]}
    )
    with SyncDynamoDBAdapter(ledger.table_name, endpoint_url=moto_endpoint, retention=DAY) as other:
        now = _now_ms()
        other.append(entry("rt", "whole", LedgerEvent.SandboxCreated, now))
        other.append(entry("rt", "whole", LedgerEvent.ExecComplete, now + 1, step=0))
        other.append(entry("rt", "whole", LedgerEvent.SandboxClosed, now + 2))
    assert list(ledger.follow("rt", "whole", after=handed[-1].position)) == []
    assert list(ledger.follow("rt", "whole", after=handed[0].position)) == []
    fresh = [f.entry.ts - now for f in ledger.follow("rt", "whole")]
    assert fresh == [0, 1, 2]


@pytest.mark.slow
def test_many_clients_with_lost_responses_throttling_and_imports_are_followed_exactly_once(
    moto_endpoint: str, sync_table: str
) -> None:
    """Six clients append to one session at once (each loses a fifth of its transactions'
    responses and so resends them, and is throttled on a tenth), two more import batches
    into it meanwhile; a follower running all along hands out every stored entry once, in
    the order read_in_append_order gives, and no writer gives up on the sequence."""
    import threading

    from tests.dynamodb.faults import FailShare, ResendAfterSuccess

    injected: list[Any] = []

    def client(seed: int) -> SyncDynamoDBAdapter:
        made = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
        injected.append(
            ResendAfterSuccess(0.2, {"TransactWriteItems"}, seed=seed).attach(made.client())
        )
        injected.append(
            FailShare(
                0.1, "ThrottlingException", operations={"TransactWriteItems"}, aio=False, seed=seed
            ).attach(made.client())
        )
        return made

    now = _now_ms()
    with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as ledger:
        ledger.append(entry("rt", "many", LedgerEvent.SandboxCreated, now))
        handed: list[Any] = []
        follower = threading.Thread(
            target=lambda: handed.extend(f.entry for f in ledger.follow("rt", "many"))
        )
        follower.start()
        errors: list[BaseException] = []

        def append(n: int) -> None:
            try:
                with client(n) as mine:
                    for i in range(12):
                        mine.append(entry("rt", "many", "custom", now + 10 * i + n, step=n))
            except BaseException as exc:  # reported below
                errors.append(exc)

        def import_(n: int) -> None:
            try:
                with client(100 + n) as mine:
                    batch = [
                        (entry("rt", "many", "imported", now - 1000 * i, step=100 + n), 1)
                        for i in range(10)
                    ]
                    assert all(mine.append_once_many(batch))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=append, args=(n,)) for n in range(6)]
        threads += [threading.Thread(target=import_, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ledger.append(entry("rt", "many", LedgerEvent.SandboxClosed, _now_ms()))
        follower.join(60)
        assert not follower.is_alive()
        assert errors == []
        assert sum(getattr(f, "resent", 0) for f in injected) > 5
        assert sum(getattr(f, "injected", 0) for f in injected) > 5
        stored = ledger.run(_ops.read_in_append_order(sync_table, "rt", "many"))
        assert len(stored) == 1 + 6 * 12 + 2 * 10 + 1
        assert handed == stored
        marks = _marks(ledger, "rt", "many")
        assert [k.sequence_number(m["SK"]["S"]) for m in marks] == list(range(len(stored)))
        assert len({m["inc"]["S"] for m in marks}) == 1


@pytest.mark.slow
def test_two_imports_of_one_file_racing_appends_are_followed_once(
    moto_endpoint: str, sync_table: str
) -> None:
    """Two clients import the same 40 entries into a live session at once (each finds some of
    its claims taken by the other), while a third appends: every entry is stored once and a
    follower hands each out once, in commit order, the marks dense."""
    import threading

    now = _now_ms()
    lines = [(entry("rt", "twice", "imported", now - 500 * i, step=i), 1) for i in range(40)]
    with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as ledger:
        ledger.append(entry("rt", "twice", LedgerEvent.SandboxCreated, now))
        handed: list[Any] = []
        follower = threading.Thread(
            target=lambda: handed.extend(f.entry for f in ledger.follow("rt", "twice"))
        )
        follower.start()
        outcomes: list[list[Any]] = []

        def import_() -> None:
            with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as mine:
                outcomes.append(mine.append_once_many(lines))

        def append() -> None:
            with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as mine:
                for i in range(15):
                    mine.append(entry("rt", "twice", "live", now + i, step=i))

        threads = [threading.Thread(target=f) for f in (import_, import_, append)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ledger.append(entry("rt", "twice", LedgerEvent.SandboxClosed, _now_ms()))
        follower.join(60)
        assert not follower.is_alive()
        assert [a or b for a, b in zip(*outcomes, strict=True)] == [True] * 40
        stored = ledger.run(_ops.read_in_append_order(sync_table, "rt", "twice"))
        assert len(stored) == 1 + 40 + 15 + 1
        assert handed == stored
        marks = _marks(ledger, "rt", "twice")
        assert [k.sequence_number(m["SK"]["S"]) for m in marks] == list(range(len(stored)))


def test_a_guess_of_a_new_session_is_not_kept_past_its_moment(
    ledger: SyncDynamoDBAdapter, moto_endpoint: str
) -> None:
    """An import's read finds a session without marks (its client may then guess mark 0);
    the import does not write it. Later another client's sequence begins there and TTL
    removes its first mark (an old entry's). The first client's next write must not take
    mark 0 on that old guess: it would begin a second sequence."""
    ledger.read_stored_sessions([("rt", "stale")])  # no marks: mark 0 guessed
    ledger._sequencer.fresh_for = 1.0
    old = _now_ms() - DAY_MS + 2_000
    with SyncDynamoDBAdapter(ledger.table_name, endpoint_url=moto_endpoint, retention=DAY) as other:
        other.append(entry("rt", "stale", LedgerEvent.SandboxCreated, old))
        other.append(entry("rt", "stale", LedgerEvent.ExecComplete, _now_ms(), step=0))
    time.sleep(3.2)
    first = _marks(ledger, "rt", "stale")[0]
    ledger.client().delete_item(
        TableName=ledger.table_name, Key={"PK": first["PK"], "SK": first["SK"]}
    )
    ledger.append(entry("rt", "stale", LedgerEvent.SandboxClosed, _now_ms()))
    assert len({m["inc"]["S"] for m in _marks(ledger, "rt", "stale")}) == 1
    assert [f.entry.step_index for f in ledger.follow("rt", "stale")] == [0, -1]
