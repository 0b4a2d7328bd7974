"""An export holds a session whole as of one moment, or not at all (issue 41, item 6).

A session read over several Query pages can change between two of them. The reads here are
forced into pages of a few items (a ``Limit`` added to every Query of the reader's client)
and a delete, a re-creation or an append is made between two pages: the export read
(``read_in_append_order``, ``read_sessions_in_append_order``, ``export_lines``) returns the
session as it was at one moment, or nothing while a delete holds it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.errors import StorageError
from sandbox_ledger.transfer import export_lines

if TYPE_CHECKING:
    from collections.abc import Callable

NAME = "whole"


def e(sid: str, event: str, ts: int, step: int = -1) -> LedgerEntry:
    return LedgerEntry(ts=ts, name=NAME, sandbox_id=sid, step_index=step, event=event)


def session(sid: str, entries: int = 16) -> list[LedgerEntry]:
    """``entries`` entries: created, execs started and completed, closed."""
    out = [e(sid, LedgerEvent.SandboxCreated, 100)]
    step = 0
    while len(out) < entries - 1:
        event = LedgerEvent.ExecStarted if len(out) % 2 else LedgerEvent.ExecComplete
        out.append(e(sid, event, 101 + len(out), step=step))
        step += len(out) % 2 == 0
    out.append(e(sid, LedgerEvent.SandboxClosed, 200))
    return out[:entries]


def small_pages(client: Any, limit: int = 5) -> None:
    """Every Query this client sends reads at most ``limit`` items a page."""

    def add_limit(params: dict[str, Any], **_: Any) -> None:
        params.setdefault("Limit", limit)

    client.meta.events.register("before-parameter-build.dynamodb.Query", add_limit)


def between_pages(client: Any, action: Callable[[], None], *, times: int = 1) -> list[int]:
    """Run ``action`` after the first page of a read of entries when more is to come,
    ``times`` times at most."""
    ran: list[int] = []
    sent: list[dict[str, Any]] = []

    def first(params: dict[str, Any], **_: Any) -> None:
        sent.append(dict(params))

    def hook(parsed: dict[str, Any], **_: Any) -> None:
        params = sent[-1]
        begins = "ExclusiveStartKey" not in params and "ProjectionExpression" not in params
        if len(ran) < times and begins and parsed.get("LastEvaluatedKey"):
            ran.append(1)
            action()

    client.meta.events.register("before-parameter-build.dynamodb.Query", first)
    client.meta.events.register("after-call.dynamodb.Query", hook)
    return ran


def lines(reader: SyncDynamoDBAdapter, sid: str) -> list[str]:
    return list(export_lines(reader, [(NAME, sid)]))


def wires(entries: list[LedgerEntry]) -> list[str]:
    return [x.model_dump_json(by_alias=True) for x in entries]


@pytest.fixture
def pair(moto_endpoint: str, sync_table: str) -> tuple[SyncDynamoDBAdapter, SyncDynamoDBAdapter]:
    """A writer and a reader whose Queries read five items a page."""
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    reader = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    small_pages(reader.client())
    return writer, reader


def test_a_delete_between_two_pages_leaves_the_session_out(
    pair: tuple[SyncDynamoDBAdapter, SyncDynamoDBAdapter],
) -> None:
    """The red team's case: 16 entries, a delete after the first page. The export held the
    first page's 5 entries of a session that no longer existed."""
    writer, reader = pair
    for entry in session("d"):
        writer.append(entry)
    ran = between_pages(reader.client(), lambda: writer.delete_sandbox(NAME, "d"))
    assert lines(reader, "d") == []
    assert ran


def test_a_delete_and_a_new_session_between_two_pages_export_the_new_session_whole(
    pair: tuple[SyncDynamoDBAdapter, SyncDynamoDBAdapter],
) -> None:
    writer, reader = pair
    for entry in session("r"):
        writer.append(entry)
    again = [e("r", LedgerEvent.SandboxCreated, 300), e("r", LedgerEvent.ExecStarted, 301, 0)]

    def delete_and_begin_again() -> None:
        writer.delete_sandbox(NAME, "r")
        for entry in again:
            writer.append(entry)

    ran = between_pages(reader.client(), delete_and_begin_again)
    assert reader.read_in_append_order(NAME, "r") == again
    assert ran


def test_an_append_behind_the_read_is_not_a_gap(
    pair: tuple[SyncDynamoDBAdapter, SyncDynamoDBAdapter],
) -> None:
    """Between two pages an entry with an old ts (an import, a clock behind) lands before
    the read's place, then one with a new ts after it: the export held the later append
    and not the earlier one. Now it holds both, or (read before both) neither."""
    writer, reader = pair
    entries = session("b")
    for entry in entries:
        writer.append(entry)
    old = e("b", LedgerEvent.ExecStarted, 1, step=90)
    new = e("b", LedgerEvent.ExecStarted, 10_000, step=91)

    def append_behind_then_ahead() -> None:
        writer.append(old)
        writer.append(new)

    ran = between_pages(reader.client(), append_behind_then_ahead)
    assert reader.read_in_append_order(NAME, "b") == [*entries, old, new]
    assert ran


def test_a_session_written_behind_every_page_is_read_as_of_its_marks(
    pair: tuple[SyncDynamoDBAdapter, SyncDynamoDBAdapter],
) -> None:
    """A writer appends entries with an old ts (behind the read's place) after each page: the
    read is not thrown away (it was read again, four times, then refused: an export of a
    session written all along failed), it holds what its sequence marks say was stored when
    they were read: the appends behind it fetched, in commit order, a prefix of the session."""
    writer, reader = pair
    entries = session("c")
    for entry in entries:
        writer.append(entry)
    step = iter(range(1000, 2000))
    behind: list[LedgerEntry] = []

    def append_behind() -> None:
        behind.append(e("c", LedgerEvent.ExecStarted, 1, step=next(step)))
        writer.append(behind[-1])

    ran = between_pages(reader.client(), append_behind, times=3)
    [got] = reader.read_sessions_in_append_order([(NAME, "c")])
    assert ran == [1]  # one read
    assert wires(got) == wires([*entries, *behind])
    assert wires(reader.read_in_append_order(NAME, "c")) == wires([*entries, *behind])


def test_a_session_that_loses_entries_behind_every_read_is_an_error(
    pair: tuple[SyncDynamoDBAdapter, SyncDynamoDBAdapter], sync_table: str
) -> None:
    """An entry read on the first page is gone by the last (TTL removed it, or a delete whose
    mark the read missed): the read is done again, at most WHOLE_READ_ATTEMPTS times, then
    refused naming the session."""
    from sandbox_ledger.dynamodb._ops import WHOLE_READ_ATTEMPTS

    writer, reader = pair
    entries = session("g")
    for entry in entries:
        writer.append(entry)
    raw = writer.client()
    pk = k.session_pk(NAME, "g")

    def remove_the_first_head() -> None:
        first = raw.query(
            TableName=sync_table,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :e)",
            ExpressionAttributeValues={":pk": {"S": pk}, ":e": {"S": k.EVENT_PREFIX}},
            ConsistentRead=True,
            Limit=1,
        )["Items"][0]
        raw.delete_item(TableName=sync_table, Key={"PK": first["PK"], "SK": first["SK"]})

    between_pages(reader.client(), remove_the_first_head, times=WHOLE_READ_ATTEMPTS)
    with pytest.raises(StorageError, match="changed behind each of 4 reads"):
        reader.read_sessions_in_append_order([(NAME, "g")])
    assert len(reader.read_in_append_order(NAME, "g")) == 16 - WHOLE_READ_ATTEMPTS


def test_a_session_a_delete_holds_is_left_out_and_a_dead_delete_is_not(
    moto_endpoint: str, sync_table: str
) -> None:
    """A delete marks the summary before it deletes anything: a read of one page that finds
    the mark of a running delete leaves the session out (part of it may be gone). A delete
    that died leaves a mark whose lease is over: the session is read as it is."""
    import time

    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    entries = session("m", 4)
    for entry in entries:
        ledger.append(entry)
    key = {"PK": {"S": k.session_pk(NAME, "m")}, "SK": {"S": k.SUMMARY_SK}}
    for until, expected in ((time.time_ns() // 10**6 + 60_000, []), (1, entries)):
        ledger.client().update_item(
            TableName=sync_table,
            Key=key,
            UpdateExpression="SET deleting = :d",
            ExpressionAttributeValues={":d": {"N": str(until)}},
        )
        assert ledger.read_in_append_order(NAME, "m") == expected
        assert ledger.read_sessions_in_append_order([(NAME, "m")]) == [expected]


def test_a_session_of_one_page_is_one_query(moto_endpoint: str, sync_table: str) -> None:
    """The summary comes with the entries (its key sorts first): no request more."""
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    entries = session("q")
    for entry in entries:
        ledger.append(entry)
    sent: list[str] = []
    ledger.client().meta.events.register(
        "before-call.dynamodb.*", lambda model, **_: sent.append(model.name)
    )
    assert ledger.read_in_append_order(NAME, "q") == entries
    assert sent == ["Query"]


def test_a_session_of_several_pages_costs_a_summary_read_and_a_keys_query(
    pair: tuple[SyncDynamoDBAdapter, SyncDynamoDBAdapter],
) -> None:
    writer, reader = pair
    entries = session("p")
    for entry in entries:
        writer.append(entry)
    sent: list[str] = []
    reader.client().meta.events.register(
        "before-call.dynamodb.*", lambda model, **_: sent.append(model.name)
    )
    assert reader.read_in_append_order(NAME, "p") == entries
    # 33 items (the summary, 16 entries and their 16 sequence marks) in pages of 5: 7 pages,
    # then the summary and the keys of the first six pages (30 items: 6 pages and an empty one)
    assert sent == ["Query"] * 7 + ["GetItem"] + ["Query"] * 7


async def test_a_delete_between_two_pages_leaves_the_session_out_async(
    moto_endpoint: str, sync_table: str
) -> None:
    writer = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    for entry in session("a"):
        writer.append(entry)
    kept = session("k", 3)
    for entry in kept:
        writer.append(entry)
    async with DynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as reader:
        client = await reader.client()
        small_pages(client)
        ran = between_pages(client, lambda: writer.delete_sandbox(NAME, "a"))
        found = await reader.read_sessions_in_append_order([(NAME, "a"), (NAME, "k")])
        assert found == [[], kept]
        assert ran


def test_an_export_racing_appends_holds_a_prefix_of_them(
    pair: tuple[SyncDynamoDBAdapter, SyncDynamoDBAdapter],
) -> None:
    """A writer appends while exports read the session in pages: each export holds the
    entries appended up to some moment, in order, never a later one without an earlier."""
    writer, reader = pair
    appended = session("w", 40)
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for entry in appended:
                writer.append(entry)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=write)
    thread.start()
    seen: list[int] = []
    while True:
        finished = done.is_set()
        got = reader.read_in_append_order(NAME, "w")
        assert wires(got) == wires(appended[: len(got)])
        seen.append(len(got))
        if finished and len(seen) >= 3:
            break
    thread.join()
    assert errors == []
    assert seen[-1] == len(appended)
