"""An import's batched writes on DynamoDB (``append_once_many``): few requests, DynamoDB's
transaction limits kept, and exactly once under resends, taken claims, conflicts and
throttling, on both twins."""

from __future__ import annotations

import base64
import os
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from botocore.config import Config

from dynamodb.faults import CancelTransactions, ResendAfterSuccess
from dynamodb.test_dynamodb_faults import workload
from sandbox_ledger import LedgerEntry, LedgerEvent, StorageError
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter, _bulk
from sandbox_ledger.dynamodb.instrument import RequestCounter
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.sdk import steps
from sandbox_ledger.sdk.steps import Call, Parallel
from sandbox_ledger.transfer import ImportReport, content_digest, entry_line, import_lines

pytestmark = pytest.mark.usefixtures("fast_sdk_backoff")

BACKOFF = steps.backoff
"""The adapter's own backoff (``fast_sdk_backoff`` shortens it for each test)."""


def session(name: str, sandbox_id: str, execs: int, *, payload: int = 0) -> list[LedgerEntry]:
    """:func:`workload`'s session (ids in every payload); ``payload``: bytes of incompressible
    text added to each complete exec."""
    entries = workload(name, sandbox_id, execs)
    if not payload:
        return entries
    return [
        e.model_copy(update={"payload": {**e.payload, "data": _noise(payload)}})
        if e.event == LedgerEvent.ExecComplete
        else e
        for e in entries
    ]


def _noise(size: int) -> str:
    return base64.b64encode(os.urandom(size)).decode()[:size]


def sync_adapter(endpoint: str, table: str) -> SyncDynamoDBAdapter:
    return SyncDynamoDBAdapter(
        table,
        endpoint_url=endpoint,
        config=Config(retries={"mode": "standard", "max_attempts": 4}),
    )


def lines(entries: list[LedgerEntry]) -> list[bytes]:
    return [entry_line(e).encode() + b"\n" for e in entries]


def imported_once(adapter: SyncDynamoDBAdapter, entries: list[LedgerEntry]) -> None:
    """Import ``entries`` into an empty session set: every line new, each stored once."""
    report = import_lines(adapter, lines(entries))
    assert (report.new, report.present, report.failed) == (len(entries), 0, [])
    same_as_a_replay(sync_adapter(adapter.client().meta.endpoint_url, adapter.table_name), entries)


def same_as_a_replay(adapter: Any, entries: list[LedgerEntry]) -> None:
    """The store holds ``entries`` once each, with the summaries a replay gives."""
    keys = sorted({(e.name, e.sandbox_id) for e in entries})
    for name, sandbox_id in keys:
        mine = [e for e in entries if (e.name, e.sandbox_id) == (name, sandbox_id)]
        stored = adapter.read_all(name, sandbox_id)
        assert sorted(map(content_digest, stored)) == sorted(map(content_digest, mine))
        details = adapter.get_sandbox_details(name, sandbox_id)
        execs = sum(1 for e in mine if e.event == LedgerEvent.ExecComplete)
        assert details is not None and details.exec_count == execs
        assert details.started_at == 1000 and details.completed_at == 9999
        checkpoints = sum(1 for e in mine if e.event == LedgerEvent.CheckpointCreated)
        assert len(adapter.list_checkpoints(name, sandbox_id)) == checkpoints


def _bytes(value: Any) -> int:
    """Every name and value in an action, binary values at their length."""
    if isinstance(value, dict):
        return sum(len(str(k).encode()) + _bytes(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(_bytes(v) for v in value)
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return len(str(value).encode())


class TransactionLimits:
    """Records every TransactWriteItems' action count and item bytes (counted here, apart
    from the adapter's own estimate: names and values, binary as its decoded length)."""

    def __init__(self) -> None:
        self.actions: list[int] = []
        self.sizes: list[int] = []

    def __call__(self, params: dict[str, Any], **_: Any) -> None:
        items = params["TransactItems"]
        self.actions.append(len(items))
        self.sizes.append(sum(_bytes(action) for action in items))

    def attach(self, client: Any) -> TransactionLimits:
        client.meta.events.register("before-parameter-build.dynamodb.TransactWriteItems", self)
        return self


def test_sessions_of_ten_or_more_take_under_015_requests_per_entry(
    moto_endpoint: str, sync_table: str
) -> None:
    adapter = sync_adapter(moto_endpoint, sync_table)
    entries = [e for i in range(40) for e in session("job", f"s{i:02d}", 4)]
    assert len(entries) == 40 * 11
    counter = RequestCounter().attach(adapter.client())
    report = import_lines(adapter, lines(entries))
    assert (report.new, report.failed) == (len(entries), [])
    # One Query per session and a few transactions: a session of 11 is 35 actions (each
    # entry's head, claim and sequence mark, its summary and the check of the mark before
    # its first), so a transaction of 100 holds two and most of a third.
    assert counter.total / len(entries) <= 0.15, counter.calls
    assert counter.calls["TransactWriteItems"] <= 16
    same_as_a_replay(sync_adapter(moto_endpoint, sync_table), entries)


def test_transactions_stay_within_100_actions_and_4_mb(
    moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 4.6 MB into one partition key: on a strict server (DynamoDB's 1,000 write units a second
    # per partition key, a transaction's items charged twice by size) the transactions after
    # the first wait seconds for the partition, with the adapter's own backoff.
    monkeypatch.setattr(steps, "backoff", BACKOFF)
    adapter = sync_adapter(moto_endpoint, sync_table)
    limits = TransactionLimits().attach(adapter.client())
    # 55 entries of one session (more than 100 actions), then 38 in 81 actions, 16 of them
    # about 285 KB once compressed (4.6 MB).
    entries = session("big", "many", 24) + session("big", "large", 16, payload=380_000)
    imported_once(adapter, entries)
    assert max(limits.actions) <= 100
    assert max(limits.sizes) <= 4 * 1024 * 1024
    assert sum(limits.actions) >= 2 * len(entries)  # a head and a claim each, at least
    assert any(a > 90 for a in limits.actions)  # full transactions, not one per entry
    assert max(limits.sizes) > 3 * 1024 * 1024  # and large ones, split by size
    # Read back over several 1 MB pages, the large session is found whole: all present.
    again = import_lines(sync_adapter(moto_endpoint, sync_table), lines(entries))
    assert (again.new, again.present, again.failed) == (0, len(entries), [])
    same_as_a_replay(sync_adapter(moto_endpoint, sync_table), entries)


def test_a_lost_response_after_a_commit_counts_each_entry_once(
    moto_endpoint: str, sync_table: str
) -> None:
    adapter = sync_adapter(moto_endpoint, sync_table)
    resend = ResendAfterSuccess(1.0, {"TransactWriteItems"}).attach(adapter.client())
    entries = [e for i in range(6) for e in session("job", f"r{i}", 3)]
    imported_once(adapter, entries)
    assert resend.resent >= 1


def test_a_claim_taken_by_another_import_cancels_only_that_entry(
    moto_endpoint: str, sync_table: str
) -> None:
    adapter = sync_adapter(moto_endpoint, sync_table)
    entries = session("job", "c", 5)
    # Another importer stores the third entry between this import's read and its write.
    other = sync_adapter(moto_endpoint, sync_table)
    assert other.append_once(entries[2], 1) is True
    counter = RequestCounter().attach(adapter.client())
    outcomes = adapter.append_once_many([(entry, 1) for entry in entries])
    assert outcomes == [i != 2 for i in range(len(entries))]
    assert counter.calls["TransactWriteItems"] == 2  # cancelled naming the claim, then the rest
    same_as_a_replay(sync_adapter(moto_endpoint, sync_table), entries)


@pytest.mark.parametrize("code", ["ThrottlingError", "TransactionConflict"])
def test_cancelled_transactions_are_retried_and_lose_nothing(
    moto_endpoint: str, sync_table: str, code: str
) -> None:
    adapter = sync_adapter(moto_endpoint, sync_table)
    faults = CancelTransactions(code, times=5, aio=False).attach(adapter.client())
    entries = [e for i in range(12) for e in session("job", f"t{i:02d}", 3)]
    imported_once(adapter, entries)
    assert faults.injected == 5


def test_throttling_past_every_retry_is_an_error_not_a_success(
    moto_endpoint: str, sync_table: str
) -> None:
    adapter = sync_adapter(moto_endpoint, sync_table)
    CancelTransactions("ThrottlingError", times=10_000, aio=False).attach(adapter.client())
    entries = session("job", "never", 3)
    with pytest.raises(StorageError, match="cancelled"):
        adapter.append_once_many([(entry, 1) for entry in entries])
    assert sync_adapter(moto_endpoint, sync_table).read_all("job", "never") == []
    # A re-run once the table answers again stores everything, once.
    imported_once(sync_adapter(moto_endpoint, sync_table), entries)


async def test_the_async_twin_batches_and_survives_resends(
    moto_endpoint: str, sync_table: str
) -> None:
    adapter = DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    client = await adapter.client()
    resend = ResendAfterSuccess(0.5, {"TransactWriteItems"}).attach(client)
    cancel = CancelTransactions("TransactionConflict", times=2, aio=True).attach(client)
    counter = RequestCounter().attach(client)
    entries = [e for i in range(8) for e in session("job", f"a{i}", 4)]
    outcomes = await adapter.append_once_many([(entry, 1) for entry in entries])
    assert outcomes == [True] * len(entries)
    assert resend.resent >= 1 and cancel.injected == 2
    assert counter.calls["TransactWriteItems"] <= 2 + 2 + len(entries) // 20
    again = await adapter.append_once_many([(entry, 1) for entry in entries])
    assert again == [False] * len(entries)
    await adapter.close()
    same_as_a_replay(sync_adapter(moto_endpoint, sync_table), entries)


def test_the_reconciliation_reads_sessions_in_parallel() -> None:
    """Driven without AWS: the first pages of up to READS sessions' queries go out as one
    Parallel step; a session with more pages then reads them one by one."""
    sessions = [("job", f"s{i:02d}") for i in range(_bulk.READS + 3)]
    op = _bulk.read_each_stored("tab", sessions)
    step = next(op)
    assert isinstance(step, Parallel) and len(step.calls) == _bulk.READS
    assert [c.operation for c in step.calls] == ["query"] * _bulk.READS
    more = {"Items": [], "LastEvaluatedKey": {"pk": {"S": "x"}}}
    step = op.send([more] + [{"Items": []}] * (_bulk.READS - 1))
    assert isinstance(step, Call) and step.params["ExclusiveStartKey"] == {"pk": {"S": "x"}}
    step = op.send({"Items": []})
    assert isinstance(step, Parallel) and len(step.calls) == 3
    with pytest.raises(StopIteration) as done:
        op.send([{"Items": []}] * 3)
    assert done.value.value == [[] for _ in sessions]


def test_a_later_summary_expiry_is_kept_by_an_import_of_older_entries(
    moto_endpoint: str, table_name: str
) -> None:
    """The folded summary update takes the form that leaves a later TTL (its condition
    fails once, then the other form goes), as a single append does."""
    adapter = SyncDynamoDBAdapter(
        table_name, endpoint_url=moto_endpoint, retention=timedelta(days=30)
    )
    adapter.create_table()
    now = int(time.time() * 1000)
    adapter.append(
        LedgerEntry(
            ts=now, name="n", sandbox_id="s", step_index=-1, event=LedgerEvent.SandboxClosed
        )
    )
    summary = {k.PARTITION_KEY: {"S": k.session_pk("n", "s")}, k.SORT_KEY: {"S": k.SUMMARY_SK}}

    def expiry() -> int:
        item = adapter.client().get_item(TableName=table_name, Key=summary)["Item"]
        return int(item[k.TTL_ATTRIBUTE]["N"])

    before = expiry()
    older = now - 5 * 86_400_000
    entries = [
        LedgerEntry(
            ts=older, name="n", sandbox_id="s", step_index=-1, event=LedgerEvent.SandboxCreated
        ),
        LedgerEntry(
            ts=older + 1, name="n", sandbox_id="s", step_index=0, event=LedgerEvent.ExecComplete
        ),
    ]
    counter = RequestCounter().attach(adapter.client())
    assert adapter.append_once_many([(e, 1) for e in entries]) == [True, True]
    assert counter.calls["TransactWriteItems"] == 2
    assert expiry() == before
    details = adapter.get_sandbox_details("n", "s")
    assert details is not None and (details.started_at, details.exec_count) == (older, 1)


def test_concurrent_importers_of_many_sessions_store_each_entry_once(
    moto_endpoint: str, sync_table: str
) -> None:
    """Three importers of one file (one of them in reverse session order) race through the
    same sessions' transactions: every entry stored once, the reports adding up."""
    per_session = [session("job", f"c{i:02d}", 3) for i in range(15)]
    entries = [e for s in per_session for e in s]
    files = [entries, entries, [e for s in reversed(per_session) for e in s]]
    reports: list[Any] = []

    def run(order: list[LedgerEntry]) -> None:
        reports.append(import_lines(sync_adapter(moto_endpoint, sync_table), lines(order)))

    threads = [threading.Thread(target=run, args=(order,)) for order in files]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(reports) == 3
    assert sum(r.new for r in reports) == len(entries)
    assert all(r.new + r.present == len(entries) and not r.failed for r in reports)
    same_as_a_replay(sync_adapter(moto_endpoint, sync_table), entries)


def test_an_import_that_gives_up_counts_what_it_stored(moto_endpoint: str, sync_table: str) -> None:
    """A batch goes in parallel transactions: when one gives up (throttled past every
    retry), the others of its round are stored, and the error and the import's report say
    which (they were counted nowhere, and a re-run counted them as present)."""
    adapter = sync_adapter(moto_endpoint, sync_table)
    faults = CancelTransactions("ThrottlingError", times=10_000, aio=False, only="stuck-session")
    faults.attach(adapter.client())
    ok1, ok2, stuck = (session("job", sid, 20) for sid in ("ok-1", "ok-2", "stuck-session"))
    items = ok1 + stuck + ok2
    with pytest.raises(StorageError, match="cancelled") as raised:
        adapter.append_once_many([(entry, 1) for entry in items])
    assert faults.injected > 1  # retried, then given up
    outcomes = raised.value.outcomes
    assert outcomes is not None and set(outcomes) == {True, None}
    stored = _stored(moto_endpoint, sync_table, items)
    assert [content_digest(e) in stored for e in items] == [o is True for o in outcomes]
    assert not stored & set(map(content_digest, stuck))

    # The import's report counts what the stopped batch stored.
    other = sync_adapter(moto_endpoint, sync_table)
    CancelTransactions("ThrottlingError", times=10_000, aio=False, only="stuck-session").attach(
        other.client()
    )
    ok3, ok4 = (session("job", sid, 20) for sid in ("ok-3", "ok-4"))
    report = ImportReport()
    with pytest.raises(StorageError):
        import_lines(other, lines(ok3 + stuck + ok4), report=report)
    written = len(_stored(moto_endpoint, sync_table, ok3 + ok4))
    assert (report.new, report.present, report.failed) == (written, 0, [])
    assert written > 0
    # A re-run once the table answers again writes the rest, and only the rest.
    everything = ok1 + ok2 + ok3 + ok4 + stuck
    before = len(_stored(moto_endpoint, sync_table, everything))
    rerun = import_lines(sync_adapter(moto_endpoint, sync_table), lines(everything))
    assert (rerun.new, rerun.present, rerun.failed) == (len(everything) - before, before, [])
    same_as_a_replay(sync_adapter(moto_endpoint, sync_table), everything)


def _stored(endpoint: str, table: str, entries: list[LedgerEntry]) -> set[str]:
    """The content digests of what the table holds of ``entries``' sessions."""
    reader = sync_adapter(endpoint, table)
    sessions = sorted({(e.name, e.sandbox_id) for e in entries})
    return {content_digest(e) for key in sessions for e in reader.read_all(*key)}


# -- a session's first group puts its summary whole ----------------------------------------


def _entry(sandbox_id: str, event: str, ts: int, step: int = -1) -> LedgerEntry:
    return LedgerEntry(ts=ts, name="n", sandbox_id=sandbox_id, step_index=step, event=event)


E = LedgerEvent
_FOLDS = {
    "created": [E.SandboxCreated],
    "closed": [E.SandboxClosed],
    "execs": [E.ExecStarted, E.ExecComplete, E.ExecComplete],
    "created, execs": [E.SandboxCreated, E.ExecComplete],
    "closed, execs": [E.ExecComplete, E.SandboxClosed],
    "created, closed": [E.SandboxClosed, E.SandboxCreated, E.SandboxCreated],
    "whole": [E.SandboxCreated, E.ExecStarted, E.ExecComplete, E.SandboxClosed],
}


@pytest.mark.parametrize("ttl", [None, 1_900_000_000], ids=["no-ttl", "ttl"])
@pytest.mark.parametrize("shards", [1, 4])
@pytest.mark.parametrize("fold", list(_FOLDS))
def test_a_summary_put_whole_is_what_its_update_makes_of_nothing(
    moto_endpoint: str, sync_table: str, fold: str, shards: int, ttl: int | None
) -> None:
    """The put form of a session's summary (:func:`summary_item`) is the item that the
    update form creates where none is stored, attribute for attribute, as DynamoDB (here
    moto) executes the update."""
    from sandbox_ledger.dynamodb import _items

    client = sync_adapter(moto_endpoint, sync_table).client()
    sid = f"{fold}-{shards}-{ttl}"
    entries = [_entry(sid, event, 1000 + i) for i, event in enumerate(_FOLDS[fold])]
    update = _items.summary_fold(entries, shards, ttl)
    assert update is not None
    folded = {}
    for form in ("update", "put"):
        if form == "update":
            client.update_item(TableName=sync_table, **update)
        else:
            client.put_item(TableName=sync_table, Item=_items.summary_item(update))
        folded[form] = client.get_item(TableName=sync_table, Key=update["Key"])["Item"]
        client.delete_item(TableName=sync_table, Key=update["Key"])
    assert folded["put"] == folded["update"]


def test_summary_item_refuses_an_update_form_it_does_not_know() -> None:
    from sandbox_ledger.dynamodb import _items

    update = _items.summary_fold([_entry("s", E.SandboxCreated, 1)], 1)
    assert update is not None
    for expression in (
        update["UpdateExpression"] + ", x = list_append(x, :nm)",
        update["UpdateExpression"].replace("if_not_exists(", "if_not_exists(other, "),
        "REMOVE x",
    ):
        with pytest.raises(ValueError, match="not a summary update"):
            _items.summary_item({**update, "UpdateExpression": expression})


def _summary(adapter: SyncDynamoDBAdapter, sandbox_id: str) -> dict[str, Any]:
    key = {k.PARTITION_KEY: {"S": k.session_pk("n", sandbox_id)}, k.SORT_KEY: {"S": k.SUMMARY_SK}}
    item: dict[str, Any] = adapter.client().get_item(TableName=adapter.table_name, Key=key)["Item"]
    return item


def assert_summary_as_replayed(
    adapter: SyncDynamoDBAdapter, endpoint: str, entries: list[LedgerEntry]
) -> None:
    """The session's summary is, attribute for attribute, what appending ``entries`` one by
    one into a table of its own leaves (the same session, so the same shard)."""
    replay = sync_adapter(endpoint, f"{adapter.table_name}-replay")
    replay.create_table()
    try:
        for e in entries:
            replay.append(e)
        sandbox_id = entries[0].sandbox_id
        got, want = _summary(adapter, sandbox_id), _summary(replay, sandbox_id)
        # lq names the last write's mark, <incarnation>#<number>: the incarnation is random
        # (each table's sequence begins with one of its own), the number is the replay's.
        for summary in (got, want):
            incarnation, _, number = summary[A.LIFECYCLE_SEQUENCE]["S"].partition("#")
            assert incarnation and number == summary[A.SUMMARY_SEQUENCE]["N"], summary
            summary[A.LIFECYCLE_SEQUENCE] = {"S": f"<incarnation>#{number}"}
        assert got == want
    finally:
        replay.client().delete_table(TableName=replay.table_name)


def test_an_import_into_a_session_the_target_holds_updates_its_summary(
    moto_endpoint: str, sync_table: str
) -> None:
    """A session whose summary is stored: the put form's condition fails (nothing is
    replaced), the stored summary comes back with the failure, and the batch's next
    transaction updates it: two transactions, and the summary that appending every entry
    one by one gives."""
    adapter = sync_adapter(moto_endpoint, sync_table)
    head = [_entry("held", E.SandboxCreated, 1000), _entry("held", E.ExecComplete, 1001, 0)]
    tail = [_entry("held", E.ExecComplete, 1002, 1), _entry("held", E.SandboxClosed, 1003)]
    for e in head:
        adapter.append(e)
    counter = RequestCounter().attach(adapter.client())
    assert adapter.append_once_many([(e, 1) for e in tail]) == [True, True]
    assert counter.calls["TransactWriteItems"] == 2, counter.calls
    assert_summary_as_replayed(adapter, moto_endpoint, head + tail)
    details = adapter.get_sandbox_details("n", "held")
    assert details is not None and (details.started_at, details.exec_count) == (1000, 2)
    assert details.completed_at == 1003


def test_a_summary_created_between_the_read_and_the_batch_is_updated_not_replaced(
    moto_endpoint: str, sync_table: str
) -> None:
    """Another writer creates the session's summary just before the batch's transaction (a
    session the import's reconciliation found empty): the put fails, nothing of the other
    writer's is lost, and the summary folds both."""
    adapter = sync_adapter(moto_endpoint, sync_table)
    other = sync_adapter(moto_endpoint, sync_table)
    raced = [_entry("raced", E.SandboxCreated, 900), _entry("raced", E.ExecComplete, 901, 0)]
    batch = [_entry("raced", E.ExecComplete, 1002, 1), _entry("raced", E.SandboxClosed, 1003)]
    calls = []

    def first_transaction(**_: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            for e in raced:
                other.append(e)

    adapter.client().meta.events.register(
        "before-call.dynamodb.TransactWriteItems", first_transaction
    )
    assert adapter.append_once_many([(e, 1) for e in batch]) == [True, True]
    assert len(calls) == 2
    assert_summary_as_replayed(adapter, moto_endpoint, raced + batch)
    details = adapter.get_sandbox_details("n", "raced")
    assert details is not None and (details.started_at, details.exec_count) == (900, 2)
    assert len(adapter.read_all("n", "raced")) == 4


def test_a_session_held_by_a_running_delete_waits_whatever_the_summary_form(
    moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running delete's lease is on the stored summary: the put form fails on it, and the
    batch backs off as the update form does (a ConflictError once it stays held), instead of
    taking the failure for a summary to update at once."""
    from sandbox_ledger import ConflictError

    adapter = sync_adapter(moto_endpoint, sync_table)
    adapter.append(_entry("leased", E.SandboxCreated, 1000))
    key = {k.PARTITION_KEY: {"S": k.session_pk("n", "leased")}, k.SORT_KEY: {"S": k.SUMMARY_SK}}
    adapter.client().update_item(
        TableName=sync_table,
        Key=key,
        UpdateExpression="SET #dl = :until",
        ExpressionAttributeNames={"#dl": k.LedgerAttr.DELETING},
        ExpressionAttributeValues={":until": {"N": str(int(time.time() * 1000) + 600_000)}},
    )
    counter = RequestCounter().attach(adapter.client())
    with pytest.raises(ConflictError, match="being deleted"):
        adapter.append_once_many([(_entry("leased", E.ExecComplete, 1001, 0), 1)])
    assert counter.calls["TransactWriteItems"] == _bulk.MAX_ATTEMPTS
    assert adapter.read_all("n", "leased") == [_entry("leased", E.SandboxCreated, 1000)]


def test_turning_the_summary_put_into_an_update_costs_no_attempt(
    moto_endpoint: str, sync_table: str
) -> None:
    """A held session's failed put is progress (its group is updated from then on, once),
    not one of the ``MAX_ATTEMPTS`` a transaction has against conflicts: after one fewer
    conflicts than that, the batch still lands."""
    adapter = sync_adapter(moto_endpoint, sync_table)
    adapter.append(_entry("held", E.SandboxCreated, 1000))
    conflicts = CancelTransactions(
        "TransactionConflict", times=_bulk.MAX_ATTEMPTS - 1, aio=False
    ).attach(adapter.client())
    counter = RequestCounter().attach(adapter.client())
    assert adapter.append_once_many([(_entry("held", E.ExecComplete, 1001, 0), 1)]) == [True]
    assert conflicts.injected == _bulk.MAX_ATTEMPTS - 1
    # the conflicts, the put refused by the stored summary, the update
    assert counter.calls["TransactWriteItems"] == _bulk.MAX_ATTEMPTS + 1
    details = adapter.get_sandbox_details("n", "held")
    assert details is not None and (details.started_at, details.exec_count) == (1000, 1)
