"""Red-team attacks on the saves' loose items (``localItems``): a delete that moves on
between a save's reads, and a save cut short between its lines (``kill -9``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_ledger import LedgerEntry
from sandbox_ledger import keys as k
from sandbox_ledger.cli.local_saves import Saver
from sandbox_ledger.errors import ConflictError, InvalidInputError
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.local import loose
from sandbox_ledger.local.persist import load_state, read_data, read_lines
from sandbox_ledger.transfer import import_lines
from verification.profiles import PROFILE

from .test_local_journal import Server
from .test_local_loose import (
    NAME,
    SID,
    _Cut,
    _cut_delete,
    _delete_calls,
    _entries,
    _load,
    _partition,
    _saving,
)

MANY = 60
"""Entries enough for a delete to take them in more than one write."""


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    made = Server()
    yield made
    made.server.stop()


def test_a_delete_that_ends_between_a_saves_reads_never_loads_a_part_of_the_session(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save reads a session a delete holds (part of its entries gone), then, before it
    reads the session's loose items, the delete ends (summary gone, its spent marks left).
    FILE, loaded (``kill -9`` after that save), must not serve a session that never was:
    a reader sees all of its entries or none (a delete's lease holding it, or gone)."""
    calls = len(_delete_calls(server, MANY))
    real = loose.loose_items
    for cut in range(1, calls):
        path = tmp_path / f"race-{cut}.jsonl"
        _own, ledger, saver = _saving(server, path, _entries(MANY))
        saver.save()
        _cut_delete(ledger, cut)

        def finish_first(*args: Any, ledger: Any = ledger, **kwargs: Any) -> Any:
            ledger.delete_sandbox(NAME, SID)  # the delete run again ends meanwhile
            return real(*args, **kwargs)

        monkeypatch.setattr(loose, "loose_items", finish_first)
        saver.save()
        monkeypatch.setattr(loose, "loose_items", real)
        again = _load(server, path)
        seen = again.read_all(NAME, SID)
        assert seen in ([], _entries(MANY)), (cut, [e.step_index for e in seen])
        again.close()
        ledger.close()


def test_a_save_cut_between_its_lines_keeps_a_held_sessions_summary(
    server: Server, tmp_path: Path
) -> None:
    """A delete cut before its last call (the summary's removal) leaves the summary under
    its lease and no entry; the save after it appends the session's block (no entry) and
    its ``localItems`` line. FILE cut anywhere in that save (``kill -9`` mid-write) loads
    to the session as the save before held it or with its summary: never the session gone
    without the summary whose removal is its ``session.deleted``."""
    calls = len(_delete_calls(server))
    path = tmp_path / "dev.jsonl"
    own, ledger, saver = _saving(server, path, _entries())
    saver.save()
    before = path.read_bytes()
    _cut_delete(ledger, calls - 1)
    held = _partition(ledger.client(), own.table_name)
    assert A.DELETING in held[k.SUMMARY_SK]
    saver.save()
    after = path.read_bytes()
    assert after.startswith(before) and len(after) > len(before)
    cut_path = tmp_path / "cut.jsonl"
    # A load reads whole lines only (a torn one is left out): each line whole, or torn
    # a byte before its end, is every state a cut can leave.
    ends = [i + 1 for i in range(len(before), len(after)) if after[i : i + 1] == b"\n"]
    for size in sorted({len(before), *ends, *(end - 1 for end in ends)}):
        cut_path.write_bytes(after[:size])
        again = _load(server, cut_path)
        loaded = _partition(again.client(), again.table_name)
        assert k.SUMMARY_SK in loaded, (size, after[len(before) : size].decode())
        again.close()
    ledger.close()


def test_an_entry_appended_between_a_saves_reads_leaves_no_mark_without_its_entry(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session begun again after a delete (its first mark past the delete's seal: the
    save reads its loose items at every save) takes an append between the save's read of
    its entries and of its loose items. FILE, loaded (``kill -9`` after that save), holds no
    sequence mark of an entry it does not hold (the next save would have saved the entry
    with its mark)."""
    path = tmp_path / "dev.jsonl"
    _own, ledger, saver = _saving(server, path, _entries())
    ledger.delete_sandbox(NAME, SID)
    ledger.append(_entries()[0])  # begun again: marks after the seal
    saver.save()
    real = loose.loose_items
    late = _entries(5)[4]

    def append_first(*args: Any, **kwargs: Any) -> Any:
        ledger.append(late)
        return real(*args, **kwargs)

    ledger.append(_entries()[1])
    monkeypatch.setattr(loose, "loose_items", append_first)
    saver.save()
    monkeypatch.setattr(loose, "loose_items", real)
    again = _load(server, path)
    loaded = _partition(again.client(), again.table_name)
    dangling = [
        sk
        for sk, item in loaded.items()
        if k.sequence_number(sk) is not None and A.REF in item and item[A.REF]["S"] not in loaded
    ]
    assert dangling == [], sorted(loaded)
    again.close()
    ledger.close()


def test_a_session_begun_again_between_a_saves_reads_loads_whole_or_not_at_all(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deleted session (no entry: its spent marks only) begun again between the save's
    read of its entries (none) and of its loose items: FILE, loaded, must not hold the new
    session's summary or marks without its entry."""
    path = tmp_path / "dev.jsonl"
    _own, ledger, saver = _saving(server, path, _entries())
    saver.save()
    ledger.delete_sandbox(NAME, SID)
    real = loose.loose_items

    def begin_first(*args: Any, **kwargs: Any) -> Any:
        ledger.append(_entries()[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(loose, "loose_items", begin_first)
    saver.save()
    monkeypatch.setattr(loose, "loose_items", real)
    again = _load(server, path)
    loaded = _partition(again.client(), again.table_name)
    heads = [sk for sk in loaded if sk.startswith(k.EVENT_PREFIX)]
    assert heads or k.SUMMARY_SK not in loaded, sorted(loaded)
    dangling = [
        sk
        for sk, item in loaded.items()
        if k.sequence_number(sk) is not None and A.REF in item and item[A.REF]["S"] not in loaded
    ]
    assert dangling == [], sorted(loaded)
    again.close()
    ledger.close()


def _loose_line(items: list[dict[str, Any]]) -> str:
    value = {"kind": "localItems", "name": NAME, "sandboxId": SID, "items": items}
    return json.dumps(value) + "\n"


_PK = k.session_pk(NAME, SID)


@pytest.mark.parametrize(
    ("items", "says"),
    [
        ([{"PK": {"S": _PK}, "SK": {"S": k.sequence_sk(5)}, "x": {"N": "abc"}}], "refuses"),
        ([{"PK": {"S": _PK}, "SK": {"S": k.sequence_sk(5)}, "x": {"S": "a" * 500_000}}], "refuses"),
        ([{"PK": {"S": _PK}, "SK": {"S": k.sequence_sk(5)}}] * 2, "twice"),
    ],
)
def test_a_loose_items_line_the_table_refuses_is_refused_naming_its_line(
    server: Server, items: list[dict[str, Any]], says: str
) -> None:
    """A hand-edited ``localItems`` line that reads as one but whose items the table will
    not take (a number that is none, an item past 400 KB, a key named twice) is refused
    with its file and line number, as a resource record's line is; it crashed the load
    with the table's error, naming no line."""
    entry = json.dumps(
        {"ts": 1, "name": NAME, "sandboxId": "sb-other", "stepIndex": 0, "event": "sandbox.created"}
    )  # another session's: the loose items are the deleted session's, all put
    ledger, store = server.table()
    with pytest.raises(InvalidInputError) as refused:
        load_state(read_lines([entry + "\n", "\n", _loose_line(items)], "dev.jsonl"), ledger, store)
    assert refused.value.field == "dev.jsonl:3" and says in str(refused.value)


def _keys(client: Any, table: str) -> dict[str, Any]:
    """The session's partition as a restart must keep it: every key but the import claims
    a load adds, each mark with its incarnation and whether it names an entry."""
    return {
        sk: (item.get(A.INCARNATION), A.REF in item, A.DELETING in item)
        for sk, item in _partition(client, table).items()
        if not sk.startswith(k.CLAIM_PREFIX)
    }


def test_a_session_deleted_begun_again_and_deleted_again_across_saves_loads_as_it_stood(
    server: Server, tmp_path: Path
) -> None:
    """Deleted, begun again, deleted again, begun again, a save after each step (appending,
    then on exit written whole): FILE loads to the session's partition as it stood at each
    save (the localItems line replaced each time), and the mirror is what FILE holds."""
    path = tmp_path / "dev.jsonl"
    own, ledger, saver = _saving(server, path)
    client = ledger.client()
    steps: list[Any] = [
        lambda: [ledger.append(e) for e in _entries()],
        lambda: ledger.delete_sandbox(NAME, SID),
        lambda: [ledger.append(e) for e in _entries()[:2]],
        lambda: ledger.delete_sandbox(NAME, SID),
        lambda: ledger.delete_sandbox(NAME, SID),
        lambda: ledger.append(_entries()[0]),
    ]
    for number, step in enumerate(steps):
        step()
        for final in (False, True) if number == len(steps) - 1 else (False,):
            saver.save(final=final)
            want = _keys(client, own.table_name)
            again = _load(server, path)
            assert _keys(again.client(), again.table_name) == want, (number, final)
            again.close()
            state = read_data(path)
            assert sorted(state.loose) == sorted(saver.mirror.loose), (number, final)
            assert list(state.lines()) == list(saver.mirror.lines()), (number, final)
    ledger.close()


def test_a_session_begun_again_loaded_by_the_import_is_followed_whole(
    server: Server, tmp_path: Path
) -> None:
    """A restart loads the entries by the import where the bulk load declines (a ledger
    with retention): the import numbers a session's marks from 0 in an incarnation of its
    own. The loose marks of a session begun again after a delete (the spent seal, numbered
    in the sequence FILE names) put over that sequence left a spent seal in the middle of
    it: the next appends numbered past it in the seal's incarnation, and a follower of the
    session ended before them (2 entries followed of 6 stored)."""
    path = tmp_path / "dev.jsonl"
    _own, ledger, saver = _saving(server, path, _entries())
    ledger.delete_sandbox(NAME, SID)
    for entry in _entries()[:2]:
        ledger.append(entry)
    saver.save(final=True)
    ledger.close()
    loaded, store = server.table()
    load_state(read_data(path), loaded, store)  # no bulk load: the import
    again, _ = server.clients(loaded.table_name)
    for step in range(2, 5):
        again.append(_entries(5)[step])
    again.append(_entries(5)[0].model_copy(update={"ts": 99, "event": "sandbox.closed"}))
    stored = again.read_all(NAME, SID)
    followed = list(again.follow(NAME, SID))
    assert len(followed) == len(stored) == 6
    again.close()


def test_a_delete_cut_at_any_step_and_loaded_by_the_import_ends_with_the_session_gone(
    server: Server, tmp_path: Path
) -> None:
    """As ``test_a_delete_cut_at_any_step_is_loaded_as_the_table_held_it``, the load by the
    import (a ledger with retention): the session held keeps its summary under the lease,
    and the delete run again leaves no entry, no summary and no mark of an entry."""
    calls = len(_delete_calls(server))
    for cut in range(1, calls):
        path = tmp_path / f"import-{cut}.jsonl"
        own, ledger, saver = _saving(server, path, _entries())
        saver.save()
        _cut_delete(ledger, cut)
        held = _partition(ledger.client(), own.table_name)
        saver.save(final=True)
        loaded, store = server.table()
        load_state(read_data(path), loaded, store)
        again, _ = server.clients(loaded.table_name)
        after = _partition(again.client(), again.table_name)
        assert (k.SUMMARY_SK in after) == (k.SUMMARY_SK in held), cut
        if k.SUMMARY_SK in held:
            assert after[k.SUMMARY_SK] == held[k.SUMMARY_SK], cut
        again.delete_sandbox(NAME, SID)
        assert again.read_all(NAME, SID) == [], cut
        left = _partition(again.client(), again.table_name)
        assert k.SUMMARY_SK not in left and not any(A.REF in item for item in left.values())
        again.close()
        ledger.close()


def test_an_import_of_a_data_file_never_brings_back_a_part_of_a_session_a_delete_held(
    server: Server, tmp_path: Path
) -> None:
    """FILE written whole stays an export (``sandbox-ledger import`` reads it, skipping the
    ``localItems`` lines). A session a delete held at the last save (part of its entries
    gone) is now in FILE as its remaining entries, their lease in a ``localItems`` line the
    import skips: the import stores them as a live session that never was. An export leaves
    such a session out."""
    calls = len(_delete_calls(server, MANY))
    for cut in range(2, calls - 1):
        path = tmp_path / f"import-{cut}.jsonl"
        _own, ledger, saver = _saving(server, path, _entries(MANY))
        saver.save()
        _cut_delete(ledger, cut)
        saver.save(final=True)
        target, _ = server.table()
        report = import_lines(target, path.read_bytes().splitlines(keepends=True))
        assert not report.failed
        seen = target.read_all(NAME, SID)
        assert seen in ([], _entries(MANY)), (cut, len(seen))
        ledger.close()


def test_a_save_of_a_session_begun_again_cut_anywhere_loads_a_session_followed_whole(
    server: Server, tmp_path: Path
) -> None:
    """A session deleted and begun again between two saves: the second appends its
    ``localItems`` line (the spent marks), its block and its sequence. FILE cut at any byte
    of that save (``kill -9``) loads to a session whose next appends a follower hands out
    whole (a cut before the sequence loads the entries numbered anew from 0: the spent seal
    put among those marks ended a follower there)."""
    path = tmp_path / "dev.jsonl"
    _own, ledger, saver = _saving(server, path, _entries())
    saver.save()
    before = path.read_bytes()
    ledger.delete_sandbox(NAME, SID)
    for entry in _entries()[:2]:
        ledger.append(entry)
    saver.save()
    after = path.read_bytes()
    ledger.close()
    cut_path = tmp_path / "cut.jsonl"
    ends = [i + 1 for i in range(len(before), len(after)) if after[i : i + 1] == b"\n"]
    for size in sorted({len(before), *ends, *(end - 1 for end in ends)}):  # a line whole or torn
        cut_path.write_bytes(after[:size])
        again = _load(server, cut_path)
        for step in range(3, 6):
            again.append(_entries(6)[step])
        again.append(_entries(6)[0].model_copy(update={"ts": 99, "event": "sandbox.closed"}))
        stored = again.read_all(NAME, SID)
        followed = list(again.follow(NAME, SID))
        assert len(followed) == len(stored), (size, after[len(before) : size].decode())
        again.close()


def test_a_save_that_reads_everything_keeps_loose_items_of_every_kind(
    server: Server, tmp_path: Path
) -> None:
    """A request that may have changed anything (PartiQL, a table made) makes the save read
    every table again and write FILE whole (``journal._everything``): a session a delete
    holds (its lease), one deleted (its spent marks only) and one begun again after a
    delete load back with every key as the table held it."""
    from sandbox_ledger.local import inprocess

    path = tmp_path / "dev.jsonl"
    own, ledger, saver = _saving(server, path)
    client = ledger.client()
    sessions = {"held": "sb-1", "gone": "sb-2", "again": "sb-3"}
    for name, sid in sessions.items():
        for entry in _entries():
            ledger.append(entry.model_copy(update={"name": name, "sandbox_id": sid}))
    saver.save()
    ledger.delete_sandbox("gone", "sb-2")
    ledger.delete_sandbox("again", "sb-3")
    ledger.append(_entries()[0].model_copy(update={"name": "again", "sandbox_id": "sb-3"}))
    made = [0]

    def stop_before(model: Any, **_: Any) -> None:
        if made[0] == 3:
            raise _Cut(model.name)
        made[0] += 1

    client.meta.events.register("before-call.dynamodb", stop_before)
    with pytest.raises(_Cut):
        ledger.delete_sandbox("held", "sb-1")
    client.meta.events.unregister("before-call.dynamodb", stop_before)

    def keys(client: Any, table: str) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name, sid in sessions.items():
            for item in client.query(
                TableName=table,
                KeyConditionExpression="PK = :pk",
                ExpressionAttributeValues={":pk": {"S": k.session_pk(name, sid)}},
                ConsistentRead=True,
            )["Items"]:
                sk = item["SK"]["S"]
                if not sk.startswith(k.CLAIM_PREFIX):
                    found[f"{name}/{sk}"] = (item.get(A.INCARNATION), A.DELETING in item)
        return found

    want = keys(client, own.table_name)
    server.log.take()
    everything = inprocess.Written(everything=True)
    monkey = pytest.MonkeyPatch()
    monkey.setattr(server.log, "take", lambda: everything)
    try:
        saver.save()
    finally:
        monkey.undo()
    written = read_data(path)
    assert not written.appended and sorted(written.loose) == sorted(sessions.items())
    again = _load(server, path)
    assert keys(again.client(), again.table_name) == want
    again.close()
    ledger.close()


def test_a_save_under_steady_appends_to_a_session_begun_again_is_not_refused(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append between the save's reads at every attempt (a session begun again, written
    steadily) leaves the new marks to the next save: the save succeeds (it read again, then
    gave up, failing every save of such a session while the appends went on)."""
    path = tmp_path / "dev.jsonl"
    _own, ledger, saver = _saving(server, path, _entries())
    ledger.delete_sandbox(NAME, SID)
    ledger.append(_entries()[0])
    saver.save()
    real = loose.loose_items
    steps = iter(range(1, 50))

    def append_first(*args: Any, **kwargs: Any) -> Any:
        ledger.append(_entries(50)[next(steps)])
        return real(*args, **kwargs)

    ledger.append(_entries(50)[next(steps)])  # the session to read at the next save
    monkeypatch.setattr(loose, "loose_items", append_first)
    saver.save()
    monkeypatch.setattr(loose, "loose_items", real)
    assert saver.failing is None
    again = _load(server, path)
    loaded = _partition(again.client(), again.table_name)
    assert not [
        sk
        for sk, item in loaded.items()
        if k.sequence_number(sk) is not None and A.REF in item and item[A.REF]["S"] not in loaded
    ]
    again.close()
    ledger.close()


_SESSIONS = [(NAME, SID), (NAME, "sb-2")]


@settings(
    max_examples=6 if PROFILE == "fast" else 40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["append", "append", "delete", "cut", "save"]),
            st.integers(0, 1),
            st.integers(1, 8),
        ),
        max_size=14,
    )
)
def test_saves_between_appends_deletes_and_cut_deletes_load_every_key(
    server: Server, tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, int]]
) -> None:
    """Appends, deletes, deletes cut at a step, saves between them: after each save FILE
    loads to every key of each session as the table held it (claims aside), each mark in
    its incarnation, a delete's lease on its summary."""
    path = tmp_path_factory.mktemp("keys") / "dev.jsonl"
    own, own_store = server.table()
    ledger, _ = server.clients(own.table_name)
    client = ledger.client()
    server.log.take()
    saver = Saver(path, own, own_store, server.log)
    counts = [0, 0]

    def keys(client: Any, table: str) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name, sid in _SESSIONS:
            for item in client.query(
                TableName=table,
                KeyConditionExpression="PK = :pk",
                ExpressionAttributeValues={":pk": {"S": k.session_pk(name, sid)}},
                ConsistentRead=True,
            )["Items"]:
                sk = item["SK"]["S"]
                if not sk.startswith(k.CLAIM_PREFIX):
                    found[f"{sid}/{sk}"] = (item.get(A.INCARNATION), item.get(A.DELETING))
        return found

    for kind, which, cut in [*steps, ("save", 0, 0)]:
        name, sid = _SESSIONS[which]
        if kind == "append":
            event = "sandbox.created" if counts[which] == 0 else "exec.complete"
            entry = LedgerEntry(
                ts=10 + counts[which],
                name=name,
                sandbox_id=sid,
                step_index=counts[which],
                event=event,
            )
            try:
                ledger.append(entry)
            except ConflictError:  # a cut delete's lease holds the session off
                continue
            counts[which] += 1
        elif kind == "delete":
            ledger.delete_sandbox(name, sid)
        elif kind == "cut":
            made = [0]

            def stop_before(model: Any, cut: int = cut, made: list[int] = made, **_: Any) -> None:
                if made[0] == cut:
                    raise _Cut(model.name)
                made[0] += 1

            client.meta.events.register("before-call.dynamodb", stop_before)
            try:
                ledger.delete_sandbox(name, sid)
            except _Cut:
                pass
            finally:
                client.meta.events.unregister("before-call.dynamodb", stop_before)
        else:
            saver.save()
            want = keys(client, own.table_name)
            again = _load(server, path)
            assert keys(again.client(), again.table_name) == want
            again.close()
    ledger.close()
