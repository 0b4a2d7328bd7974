"""The DynamoDB operations (``dynamodb/_ops.py``) against the moto server, where the conformance
suite does not reach: what an append does with each kind of cancelled transaction, a read that
meets an entry missing a part, a delete of many pages (each item deleted once, its lease
renewed, a delete that another took over), the parts a delete leaves for an append in flight,
and ``create_table`` on a table still CREATING or already there; what the newest checkpoint
reads.

DynamoDB's answers that moto does not give on its own (a CREATING table, a cancelled
transaction, pages of a few items) are put in by the test's own client (botocore event hooks);
every test drives the operations with ``run_sync`` and that client."""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
import types
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from dynamodb.partition import after_delete
from sandbox_ledger import (
    ConflictError,
    EnvironmentRecord,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    SandboxStatus,
    StorageError,
)
from sandbox_ledger import keys as k
from sandbox_ledger.deployment import SweepSettings
from sandbox_ledger.dynamodb import _delete, _ops
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb._sequence import Sequencer
from sandbox_ledger.sdk.attributes import N, S
from sandbox_ledger.sdk.steps import MAX_ATTEMPTS, run_sync

pytestmark = pytest.mark.usefixtures("fast_sdk_backoff")

SHARDS = k.DEFAULT_SHARD_COUNT
PK = k.session_pk("build", "sb-1")


def entry(
    event: str = LedgerEvent.ExecComplete, payload: object = None, ts: int = 1_000
) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name="build", sandbox_id="sb-1", step_index=0, event=event, payload=payload
    )


class Client:
    """A client of its own (hooks stay with it) that counts the requests it sends."""

    def __init__(self, endpoint: str) -> None:
        self.sdk = boto3.session.Session().client("dynamodb", endpoint_url=endpoint)
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.sdk.meta.events.register("before-call.dynamodb.*", self._count)

    def _count(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        self.sent.append((model.name, params))

    def calls(self, operation: str) -> list[dict[str, Any]]:
        return [params for name, params in self.sent if name == operation]

    def run(self, op: Any) -> Any:
        return run_sync(self.sdk, op)


@pytest.fixture
def client(moto_endpoint: str) -> Client:
    return Client(moto_endpoint)


def cancel_transactions(client: Client, *reasons: list[str]) -> None:
    """Answer the next transactions with DynamoDB's cancellation, one per ``reasons``."""
    pending = list(reasons)

    def answer(**_: Any) -> Any:
        if not pending:
            return None
        codes = pending.pop(0)
        parsed = {
            "Error": {"Code": "TransactionCanceledException", "Message": f"cancelled {codes}"},
            "CancellationReasons": [{"Code": code} for code in codes],
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return AWSResponse("https://dynamodb", 400, {}, None), parsed

    client.sdk.meta.events.register("before-call.dynamodb.TransactWriteItems", answer)


def stored_items(fixture_client: Any, table: str) -> list[dict[str, Any]]:
    return fixture_client.query(
        TableName=table,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": S(PK)},
        ConsistentRead=True,
    )["Items"]


def lease_updates(client: Client) -> list[Any]:
    """The UpdateItem calls on the session's summary (a delete's lease), not on its marks."""
    return [
        call
        for call in client.calls("UpdateItem")
        if json.loads(call["body"])["Key"][k.SORT_KEY] == S(k.SUMMARY_SK)
    ]


# -- append ---------------------------------------------------------------------------------


def test_an_append_retries_a_conflicting_transaction_and_stores_the_entry_once(
    client: Client, sync_table: str, caplog: pytest.LogCaptureFixture
) -> None:
    client.run(
        _ops.append(
            sync_table, entry(LedgerEvent.SandboxCreated), it.order_ids.next(), SHARDS, Sequencer()
        )
    )
    before = len(client.calls("TransactWriteItems"))
    cancel_transactions(client, ["None", "TransactionConflict"])
    with caplog.at_level(logging.INFO, logger="sandbox_ledger"):
        assert (
            client.run(_ops.append(sync_table, entry(), it.order_ids.next(), SHARDS, Sequencer()))
            is True
        )
    assert len(client.calls("TransactWriteItems")) - before == 2  # cancelled, then stored
    stored = client.run(_ops.read_all(sync_table, "build", "sb-1"))
    assert [e.event for e in stored] == ["sandbox.created", "exec.complete"]
    details = client.run(_ops.get_sandbox_details(sync_table, "build", "sb-1"))
    assert details is not None and details.exec_count == 1
    logged = [r.getMessage() for r in caplog.records]
    assert "append build/sb-1: transaction cancelled ['None', 'TransactionConflict'], retry 1" in (
        logged
    )


def test_an_append_cancelled_for_a_reason_no_retry_cures_fails_at_once(
    client: Client, sync_table: str
) -> None:
    cancel_transactions(client, *[["None", "ItemCollectionSizeLimitExceeded"]] * MAX_ATTEMPTS)
    with pytest.raises(StorageError) as raised:
        client.run(_ops.append(sync_table, entry(), it.order_ids.next(), SHARDS, Sequencer()))
    assert not isinstance(raised.value, ConflictError)  # nothing says a delete is running
    assert len(client.calls("TransactWriteItems")) == 1


def test_an_append_with_a_ttl_waits_for_a_running_delete_then_says_so(
    client: Client,
    sync_table: str,
    fixture_clients: Any,
    moto_endpoint: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client.run(
        _ops.append(
            sync_table,
            entry(LedgerEvent.SandboxCreated),
            it.order_ids.next(),
            SHARDS,
            Sequencer(),
            ttl=4_000_000_000,
        )
    )
    lease_until = time.time_ns() // 1_000_000 + 60_000  # a delete_sandbox holds the session
    fixture_clients(moto_endpoint).update_item(
        TableName=sync_table,
        Key=it.summary_key(PK),
        UpdateExpression="SET #dl = :until",
        ExpressionAttributeNames={"#dl": k.LedgerAttr.DELETING},
        ExpressionAttributeValues={":until": N(lease_until)},
    )
    before = len(client.calls("TransactWriteItems"))
    said = r"append: the session is being deleted \(retry once delete_sandbox has returned\)"
    with pytest.raises(ConflictError, match=said) as raised, caplog.at_level(logging.WARNING):
        client.run(
            _ops.append(
                sync_table, entry(), it.order_ids.next(), SHARDS, Sequencer(), ttl=4_000_000_000
            )
        )
    assert raised.value.code == "TransactionCanceledException"
    logged = [r.getMessage() for r in caplog.records]
    assert f"append build/sb-1: giving up after {MAX_ATTEMPTS} attempts" in logged
    assert len(client.calls("TransactWriteItems")) - before == MAX_ATTEMPTS


def test_an_out_of_order_append_whose_summary_a_delete_removed_meanwhile_starts_it_again(
    client: Client, sync_table: str, fixture_clients: Any, moto_endpoint: str
) -> None:
    later, earlier = 4_000_000_000, 3_000_000_000
    client.run(
        _ops.append(
            sync_table, entry(LedgerEvent.SandboxCreated), "1", SHARDS, Sequencer(), ttl=later
        )
    )
    raw = fixture_clients(moto_endpoint)
    sent = iter(range(1, 100))

    def deleted_after_the_first(**_: Any) -> None:  # the summary's TTL is later: try again,
        if next(sent) == 2:  # leaving it; a delete_sandbox removes the summary just then
            raw.delete_item(TableName=sync_table, Key=it.summary_key(PK))

    client.sdk.meta.events.register(
        "before-call.dynamodb.TransactWriteItems", deleted_after_the_first
    )
    client.run(
        _ops.append(sync_table, entry(), it.order_ids.next(), SHARDS, Sequencer(), ttl=earlier)
    )
    summary = raw.get_item(TableName=sync_table, Key=it.summary_key(PK), ConsistentRead=True)
    assert summary["Item"][k.LedgerAttr.ENTRY_EXPIRES] == N(earlier)  # made again by this append
    # kept while the session's latest entry (the created's) lives
    assert summary["Item"][k.TTL_ATTRIBUTE] == N(later + it.SUMMARY_SLACK_S)


def test_an_import_claim_held_by_another_write_stores_nothing(
    client: Client, sync_table: str
) -> None:
    claim = k.claim_sk("0" * 64, 1)
    started = entry(LedgerEvent.ExecStarted)  # no summary change: the transaction is head and claim
    assert client.run(
        _ops.append(sync_table, started, it.order_ids.next(), SHARDS, Sequencer(), claim=claim)
    )
    again = _ops.append(sync_table, started, it.order_ids.next(), SHARDS, Sequencer(), claim=claim)
    assert client.run(again) is False
    assert len(client.run(_ops.read_all(sync_table, "build", "sb-1"))) == 1


def test_an_import_write_resent_after_it_landed_counts_as_written_by_this_call(
    client: Client, sync_table: str
) -> None:
    """The SDK resends a transaction whose response was lost: the resend finds its own head
    and claim stored, and the call still says it wrote the entry (an import counts it new),
    stored and counted once."""
    from dynamodb.faults import ResendAfterSuccess

    client.run(_ops.append(sync_table, entry(LedgerEvent.SandboxCreated), "1", SHARDS, Sequencer()))
    resent = ResendAfterSuccess(1.0, {"TransactWriteItems"}).attach(client.sdk)
    claim = k.claim_sk("1" * 64, 1)
    done = client.run(
        _ops.append(sync_table, entry(), it.order_ids.next(), SHARDS, Sequencer(), claim=claim)
    )
    assert resent.resent == 1 and done is True
    stored = client.run(_ops.read_all(sync_table, "build", "sb-1"))
    assert sorted(e.event for e in stored) == ["exec.complete", "sandbox.created"]
    details = client.run(_ops.get_sandbox_details(sync_table, "build", "sb-1"))
    assert details is not None and details.exec_count == 1


def test_an_append_with_a_ttl_meets_a_lease_that_ends_this_very_millisecond(
    client: Client,
    sync_table: str,
    fixture_clients: Any,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A delete's lease still holds the session in the millisecond it ends (the condition is
    ``#dl < :now``): an append with a TTL that meets it waits as for a running delete and
    then says so, instead of taking the refusal for its TTL's."""
    client.run(
        _ops.append(
            sync_table, entry(LedgerEvent.SandboxCreated), "1", SHARDS, Sequencer(), ttl=4 * 10**9
        )
    )
    now_ms = time.time_ns() // 1_000_000
    deleting(fixture_clients(moto_endpoint), sync_table, now_ms)
    monkeypatch.setattr(_ops, "time", types.SimpleNamespace(time_ns=lambda: now_ms * 1_000_000))
    with pytest.raises(ConflictError, match="being deleted") as raised:
        client.run(
            _ops.append(
                sync_table, entry(), it.order_ids.next(), SHARDS, Sequencer(), ttl=4 * 10**9
            )
        )
    assert raised.value.code == "TransactionCanceledException"


def summary_refused(client: Client, ttls: list[int]) -> None:
    """Answer the next transactions as DynamoDB does when the summary's condition fails, the
    summary (returned, ALL_OLD) carrying each TTL of ``ttls`` in turn; then let them through."""
    left = list(ttls)

    def answer(**_: Any) -> Any:
        if not left:
            return None
        parsed = {
            "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
            "CancellationReasons": [
                {"Code": "None"},
                {"Code": "ConditionalCheckFailed", "Item": {k.TTL_ATTRIBUTE: N(left.pop(0))}},
            ],
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return AWSResponse("https://dynamodb", 400, {}, None), parsed

    client.sdk.meta.events.register("before-call.dynamodb.TransactWriteItems", answer)


def summary_forms(client: Client) -> list[str]:
    """The summary update's form in each transaction sent: ``set`` (it sets the TTL) or
    ``keep`` (it leaves a later one)."""
    forms: list[str] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        [update] = [a["Update"] for a in params["TransactItems"] if "Update" in a]
        forms.append("keep" if "#ttl > :ttl" in update["ConditionExpression"] else "set")

    client.sdk.meta.events.register("provide-client-params.dynamodb.TransactWriteItems", record)
    return forms


def test_an_append_whose_summary_ttl_keeps_moving_tries_a_bounded_number_of_times(
    client: Client, sync_table: str
) -> None:
    """Each refusal of the summary's TTL condition is answered with the form that fits the
    TTL it returned; a TTL that moves on every attempt (later, then earlier, ...) ends the
    append after MAX_ATTEMPTS transactions, with DynamoDB's error."""
    ttl = 3_000_000_000
    summary_refused(client, [ttl + 10, ttl - 10] * (2 * MAX_ATTEMPTS))
    forms = summary_forms(client)
    with pytest.raises(StorageError, match="TransactionCanceledException: cancelled"):
        client.run(
            _ops.append(sync_table, entry(), it.order_ids.next(), SHARDS, Sequencer(), ttl=ttl)
        )
    assert forms == ["set", "keep"] * (MAX_ATTEMPTS // 2) + ["set"] * (MAX_ATTEMPTS % 2)


def test_an_append_sets_the_ttl_again_once_the_summarys_is_its_own(
    client: Client, sync_table: str
) -> None:
    """Refused first by a later TTL (the next attempt leaves the TTL alone), then by a summary
    whose TTL is now the append's own (made again meanwhile): the third attempt sets the TTL
    again, and lands."""
    ttl = 3_000_000_000
    summary_refused(client, [ttl + 10, ttl])
    forms = summary_forms(client)
    assert client.run(
        _ops.append(sync_table, entry(), it.order_ids.next(), SHARDS, Sequencer(), ttl=ttl)
    )
    assert forms == ["set", "keep", "set"]


def test_an_append_that_gives_up_says_why_with_dynamodbs_code(
    client: Client, sync_table: str
) -> None:
    # A conflict (another transaction in flight) gets steps.MAX_CONFLICTS tries, not
    # MAX_ATTEMPTS: it is contention, not a fault.
    from sandbox_ledger.sdk.steps import MAX_CONFLICTS

    cancel_transactions(client, *[["None", "TransactionConflict"]] * MAX_CONFLICTS)
    with pytest.raises(StorageError) as raised:
        client.run(_ops.append(sync_table, entry(), it.order_ids.next(), SHARDS, Sequencer()))
    assert str(raised.value) == (
        f"append: transaction cancelled {MAX_CONFLICTS} times (['None', 'TransactionConflict'])"
    )
    assert raised.value.code == "TransactionCanceledException"
    assert not isinstance(raised.value, ConflictError)


# -- reads of an entry missing a part -------------------------------------------------------


@pytest.fixture
def broken_entry(
    client: Client,
    sync_table: str,
    monkeypatch: pytest.MonkeyPatch,
    fixture_clients: Any,
    moto_endpoint: str,
) -> Any:
    """A stored entry of three parts (parts of 350 bytes) whose second part is gone."""
    monkeypatch.setattr(it, "CHUNK_BYTES", 350)
    big = entry(payload=os.urandom(600).hex())  # random: zlib only halves it
    client.run(_ops.append(sync_table, big, it.order_ids.next(), SHARDS, Sequencer()))
    raw = fixture_clients(moto_endpoint)
    parts = [i for i in stored_items(raw, sync_table) if k.part_head(i["SK"]["S"]) is not None]
    assert len(parts) == 2
    raw.delete_item(TableName=sync_table, Key={"PK": parts[0]["PK"], "SK": parts[0]["SK"]})
    return raw


def deleting(raw: Any, table: str, until_ms: int | None = None) -> None:
    """The session's summary carries a delete's mark, held until ``until_ms`` (a running
    delete's: a minute from now)."""
    until = time.time_ns() // 1_000_000 + 60_000 if until_ms is None else until_ms
    raw.update_item(
        TableName=table,
        Key=it.summary_key(PK),
        UpdateExpression="SET #dl = :until",
        ExpressionAttributeNames={"#dl": k.LedgerAttr.DELETING},
        ExpressionAttributeValues={":until": N(until)},
    )


def test_a_read_refuses_an_entry_missing_a_part_in_a_session_nobody_deletes(
    client: Client, sync_table: str, broken_entry: Any
) -> None:
    with pytest.raises(ValueError, match="part"):
        client.run(_ops.read_all(sync_table, "build", "sb-1"))


def test_a_read_leaves_out_an_entry_missing_a_part_while_a_delete_runs(
    client: Client, sync_table: str, broken_entry: Any
) -> None:
    deleting(broken_entry, sync_table)
    assert client.run(_ops.read_all(sync_table, "build", "sb-1")) == []


def test_an_imports_read_of_stored_entries_treats_a_missing_part_as_every_read_does(
    client: Client, sync_table: str, broken_entry: Any
) -> None:
    """What an import reconciles against (``read_stored``): the entry missing a part is
    refused in a session nobody deletes, and left out while a delete runs."""
    with pytest.raises(ValueError, match="part"):
        client.run(_ops.read_stored(sync_table, "build", "sb-1"))
    deleting(broken_entry, sync_table)
    assert client.run(_ops.read_stored(sync_table, "build", "sb-1")) == []


def test_an_append_after_a_delete_whose_lease_ran_out_a_second_ago_is_stored(
    client: Client, sync_table: str, fixture_clients: Any, moto_endpoint: str
) -> None:
    """A delete that died leaves its mark; once its lease has run out by this clock (here a
    second ago) appends go on: the clock is the wall clock in milliseconds."""
    client.run(
        _ops.append(
            sync_table, entry(LedgerEvent.SandboxCreated), it.order_ids.next(), SHARDS, Sequencer()
        )
    )
    deleting(fixture_clients(moto_endpoint), sync_table, time.time_ns() // 1_000_000 - 1_000)
    assert (
        client.run(_ops.append(sync_table, entry(), it.order_ids.next(), SHARDS, Sequencer()))
        is True
    )
    assert len(client.run(_ops.read_all(sync_table, "build", "sb-1"))) == 2


def stale_replica(client: Client) -> None:
    """Answer every read that is not strongly consistent as a replica that has not yet seen
    the table's writes (DynamoDB's eventually consistent reads may lag a second; moto's never
    do)."""
    empty = {"GetItem": {}, "Query": {"Items": [], "Count": 0, "ScannedCount": 0}}

    def answer(model: Any, params: dict[str, Any], **_: Any) -> Any:
        sent = json.loads(params["body"] or b"{}")  # the request as serialized
        if model.name in empty and not sent.get("ConsistentRead"):
            return AWSResponse("https://dynamodb", 200, {}, None), {
                **empty[model.name],
                "ResponseMetadata": {"HTTPStatusCode": 200},
            }
        return None

    client.sdk.meta.events.register("before-call.dynamodb.*", answer)


def test_reads_right_after_writes_see_them_on_a_replica_that_lags(
    client: Client, sync_table: str, broken_entry: Any
) -> None:
    """Every read of a session, its summary and the environment records is strongly
    consistent: it sees the write just made however far the replicas lag."""
    created = entry(LedgerEvent.SandboxCreated, ts=500)
    client.run(_ops.append(sync_table, created, it.order_ids.next(), SHARDS, Sequencer()))
    stale_replica(client)
    client.run(_ops.save_environment(sync_table, EnvironmentRecord(name="py", built_at=5), "1"))
    assert client.run(_ops.get_environment(sync_table, "py")) is not None
    assert [e.name for e in client.run(_ops.list_environments(sync_table))] == ["py"]
    details = client.run(_ops.get_sandbox_details(sync_table, "build", "sb-1"))
    assert details is not None and details.exec_count == 1  # the broken entry's
    deleting(broken_entry, sync_table)  # its read must see the mark: else it refuses
    assert [e.event for e in client.run(_ops.read_all(sync_table, "build", "sb-1"))] == [
        "sandbox.created"
    ]
    broken_entry.update_item(
        TableName=sync_table,
        Key=it.summary_key(PK),
        UpdateExpression="REMOVE #dl",
        ExpressionAttributeNames={"#dl": k.LedgerAttr.DELETING},
    )
    with pytest.raises(ValueError, match="part"):  # and the prefix query sees the parts
        client.run(_ops.read_all(sync_table, "build", "sb-1"))


# -- delete_sandbox -------------------------------------------------------------------------


def heads(raw: Any, table: str, count: int) -> None:
    """``count`` stored entries of the session (heads only), written directly."""
    items = [it.encode_entry(entry(ts=ts), it.order_ids.next()).head for ts in range(count)]
    for at in range(0, count, 25):
        batch = [{"PutRequest": {"Item": item}} for item in items[at : at + 25]]
        raw.batch_write_item(RequestItems={table: batch})


@pytest.fixture
def many_pages(
    client: Client,
    sync_table: str,
    fixture_clients: Any,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    """60 entries; queries answered 20 items a page (DynamoDB's pages end at 1 MB), and a clock
    that moves 35 s at each reading, so the delete's lease (60 s) is due before each batch
    (half of it passed)."""
    raw = fixture_clients(moto_endpoint)
    heads(raw, sync_table, 60)
    client.sdk.meta.events.register(
        "provide-client-params.dynamodb.Query", lambda params, **_: params.update(Limit=20)
    )
    clock = iter(range(time.time_ns(), 2**63, 35 * 10**9))
    monkeypatch.setattr(_ops, "time", types.SimpleNamespace(time_ns=lambda: next(clock)))
    return raw


def test_a_delete_of_many_pages_deletes_each_item_once_and_renews_its_lease(
    client: Client, sync_table: str, many_pages: Any
) -> None:
    raw = many_pages
    client.run(_delete.delete_session(sync_table, PK))
    assert after_delete(stored_items(raw, sync_table)) == []
    batches = [
        json.loads(p["body"])["RequestItems"][sync_table] for p in client.calls("BatchWriteItem")
    ]
    assert sum(len(b) for b in batches) == 60  # each item once, in batches of 25
    assert [len(b) for b in batches] == [25, 25, 10]
    reads = [q for q in client.calls("Query") if "ProjectionExpression" in json.loads(q["body"])]
    assert len(reads) >= 3  # the partition, 20 items a page
    # taken, then renewed before the seal, each page and each batch
    assert len(lease_updates(client)) == 1 + 1 + len(reads) + len(batches)


def test_a_delete_that_another_took_over_stops_renewing_and_leaves_the_summary_to_it(
    client: Client, sync_table: str, many_pages: Any
) -> None:
    raw = many_pages

    def take_over(**_: Any) -> None:  # another delete_sandbox takes the lease with its token
        raw.update_item(
            TableName=sync_table,
            Key=it.summary_key(PK),
            UpdateExpression="SET #dt = :token",
            ExpressionAttributeNames={"#dt": k.LedgerAttr.DELETING_TOKEN},
            ExpressionAttributeValues={":token": S("the-other-delete")},
        )

    client.sdk.meta.events.register("before-call.dynamodb.BatchWriteItem", take_over)
    client.run(_delete.delete_session(sync_table, PK))
    # taken, renewed before the seal, each page and the first batch, refused before the
    # second batch, then left to the other
    reads = [q for q in client.calls("Query") if "ProjectionExpression" in json.loads(q["body"])]
    assert len(lease_updates(client)) == 1 + 1 + len(reads) + 2
    assert len(client.calls("BatchWriteItem")) == 3  # the delete goes on: only the lease is left
    left = after_delete(stored_items(raw, sync_table))
    assert [i["SK"]["S"] for i in left] == [k.SUMMARY_SK]


def parts_written_at(raw: Any, table: str, written_ns: int, ts: int) -> None:
    """The parts of an entry whose head is not stored yet, its order id made at ``written_ns``."""
    order = f"{written_ns:020d}beefcafe"
    big = it.encode_entry(entry(payload=os.urandom(600).hex(), ts=ts), order)
    for part in big.parts:
        raw.put_item(TableName=table, Item=part)


def test_a_delete_leaves_the_parts_of_an_append_in_flight_for_15_minutes_exactly(
    client: Client,
    sync_table: str,
    fixture_clients: Any,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(it, "CHUNK_BYTES", 350)
    raw = fixture_clients(moto_endpoint)
    now = time.time_ns()
    grace = _delete.ORPHAN_PART_GRACE_MS * 1_000_000
    parts_written_at(raw, sync_table, now - grace, ts=1)  # a writer that died: deleted
    parts_written_at(raw, sync_table, now - grace + 1, ts=2)  # still in flight: left
    monkeypatch.setattr(_delete, "time", types.SimpleNamespace(time_ns=lambda: now))
    client.run(_delete.delete_session(sync_table, PK))
    left = {k.part_head(i["SK"]["S"]) for i in after_delete(stored_items(raw, sync_table))}
    assert len(left) == 1 and next(iter(left)).startswith(f"{k.EVENT_PREFIX}0000000000000002#")


def test_a_delete_takes_an_entry_just_appended_whole_and_what_follows_an_append_in_flight(
    client: Client,
    sync_table: str,
    fixture_clients: Any,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the parts whose head is not stored yet are left for their append: a large entry
    appended a moment ago goes whole (its parts with its head), and so does every entry that
    sorts after the parts left."""
    monkeypatch.setattr(it, "CHUNK_BYTES", 350)
    raw = fixture_clients(moto_endpoint)
    parts_written_at(raw, sync_table, time.time_ns(), ts=2)  # an append in flight
    big = entry(payload=os.urandom(600).hex(), ts=3)  # stored whole, just now
    client.run(_ops.append(sync_table, big, it.order_ids.next(), SHARDS, Sequencer()))
    client.run(_ops.append(sync_table, entry(ts=4), it.order_ids.next(), SHARDS, Sequencer()))
    # The parts in flight, the big entry (head and 2 parts) and the small one, each with its
    # sequence mark, and the summary.
    assert len(stored_items(raw, sync_table)) == 2 + 3 + 1 + 2 + 1
    client.run(_delete.delete_session(sync_table, PK))
    left = [k.part_head(i["SK"]["S"]) for i in after_delete(stored_items(raw, sync_table))]
    in_flight = f"{k.EVENT_PREFIX}0000000000000002#"
    assert len(left) == 2 and all(head and head.startswith(in_flight) for head in left), left


def test_a_delete_on_a_replica_that_lags_still_deletes_what_was_just_written(
    client: Client, sync_table: str, fixture_clients: Any, moto_endpoint: str
) -> None:
    """The delete finds the session's items with a strongly consistent query: entries
    appended a moment before are deleted however far the replicas lag."""
    for ts in (1, 2, 3):
        client.run(_ops.append(sync_table, entry(ts=ts), it.order_ids.next(), SHARDS, Sequencer()))
    stale_replica(client)
    client.run(_delete.delete_session(sync_table, PK))
    assert after_delete(stored_items(fixture_clients(moto_endpoint), sync_table)) == []


def test_a_delete_renews_its_lease_once_exactly_half_of_it_has_passed(
    client: Client, sync_table: str, many_pages: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease (60 s) is renewed before a batch once half of it has passed: here the clock
    stands exactly 30 s after the lease was taken from the first batch on, so it is renewed
    before the first batch and not again."""
    taken = time.time_ns()
    readings = itertools.chain([taken, taken], itertools.repeat(taken + 30 * 10**9))
    monkeypatch.setattr(_ops, "time", types.SimpleNamespace(time_ns=lambda: next(readings)))
    client.run(_delete.delete_session(sync_table, PK))
    assert after_delete(stored_items(many_pages, sync_table)) == []
    assert len(client.calls("BatchWriteItem")) >= 3  # a page of 20 items in each
    assert len(lease_updates(client)) == 2  # taken, renewed before the first batch


# -- create_table ---------------------------------------------------------------------------


def test_create_table_waits_for_a_creating_table_and_leaves_an_existing_one(
    client: Client, table_name: str
) -> None:
    answers = iter(["CREATING"])

    def creating(parsed: dict[str, Any], **_: Any) -> None:  # DynamoDB's first answers
        parsed["Table"]["TableStatus"] = next(answers, parsed["Table"]["TableStatus"])

    client.sdk.meta.events.register("after-call.dynamodb.DescribeTable", creating)
    created, _ = client.run(_ops.create_table(table_name, SHARDS))
    assert created is True and len(client.calls("DescribeTable")) == 2
    assert len(client.calls("UpdateTimeToLive")) == 1
    created, _ = client.run(_ops.create_table(table_name, SHARDS))
    assert created is False
    # DynamoDB refuses to enable a TTL that is already enabled (moto does not)
    assert len(client.calls("UpdateTimeToLive")) == 1

    def enabling(parsed: dict[str, Any], **_: Any) -> None:  # DynamoDB's, for up to an hour
        parsed["TimeToLiveDescription"]["TimeToLiveStatus"] = "ENABLING"

    client.sdk.meta.events.register("after-call.dynamodb.DescribeTimeToLive", enabling)
    client.run(_ops.create_table(table_name, SHARDS))
    assert len(client.calls("UpdateTimeToLive")) == 1


def test_create_table_waits_for_its_indexes_as_well_as_the_table(
    client: Client, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DynamoDB may answer an ACTIVE table whose indexes are still CREATING (an index added
    or backfilling): create_table waits until every index is ACTIVE before it writes."""
    from sandbox_ledger.sdk import steps

    slept: list[float] = []
    monkeypatch.setattr(steps, "time", types.SimpleNamespace(sleep=slept.append))
    answers = iter(["CREATING", "CREATING"])

    def creating(parsed: dict[str, Any], **_: Any) -> None:
        status = next(answers, None)
        if status is not None:
            parsed["Table"]["GlobalSecondaryIndexes"][-1]["IndexStatus"] = status

    client.sdk.meta.events.register("after-call.dynamodb.DescribeTable", creating)
    client.run(_ops.create_table(table_name, SHARDS))
    assert len(client.calls("DescribeTable")) == 3  # twice an index CREATING, then ACTIVE
    assert slept == [0.05, 0.1]  # polled soon at first (a table is often ready in a second)


def test_create_table_gives_up_on_a_table_that_never_becomes_active_and_names_it(
    client: Client, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_ledger.sdk import steps

    slept: list[float] = []
    monkeypatch.setattr(steps, "time", types.SimpleNamespace(sleep=slept.append))

    def creating(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Table"]["TableStatus"] = "CREATING"

    client.sdk.meta.events.register("after-call.dynamodb.DescribeTable", creating)
    with pytest.raises(StorageError, match=f"^table {table_name} did not become ACTIVE$"):
        client.run(_ops.create_table(table_name, SHARDS))
    assert len(client.calls("DescribeTable")) == 600
    assert sum(slept) > 15 * 60  # about 20 minutes of DynamoDB's time, not the test's
    assert max(slept) == 2.0  # and never more than 2 s between two polls
    assert not client.calls("PutItem")  # no descriptor on a table that is not there


def test_an_environment_stored_without_its_first_saved_order_is_listed(
    client: Client, sync_table: str, fixture_clients: Any, moto_endpoint: str
) -> None:
    # as stored before the first-saved order was kept (the record's own item, nothing more)
    old = EnvironmentRecord(name="old", built_at=5)
    fixture_clients(moto_endpoint).put_item(TableName=sync_table, Item=it.environment_item(old))
    client.run(_ops.save_environment(sync_table, EnvironmentRecord(name="new", built_at=5), "1"))
    listed = client.run(_ops.list_environments(sync_table))
    assert [e.name for e in listed] == ["old", "new"]


def test_a_listing_by_status_leaves_out_a_session_whose_summary_changed_since_the_index(
    client: Client,
    sync_table: str,
    fixture_clients: Any,
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    raw = fixture_clients(moto_endpoint)
    run_sync(
        raw, _ops.append(sync_table, entry(LedgerEvent.SandboxCreated), "1", SHARDS, Sequencer())
    )
    wait_for_indexes()  # the index lists the session as running
    closes = [entry(LedgerEvent.SandboxClosed, ts=2_000)]

    def closed_meanwhile(**_: Any) -> None:  # the index (eventually consistent) lags behind
        while closes:
            run_sync(
                raw, _ops.append(sync_table, closes.pop(), it.order_ids.next(), SHARDS, Sequencer())
            )

    client.sdk.meta.events.register("before-call.dynamodb.BatchGetItem", closed_meanwhile)
    running = ListSandboxOptions(status=SandboxStatus.Running)
    page = client.run(
        _ops.list_details(sync_table, name=None, opts=running, shard_count=SHARDS, store=None)
    )
    assert page.sessions == [] and not closes


def created(name: str, sandbox_id: str, ts: int) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name=name, sandbox_id=sandbox_id, step_index=0, event=LedgerEvent.SandboxCreated
    )


def test_a_listing_keeps_the_index_order_whatever_order_batch_get_answers_in(
    client: Client, sync_table: str, wait_for_indexes: Callable[[], None]
) -> None:
    """DynamoDB's BatchGetItem answers in any order (moto's in the order asked): sessions
    that share a startedAt still list in the index's order, the order its cursors page in."""
    for n in range(4):
        client.run(
            _ops.append(sync_table, created("build", f"sb-{n}", 1_000), "0", SHARDS, Sequencer())
        )
    wait_for_indexes()  # settled listings (index lag waited out)

    def listing() -> list[str]:
        page = client.run(
            _ops.list_details(sync_table, name="build", opts=None, shard_count=SHARDS, store=None)
        )
        return [d.sandbox_id for d in page.sessions]

    in_order = listing()

    def reversed_answer(parsed: dict[str, Any], **_: Any) -> None:
        for items in parsed.get("Responses", {}).values():
            items.reverse()

    client.sdk.meta.events.register("after-call.dynamodb.BatchGetItem", reversed_answer)
    assert sorted(in_order) == [f"sb-{n}" for n in range(4)]
    assert listing() == in_order


def test_a_cursor_of_one_names_listing_is_refused_by_another_names(
    client: Client, sync_table: str, wait_for_indexes: Callable[[], None]
) -> None:
    for name in ("a", "b"):
        for n in range(2):
            client.run(
                _ops.append(
                    sync_table, created(name, f"sb-{n}", 1_000 + n), "0", SHARDS, Sequencer()
                )
            )
    wait_for_indexes()  # settled listings (index lag waited out)
    first = client.run(
        _ops.list_details(
            sync_table,
            name="a",
            opts=ListSandboxOptions(limit=1),
            shard_count=SHARDS,
            store="the-store",
        )
    )
    assert first.cursor is not None
    with pytest.raises(ValueError, match="cursor"):
        client.run(
            _ops.list_details(
                sync_table,
                name="b",
                opts=ListSandboxOptions(limit=1, cursor=first.cursor),
                shard_count=SHARDS,
                store="the-store",
            )
        )


def test_create_table_records_its_sweep_settings_on_a_new_table_and_an_older_one(
    client: Client, table_name: str, fixture_clients: Any, moto_endpoint: str
) -> None:
    sweep = SweepSettings(event_bus_name="bus-a", stale_after_seconds=60)
    _, described = client.run(_ops.create_table(table_name, SHARDS, sweep=sweep))
    assert (described.event_bus_name, described.stale_after_seconds) == ("bus-a", 60)
    assert not client.calls("UpdateItem")  # the new descriptor whole, in its one put
    older = f"{table_name}-old"  # a table described before create_table recorded the sweep
    try:
        run_sync(fixture_clients(moto_endpoint), _ops.create_table(older, SHARDS))
        _, described = client.run(_ops.create_table(older, SHARDS, sweep=sweep))
        assert described.describes_sweep and described.event_bus_name == "bus-a"
    finally:
        fixture_clients(moto_endpoint).delete_table(TableName=older)


# -- checkpoints ----------------------------------------------------------------------------


def test_the_last_checkpoint_reads_one_marker_however_many_the_session_has(
    client: Client, sync_table: str
) -> None:
    """The newest checkpoint costs the same read with 30 markers as with one: DynamoDB bills
    the items a Query reads (``ScannedCount``), not the ones it returns."""
    client.run(
        _ops.append(
            sync_table, entry(LedgerEvent.SandboxCreated), it.order_ids.next(), SHARDS, Sequencer()
        )
    )
    for n in range(30):
        checkpoint = entry(LedgerEvent.CheckpointCreated, {"snapshotId": f"snap-{n}"}, 2_000 + n)
        client.run(_ops.append(sync_table, checkpoint, it.order_ids.next(), SHARDS, Sequencer()))
    scanned: list[int] = []

    def read(parsed: dict[str, Any], **_: Any) -> None:
        scanned.append(parsed["ScannedCount"])

    client.sdk.meta.events.register("after-call.dynamodb.Query", read)
    last = client.run(_ops.last_checkpoint(sync_table, "build", "sb-1"))
    assert last is not None and last.payload == {"snapshotId": "snap-29"}
    assert scanned == [1, 1]  # the newest marker only, then that entry's one part


def test_the_last_checkpoint_refuses_one_missing_a_part_and_skips_what_a_delete_took(
    client: Client,
    sync_table: str,
    monkeypatch: pytest.MonkeyPatch,
    fixture_clients: Any,
    moto_endpoint: str,
) -> None:
    """Its entry is read as every read reads one: a part missing in a session nobody deletes
    is refused; while a delete runs, an entry it has taken part of, or all of while the
    marker is still there, is no checkpoint (None)."""
    monkeypatch.setattr(it, "CHUNK_BYTES", 350)
    raw = fixture_clients(moto_endpoint)
    payload = {"snapshotId": "snap-1", "state": os.urandom(600).hex()}  # three parts
    client.run(
        _ops.append(
            sync_table,
            entry(LedgerEvent.CheckpointCreated, payload),
            it.order_ids.next(),
            SHARDS,
            Sequencer(),
        )
    )
    stored = stored_items(raw, sync_table)
    parts = [i for i in stored if k.part_head(i["SK"]["S"]) is not None]
    assert len(parts) == 2
    raw.delete_item(TableName=sync_table, Key={"PK": parts[0]["PK"], "SK": parts[0]["SK"]})
    with pytest.raises(ValueError, match="part"):
        client.run(_ops.last_checkpoint(sync_table, "build", "sb-1"))

    deleting(raw, sync_table)
    assert client.run(_ops.last_checkpoint(sync_table, "build", "sb-1")) is None
    head = next(i for i in stored if i["SK"]["S"] == k.part_head(parts[0]["SK"]["S"]))
    for item in (head, parts[1]):
        raw.delete_item(TableName=sync_table, Key={"PK": item["PK"], "SK": item["SK"]})
    assert any(i["SK"]["S"].startswith(k.CHECKPOINT_PREFIX) for i in stored_items(raw, sync_table))
    assert client.run(_ops.last_checkpoint(sync_table, "build", "sb-1")) is None
