"""Export and import (``transfer.py``) as a user of ``sandbox-ledger export``/``import`` meets
them: which lines fail and the reason each gives, the stored identity of an imported entry,
the progress counted, environment records counted and refused per line, and an export of
sessions of every size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox_ledger import EnvironmentRecord, LedgerEntry
from sandbox_ledger.blocking import BlockingAdapter
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.memory import MemoryAdapter
from sandbox_ledger.sqlite import SQLiteAdapter
from sandbox_ledger.transfer import (
    LineError,
    content_digest,
    environment_line,
    export_lines,
    import_entries,
    import_lines,
    parse_line,
    parse_lines,
)


def entry(sid: str, ts: int, payload: object = None) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name="n", sandbox_id=sid, step_index=-1, event="sandbox.created", payload=payload
    )


def line(e: LedgerEntry) -> bytes:
    return json.dumps(e.wire()).encode() + b"\n"


def env(name: str, built_at: int) -> EnvironmentRecord:
    return EnvironmentRecord.model_validate({"name": name, "builtAt": built_at, "v": built_at})


def memory() -> BlockingAdapter:
    return BlockingAdapter(MemoryAdapter())


def test_each_bad_line_fails_alone_with_a_reason_that_says_where() -> None:
    good = line(entry("s", 1))
    lines = [
        b"X\n",  # not JSON, whatever it ends with
        b"ab\xff\n",  # the third byte is not UTF-8
        b'{"ts": 1\r\n',  # cut short; the CRLF is the line's end, not its content
        b'{"ts": 1, "name": "n", "sandboxId": "s", "stepIndex": -1, "event": "e"}\x0c\n',
        b'{"foo": 1}\n',  # an object, neither an entry nor a typed line
        b'{"kind": "x", "event": "exec.started"}\n',  # a bad entry that has a "kind"
        b'{"ts": "a", "name": 1, "sandboxId": 2, "event": 3, "stepIndex": "q"}\n',
        b'{"kind": "environment", "record": {"name": "e", "builtAt": 1}, "a": 1, "b": 2}\n',
        b'{"kind": "future"}\n',
        good,
    ]
    parsed = parse_lines(lines)
    assert [n for n, _ in parsed.entries] == [10]
    reasons = [(error.number, error.reason) for error in parsed.errors]
    missing = "ts: Field required; name: Field required; sandboxId: Field required"
    assert reasons == [
        (1, "line: Invalid JSON: expected value at line 1 column 1"),
        (2, "invalid UTF-8 at byte 3"),
        (3, "line: Invalid JSON: EOF while parsing an object at line 1 column 8"),
        (4, "line: Invalid JSON: trailing characters at line 1 column 72"),
        (5, missing),
        (6, missing),
        (
            7,
            "ts: Input should be a valid integer; name: Input should be a valid string; "
            "sandboxId: Input should be a valid string",
        ),  # the first three of five
        (8, "environment line: unknown field(s) a, b"),
        (
            9,
            "line kind 'future' is unknown to this version of sandbox-ledger (written by a "
            "newer one? upgrade to import it)",
        ),
    ]


def test_parse_line_reads_one_line() -> None:
    e = entry("s", 1, {"a": [1]})
    assert parse_line(line(e)) == e
    assert parse_line(environment_line(env("py", 2)).encode()) == env("py", 2)
    assert parse_line(b"  \r\n") is None
    with pytest.raises(ValueError, match=r"^invalid UTF-8 at byte 1$"):
        parse_line(b"\xff")


def test_an_imported_entrys_stored_identity_is_fixed() -> None:
    """The digest is part of what the stores keep (DynamoDB's claim key, the SQL stores'
    import key): an import by this version must recognise what an earlier one stored."""
    e = entry("s", 1_700_000_000_000, {"b": 1, "a": "é"})
    assert content_digest(e) == "f91083a60dd5582281f575322608e701"


def test_append_once_refuses_a_surrogate_by_its_field(tmp_path: Path) -> None:
    store = BlockingAdapter(SQLiteAdapter(tmp_path / "ledger.db"))
    store.connect()
    try:
        with pytest.raises(InvalidInputError, match=r"^entry\.payload\.a: contains a lone"):
            store.append_once(entry("s", 1, {"a": "\ud800"}), 1)
        assert store.read_all("n", "s") == []
    finally:
        store.close()


def test_progress_counts_every_entry_and_record_done() -> None:
    lines = [line(entry("s", 1)), line(entry("s", 2)), environment_line(env("py", 1)).encode()]
    lines.append(line(entry("t", 3)))
    done: list[int] = []
    report = import_lines(memory(), lines, progress=done.append)
    assert (report.new, report.environments.new, sum(done)) == (3, 1, 4)
    done.clear()
    again = import_entries(memory(), parse_lines(lines), progress=done.append)
    assert (again.new, again.environments.new, sum(done)) == (3, 1, 4)


def test_environment_records_are_counted_one_by_one_and_refused_per_line() -> None:
    store = memory()
    first = [env("a", 1), env("b\x00d", 1), env("b", 1)]  # no store can hold a NUL in a name
    lines = [line(entry("s", 1)), *(environment_line(r).encode() for r in first)]
    report = import_entries(store, parse_lines(lines))
    assert report.new == 1 and report.environments.new == 2
    reason = "record.name: contains NUL (\\x00), which PostgreSQL text cannot hold"
    assert report.failed == [LineError(3, reason)]
    newer = [environment_line(env(name, 2)).encode() for name in ("a", "b")]
    assert import_lines(store, newer).environments.updated == 2
    assert [(r.name, r.built_at) for r in store.list_environments()] == [("a", 2), ("b", 2)]


def test_an_export_reads_sessions_of_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions too large to double the next read (here more than half of EXPORT_ENTRIES
    entries each) are exported whole, each once, and progress counts each session."""
    from sandbox_ledger import transfer

    monkeypatch.setattr(transfer, "EXPORT_ENTRIES", 12)
    source = memory()
    for s in range(3):
        for ts in range(7):
            source.append(entry(f"s{s}", ts))
    done: list[int] = []
    lines = list(export_lines(source, source.scan_sessions(), progress=done.append))
    assert [(json.loads(x)["sandboxId"], json.loads(x)["ts"]) for x in lines] == [
        (f"s{s}", ts) for s in range(3) for ts in range(7)
    ]
    assert done == [1, 1, 1]


@pytest.mark.parametrize(
    "given",
    [
        [("n", "s0"), ("n", "s1"), ("n", "s2")],  # a store's scan: sorted, each once
        [("n", "s2"), ("n", "s0"), ("n", "s1")],
        [("n", "s1"), ("n", "s0"), ("n", "s1"), ("n", "s2"), ("n", "s2")],
        [("n", "s0"), ("n", "s1"), ("n", "s1"), ("n", "s2")],  # sorted, one twice
    ],
)
def test_an_export_lists_each_session_once_in_key_order(given: list[tuple[str, str]]) -> None:
    """Whatever order the sessions are given in, and however often each: each exported
    once, in (name, sandboxId) order (a sorted list of distinct keys is used as it is)."""
    source = memory()
    for s in range(3):
        source.append(entry(f"s{s}", 1))
    exported: list[tuple[str, str]] = []
    lines = list(export_lines(source, iter(given), exported=exported))
    assert [json.loads(x)["sandboxId"] for x in lines] == ["s0", "s1", "s2"]
    assert exported == [("n", "s0"), ("n", "s1"), ("n", "s2")]
