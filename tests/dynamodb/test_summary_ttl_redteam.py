"""Red team of the summary TTL kept apart from its expiry (``_items.SUMMARY_SLACK_S``): what a
writer knows of the summary's TTL (``Mark.kept``) must never let it skip a raise it needed,
whatever another writer, an import's retry, a summary of the previous version or a quiet
spell did meanwhile. Each case is checked against the reference (``MemoryAdapter`` with the
same retention) on a strict server whose TTL deletes an item as soon as it has expired, or on
the raw items (the summary's TTL at least every item's of its session)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Generator, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import boto3
import pytest

from sandbox_ledger import LedgerEntry, LedgerEvent, MemoryAdapter
from sandbox_ledger import keys as k
from sandbox_ledger.blocking import BlockingAdapter
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter, _ops
from sandbox_ledger.dynamodb._items import SUMMARY_SLACK_S
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.local import LocalDynamoDB, StrictProfile
from sandbox_ledger.sdk.steps import Call, Op, Parallel
from sandbox_ledger.transfer import entry_line, import_entries, parse_lines

T = TypeVar("T")
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


class _Hooked(SyncDynamoDBAdapter):
    """An adapter that calls ``before(call)`` before each of its calls (another writer's
    write between two of its attempts)."""

    before: Callable[[Call], None] = staticmethod(lambda call: None)

    def run(self, op: Op[T]) -> T:
        return super().run(_hooked(op, self.before))


def _hooked(op: Op[T], before: Callable[[Call], None]) -> Generator[Any, Any, T]:
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = op.throw(error) if error is not None else op.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        for call in step.calls if isinstance(step, Parallel) else [step]:
            if isinstance(call, Call):
                before(call)
        value, error = None, None
        try:
            value = yield step
        except Exception as exc:  # the SDK's error, thrown back into the operation
            error = exc


def _e(sid: str, event: LedgerEvent, ts: int, data: dict[str, Any] | None = None) -> LedgerEntry:
    return LedgerEntry(ts=ts, name="job", sandbox_id=sid, step_index=-1, event=event, payload=data)


def _client(endpoint: str) -> Any:
    return boto3.client("dynamodb", endpoint_url=endpoint, **CREDENTIALS)


def _raw(endpoint: str, table: str, sid: str) -> list[dict[str, Any]]:
    return _client(endpoint).query(  # type: ignore[no-any-return]
        TableName=table,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": k.session_pk("job", sid)}},
        ConsistentRead=True,
    )["Items"]


def _kept_past_every_item(endpoint: str, table: str, sid: str) -> None:
    """The invariant: while the summary exists, its TTL is at least every item's of its
    session."""
    items = _raw(endpoint, table, sid)
    summaries = [i for i in items if i["SK"]["S"] == k.SUMMARY_SK]
    if not summaries:
        return
    kept = int(summaries[0][k.TTL_ATTRIBUTE]["N"])
    others = [int(i[k.TTL_ATTRIBUTE]["N"]) for i in items if i is not summaries[0]]
    assert kept >= max(others, default=0), (kept, max(others))


def _table(endpoint: str, retention: int) -> tuple[str, SyncDynamoDBAdapter]:
    table = f"ledger-{uuid.uuid4().hex[:12]}"
    ledger = SyncDynamoDBAdapter(
        table, endpoint_url=endpoint, retention=timedelta(seconds=retention)
    )
    ledger.create_table()
    return table, ledger


def _wait_gone(endpoint: str, table: str, sid: str, sk: str) -> None:
    deadline = time.monotonic() + 10
    while any(i["SK"]["S"] == sk for i in _raw(endpoint, table, sid)):
        assert time.monotonic() < deadline, "TTL never deleted the expired item"
        time.sleep(0.02)


def _agree(ledger: SyncDynamoDBAdapter, reference: BlockingAdapter, sid: str) -> None:
    got = ledger.get_sandbox_details("job", sid)
    want = reference.get_sandbox_details("job", sid)
    assert (got and (got.started_at, got.exec_count, got.completed_at)) == (
        want and (want.started_at, want.exec_count, want.completed_at)
    )


def test_an_import_whose_raise_failed_raises_after_another_writer_made_the_summary(
    moto_endpoint: str,
) -> None:
    """An import's raise of the summary TTL fails on a session without a summary; before
    its retry another writer makes the summary (a sandbox.created of an old ts: its TTL a
    day from now), so the retry's mark misses and is read again. The retry must raise the
    summary's TTL past its live entry (it skipped the raise for good: the summary's TTL a
    day, the entry's three, and the importer's guess said "no summary" from then on)."""
    retention = 3 * DAY
    table, ledger = _table(moto_endpoint, retention)
    importer = _Hooked(table, endpoint_url=moto_endpoint, retention=timedelta(seconds=retention))
    now = int(time.time() * 1000)
    transactions = 0

    def before(call: Call) -> None:
        nonlocal transactions
        if call.operation != "transact_write_items":
            return
        transactions += 1
        if transactions == 2:  # the first came back cancelled on its raise
            ledger.append(_e("s", LedgerEvent.SandboxCreated, now - (retention - 60) * 1000))

    importer.before = before
    lines = [entry_line(_e("s", LedgerEvent.ExecStarted, now, {"step": 0})).encode()]
    assert import_entries(importer, parse_lines(lines)).new == 1
    assert transactions >= 3  # the raise failed, then the mark missed
    _kept_past_every_item(moto_endpoint, table, "s")
    # The importer's next write of the session (its guess kept) leaves it so too.
    importer.before = staticmethod(lambda call: None)
    importer.append(_e("s", LedgerEvent.ExecStarted, now + 2 * DAY * 1000, {"step": 1}))
    _kept_past_every_item(moto_endpoint, table, "s")


def _make_legacy(endpoint: str, table: str, sid: str) -> None:
    """Rewrite the session's summary as the previous version left it: its TTL its expiry,
    no ``eex``."""
    key = {"PK": {"S": k.session_pk("job", sid)}, "SK": {"S": k.SUMMARY_SK}}
    client = _client(endpoint)
    item = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    client.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="SET #ttl = :e REMOVE #eex",
        ExpressionAttributeNames={"#ttl": k.TTL_ATTRIBUTE, "#eex": A.ENTRY_EXPIRES},
        ExpressionAttributeValues={":e": item[A.ENTRY_EXPIRES]},
    )


@pytest.mark.parametrize("writes", ["appends", "imports", "a late exec.complete first"])
def test_a_summary_of_the_previous_version_is_kept_while_its_session_lives(
    deleting_at_once: LocalDynamoDB, writes: str
) -> None:
    """A session begun before the upgrade (its summary's TTL its expiry, no eex) goes on
    with a live exec.started by this version: the summary must be kept past it, as any
    summary is, so that the exec.complete after it finds the session's startedAt and counts
    (TTL deleted the summary at its old expiry, under the live entry, and the exec.complete
    made a summary without startedAt: the session left get_sandbox_details)."""
    endpoint = deleting_at_once.endpoint_url
    retention = 3 * DAY
    table, ledger = _table(endpoint, retention)
    reference = BlockingAdapter(MemoryAdapter(retention=timedelta(seconds=retention)))
    now = int(time.time() * 1000)
    soon = now - (retention - 2) * 1000  # expires in two seconds
    early = [
        _e("s", LedgerEvent.SandboxCreated, soon),
        _e("s", LedgerEvent.ExecComplete, soon + 1, {"step": 0}),
    ]
    for entry in early:
        ledger.append(entry)
        reference.append(entry)
    _make_legacy(endpoint, table, "s")
    writer = SyncDynamoDBAdapter(  # another process, upgraded: no guess of the session
        table, endpoint_url=endpoint, retention=timedelta(seconds=retention)
    )
    started = _e("s", LedgerEvent.ExecStarted, now, {"step": 1})
    if writes == "a late exec.complete first":
        # Older than the summary's expiry: the form that keeps it (its TTL, no eex).
        late = _e("s", LedgerEvent.ExecComplete, soon - 1500, {"step": 0})
        writer.append(late)
        reference.append(late)
        [summary] = [i for i in _raw(endpoint, table, "s") if i["SK"]["S"] == k.SUMMARY_SK]
        assert summary[A.ENTRY_EXPIRES] == {"N": str((soon + 1) // 1000 + retention)}
        _kept_past_every_item(endpoint, table, "s")
    if writes != "imports":
        writer.append(started)
    else:
        assert import_entries(writer, parse_lines([entry_line(started).encode()])).new == 1
    reference.append(started)
    _kept_past_every_item(endpoint, table, "s")
    # The early entries expire and TTL deletes them at once (the summary too, if it may).
    _wait_gone(endpoint, table, "s", _head_sk(endpoint, table, "s", soon))
    complete = _e("s", LedgerEvent.ExecComplete, now + 1, {"step": 1})
    writer.append(complete)
    reference.append(complete)
    _agree(writer, reference, "s")


def _head_sk(endpoint: str, table: str, sid: str, ts: int) -> str:
    """The sort key of the session's entry head of ``ts``."""
    [sk] = [
        i["SK"]["S"] for i in _raw(endpoint, table, sid) if A.TS in i and int(i[A.TS]["N"]) == ts
    ]
    return str(sk)


@pytest.mark.parametrize("event", [LedgerEvent.ExecStarted, LedgerEvent.CheckpointCreated])
def test_a_write_of_an_old_ts_near_the_summarys_ttl_keeps_it_past_the_write(
    moto_endpoint: str, table_name: str, monkeypatch: pytest.MonkeyPatch, event: LedgerEvent
) -> None:
    """A writer's last write of a session of old entries set the summary's TTL a day ahead;
    near the end of that day (here: that write's clock a day less a minute back) it appends
    another entry of an old ts, whose mark does not pass that TTL. TTL must not be free to
    delete the summary right after that write (an exec.complete a moment later then made a
    summary without startedAt): the summary's TTL is raised at least half a day past it."""
    retention = DAY
    ledger = SyncDynamoDBAdapter(
        table_name, endpoint_url=moto_endpoint, retention=timedelta(seconds=retention)
    )
    ledger.create_table()
    real = int(time.time() * 1000)
    old = real - 3 * DAY * 1000  # every entry below expired on arrival
    back = (SUMMARY_SLACK_S - 60) * 1000
    monkeypatch.setattr(_ops, "_now_ms", lambda: time.time_ns() // 1_000_000 - back)
    ledger.append(_e("s", LedgerEvent.SandboxCreated, old))
    ledger.append(_e("s", LedgerEvent.ExecComplete, old + 1))
    monkeypatch.undo()
    data = {"snapshotId": "x"} if event == LedgerEvent.CheckpointCreated else {"step": 1}
    written = int(time.time())
    ledger.append(_e("s", event, old + 2, data))
    _kept_past_every_item(moto_endpoint, table_name, "s")
    [summary] = [i for i in _raw(moto_endpoint, table_name, "s") if i["SK"]["S"] == k.SUMMARY_SK]
    assert int(summary[k.TTL_ATTRIBUTE]["N"]) >= written + SUMMARY_SLACK_S // 2


@pytest.mark.parametrize("seed", range(6))
def test_writers_importers_and_deletes_keep_the_summary_past_every_item(
    moto_endpoint: str, table_name: str, seed: int
) -> None:
    """Three writers (each its own guesses), appends and imports of entries of any age, in
    any order, sessions begun without sandbox.created, and deletes: after each step the
    summary's TTL is at least every item's of its session, and the reads agree with the
    reference."""
    import random

    rng = random.Random(seed)
    retention = 2 * DAY
    writers = [
        SyncDynamoDBAdapter(
            table_name, endpoint_url=moto_endpoint, retention=timedelta(seconds=retention)
        )
        for _ in range(3)
    ]
    writers[0].create_table()
    reference = BlockingAdapter(MemoryAdapter(retention=timedelta(seconds=retention)))
    now = int(time.time() * 1000)
    events = [
        LedgerEvent.SandboxCreated,
        LedgerEvent.ExecStarted,
        LedgerEvent.ExecComplete,
        LedgerEvent.ExecFailed,
        LedgerEvent.CheckpointCreated,
        LedgerEvent.SandboxClosed,
    ]
    for step in range(60):
        sid = rng.choice(["a", "b"])
        writer = rng.choice(writers)
        roll = rng.random()
        if roll < 0.08:
            writer.delete_sandbox("job", sid)
            reference.delete_sandbox("job", sid)
        else:
            event = rng.choice(events)
            data = {"snapshotId": f"x{step}"} if event == LedgerEvent.CheckpointCreated else {}
            ts = now + rng.randrange(-4 * DAY, 2 * DAY) * 1000 + step
            entry = _e(sid, event, ts, {**data, "step": step})
            if roll < 0.35:
                lines = [entry_line(entry).encode()]
                got = import_entries(writer, parse_lines(lines))
                want = import_entries(reference, parse_lines(lines))
                assert (got.new, got.expired) == (want.new, want.expired), step
            else:
                writer.append(entry)
                reference.append(entry)
        _kept_past_every_item(moto_endpoint, table_name, sid)
        _agree(writer, reference, sid)
        got_entries = sorted((e.ts, e.event) for e in writer.read_all("job", sid))
        assert got_entries == sorted((e.ts, e.event) for e in reference.read_all("job", sid))
        in_order = writer.read_in_append_order("job", sid)
        assert in_order == reference.read_in_append_order("job", sid), step
    for writer in writers:
        writer.close()


def test_an_entry_of_an_old_ts_between_live_ones_leaves_the_sequence_whole(
    moto_endpoint: str, table_name: str
) -> None:
    """An entry of an old ts (expired on arrival) between two live ones: its mark's TTL is
    raised to the mark before's (marks expire in order), its own beside it (``eex``). The
    reads of a session through its marks hid that mark by its entry's expiry, read it as a
    mark stored after the read (it is missing among live ones, yet stored), and left out
    every entry after it: read_in_append_order lost the live exec.started."""
    retention = DAY
    ledger = SyncDynamoDBAdapter(
        table_name, endpoint_url=moto_endpoint, retention=timedelta(seconds=retention)
    )
    ledger.create_table()
    reference = BlockingAdapter(MemoryAdapter(retention=timedelta(seconds=retention)))
    now = int(time.time() * 1000)
    entries = [
        _e("s", LedgerEvent.SandboxCreated, now),
        _e("s", LedgerEvent.ExecStarted, now - 2 * DAY * 1000, {"step": 0}),
        _e("s", LedgerEvent.ExecStarted, now + 1, {"step": 1}),
        _e("s", LedgerEvent.SandboxClosed, now + 2),
    ]
    for entry in entries:
        ledger.append(entry)
        reference.append(entry)
    want = reference.read_in_append_order("job", "s")
    assert [e.ts for e in want] == [now, now + 1, now + 2]
    assert ledger.read_in_append_order("job", "s") == want
    assert ledger.read_sessions_in_append_order([("job", "s")]) == [want]
    assert [f.entry for f in ledger.follow("job", "s")] == want
