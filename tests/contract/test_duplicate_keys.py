"""A JSON object that names a key twice is refused by every reader of JSON the product takes
from outside (issue 41, item 8): import lines (entries and environment lines), resource record
files, the local server's data file, cursors. JSON parsers keep one of the two values without
a word; each reader refuses the line or file instead, naming the key, and stores nothing of
it."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.test_import_stream import e, lines, small_batches, store  # noqa: F401
from sandbox_ledger import _json
from sandbox_ledger.cursor import decode_cursor, encode_cursor
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.transfer import import_lines, parse_line

if TYPE_CHECKING:
    from pathlib import Path

HEAD = '"ts":1,"name":"job","stepIndex":0,"event":"exec.complete"'
DUPLICATES = {
    "a top-level key": (f'{{{HEAD},"sandboxId":"sb-1","sandboxId":"sb-2"}}', "sandboxId"),
    "a key of the payload": (
        f'{{{HEAD},"sandboxId":"sb-1","payload":{{"exitCode":0,"exitCode":1}}}}',
        "exitCode",
    ),
    "a key deep in the payload": (
        f'{{{HEAD},"sandboxId":"sb-1","payload":[{{"a":{{"b":"x:y","b":"z"}}}}]}}',
        "b",
    ),
    "a key spelled with an escape": (
        f'{{{HEAD},"sandboxId":"sb-1","trace":1,"tr\\u0061ce":2}}',
        "trace",
    ),
    "an unknown field kept as given": (
        f'{{{HEAD},"sandboxId":"sb-1","trace":{{"id":1,"id":2}}}}',
        "id",
    ),
    "an environment line": (
        '{"kind":"environment","record":{"name":"py","name":"node","builtAt":1}}',
        "name",
    ),
}


@pytest.mark.parametrize("line,key", DUPLICATES.values(), ids=list(DUPLICATES))
def test_a_line_naming_a_key_twice_is_refused_naming_it(line: str, key: str) -> None:
    with pytest.raises(ValueError, match=f"the key '{key}' appears twice in one object"):
        parse_line(line.encode())


def test_keys_named_once_in_each_object_pass() -> None:
    """The same key in two objects, colons inside strings, spaces around colons: no repeat."""
    line = (
        f'{{{HEAD} , "sandboxId" : "sb-1", "payload": {{"k": [{{"a": "1:2"}}, {{"a": 2}}],'
        ' "a": {"a": "::"}}, "error": "e: r"}'
    )
    entry = parse_line(line.encode())
    assert entry is not None and getattr(entry, "payload", None) == {
        "k": [{"a": "1:2"}, {"a": 2}],
        "a": {"a": "::"},
    }


@pytest.mark.usefixtures("small_batches")
def test_an_import_refuses_the_line_and_stores_the_rest(store: Any) -> None:  # noqa: F811
    """Numbered as the line's error, naming the key; nothing of it is stored (sb-2 is never
    begun, the payload never taken as its last value); the lines around it are stored."""
    good = lines([e("job", "sb-1", "sandbox.created", 1), e("job", "sb-1", "sandbox.closed", 3)])
    top, _ = DUPLICATES["a top-level key"]
    nested, _ = DUPLICATES["a key of the payload"]
    report = import_lines(store, [good[0], top.encode() + b"\n", nested.encode() + b"\n", good[1]])
    assert report.new == 2
    assert [(f.number, f.reason) for f in report.failed] == [
        (2, "the key 'sandboxId' appears twice in one object"),
        (3, "the key 'exitCode' appears twice in one object"),
    ]
    assert [x.event for x in store.read_all("job", "sb-1")] == ["sandbox.created", "sandbox.closed"]
    assert store.read_all("job", "sb-2") == []


_KEYS = st.sampled_from(["a", "b", "c:d", "ts"])
_SCALARS = st.none() | st.integers(-5, 5) | st.sampled_from(["x", "a:b", "::", '"'])


def _text(value: Any) -> str:
    """JSON text of ``value``, where a list of pairs is an object (pairs may repeat a key)."""
    if isinstance(value, tuple):
        return "{" + ",".join(f"{json.dumps(k)}:{_text(v)}" for k, v in value[1]) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    return json.dumps(value)


def _repeats(value: Any) -> bool:
    if isinstance(value, tuple):
        names = [k for k, _ in value[1]]
        return len(set(names)) < len(names) or any(_repeats(v) for _, v in value[1])
    if isinstance(value, list):
        return any(_repeats(v) for v in value)
    return False


_PAYLOADS = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(st.tuples(_KEYS, inner), max_size=3).map(lambda pairs: ("object", pairs))
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(payload=_PAYLOADS)
def test_the_fast_check_is_exact(payload: Any) -> None:
    """Whatever the payload (objects that repeat a key or not, colons in strings), a line is
    refused exactly when some object in it names a key twice."""
    line = f'{{{HEAD},"sandboxId":"sb-1","payload":{_text(payload)}}}'
    if _repeats(payload):
        with pytest.raises(_json.DuplicateKeyError):
            parse_line(line.encode())
    else:
        assert parse_line(line.encode()) is not None


def _record_text() -> tuple[str, str]:
    """A resource record file's text and the record's id."""
    from resources.resource_fixtures import record
    from sandbox_ledger.resources.files import record_file_text

    r = record(age=timedelta(minutes=1))
    return record_file_text(r), r.id


def _twice(text: str, key: str, value: str) -> str:
    """``text`` (a JSON object) with ``key`` named once more, first."""
    assert text.startswith("{") and f'"{key}"' in text
    return "{" + json.dumps(key) + ":" + value + "," + text[1:]


def test_a_resource_record_file_naming_a_key_twice_is_refused(
    tmp_path: Path, moto_endpoint: str, sync_table: str
) -> None:
    from sandbox_ledger.resources import SyncResourceRecordStore
    from sandbox_ledger.resources.files import import_directory, read_record_file

    records = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    text, record_id = _record_text()
    path = tmp_path / f"{record_id}.json"
    path.write_text(_twice(text, "pid", "1"))
    with pytest.raises(InvalidInputError) as info:
        read_record_file(path)
    assert info.value.field == path.name
    assert "the key 'pid' appears twice in one object" in str(info.value)
    report = import_directory(records, tmp_path)
    assert list(report.failed) == [path.name] and "'pid' appears twice" in report.failed[path.name]
    assert records.list(limit=10).records == []
    path.write_text(text)  # the same file naming each key once is imported
    assert len(import_directory(records, tmp_path).written) == 1


def test_the_local_data_file_refuses_a_line_naming_a_key_twice(
    tmp_path: Path, moto_endpoint: str, sync_table: str
) -> None:
    """A resource record line or a ledger line naming a key twice: the load is refused, naming
    the file, the line and the key; nothing of the file is loaded."""
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.local.persist import RESOURCE_KIND, load
    from sandbox_ledger.resources import SyncResourceRecordStore

    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    records = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    text = json.dumps(json.loads(_record_text()[0]))  # on one line
    record_line = '{"kind":"' + RESOURCE_KIND + '","record":' + text + "}"
    entry_line = json.dumps(e("job", "sb-1", "sandbox.created", 1).wire())
    top, _ = DUPLICATES["a top-level key"]
    for bad, key in (
        (
            '{"kind":"' + RESOURCE_KIND + '","record":' + _twice(text, "id", '"x"') + "}",
            "id",
        ),
        (top, "sandboxId"),
    ):
        path = tmp_path / "dev.jsonl"
        path.write_text(f"{entry_line}\n{record_line}\n{bad}\n")
        with pytest.raises(InvalidInputError) as info:
            load(path, ledger, records)
        assert info.value.field == f"{path}:3"
        assert f"the key '{key}' appears twice in one object" in str(info.value)
        assert ledger.read_all("job", "sb-1") == [] and records.list(limit=10).records == []
    path.write_text(f"{entry_line}\n{record_line}\n")
    assert load(path, ledger, records).records == 1


def test_a_cursor_naming_a_key_twice_is_damaged() -> None:
    import base64

    good = encode_cursor("k", {"a": 1})
    raw = base64.urlsafe_b64decode(good + "=" * (-len(good) % 4)).decode()
    doubled = raw.replace('"k":"k"', '"k":"other","k":"k"')
    assert doubled != raw
    cursor = base64.urlsafe_b64encode(doubled.encode()).decode().rstrip("=")
    with pytest.raises(InvalidInputError, match="damaged"):
        decode_cursor("k", cursor)
