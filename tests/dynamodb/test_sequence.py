"""The session's sequence marks (dynamodb/_sequence.py): the actions that write them, what a
client guesses, what a writer does when another takes its mark first, and that the marks
are part of no change the feed reports."""

from __future__ import annotations

import pytest
from tests.dynamodb.test_dynamodb_design import RequestCounter

from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.dynamodb import _sequence as seq
from sandbox_ledger.dynamodb._changes import changes_of
from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.testing._build import entry

PK = "S#1#f#s"
HEAD = {k.PARTITION_KEY: {"S": PK}, k.SORT_KEY: {"S": "E#0000000000000001#x"}, "np": {"N": "2"}}


def test_mark_zero_has_no_check_and_later_marks_check_the_one_before() -> None:
    first = seq.mark_actions("t", PK, seq.Mark("inc", 0), [HEAD, HEAD])
    assert [next(iter(a)) for a in first] == ["Put", "Put"]
    assert [a["Put"]["Item"][k.SORT_KEY]["S"] for a in first] == [
        k.sequence_sk(0),
        k.sequence_sk(1),
    ]
    assert all(a["Put"]["ConditionExpression"] == "attribute_not_exists(#pk)" for a in first)
    later = seq.mark_actions("t", PK, seq.Mark("inc", 7), [HEAD])
    check = later[0]["ConditionCheck"]
    assert check["Key"][k.SORT_KEY]["S"] == k.sequence_sk(6)
    assert check["ExpressionAttributeValues"] == {":inc": {"S": "inc"}}
    mark = later[1]["Put"]["Item"]
    assert mark[k.SORT_KEY]["S"] == k.sequence_sk(7)
    assert mark["ref"] == HEAD[k.SORT_KEY] and mark["np"] == {"N": "2"}
    assert seq.mark_count(seq.Mark("i", 0), 2) == 2 and seq.mark_count(seq.Mark("i", 7), 1) == 2


def test_mark_keys_sort_in_number_order_and_are_their_own_family() -> None:
    keys = [k.sequence_sk(n) for n in (0, 9, 10, 99, 10**11)]
    assert keys == sorted(keys)
    assert [k.sequence_number(key) for key in keys] == [0, 9, 10, 99, 10**11]
    assert k.sequence_number("Q#12") is None and k.sequence_number("E#000000000001") is None
    assert k.item_family(PK, k.sequence_sk(3)) is k.ItemFamily.SEQUENCE
    with pytest.raises(ValueError, match="10\\*\\*12"):
        seq.mark_actions("t", PK, seq.Mark("i", seq.MAX_MARKS - 1), [HEAD, HEAD])


def test_the_guesses_are_bounded_and_forgotten_on_request() -> None:
    guesses = seq.Sequencer(size=2)
    for n, pk in enumerate(("a", "b", "c")):
        guesses.learn(pk, seq.Mark("i", n))
    assert guesses.guess("a") is None  # the least recently used went first
    mark = guesses.guess("c")
    assert mark is not None and (mark.incarnation, mark.number) == ("i", 2)
    guesses.forget("c")
    assert guesses.guess("c") is None


def test_a_mark_written_or_removed_is_no_change_of_the_feed() -> None:
    for event in ("INSERT", "REMOVE"):
        record = {
            "eventName": event,
            "dynamodb": {
                "Keys": {k.PARTITION_KEY: {"S": PK}, k.SORT_KEY: {"S": k.sequence_sk(1)}},
                "ApproximateCreationDateTime": 1_700_000_000,
            },
        }
        assert changes_of(record) == []


def test_a_stale_guess_costs_one_query_and_stores_the_entry_once(
    moto_endpoint: str, sync_table: str
) -> None:
    """Client A guesses from its own last write; client B appends meanwhile: A's next append
    is cancelled on its mark, reads the last mark and is stored once, under the next mark."""
    a = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    b = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    try:
        a.append(entry("f", "s", LedgerEvent.SandboxCreated, 1))
        b.append(entry("f", "s", LedgerEvent.ExecStarted, 2, step=0))
        counter = RequestCounter().attach(a.client())
        a.append(entry("f", "s", LedgerEvent.ExecStarted, 3, step=1))
        assert dict(counter.calls) == {"TransactWriteItems": 2, "Query": 1}
        assert [e.ts for e in a.read_in_append_order("f", "s")] == [1, 2, 3]
        counter.reset()
        a.append(entry("f", "s", LedgerEvent.ExecStarted, 4, step=2))
        assert dict(counter.calls) == {"TransactWriteItems": 1}  # the guess is right again
    finally:
        a.close()
        b.close()


def _marks(ledger: SyncDynamoDBAdapter, table: str) -> list[tuple[str, str]]:
    items = ledger.client().query(
        TableName=table,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :q)",
        ExpressionAttributeValues={
            ":pk": {"S": k.session_pk("f", "s")},
            ":q": {"S": k.SEQUENCE_PREFIX},
        },
        ConsistentRead=True,
    )["Items"]
    return [(i[k.SORT_KEY]["S"], i["inc"]["S"]) for i in items]


def test_a_session_deleted_and_begun_again_starts_a_new_incarnation(
    moto_endpoint: str, sync_table: str
) -> None:
    with SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as ledger:
        ledger.append(entry("f", "s", LedgerEvent.SandboxCreated, 1))
        ledger.append(entry("f", "s", LedgerEvent.ExecStarted, 2, step=0))
        [(_, old), (second, same)] = _marks(ledger, sync_table)
        assert second == k.sequence_sk(1) and same == old
        ledger.delete_sandbox("f", "s")
        # Mark 0 stays, spent, and so does the delete's seal (mark 2, an incarnation of its
        # own): no mark number is ever taken twice. Mark 0 leaves the session's incarnation
        # too (one of its own): a guess of mark 1 kept from before fails its check of mark 0.
        [(zero, was), (sealed, seal)] = _marks(ledger, sync_table)
        assert (zero, sealed) == (k.sequence_sk(0), k.sequence_sk(2))
        assert len({old, was, seal}) == 3
        counter = RequestCounter().attach(ledger.client())
        ledger.append(entry("f", "s", LedgerEvent.SandboxCreated, 3))
        # The last mark read first (the seal), as for any session the client has no guess
        # for: a guess could begin a second sequence (_sequence.read_last).
        assert dict(counter.calls) == {"Query": 1, "TransactWriteItems": 1}
        [_, _, (first, new)] = _marks(ledger, sync_table)
        # The new session goes on after the seal, in its incarnation.
        assert first == k.sequence_sk(3) and new == seal and new != old
