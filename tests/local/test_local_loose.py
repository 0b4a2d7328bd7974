"""A delete cut by a restart of ``local --data``: the items a session's entries do not
rebuild (its summary while a delete marks it, its marks with no entry) are saved as stored
and put back by the load (:mod:`sandbox_ledger.local.loose`), so that the table after the
restart holds what it held before it, and the delete, run on or run again, ends with the
session gone.

Before, a save read a session a delete held as gone (an export leaves it out): a restart
in the middle of a delete dropped the session without a stream record of its removal (the
soak's change feed lost one ``session.deleted`` about every restart), and a delete that
went on after the restart, its lease gone, answered with the session still there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_ledger import LedgerEntry
from sandbox_ledger import keys as k
from sandbox_ledger.cli.local_saves import Saver
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.local import bulk
from sandbox_ledger.local.persist import load_state, read_data, read_lines
from sandbox_ledger.transfer import parse_lines

from .test_local_journal import Server

NAME, SID = "build", "sb-1"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    made = Server()
    yield made
    made.server.stop()


def _load(server: Server, path: Path) -> SyncDynamoDBAdapter:
    """FILE loaded into a new table as a restart loads it (the bulk load); a client of it."""
    loaded, store = server.table()

    def bulk_load(sessions: Any, progress: Any, sequences: Any, orders: Any) -> int:
        done = bulk.load_entries(server.server, loaded, sessions, progress, sequences, orders)
        assert done is not None  # the restart's own path
        return done

    load_state(read_data(path), loaded, store, bulk=bulk_load)
    return server.clients(loaded.table_name)[0]


class _Cut(Exception):
    """The client stopped before its next call (the server restarted under it)."""


def _entries(n: int = 3) -> list[LedgerEntry]:
    events = ["sandbox.created"] + ["exec.complete"] * (n - 1)
    return [
        LedgerEntry(ts=10 + i, name=NAME, sandbox_id=SID, step_index=i, event=event)
        for i, event in enumerate(events)
    ]


def _saving(
    server: Server, path: Path, entries: list[LedgerEntry] | None = None
) -> tuple[SyncDynamoDBAdapter, SyncDynamoDBAdapter, Saver]:
    """A new table (its in-process ledger), a client of it over HTTP (its writes logged, as
    the local command logs them) and a Saver of FILE ``path``; ``entries`` appended."""
    own, own_store = server.table()
    ledger, _ = server.clients(own.table_name)
    server.log.take()
    saver = Saver(path, own, own_store, server.log)
    for entry in entries or []:
        ledger.append(entry)
    return own, ledger, saver


def _cut_delete(ledger: Any, cut: int) -> None:
    """``delete_sandbox`` stopped before its ``cut``-th call (its client gone)."""
    client = ledger.client()
    made = [0]

    def stop_before(model: Any, **_: Any) -> None:
        if made[0] == cut:
            raise _Cut(model.name)
        made[0] += 1

    client.meta.events.register("before-call.dynamodb", stop_before)
    with pytest.raises(_Cut):
        ledger.delete_sandbox(NAME, SID)
    client.meta.events.unregister("before-call.dynamodb", stop_before)


def _partition(client: Any, table: str) -> dict[str, dict[str, Any]]:
    found = client.query(
        TableName=table,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": k.session_pk(NAME, SID)}},
        ConsistentRead=True,
    )["Items"]
    return {item["SK"]["S"]: item for item in found}


def _delete_calls(server: Server, n: int = 3) -> list[str]:
    """The calls a delete of a session of ``n`` entries makes, by name."""
    own, _ = server.table()
    ledger, _ = server.clients(own.table_name)
    for entry in _entries(n):
        ledger.append(entry)
    calls: list[str] = []
    ledger.client().meta.events.register(
        "before-call.dynamodb", lambda model, **_: calls.append(model.name)
    )
    ledger.delete_sandbox(NAME, SID)
    ledger.close()
    return calls


def test_a_delete_cut_at_any_step_is_loaded_as_the_table_held_it(
    server: Server, tmp_path: Path
) -> None:
    """Cut before each of its calls in turn, a delete leaves the table in a state the save
    keeps and the load gives back (every key of the session's partition, and its summary,
    lease included, and its marks as stored); the delete run again on the loaded table leaves
    no entry and no summary."""
    calls = _delete_calls(server)
    assert calls[0] == "UpdateItem" and calls[-1] == "DeleteItem" and len(calls) >= 6
    for cut in range(1, len(calls)):  # the first call's cut is a delete never begun
        path = tmp_path / f"cut-{cut}.jsonl"
        own, ledger, saver = _saving(server, path, _entries())
        saver.save()
        _cut_delete(ledger, cut)
        held = _partition(ledger.client(), own.table_name)
        for final in (False, True):  # a save appending, then the last one writing FILE whole
            saver.save(final=final)
            again = _load(server, path)
            reloaded = _partition(again.client(), again.table_name)
            # Every key but the import claims the load adds (an entry loaded is an import).
            unclaimed = {sk for sk in reloaded if not sk.startswith(k.CLAIM_PREFIX)}
            assert unclaimed == set(held), (calls[cut], final)
            for sk, item in held.items():
                if sk == k.SUMMARY_SK or k.sequence_number(sk) is not None:
                    assert reloaded[sk] == item, (calls[cut], final, sk)
            again.delete_sandbox(NAME, SID)
            assert again.read_all(NAME, SID) == []
            assert k.SUMMARY_SK not in _partition(again.client(), again.table_name)
            again.close()
        ledger.close()


def test_a_deleted_sessions_marks_outlive_a_restart_and_a_new_session_numbers_after_them(
    server: Server, tmp_path: Path
) -> None:
    """A delete leaves its spent seal and mark 0 so that no key of the deleted session is
    put again; a restart keeps them (they are loose: no entry rebuilds them), and a session
    begun again after it numbers its marks after the seal, as without the restart."""
    path = tmp_path / "dev.jsonl"
    own, ledger, saver = _saving(server, path, _entries())
    ledger.delete_sandbox(NAME, SID)
    left = _partition(ledger.client(), own.table_name)
    assert left and all(k.sequence_number(sk) is not None for sk in left)
    saver.save(final=True)
    ledger.close()
    again = _load(server, path)
    assert _partition(again.client(), again.table_name) == left
    again.append(_entries()[0])
    marks = sorted(
        n
        for sk in _partition(again.client(), again.table_name)
        if (n := k.sequence_number(sk)) is not None
    )
    assert marks[-1] == max(map(k.sequence_number, left)) + 1  # type: ignore[type-var]
    again.close()


def _line(**fields: Any) -> str:
    value = {"kind": "localItems", "name": NAME, "sandboxId": SID, **fields}
    return json.dumps(value, separators=(",", ":")) + "\n"


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (
            _line(items=[{"PK": {"S": k.session_pk("other", SID)}, "SK": {"S": "#SUMMARY"}}]),
            "outside the session",
        ),
        (
            _line(items=[{"PK": {"S": k.session_pk(NAME, SID)}, "SK": {"S": "E#1"}}]),
            "no summary or mark",
        ),
        (
            _line(items=[{"PK": {"S": k.session_pk(NAME, SID)}, "SK": {"N": "1"}}]),
            "outside the session",
        ),
        (_line(items=["not an item"]), "not an item"),
        (_line(items=[{"PK": {"Q": "x"}}]), "not an attribute value"),
        (_line(items={}), "not a session's name"),
        (_line(items=[], extra=1), "not a session's name"),
    ],
)
def test_a_loose_items_line_that_is_not_one_is_refused_naming_its_line(
    line: str, says: str
) -> None:
    """A hand-edited ``localItems`` line is refused with its file and line number, and
    nothing of the file is loaded."""
    with pytest.raises(InvalidInputError) as refused:
        read_lines(["\n", line], "dev.jsonl")
    assert refused.value.field == "dev.jsonl:2" and says in str(refused.value)


def test_an_import_of_a_data_file_skips_its_loose_items_lines() -> None:
    """FILE stays an export: ``import`` reads past a ``localItems`` line (as the saves write
    it) as a blank one."""
    from sandbox_ledger.local.loose import loose_line

    item = {"PK": {"S": k.session_pk(NAME, SID)}, "SK": {"S": k.sequence_sk(0)}}
    lines = [
        json.dumps({"ts": 1, "name": NAME, "sandboxId": SID, "stepIndex": 0, "event": "x"}),
        loose_line((NAME, SID), [item]).rstrip("\n"),
    ]
    parsed = parse_lines(line.encode() for line in lines)
    assert parsed.errors == [] and len(parsed.entries) == 1
