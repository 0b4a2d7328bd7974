"""The local server's bulk load (issue 41, item 5): a restart puts the items the import
would store straight into moto's table. Every item and every read agree with the import's."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

from resources.resource_fixtures import record as resource_record
from sandbox_ledger import EnvironmentRecord, LedgerEvent
from sandbox_ledger import keys as k
from sandbox_ledger.deployment import SweepSettings
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb._sequence import numbered
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.local import LocalDynamoDB, bulk, inprocess
from sandbox_ledger.local.persist import (
    RESOURCE_KIND,
    DataState,
    _json_item,
    load_state,
    read_lines,
)
from sandbox_ledger.resources import _items as ri
from sandbox_ledger.resources.models import FAILED_PHASES, LIVE_PHASES
from sandbox_ledger.testing._build import entry
from sandbox_ledger.transfer import entry_line, environment_line

REGION = "us-east-1"


@pytest.fixture(scope="module")
def server() -> Iterator[LocalDynamoDB]:
    running = LocalDynamoDB()
    running.start()
    yield running
    running.stop()


def _lines() -> list[str]:
    """Several sessions with every event kind, checkpoints, a repeated entry, a session of
    many transactions, a large entry kept in parts, and environment records."""
    lines: list[str] = []
    for s in range(4):
        name, sid = f"svc-{s % 2}", f"sb-{s}"
        lines.append(entry_line(entry(name, sid, LedgerEvent.SandboxCreated, 1000 + s)))
        for step in range(3 + 40 * (s == 1)):
            ts = 2000 + step
            lines.append(entry_line(entry(name, sid, LedgerEvent.ExecStarted, ts, step=step)))
            event = LedgerEvent.ExecFailed if step % 3 == 2 else LedgerEvent.ExecComplete
            lines.append(
                entry_line(entry(name, sid, event, ts + 1, step=step, payload={"exitCode": 0}))
            )
        checkpoint = entry(
            name, sid, LedgerEvent.CheckpointCreated, 3000, payload={"snapshotId": f"x{s}"}
        )
        lines += [entry_line(checkpoint), entry_line(checkpoint)]  # the same entry twice
        lines.append(entry_line(entry(name, sid, "exec.complete.v2", 3001, step=9)))
        if s == 2:
            big = {"stdout": random.Random(7).randbytes(500_000).hex()}  # beyond an item
            lines.append(entry_line(entry(name, sid, LedgerEvent.ExecComplete, 3002, payload=big)))
        if s != 3:
            lines.append(entry_line(entry(name, sid, LedgerEvent.SandboxClosed, 4000 + s)))
    for n in range(3):
        record = EnvironmentRecord.model_validate({"name": f"env-{n}", "builtAt": 10 + n})
        lines.append(environment_line(record))
    for phase in (*LIVE_PHASES, *FAILED_PHASES):  # resource records, every phase
        lines.append(
            json.dumps({"kind": RESOURCE_KIND, "record": resource_record(phase=phase).wire()})
        )
    for extra in ({"gpu": "a newer writer's field"}, {"phase": "paused"}):
        newer = resource_record()
        item = {**ri.record_key(newer.id), k.REVISION: {"N": "7"}}
        item.update(ri.write_values(newer, expires_at=2**31, shard_count=k.DEFAULT_SHARD_COUNT))
        body = json.loads(item[k.RECORD_BODY]["S"])
        item[k.RECORD_BODY] = {"S": json.dumps({**body, **extra})}
        item["newerAttribute"] = {"B": b"\x00\xffbinary"}
        unreadable = {"kind": RESOURCE_KIND, "unreadable": "newer", "item": _json_item(item)}
        lines.append(json.dumps(unreadable))
    return [line + "\n" for line in lines]


def _loaded(
    server: LocalDynamoDB, table: str, lines: list[str] | DataState, *, use_bulk: bool
) -> tuple[SyncDynamoDBAdapter, int | None]:
    """``lines`` (or the state read from them) loaded into a new table as a restart loads
    them; its ledger, and what the bulk load returned (None: the lines were imported)."""
    ledger = inprocess.ledger(server, table, REGION)
    ledger.create_table(sweep=SweepSettings())
    store = inprocess.resource_store(server, table, REGION)
    used: list[int | None] = []

    def bulk_load(
        sessions: Any, progress: Any, sequences: Any = None, orders: Any = None
    ) -> int | None:
        used.append(bulk.load_entries(server, ledger, sessions, progress, sequences, orders))
        return used[-1]

    state = read_lines(lines) if isinstance(lines, list) else lines
    expected = (
        sum(1 for line in lines if '"event"' in line) if isinstance(lines, list) else state.entries
    )
    loaded = load_state(state, ledger, store, bulk=bulk_load if use_bulk else None)
    assert loaded.entries == expected
    return ledger, used[0] if used else None


def _items(server: LocalDynamoDB, table: str) -> list[dict[str, Any]]:
    client = inprocess.InProcessClient(server, REGION)
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"TableName": table}
    while True:
        page = client.scan(**params)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        params["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _normalised(items: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """Each item by its keys, with what is random by design named by its place: an entry's
    order id (by its session and sequence number), a sequence's incarnation, a store id, an
    environment's first-saved order; and a summary's lc, which lists the created and closed
    entries of the write that made it last (the whole session in a bulk load, the last
    transaction in an import)."""
    orders: dict[str, str] = {}
    for item in items:
        mark = numbered(item)
        if mark is not None:
            order = it.append_order(item[A.REF]["S"])
            orders[order] = f"<order {item[k.PARTITION_KEY]['S']} {mark[0]}>"
    assert orders
    pattern = re.compile("|".join(map(re.escape, sorted(orders, key=len, reverse=True))))
    incarnations = {i[A.INCARNATION]["S"] for i in items if A.INCARNATION in i}
    for name in (k.DESCRIPTOR_STORE_ID, A.FIRST_SAVED):  # both paths save environments alike
        incarnations |= {i[name]["S"] for i in items if name in i}
    found: dict[tuple[str, str], str] = {}
    for item in items:
        if item[k.PARTITION_KEY]["S"].startswith(k.RESOURCE_PREFIX):  # its TTL: from the load's
            item = {**item, k.TTL_ATTRIBUTE: "<the time of the load>"}  # clock, either way
        if A.LIFECYCLE in item:
            item = {**item, A.LIFECYCLE: "<the last write's>"}
        text = json.dumps(item, sort_keys=True, default=repr)
        text = pattern.sub(lambda m: orders[m.group(0)], text)
        for incarnation in incarnations:
            text = text.replace(incarnation, "<random by design>")
        value = json.loads(text)
        found[(value[k.PARTITION_KEY]["S"], value[k.SORT_KEY]["S"])] = text
    return found


def test_the_bulk_load_stores_every_item_the_import_stores(server: LocalDynamoDB) -> None:
    lines = _lines()
    imported, _ = _loaded(server, "bulk-imported", lines, use_bulk=False)
    bulked, done = _loaded(server, "bulk-direct", lines, use_bulk=True)
    assert done == sum(1 for line in lines if '"event"' in line)  # the bulk path ran
    expected = _normalised(_items(server, "bulk-imported"))
    got = _normalised(_items(server, "bulk-direct"))
    assert any(A.PARTS in json.loads(text) for text in got.values())  # a large entry's parts
    assert sorted(got) == sorted(expected)
    for key, text in expected.items():
        assert got[key] == text, key

    sessions = imported.scan_sessions(None)
    assert bulked.scan_sessions(None) == sessions
    assert len(sessions) == 4
    for name, sid in sessions:
        assert bulked.read_all(name, sid) == imported.read_all(name, sid)
        assert bulked.list_checkpoints(name, sid) == imported.list_checkpoints(name, sid)
        assert bulked.get_sandbox_details(name, sid) == imported.get_sandbox_details(name, sid)
        assert bulked.last_checkpoint(name, sid) == imported.last_checkpoint(name, sid)
        if sid != "sb-3":  # closed: the follower ends
            followed = [f.entry for f in bulked.follow(name, sid)]
            assert followed == [f.entry for f in imported.follow(name, sid)]
            assert followed == imported.read_all(name, sid)
    assert bulked.list_all_sandbox_details() == imported.list_all_sandbox_details()
    assert bulked.list_environments() == imported.list_environments()
    # The sequence goes on where the load left it: an append after the load is followed.
    later = entry("svc-1", "sb-3", LedgerEvent.SandboxClosed, 5000)
    bulked.append(later)
    assert [f.entry for f in bulked.follow("svc-1", "sb-3")][-1] == later


def test_a_table_holding_a_session_of_the_file_is_imported(server: LocalDynamoDB) -> None:
    """The bulk path writes nothing where a condition could fail: the import reconciles."""
    lines = _lines()
    ledger = inprocess.ledger(server, "bulk-held", REGION)
    ledger.create_table(sweep=SweepSettings())
    ledger.append(entry("svc-0", "sb-0", LedgerEvent.SandboxCreated, 1000))
    sessions = [(("svc-0", "sb-0"), [lines[0]])]
    assert bulk.load_entries(server, ledger, sessions) is None


def test_a_line_the_import_refuses_leaves_it_to_the_import(server: LocalDynamoDB) -> None:
    ledger = inprocess.ledger(server, "bulk-refused", REGION)
    ledger.create_table(sweep=SweepSettings())
    good = entry_line(entry("a", "b", LedgerEvent.SandboxCreated, 1)) + "\n"
    other = entry_line(entry("a", "c", LedgerEvent.SandboxCreated, 1)) + "\n"
    assert bulk.load_entries(server, ledger, [(("a", "b"), [good, other])]) is None
    assert bulk.load_entries(server, ledger, [(("a", "b"), [good, "{}\n"])]) is None
    assert ledger.scan_sessions(None) == []


def test_moto_out_of_reach_warns_and_loads_through_requests(
    server: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto's backend no longer where this version looks for it (another moto release): a
    warning, and the same items put through requests (each entry under its order id)."""
    from moto.dynamodb import models

    ledger = inprocess.ledger(server, "bulk-moved", REGION)
    ledger.create_table(sweep=SweepSettings())
    monkeypatch.delattr(models, "dynamodb_backends")  # moto's own requests still reach it
    good = entry_line(entry("a", "b", LedgerEvent.SandboxCreated, 1)) + "\n"
    orders: dict[tuple[str, str], list[str]] = {("a", "b"): ["0179000000000000000000000001"]}
    with pytest.warns(bulk.BulkLoadWarning):
        assert bulk.load_entries(server, ledger, [(("a", "b"), [good])], orders=orders) == 1
    monkeypatch.undo()
    assert ledger.scan_sessions(None) == [("a", "b")]
    assert _heads(server, "bulk-moved")[k.session_pk("a", "b")] == [
        k.event_sk(1, "0179000000000000000000000001")
    ]


def _marks(server: LocalDynamoDB, table: str) -> dict[tuple[str, str], tuple[str, bool, bool]]:
    """Every sequence mark: (partition, sort key) -> (incarnation, has an entry, spent)."""
    return {
        (i[k.PARTITION_KEY]["S"], i[k.SORT_KEY]["S"]): (
            i[A.INCARNATION]["S"],
            A.REF in i,
            A.SPENT in i,
        )
        for i in _items(server, table)
        if k.sequence_number(i[k.SORT_KEY]["S"]) is not None
    }


def test_a_load_keeps_each_sessions_incarnation_and_numbers(server: LocalDynamoDB) -> None:
    """A save names each session's sequence (``localSequences``) and a load stores the
    entries with those marks: the same incarnation and numbers, a session begun again after a
    delete numbered on after its seal, its mark 0 left spent (no number is taken twice). A
    file without the line loads as before: from 0, in a new incarnation."""
    from sandbox_ledger.local import journal
    from sandbox_ledger.local.inprocess import Written
    from sandbox_ledger.local.persist import SEQUENCES_KIND, DataState

    ledger = inprocess.ledger(server, "seq-source", REGION)
    ledger.create_table(sweep=SweepSettings())
    store = inprocess.resource_store(server, "seq-source", REGION)
    for step in range(3):
        ledger.append(entry("job", "again", LedgerEvent.ExecStarted, 100 + step, step=step))
        ledger.append(entry("job", "kept", LedgerEvent.ExecStarted, 100 + step, step=step))
    ledger.delete_sandbox("job", "again")
    for step in range(2):
        ledger.append(entry("job", "again", LedgerEvent.ExecStarted, 200 + step, step=step))
    saved = journal.changes(DataState(), Written(everything=True), "seq-source", ledger, store)
    lines = list(saved.after.lines())
    assert json.loads(lines[-1])["kind"] == SEQUENCES_KIND
    before = _marks(server, "seq-source")

    _loaded(server, "seq-loaded", lines, use_bulk=True)
    after = _marks(server, "seq-loaded")
    with_entries = {key: value for key, value in before.items() if value[1]}
    assert with_entries and {key: v for key, v in after.items() if v[1]} == with_entries
    again = k.session_pk("job", "again")
    assert after[(again, k.sequence_sk(0))][1:] == (False, True)  # spent, as the delete left it
    assert min(n for (pk, sk) in with_entries if pk == again and (n := k.sequence_number(sk))) > 3

    # A file naming no sequences (an earlier version's, here with the loose items of the
    # deleted session kept: a mark the load numbered for an entry wins over a loose one).
    earlier = [line for line in lines if json.loads(line).get("kind") != SEQUENCES_KIND]
    _loaded(server, "seq-old", earlier, use_bulk=True)
    old = {key: v for key, v in _marks(server, "seq-old").items() if v[1]}
    assert sorted(k.sequence_number(sk) for pk, sk in old if pk == again) == [0, 1]
    assert not {v[0] for v in old.values()} & {v[0] for v in with_entries.values()}


def _heads(server: LocalDynamoDB, table: str) -> dict[str, list[str]]:
    """Each session partition's entry heads' sort keys, in key order."""
    heads: dict[str, list[str]] = {}
    for i in _items(server, table):
        sk = i[k.SORT_KEY]["S"]
        if sk.startswith(k.EVENT_PREFIX) and k.part_head(sk) is None:
            heads.setdefault(i[k.PARTITION_KEY]["S"], []).append(sk)
    return {pk: sorted(sks) for pk, sks in heads.items()}


def test_a_load_keeps_each_entrys_order_id(
    server: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save names each entry's order id (the one its writer chose, in its head's key) and a
    load stores each head under it: a resend of an append, whose condition is on that key,
    finds its entry after a restart. Saves appended to the file name the new entries' ids
    from where the last named ended; a file written whole names them in lines of at most a
    set number of ids, a session's split across lines; entries after the last id named get
    new ones (a file of an earlier version names none)."""
    from sandbox_ledger.local import journal, persist
    from sandbox_ledger.local.inprocess import Written
    from sandbox_ledger.local.persist import DataState

    monkeypatch.setattr(persist, "_ORDERS_PER_LINE", 4)
    ledger = inprocess.ledger(server, "ord-source", REGION)
    ledger.create_table(sweep=SweepSettings())
    store = inprocess.resource_store(server, "ord-source", REGION)
    for step in range(3):
        for sid in ("a", "b"):
            ledger.append(entry("job", sid, LedgerEvent.ExecStarted, 100, step=step))
    first = journal.changes(DataState(), Written(everything=True), "ord-source", ledger, store)
    for step in range(3, 5):
        ledger.append(entry("job", "a", LedgerEvent.ExecStarted, 100, step=step))
    pks = {"ord-source": {k.session_pk("job", "a")}}
    later = journal.changes(first.after, Written(partitions=pks), "ord-source", ledger, store)
    assert '"orders":[["job","a",3,[' in later.lines[-1]  # only the two new ids
    source = _heads(server, "ord-source")
    assert sorted(len(v) for v in source.values()) == [3, 5]

    appended = [*first.after.lines(), *later.lines]
    whole = list(later.after.lines())
    assert sum('"orders"' in line for line in whole) == 2  # 8 ids, 4 a line
    for table, lines in (("ord-appended", appended), ("ord-whole", whole)):
        _loaded(server, table, lines, use_bulk=True)
        assert _heads(server, table) == source
    _loaded(server, "ord-old", [line for line in whole if '"orders"' not in line], use_bulk=True)
    old = _heads(server, "ord-old")
    assert {pk: len(v) for pk, v in old.items()} == {pk: len(v) for pk, v in source.items()}
    assert not {sk for v in old.values() for sk in v} & {sk for v in source.values() for sk in v}


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"kind":"localSequences"}', "no list of sessions"),
        ('{"kind":"localSequences","sessions":[],"orders":{}}', "orders is not a list"),
        ('{"kind":"localSequences","sessions":[],"store":5}', "store is not a store id"),
        ('{"kind":"localSequences","sessions":[],"store":""}', "store is not a store id"),
        ('{"kind":"localSequences","sessions":[],"other":1}', "no list of sessions"),
        (
            '{"kind":"localSequences","sessions":[],"orders":[["a","b",[]]]}',
            "orders: not [name, sandboxId, start, ids]",
        ),
        (
            '{"kind":"localSequences","sessions":[],"orders":[["a","b",1,["x"]]]}',
            "order ids of ('a', 'b') from entry 1, but 0 named before",
        ),
        (
            '{"kind":"localSequences","sessions":[],"orders":[["a","b",0,["x#1"]]]}',
            "not an order id: 'x#1'",
        ),
        (
            '{"kind":"localSequences","sessions":[],"orders":[["a","b",0,["x","x"]]]}',
            "an order id named twice",
        ),
        (
            '{"kind":"localSequences","sessions":[],"orders":[["a","b",-1,["x"]]]}',
            "orders: not [name, sandboxId, start, ids]",
        ),
        ('{"kind":"localSequences","sessions":[["a","b",[]]]}', "no runs"),
        ('{"kind":"localSequences","sessions":[["a",[]]]}', "not [name, sandboxId, runs]"),
        ('{"kind":"localSequences","sessions":[["a","b",[["x",-1,0]]]]}', "a run is not"),
        ('{"kind":"localSequences","sessions":[["a","b",[["x",0,1]]]]}', "runs out of order"),
        (
            '{"kind":"localSequences","sessions":[["a","b",[["x",0,0],["y",1,2]]]]}',
            "runs out of order",
        ),
    ],
)
def test_a_sequences_line_not_one_a_save_writes_is_refused_naming_its_line(
    line: str, reason: str
) -> None:
    from sandbox_ledger.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match=re.escape(reason)) as raised:
        read_lines([line + "\n"], "dev.jsonl")
    assert raised.value.field == "dev.jsonl:1"


def test_import_skips_a_data_files_sequences_line() -> None:
    """``import`` reads FILE as an export: the sequences line is skipped, as a blank one."""
    from sandbox_ledger.transfer import parse_lines

    line = '{"kind":"localSequences","sessions":[["a","b",[["x",0,0]]]]}\n'
    first = entry_line(entry("a", "b", LedgerEvent.SandboxCreated, 1)) + "\n"
    parsed = parse_lines([first.encode(), line.encode()])
    assert not parsed.errors and len(parsed.entries) == 1


# -- red team of the order ids a restart keeps: where the load cannot put items in directly ---


def test_a_load_that_cannot_reach_motos_table_keeps_each_entrys_order_id(
    server: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/cli.md promises every restart keeps each entry under its writer's order id and
    mark; where moto's table cannot be reached (its internals moved), the load puts the same
    items through requests. Before, FILE was then imported, and the import gave each entry a
    new order id: an append resent across that restart was stored twice."""
    from sandbox_ledger.local import journal
    from sandbox_ledger.local.inprocess import Written

    ledger = inprocess.ledger(server, "fallback-source", REGION)
    ledger.create_table(sweep=SweepSettings())
    store = inprocess.resource_store(server, "fallback-source", REGION)
    for step in range(3):
        ledger.append(entry("job", "a", LedgerEvent.ExecStarted, 100, step=step))
    saved = journal.changes(DataState(), Written(everything=True), "fallback-source", ledger, store)
    lines = list(saved.after.lines())
    assert '"orders"' in lines[-1]

    monkeypatch.setattr(bulk, "_moto_table", lambda *_: None)  # moto's internals moved
    _, used = _loaded(server, "fallback-loaded", lines, use_bulk=True)
    assert used == 3  # put through requests, not imported
    assert _heads(server, "fallback-loaded") == _heads(server, "fallback-source")
    assert _marks(server, "fallback-loaded") == _marks(server, "fallback-source")


def test_a_load_names_the_order_ids_of_its_entries_only(server: LocalDynamoDB) -> None:
    """FILE naming more order ids than a session has entries (a hand edit): the load stores
    the entries under the first ones and names only those, so the first save writes FILE
    whole without the others (and the image, built from those ids, matches at the next
    start). Before, the extra ids were kept: FILE went on naming them and no image of the
    session ever matched."""
    from sandbox_ledger.local import journal
    from sandbox_ledger.local.inprocess import Written

    ledger = inprocess.ledger(server, "extra-source", REGION)
    ledger.create_table(sweep=SweepSettings())
    store = inprocess.resource_store(server, "extra-source", REGION)
    for step in range(2):
        ledger.append(entry("job", "a", LedgerEvent.ExecStarted, 100, step=step))
    saved = journal.changes(DataState(), Written(everything=True), "extra-source", ledger, store)
    ids = saved.after.orders[("job", "a")]
    lines = [
        line.replace(json.dumps(ids, separators=(",", ":")), json.dumps([*ids, "extra"]))
        for line in saved.after.lines()
    ]
    state = read_lines(lines)
    assert state.orders[("job", "a")] == [*ids, "extra"]
    _loaded(server, "extra-loaded", state, use_bulk=True)
    assert _heads(server, "extra-loaded") == _heads(server, "extra-source")
    assert state.orders[("job", "a")] == ids
