"""Export and import: reconcile, never replay; complete, atomic exports; CLI paging and guards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from resources.resource_fixtures import record
from sandbox_ledger import EnvironmentRecord, LedgerEntry
from sandbox_ledger.cli import app
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.resources import SyncResourceRecordStore
from sandbox_ledger.transfer import (
    content_digest,
    environment_line,
    import_entries,
    parse_lines,
    plan_session,
)


def e(
    name: str, sid: str, event: str, ts: int, payload: object = None, step: int = -1
) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name=name, sandbox_id=sid, step_index=step, event=event, payload=payload
    )


def line(entry: LedgerEntry) -> str:
    return json.dumps(entry.wire(), ensure_ascii=False)


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("SANDBOX_LEDGER_TABLE", raising=False)
    return CliRunner()


@pytest.fixture
def args(moto_endpoint: str, sync_table: str) -> list[str]:
    return ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]


@pytest.fixture
def ledger(moto_endpoint: str, sync_table: str) -> SyncDynamoDBAdapter:
    return SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)


def fill(ledger: SyncDynamoDBAdapter) -> None:
    """Two sessions, the second with its created events out of time order, and an orphan."""
    ledger.append(e("job", "a", "sandbox.created", 100))
    ledger.append(e("job", "a", "exec.complete", 110, {"out": "x"}, step=0))
    ledger.append(e("job", "a", "exec.complete", 110, {"out": "x"}, step=0))  # a genuine repeat
    ledger.append(e("job", "a", "exec.started", 110, "tie-1", step=1))
    ledger.append(e("job", "a", "exec.started", 110, "tie-2", step=1))
    ledger.append(e("job", "a", "sandbox.closed", 200))
    ledger.append(e("job", "b", "sandbox.created", 500))
    ledger.append(e("job", "b", "sandbox.created", 300))  # appended later, earlier ts
    ledger.append(e("job", "b", "exec.complete", 510, step=0))
    ledger.append(e("job", "b", "sandbox.closed", 900))
    ledger.append(e("job", "b", "sandbox.closed", 600))
    ledger.append(e("other", "orphan", "exec.complete", 50, step=0))  # never created


def export(runner: CliRunner, args: list[str], path: Path, *extra: str) -> list[str]:
    result = runner.invoke(app, [*args, "export", "-o", str(path), *extra])
    assert result.exit_code == 0, result.output
    return path.read_text(encoding="utf-8").splitlines()


def imported(runner: CliRunner, args: list[str], path: str, code: int = 0, **kw: object) -> str:
    result = runner.invoke(app, [*args, "import", path], **kw)  # type: ignore[arg-type]
    assert result.exit_code == code, result.output
    return result.output


def other_table(moto_endpoint: str, name: str) -> tuple[list[str], SyncDynamoDBAdapter]:
    adapter = SyncDynamoDBAdapter(name, endpoint_url=moto_endpoint)
    adapter.create_table()
    return ["--table", name, "--endpoint-url", moto_endpoint, "--region", "us-east-1"], adapter


def exec_counts(ledger: SyncDynamoDBAdapter, name: str, sid: str) -> tuple[int, int]:
    details = ledger.get_sandbox_details(name, sid)
    entries = ledger.read_all(name, sid)
    return (details.exec_count if details else 0), sum(x.event == "exec.complete" for x in entries)


# -- reconciliation, pure -------------------------------------------------------------------


def test_plan_counts_identical_entries_as_a_multiset() -> None:
    x, y = e("n", "s", "exec.complete", 1, {"a": 1}), e("n", "s", "exec.complete", 1, {"a": 2})
    writes, present = plan_session([x], [(1, x), (2, y), (3, x), (4, x)])
    assert present == 1
    assert [(n, occ) for n, _, occ, _ in writes] == [(2, 1), (3, 2), (4, 3)]
    assert [digest for *_, digest in writes] == [content_digest(y)] + [content_digest(x)] * 2
    # Key order inside objects is not content.
    same = LedgerEntry.model_validate_json(
        '{"payload":{"b":1,"a":2},"ts":1,"name":"n","sandboxId":"s","stepIndex":-1,"event":"x"}'
    )
    other = LedgerEntry.model_validate_json(
        '{"ts":1,"name":"n","sandboxId":"s","stepIndex":-1,"event":"x","payload":{"a":2,"b":1}}'
    )
    assert content_digest(same) == content_digest(other)


def test_parse_accepts_bom_crlf_and_reports_every_bad_line() -> None:
    good = line(e("n", "s", "sandbox.created", 1)).encode()
    lines = [
        b"\xef\xbb\xbf" + good + b"\r\n",
        b"\r\n",
        b'{"ts": 2, "name": "n", "sandboxId": "s", "stepIndex": -1, "event": "caf\xe9"}\r\n',
        line(e("n" * 2036, "s", "exec.started", 3)).encode() + b"\n",
        b"[1, 2]\n",
        good.replace(b'"ts":1', b'"ts":5'),
    ]
    parsed = parse_lines(lines)
    assert [n for n, _ in parsed.entries] == [1, 6]
    reasons = {err.number: err.reason for err in parsed.errors}
    assert set(reasons) == {3, 4, 5}
    assert "UTF-8" in reasons[3] and "too long" in reasons[4]


# -- import through the CLI -----------------------------------------------------------------


def test_import_into_the_table_it_came_from_adds_nothing(
    runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter, tmp_path: Path
) -> None:
    fill(ledger)
    dump = tmp_path / "all.jsonl"
    lines = export(runner, args, dump)
    before = {sid: ledger.read_all("job", sid) for sid in ("a", "b")}
    out = imported(runner, args, str(dump))
    assert f"0 new, {len(lines)} already present, 0 expired, 0 failed" in out
    for sid in ("a", "b"):
        assert ledger.read_all("job", sid) == before[sid]
        assert exec_counts(ledger, "job", sid)[0] == exec_counts(ledger, "job", sid)[1]
    assert exec_counts(ledger, "job", "a") == (2, 2)


def test_overlapping_reordered_and_padded_imports_store_each_entry_once(
    runner: CliRunner,
    args: list[str],
    ledger: SyncDynamoDBAdapter,
    moto_endpoint: str,
    tmp_path: Path,
) -> None:
    fill(ledger)
    full = export(runner, args, tmp_path / "full.jsonl")
    target, copy = other_table(moto_endpoint, f"{ledger.table_name}-copy")
    older = tmp_path / "older.jsonl"
    older.write_text("\n".join(full[:5]) + "\n")
    assert "5 new, 0 already present" in imported(runner, target, str(older))
    padded = tmp_path / "padded.jsonl"
    padded.write_text("\n\n" + "\n".join(full) + "\n")
    out = imported(runner, target, str(padded))
    assert f"{len(full) - 5} new, 5 already present, 0 expired, 0 failed" in out
    shuffled = tmp_path / "shuffled.jsonl"
    shuffled.write_text("\n".join(reversed(full)) + "\n")
    assert f"0 new, {len(full)} already present" in imported(runner, target, str(shuffled))
    for sid in ("a", "b"):
        assert copy.read_all("job", sid) == ledger.read_all("job", sid)
        assert copy.get_sandbox_details("job", sid) == ledger.get_sandbox_details("job", sid)
    assert copy.read_all("other", "orphan") == ledger.read_all("other", "orphan")


def test_concurrent_imports_store_each_entry_once(
    ledger: SyncDynamoDBAdapter, moto_endpoint: str
) -> None:
    entries = [e("job", "c", "sandbox.created", 1)]
    entries += [e("job", "c", "exec.complete", 10 + i % 3, {"i": i % 4}, step=i) for i in range(12)]
    entries += [e("job", "c", "exec.complete", 10, {"i": 0}, step=0)]  # a repeat of one above
    raw = [line(x).encode() + b"\n" for x in entries]
    reports = []

    def run(order: list[bytes]) -> None:
        importer = SyncDynamoDBAdapter(ledger.table_name, endpoint_url=moto_endpoint)
        reports.append(import_entries(importer, parse_lines(order)))

    threads = [
        threading.Thread(target=run, args=(raw if i % 2 else list(reversed(raw)),))
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = ledger.read_all("job", "c")
    assert sorted(map(content_digest, stored)) == sorted(map(content_digest, entries))
    assert sum(r.new for r in reports) == len(entries)
    assert all(r.new + r.present == len(entries) and not r.failed for r in reports)
    assert exec_counts(ledger, "job", "c") == (13, 13)


def test_import_keeps_valid_lines_and_reports_failed_ones(
    runner: CliRunner,
    args: list[str],
    ledger: SyncDynamoDBAdapter,
    tmp_path: Path,
    wait_for_indexes: Callable[[], None],
) -> None:
    path = tmp_path / "mixed.jsonl"
    rows = [
        b"\xef\xbb\xbf" + line(e("imp", "x", "sandbox.created", 1)).encode(),
        b'{"ts": 2, "name": "imp", "sandboxId": "x", "stepIndex": 0, "event": "\xff"}',
        line(e("imp" * 700, "x", "sandbox.created", 1)).encode(),
        line(e("imp", "x", "exec.complete", 3, step=0)).encode(),
        line(e("imp", "x", "sandbox.closed", 4)).encode(),
    ]
    path.write_bytes(b"\r\n".join(rows) + b"\r\n")
    out = imported(runner, args, str(path), code=4)  # partly failed
    assert f"{path}:2: invalid UTF-8" in out and f"{path}:3:" in out and "too long" in out
    assert "3 new, 0 already present, 0 expired, 2 failed" in out
    details = ledger.get_sandbox_details("imp", "x")
    assert details is not None and (details.exec_count, details.status) == (1, "completed")
    wait_for_indexes()  # settled listings (index lag waited out)
    [listed] = ledger.list_sandbox_details("imp")
    assert listed == details


def test_import_reads_stdin(
    runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter
) -> None:
    text = "\n".join(
        line(e("in", "s", ev, i)) for i, ev in enumerate(["sandbox.created", "exec.complete"])
    )
    out = imported(runner, args, "-", input=text + "\n")
    assert "<stdin>: 2 new, 0 already present, 0 expired, 0 failed" in out
    assert len(ledger.read_all("in", "s")) == 2


# -- export ---------------------------------------------------------------------------------


def test_round_trip_is_byte_identical_with_out_of_order_created(
    runner: CliRunner,
    args: list[str],
    ledger: SyncDynamoDBAdapter,
    moto_endpoint: str,
    tmp_path: Path,
) -> None:
    fill(ledger)
    first = export(runner, args, tmp_path / "first.jsonl")
    assert any('"sandboxId": "orphan"' in x for x in first)  # never listed, still exported
    target, copy = other_table(moto_endpoint, f"{ledger.table_name}-rt")
    imported(runner, target, str(tmp_path / "first.jsonl"))
    second = export(runner, target, tmp_path / "second.jsonl")
    assert (tmp_path / "first.jsonl").read_bytes() == (tmp_path / "second.jsonl").read_bytes()
    b = copy.get_sandbox_details("job", "b")
    assert b == ledger.get_sandbox_details("job", "b")
    assert b is not None and (b.started_at, b.completed_at, b.exec_count) == (500, 900, 1)
    assert len(second) == 12


def test_export_by_name_includes_sessions_never_created(
    runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter, tmp_path: Path
) -> None:
    fill(ledger)
    lines = export(runner, args, tmp_path / "other.jsonl", "--name", "other")
    assert [json.loads(x)["sandboxId"] for x in lines] == ["orphan"]
    job = export(runner, args, tmp_path / "job.jsonl", "--name", "job")
    assert {json.loads(x)["sandboxId"] for x in job} == {"a", "b"}


def test_failed_export_leaves_the_file_untouched(
    runner: CliRunner, moto_endpoint: str, tmp_path: Path
) -> None:
    backup = tmp_path / "backup.jsonl"
    backup.write_text("yesterday\n")
    missing = ["--table", "no-such-table", "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    result = runner.invoke(app, [*missing, "export", "-o", str(backup)])
    assert result.exit_code == 3 and "error:" in result.output
    assert backup.read_text() == "yesterday\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]


@pytest.mark.parametrize(
    "selection",
    [["--name", "nope", "--sandbox-id", "nope"], ["--name", "nope"]],
    ids=["id", "name"],
)
def test_a_named_export_that_finds_nothing_leaves_the_file(
    runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter, tmp_path: Path,
    selection: list[str],
) -> None:  # fmt: skip
    """A mistyped --name or --sandbox-id fails (not found, one line) before the output is
    opened: yesterday's backup is not replaced by an empty export."""
    ledger.append(e("job", "a", "sandbox.created", 1))
    backup = tmp_path / "backup.jsonl"
    backup.write_text("yesterday\n")
    result = runner.invoke(app, [*args, "export", *selection, "-o", str(backup)])
    assert result.exit_code == 3, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("error: no session") and "is unchanged" in line
    assert backup.read_text() == "yesterday\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]
    to_stdout = runner.invoke(app, [*args, "export", *selection])
    assert to_stdout.exit_code == 3 and to_stdout.stdout == ""


# -- paging and guards in the CLI -----------------------------------------------------------


def test_ls_pages_through_ties_with_the_printed_cursor(
    runner: CliRunner,
    args: list[str],
    ledger: SyncDynamoDBAdapter,
    wait_for_indexes: Callable[[], None],
) -> None:
    for sid in ("t1", "t2", "t3"):
        ledger.append(e("job", sid, "sandbox.created", 700))
    wait_for_indexes()  # settled listings (index lag waited out)
    seen: list[str] = []
    extra: list[str] = []
    for _ in range(4):
        result = runner.invoke(app, [*args, "ls", "--limit", "2", *extra])
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        cursor = [x for x in lines if x.startswith("next page: --cursor ")]
        # A whole field of a listed row: the cursor (random table name inside) may hold "t1".
        fields = {field for x in lines if x not in cursor for field in x.split()}
        seen += [sid for sid in ("t1", "t2", "t3") if sid in fields]
        if not cursor:
            break
        extra = ["--cursor", cursor[0].split()[-1]]
    assert sorted(seen) == ["t1", "t2", "t3"]
    bad = runner.invoke(app, [*args, "ls", "--cursor", "nonsense"])
    assert bad.exit_code == 2 and "cursor" in bad.output


def test_resources_ls_prints_and_takes_a_cursor(
    runner: CliRunner,
    args: list[str],
    moto_endpoint: str,
    sync_table: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    ids = {store.put(record(age=timedelta(minutes=i))).record.id for i in range(3)}
    wait_for_indexes()  # settled listings (index lag waited out)
    first = runner.invoke(app, [*args, "resources", "ls", "--limit", "2"])
    [cursor] = [x.split()[-1] for x in first.output.splitlines() if x.startswith("next page:")]
    second = runner.invoke(app, [*args, "resources", "ls", "--limit", "2", "--cursor", cursor])
    assert second.exit_code == 0, second.output
    assert {i for i in ids if i in first.output + second.output} == ids


@pytest.mark.parametrize(
    "command",
    [["import", "-"], ["rm", "n", "s", "--yes"], ["table", "create"], ["resources", "sweep"]],
)
def test_write_commands_refuse_the_embedded_server(runner: CliRunner, command: list[str]) -> None:
    result = runner.invoke(app, command, input="")
    assert result.exit_code == 2
    [message] = result.output.strip().splitlines()
    assert "--table" in message and "SANDBOX_LEDGER_TABLE" in message


def test_rm_and_show_of_a_missing_session_fail(
    runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter
) -> None:
    for command in (
        ["rm", "job", "nope", "--yes"],
        ["show", "job", "nope", "--json"],
        ["show", "job", "nope"],
    ):
        result = runner.invoke(app, [*args, *command])
        assert result.exit_code == 3, command  # not found
        [message] = result.output.strip().splitlines()
        assert "job/nope" in message


# -- environment records in the export ------------------------------------------------------


def env(name: str, built_at: int, **extra: object) -> EnvironmentRecord:
    return EnvironmentRecord.model_validate({"name": name, "builtAt": built_at, **extra})


def test_environment_lines_parse_and_unknown_kinds_are_reported() -> None:
    record = env("py", 5, snapshotId=None, layers=[1, {"a": None}])
    rows = [
        line(e("n", "s", "sandbox.created", 1)),
        environment_line(record),
        '{"kind": "retention-policy", "record": {"days": 3}}',
        '{"kind": "environment", "record": {"name": "no-built-at"}}',
        '{"kind": "environment", "record": {"name": "x", "builtAt": 1}, "more": 1}',
        # An entry whose extra field is called "kind" is still an entry (it has "event").
        '{"ts": 2, "name": "n", "sandboxId": "s", "stepIndex": -1, "event": "x", "kind": "k"}',
        '{"kind": "environment"}',
    ]
    parsed = parse_lines(r.encode() + b"\n" for r in rows)
    assert [n for n, _ in parsed.entries] == [1, 6]
    assert parsed.entries[1][1].wire()["kind"] == "k"
    assert [(n, r.wire()) for n, r in parsed.environments] == [(2, record.wire())]
    reasons = {err.number: err.reason for err in parsed.errors}
    assert set(reasons) == {3, 4, 5, 7}
    assert "line kind 'retention-policy' is unknown" in reasons[3] and "newer" in reasons[3]
    assert "environment record" in reasons[4] and "builtAt" in reasons[4]
    assert "more" in reasons[5]


def test_an_importer_without_typed_lines_refuses_an_environment_line() -> None:
    """What an importer older than typed lines did with every line: validate it as an entry.
    An environment line fails there (no ts, name, sandboxId), so it is reported, not lost."""
    with pytest.raises(ValueError, match="ts") as caught:
        LedgerEntry.model_validate_json(environment_line(env("py", 1)))
    assert "sandboxId" in str(caught.value)


class Envs:
    """A store's environment methods (sync), counting saves."""

    def __init__(self, *held: EnvironmentRecord) -> None:
        self.held = {r.name: r for r in held}
        self.saves = 0

    def read_stored(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        return []

    def append_once(self, entry: LedgerEntry, occurrence: int) -> bool:
        raise AssertionError("no entries in these files")

    def ledger_retention(self) -> int | None:
        return None

    def get_environment(self, name: str) -> EnvironmentRecord | None:
        return self.held.get(name)

    def save_environment(self, record: EnvironmentRecord) -> None:
        self.saves += 1
        self.held[record.name] = record


def test_environments_reconcile_by_built_at() -> None:
    store = Envs(env("older", 5, v="store"), env("newer", 9, v="store"), env("tie", 7, v="store"))
    same = env("same", 3, v=None)
    store.held["same"] = same
    incoming = [
        env("older", 6, v="file"),  # newer than the store's: replaces it
        env("newer", 8, v="file"),  # older than the store's: the store's is kept
        env("tie", 7, v="file"),  # same builtAt, other content: the store's is kept
        same,  # identical: already present
        env("fresh", 1, v="file"),  # absent: saved
    ]
    parsed = parse_lines(environment_line(r).encode() for r in incoming)
    report = import_entries(store, parsed)
    counts = report.environments
    assert (counts.new, counts.updated, counts.present, counts.kept) == (1, 1, 1, 2)
    assert {n: r.wire().get("v") for n, r in store.held.items()} == {
        "older": "file",
        "newer": "store",
        "tie": "store",
        "same": None,
        "fresh": "file",
    }
    assert store.saves == 2
    again = import_entries(store, parsed)  # re-import: nothing changes, nothing is saved
    assert (again.environments.new, again.environments.updated) == (0, 0)
    assert store.saves == 2
    assert again.summary().endswith(
        "; environments: 0 new, 0 updated, 3 already present, 2 not newer than the store's"
    )


def test_an_export_without_environment_lines_imports_as_before() -> None:
    report = import_entries(Envs(), parse_lines([b"\n"]))
    assert report.summary() == "0 new, 0 already present, 0 expired, 0 failed"


def test_a_table_export_carries_environments_and_a_refused_record_is_a_failed_line(
    runner: CliRunner,
    args: list[str],
    ledger: SyncDynamoDBAdapter,
    moto_endpoint: str,
    tmp_path: Path,
) -> None:
    fill(ledger)
    ledger.save_environment(env("py", 5, snapshotId=None, tags={"a": None}))
    lines = export(runner, args, tmp_path / "all.jsonl")
    assert lines[-1] == environment_line(env("py", 5, snapshotId=None, tags={"a": None}))
    # Per-name exports are about sessions: no environment records.
    assert not any(
        '"kind"' in x for x in export(runner, args, tmp_path / "job.jsonl", "--name", "job")
    )
    target, copy = other_table(moto_endpoint, f"{ledger.table_name}-env")
    path = tmp_path / "plus.jsonl"
    bad = environment_line(env("e" * 1100, 1))  # longer than any store's key allows
    path.write_text("\n".join([*lines, bad, '{"kind": "future"}']) + "\n", encoding="utf-8")
    out = imported(runner, target, str(path), code=4)  # partly failed
    assert f"{path}:{len(lines) + 1}:" in out and f"{path}:{len(lines) + 2}: line kind" in out
    assert "12 new, 0 already present, 0 expired, 2 failed; environments: 1 new" in out
    assert [r.wire() for r in copy.list_environments()] == [
        {"name": "py", "builtAt": 5, "snapshotId": None, "tags": {"a": None}}
    ]


# -- concurrent imports into the SQL stores -------------------------------------------------


class _ReadsThenWaits:
    """An import target whose first reconciliation read is followed by another whole import, before
    this import writes anything: the interleaving of two imports running at once."""

    def __init__(self, inner: object, meanwhile: list[object]) -> None:
        self._inner = inner
        self._meanwhile = meanwhile

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def read_stored_sessions(self, sessions: list[tuple[str, str]]) -> list[list[LedgerEntry]]:
        found: list[list[LedgerEntry]] = self._inner.read_stored_sessions(sessions)  # type: ignore[attr-defined]
        while self._meanwhile:
            self._meanwhile.pop()()  # type: ignore[operator]
        return found


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_concurrent_imports_into_a_sql_store_store_each_entry_once(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two imports of one file at once into SQLite or PostgreSQL both read the session
    before either writes: the second must find the first's entries by their identity (it
    appended every entry again: 13 entries stored twice, execCount doubled)."""
    from sandbox_ledger.blocking import BlockingAdapter

    def adapter() -> object:
        if kind == "sqlite":
            from sandbox_ledger.sqlite import SQLiteAdapter

            return SQLiteAdapter(tmp_path / "ledger.db")
        from sandbox_ledger.postgres import PostgresAdapter

        dsn = request.getfixturevalue("postgres_dsn")
        return PostgresAdapter(dsn, schema=request.getfixturevalue("pg_schema"), max_size=2)

    entries = [e("job", "c", "sandbox.created", 1)]
    entries += [e("job", "c", "exec.complete", 10 + i % 3, {"i": i % 4}, step=i) for i in range(11)]
    entries += [e("job", "c", "exec.complete", 10, {"i": 0}, step=0)]  # a repeat of one above
    parsed = parse_lines([line(x).encode() + b"\n" for x in entries])
    first, second = BlockingAdapter(adapter()), BlockingAdapter(adapter())
    reports = []
    try:
        meanwhile: list[object] = [lambda: reports.append(import_entries(second, parsed))]
        reports.append(import_entries(_ReadsThenWaits(first, meanwhile), parsed))  # type: ignore[arg-type]
        stored = first.read_all("job", "c")
        assert sorted(map(content_digest, stored)) == sorted(map(content_digest, entries))
        assert [(r.new, r.present, r.failed) for r in reports] == [(13, 0, []), (0, 13, [])]
        details = first.get_sandbox_details("job", "c")
        assert details is not None and details.exec_count == 12
    finally:
        first.close()
        second.close()


def test_export_replaces_a_symlinks_target_and_keeps_its_mode(
    runner: CliRunner, tmp_path: Path
) -> None:
    """``-o`` naming a symlink updates the file it points at (the rename replaced the link
    with a new file and left yesterday's backup as it was), and a replaced file keeps its
    permissions (a 0600 backup became 0644)."""
    import stat

    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert (
        runner.invoke(
            app,
            ["import", "--store", store, "-"],
            input=line(e("job", "s", "sandbox.created", 1)) + "\n",
        ).exit_code
        == 0
    )
    real = tmp_path / "backups" / "ledger.jsonl"
    real.parent.mkdir()
    real.write_text("yesterday\n")
    real.chmod(0o600)
    link = tmp_path / "latest.jsonl"
    link.symlink_to(real)
    result = runner.invoke(app, ["export", "--store", store, "-o", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink()
    assert json.loads(real.read_text())["sandboxId"] == "s"
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert sorted(p.name for p in real.parent.iterdir()) == ["ledger.jsonl"]


def test_an_export_failing_midway_leaves_the_file_untouched(tmp_path: Path) -> None:
    """A read that fails after lines were written (the table's own test fails before any
    line) leaves the old file and no partial file behind."""
    from sandbox_ledger.cli.transfer import _export

    backup = tmp_path / "backup.jsonl"
    backup.write_text("yesterday\n")

    def lines() -> object:
        yield '{"ts": 1}\n'
        raise ConnectionError("the second session's read failed")

    with pytest.raises(ConnectionError):
        _export(lines(), backup)  # type: ignore[arg-type]
    assert backup.read_text() == "yesterday\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]


def test_an_export_is_never_readable_beyond_the_replaced_files_mode(tmp_path: Path) -> None:
    """While the export is written, its temporary file has the backup's own mode (it was
    created 0644 and fixed only at the end, so a 0600 backup's data was readable meanwhile);
    a new file gets the usual mode (0666 less the umask)."""
    import stat

    from sandbox_ledger.cli.transfer import _export

    backup = tmp_path / "backup.jsonl"
    backup.write_text("yesterday\n")
    backup.chmod(0o600)
    seen: list[int] = []

    def lines() -> object:
        yield '{"ts": 1}\n'
        [partial] = [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
        seen.append(stat.S_IMODE(partial.stat().st_mode))
        yield '{"ts": 2}\n'

    assert _export(lines(), backup) == 2  # type: ignore[arg-type]
    assert seen == [0o600] and stat.S_IMODE(backup.stat().st_mode) == 0o600
    fresh = tmp_path / "new.jsonl"
    _export(iter(['{"ts": 1}\n']), fresh)
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~mask


def test_an_export_into_a_pipe_or_fifo_writes_through_it(tmp_path: Path) -> None:
    """-o naming something that is not a regular file (a FIFO, /dev/stdout into a pipe) is
    written as it is: there is no file to replace (a FIFO was replaced by a regular file and
    its reader got nothing; /dev/stdout into a pipe failed)."""
    from sandbox_ledger.cli.transfer import _export

    fifo = tmp_path / "export.fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    assert _export(iter(['{"ts": 1}\n', '{"ts": 2}\n']), fifo) == 2
    reader.join(timeout=10)
    assert got == ['{"ts": 1}\n{"ts": 2}\n'] and fifo.is_fifo()
    done = subprocess.run(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from sandbox_ledger.cli.transfer import _export;"
         " _export(iter(['{\"ts\": 1}\\n']), Path('/dev/stdout'))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == '{"ts": 1}\n', done.stderr


def test_an_entry_that_expires_while_the_import_runs_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's retention is checked against the clock at each entry, not at the start:
    an entry that expired during a long import is counted expired, never written hidden."""
    import time as real_time

    from sandbox_ledger import _import_stream
    from sandbox_ledger.blocking import BlockingAdapter
    from sandbox_ledger.memory import MemoryAdapter

    start = int(real_time.time())
    day = 86_400
    early = e("n", "s", "exec.started", (start - day + 1_000) * 1000, step=0)  # 1,000 s left
    late = e("n", "s", "exec.started", (start - day + 50) * 1000, step=1)  # 50 s left
    readings = iter([start])  # the first reading is the start; later ones 100 s on
    monkeypatch.setattr(_import_stream.time, "time", lambda: next(readings, start + 100))
    target = BlockingAdapter(MemoryAdapter(retention=timedelta(days=1)))
    parsed = parse_lines([line(early).encode(), line(late).encode()])
    report = import_entries(target, parsed)
    assert (report.new, report.expired) == (1, 1), report
    assert target.read_stored("n", "s") == [early]


def test_an_export_reads_more_sessions_at_a_time_only_while_they_are_small(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sessions are read one, then twice as many each time, up to EXPORT_SESSIONS and to
    EXPORT_ENTRIES entries' worth of the largest session just read: many small sessions are
    read in few calls, large ones one at a time."""
    from collections.abc import Sequence

    from sandbox_ledger import transfer
    from sandbox_ledger.blocking import BlockingAdapter
    from sandbox_ledger.memory import MemoryAdapter

    monkeypatch.setattr(transfer, "EXPORT_SESSIONS", 8)
    monkeypatch.setattr(transfer, "EXPORT_ENTRIES", 12)
    calls: list[int] = []

    class Counted(BlockingAdapter):
        def read_sessions_in_append_order(
            self, sessions: Sequence[tuple[str, str]]
        ) -> list[list[LedgerEntry]]:
            calls.append(len(sessions))
            return super().read_sessions_in_append_order(sessions)

    source = Counted(MemoryAdapter())
    for s in range(20):  # 20 sessions of 1 entry, then 6 of 12
        source.append(e("a", f"s{s:02d}", "sandbox.created", 1))
    for s in range(6):
        for ts in range(12):
            source.append(e("b", f"s{s}", "exec.started", ts))
    lines = list(transfer.export_lines(source, source.scan_sessions()))
    assert len(lines) == 20 + 72
    assert calls == [1, 2, 4, 8, 8, 1, 1, 1]
    assert [json.loads(x)["ts"] for x in lines[20:32]] == list(range(12))


def test_an_export_counts_only_the_sessions_it_exported() -> None:
    """A session listed by the scan and emptied before it is read (a delete running) has
    nothing exported and is not counted as exported."""
    from sandbox_ledger.blocking import BlockingAdapter
    from sandbox_ledger.cli.transfer import export_to
    from sandbox_ledger.memory import MemoryAdapter
    from sandbox_ledger.transfer import export_lines

    source = BlockingAdapter(MemoryAdapter())
    kept = e("n", "s", "sandbox.created", 1)
    source.append(kept)
    exported: list[tuple[str, str]] = []
    lines = list(export_lines(source, [("n", "s"), ("gone", "x")], exported=exported))
    assert lines == [line(kept) + "\n"] and exported == [("n", "s")]

    class ListsAGoneSession(BlockingAdapter):
        def scan_sessions(
            self, name: str | None = None, *, segments: int | None = None
        ) -> list[tuple[str, str]]:
            return [*super().scan_sessions(name, segments=segments), ("gone", "x")]

    from rich.console import Console

    racing = ListsAGoneSession(source.adapter)
    sessions, entries, _, _ = export_to(
        racing, name=None, sandbox_id=None, output=None, err=Console(stderr=True)
    )
    assert (sessions, entries) == (1, 1)


def test_a_line_nested_deeper_than_any_decoder_fails_alone() -> None:
    """Fourth red team: 2,000 nested arrays raised RecursionError out of the typed-line check
    and aborted the whole import (nothing stored, exit 1); it is one failed line."""
    good = [e("n", "s", "sandbox.created", 1), e("n", "s", "sandbox.closed", 3)]
    deep_entry = (
        '{"ts":2,"name":"n","sandboxId":"s","stepIndex":0,"event":"e","payload":'
        + "[" * 2000
        + "]" * 2000
        + "}"
    )
    deep_typed = '{"kind":' + "[" * 3000 + "]" * 3000 + "}"
    raw = [line(good[0]).encode(), deep_entry.encode(), deep_typed.encode(), line(good[1]).encode()]
    parsed = parse_lines(raw)
    assert [n for n, _ in parsed.entries] == [1, 4]
    assert [x.number for x in parsed.errors] == [2, 3]
    assert all("recursion" in x.reason for x in parsed.errors)
