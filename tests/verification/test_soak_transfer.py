"""The fleet's importer and exporter and the final round trip (sandbox_ledger/soak/importer.py,
exporter.py, transfers.py; docs/reliability.md): the checks on hand-made histories and
stores, short runs that must pass and, with a known defect put in by hand, fail."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sandbox_ledger import LedgerEntry, LedgerEvent, MemoryAdapter
from sandbox_ledger.blocking import BlockingAdapter, open_blocking_store
from sandbox_ledger.soak.checker import Report, check
from sandbox_ledger.soak.exporter import export_sessions
from sandbox_ledger.soak.history import History, operations, read_history
from sandbox_ledger.soak.importer import grow_file, make_file, pending_files
from sandbox_ledger.soak.transfers import DROPS_A_FIELD, round_trip
from sandbox_ledger.stores import open_store
from sandbox_ledger.transfer import ImportReport, content_digest, import_lines

from .soak_runs import run_soak

NAME = "soak"


def _checked(path: Path, url: str) -> Report:
    async def run() -> Report:
        store: Any = open_store(url)
        try:
            return await check(operations(read_history(path)), store, NAME)
        finally:
            await store.close()

    return asyncio.run(run())


def _import(url: str, file: str, times: int = 1) -> None:
    ledger = open_blocking_store(url)
    try:
        for _ in range(times):
            with Path(file).open("rb") as lines:
                assert not import_lines(ledger, lines).failed
    finally:
        ledger.close()


@pytest.fixture
def made(tmp_path: Path) -> tuple[History, dict[str, Any], str]:
    """An importer's history and a file of its making, and a SQLite store's URL."""
    history = History(tmp_path / "h.jsonl", "i.0")
    named = make_file(tmp_path / "i.0-0.jsonl", "i.0-0", random.Random(11))
    return history, named, f"sqlite:///{tmp_path / 'ledger.db'}"


def test_an_import_run_again_stores_each_entry_once(
    tmp_path: Path, made: tuple[History, dict[str, Any], str]
) -> None:
    """A killed import, run again twice (once after it was acknowledged), as the importer
    does: every entry stored once, the summaries the reference's, the environment saved."""
    history, named, url = made
    text = Path(named["file"]).read_text(encoding="utf-8")
    assert all(part in text for part in ('"traceId"', '"error"', "\\u0000"))
    history.invoke("import", rerun=False, **named)  # killed: no completion
    history.ok(history.invoke("import", rerun=True, **named))
    history.ok(history.invoke("import", rerun=True, **named))
    _import(url, named["file"], times=3)
    report = _checked(tmp_path / "h.jsonl", url)
    assert report.violations == []
    assert (report.imports, report.reimports) == (3, 2)
    assert report.imported == len(named["x"]) == report.entries
    assert report.sessions == len({x[0] for x in named["x"]})


def test_a_newer_export_and_imports_at_once_store_each_entry_once(
    tmp_path: Path, made: tuple[History, dict[str, Any], str]
) -> None:
    """A newer export of the same sessions (each open one grown), imported after the older
    one, and two imports of it at once (two operators): each entry stored once."""
    history, named, url = made
    grown = grow_file(tmp_path / "i.0-1.jsonl", "i.0-1", named, random.Random(5))
    assert grown["from"] == named["file"] and grown["x"][: len(named["x"])] == named["x"]
    assert len(grown["x"]) > len(named["x"])  # seed 11: one session of two open
    history.ok(history.invoke("import", rerun=False, **named))
    _import(url, named["file"])
    ledger = open_blocking_store(url)
    try:
        with ThreadPoolExecutor(2) as pool:
            reports = list(pool.map(lambda _: _import_one(ledger, grown["file"]), range(2)))
    finally:
        ledger.close()
    for _ in reports:
        history.ok(history.invoke("import", rerun=True, **grown))
    assert sum(r.new for r in reports) == len(grown["x"]) - len(named["x"])
    report = _checked(tmp_path / "h.jsonl", url)
    assert report.violations == [] and report.entries == len(grown["x"])


def _import_one(ledger: Any, file: str) -> ImportReport:
    with Path(file).open("rb") as lines:
        return import_lines(ledger, lines)


def test_an_import_that_replays_fails_the_check_naming_the_file(
    tmp_path: Path, made: tuple[History, dict[str, Any], str]
) -> None:
    history, named, url = made
    history.ok(history.invoke("import", rerun=False, **named))
    history.ok(history.invoke("import", rerun=True, **named))
    ledger = open_blocking_store(url)
    try:  # a replay, not a reconcile: every line appended, twice
        for _ in range(2):
            for line in Path(named["file"]).read_bytes().splitlines():
                if b'"event"' in line:
                    ledger.append(LedgerEntry.model_validate_json(line))
    finally:
        ledger.close()
    violations = _checked(tmp_path / "h.jsonl", url).violations
    found = [v for v in violations if "an acknowledged append is stored 2 times" in v.what]
    assert len(found) == 2 * len(named["x"])  # each entry, held by each import
    assert named["file"] in found[0].excerpt[0] and found[0].excerpt[0].endswith("-> ok")
    # and the environment record the imports named, never saved
    assert any(
        v.what.startswith("environment imp-i.0-0 holds the save of None") for v in violations
    )


def test_an_import_of_unknown_outcome_may_be_stored_at_most_once(
    tmp_path: Path, made: tuple[History, dict[str, Any], str]
) -> None:
    history, named, url = made
    history.fail(history.invoke("import", rerun=False, **named), TimeoutError("reset"))
    assert _checked(tmp_path / "h.jsonl", url).violations == []  # nothing stored: fine
    _import(url, named["file"])
    assert _checked(tmp_path / "h.jsonl", url).violations == []  # stored once: fine
    history.ok(history.invoke("import", rerun=True, **named))
    _lose_one(url, named)  # an acknowledged import, one of its entries not stored
    [lost] = _checked(tmp_path / "h.jsonl", url).violations
    assert lost.what.endswith("an acknowledged append is stored 0 times")


def _lose_one(url: str, named: dict[str, Any]) -> None:
    """Delete the file's first session and store it again without its first entry."""
    sid = named["x"][0][0]
    ledger = open_blocking_store(url)
    try:
        kept = ledger.read_in_append_order(NAME, sid)[1:]
        ledger.delete_sandbox(NAME, sid)
        for entry in kept:
            ledger.append(entry)
    finally:
        ledger.close()


def test_the_next_importer_finds_the_imports_to_run_again(
    tmp_path: Path, made: tuple[History, dict[str, Any], str]
) -> None:
    history, named, _ = made
    other = make_file(tmp_path / "i.0-1.jsonl", "i.0-1", random.Random(4))
    history.invoke("import", rerun=False, **named)  # killed
    history.ok(history.invoke("import", rerun=False, **other))
    History(tmp_path / "h.jsonl", "w0").ok(7)  # another process's lines are passed over
    assert pending_files(tmp_path / "h.jsonl") == ([named], [other])
    history.fail(history.invoke("import", rerun=True, **named), TimeoutError("reset"))
    assert pending_files(tmp_path / "h.jsonl") == ([named], [other])
    history.ok(history.invoke("import", rerun=True, **named))
    assert pending_files(tmp_path / "h.jsonl") == ([], [named, other])


def _entry(sid: str, event: LedgerEvent, ts: int) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name=NAME, sandbox_id=sid, step_index=ts, event=event, payload={"by": f"{ts}"}
    )


def _append(history: History, store: MemoryAdapter, entry: LedgerEntry) -> str:
    digest = content_digest(entry)
    number = history.invoke(
        "append", s=entry.sandbox_id, e=str(entry.event), d=digest, w=entry.wire()
    )
    asyncio.run(store.append(entry))
    history.ok(number)
    return digest


def _export(history: History, got: dict[str, list[str]], *sessions: str) -> None:
    history.ok(history.invoke("export", sessions=sorted(sessions)), got=got)


def test_an_export_holds_the_start_of_what_each_session_stores(tmp_path: Path) -> None:
    store, history = MemoryAdapter(), History(tmp_path / "h.jsonl", "w0")
    a = [_append(history, store, _entry("a", LedgerEvent.SandboxCreated, 1))]
    b = [_append(history, store, _entry("b", LedgerEvent.SandboxCreated, 1))]
    _export(history, {"a": a}, "a")  # a live session: the start of it, fine
    a.append(_append(history, store, _entry("a", LedgerEvent.ExecComplete, 2)))
    b.append(_append(history, store, _entry("b", LedgerEvent.ExecComplete, 2)))
    _export(history, {"a": a, "b": b}, "a", "b")  # all of both, fine
    _export(history, {"a": a[1:]}, "a")  # its first entry left out
    _export(history, {"a": [a[1], a[0]]}, "a")  # out of order
    _export(history, {}, "b")  # listed with entries, never deleted, exported with none
    report = asyncio.run(check(operations(read_history(tmp_path / "h.jsonl")), store, NAME))
    assert [v.what for v in report.violations] == [
        "a: an export held 1 entries, not the start of the 2 stored in order",
        "a: an export held 2 entries, not the start of the 2 stored in order",
        "b: an export held 0 entries, not the start of the 2 stored in order (it was listed "
        "with entries, and never deleted)",
    ]
    assert all(v.excerpt[0].startswith("w0#") for v in report.violations)
    assert (report.exports, report.exported) == (5, 8)


def test_an_export_of_a_session_deleted_since_holds_a_prefix_of_its_appends(
    tmp_path: Path,
) -> None:
    store, history = MemoryAdapter(), History(tmp_path / "h.jsonl", "w0")
    sent = [
        _append(history, store, _entry("d", event, ts))
        for ts, event in enumerate(
            [LedgerEvent.SandboxCreated, LedgerEvent.ExecStarted, LedgerEvent.ExecComplete], 1
        )
    ]
    _export(history, {"d": sent[:2]}, "d")  # as of a moment: fine
    _export(history, {}, "d")  # left out while its delete ran: fine
    _export(history, {"d": sent[1:]}, "d")  # the rest of a deleted session
    _export(history, {"d": [sent[0], sent[0]]}, "d")
    _export(history, {"d": [sent[0], "f" * 32]}, "d")
    history.ok(history.invoke("delete", s="d"))
    asyncio.run(store.delete_sandbox(NAME, "d"))
    report = asyncio.run(check(operations(read_history(tmp_path / "h.jsonl")), store, NAME))
    found = [v.what for v in report.violations]
    assert found == [
        f"d: an export held 2 entries, not a prefix of its appends: it lacks ['{sent[0]}'], "
        "acknowledged before an entry it holds was sent",
        f"d: an export held entries twice: ['{sent[0]}']",
        f"d: an export held entries nobody sent: ['{'f' * 32}']",
    ]


def test_the_exporter_records_each_sessions_lines_in_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = open_blocking_store(url)
    try:
        entries = [_entry(sid, LedgerEvent.SandboxCreated, 1) for sid in ("a", "b")]
        entries.append(_entry("a", LedgerEvent.ExecComplete, 2))
        for entry in entries:
            ledger.append(entry)
        got = export_sessions(ledger, ["a", "b", "never"])
    finally:
        ledger.close()
    digests = [content_digest(e) for e in entries]
    assert got == {"a": [digests[0], digests[2]], "b": [digests[1]]}


def _source() -> BlockingAdapter:
    source = BlockingAdapter(MemoryAdapter())
    for sid in ("a", "b"):
        for ts, event in enumerate([LedgerEvent.SandboxCreated, LedgerEvent.SandboxClosed], 1):
            source.append(_entry(sid, event, ts))
    return source


def test_the_round_trip_passes_stores_that_keep_everything(tmp_path: Path) -> None:
    source = _source()
    targets = [
        ("memory", BlockingAdapter(MemoryAdapter())),
        ("sqlite", open_blocking_store(f"sqlite:///{tmp_path / 'rt.db'}")),
    ]
    try:
        assert round_trip(source, targets) == []
    finally:
        for _, target in [("source", source), *targets]:
            target.close()


def test_the_round_trip_bites_an_import_that_drops_a_field() -> None:
    source, target = _source(), BlockingAdapter(MemoryAdapter())
    try:
        [found] = round_trip(source, [("memory", target)], DROPS_A_FIELD)
    finally:
        source.close()
        target.close()
    assert found.what == (
        "round trip through memory: the export of 4 lines came back as 4, first differing at line 1"
    )
    assert found.excerpt == [
        'exported    {"ts": 1, "name": "soak", "sandboxId": "a", "stepIndex": 1, '
        '"event": "sandbox.created", "payload": {"by": "1"}}',
        're-exported {"ts": 1, "name": "soak", "sandboxId": "a", "stepIndex": 1, '
        '"event": "sandbox.created", "payload": {}}',
    ]


def test_the_round_trip_names_a_line_lost_at_the_end() -> None:
    class LosesTheLast:
        def __init__(self, ledger: Any) -> None:
            self._ledger = ledger

        def __getattr__(self, name: str) -> Any:
            return getattr(self._ledger, name)

        def append_once_many(self, items: Any, *, digests: Any = None) -> Any:
            kept = [item for item in items if item[0].sandbox_id != "b" or item[0].ts != 2]
            return self._ledger.append_once_many(kept) + [True] * (len(items) - len(kept))

    source, target = _source(), BlockingAdapter(MemoryAdapter())
    try:
        [found] = round_trip(source, [("memory", target)], LosesTheLast)
    finally:
        source.close()
        target.close()
    assert found.what.endswith("the export of 4 lines came back as 3, first differing at line 4")
    assert found.excerpt[1] == "re-exported (the end)"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_soak(tmp_path, *args)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_short_run_imports_exports_and_round_trips(tmp_path: Path, store: str) -> None:
    paced = ("--think", "0.05") if store != "dynamodb" else ()  # its round trip: seconds
    done = _run(
        tmp_path, "--store", store, "--seconds", "8", "--workers", "2", "--kill-every", "2", *paced
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout.splitlines()[-1])
    assert figures["violations"] == 0 and figures["roundTripStores"] == 4, figures
    assert figures["imports"] > 0 and figures["entriesImported"] > 0, figures
    assert figures["importsRerun"] > 0 and figures["exports"] > 0, figures
    assert figures["entriesExported"] > 0, figures


@pytest.mark.slow
def test_the_checker_bites_an_importer_that_replays(tmp_path: Path) -> None:
    """An importer that appends every line of a file instead of reconciling it stores each
    entry of a re-run import twice: the run fails, naming the import's file and entries."""
    done = _run(
        tmp_path, "--store", "sqlite", "--seconds", "4", "--workers", "2", "--defect", "replay"
    )
    assert done.returncode == 1
    assert "an acknowledged append is stored 2 times" in done.stderr
    assert '"import": "' in done.stderr and "-> ok" in done.stderr
    assert "--defect replay" in done.stderr


@pytest.mark.slow
def test_a_run_whose_round_trip_drops_a_field_fails(tmp_path: Path) -> None:
    done = _run(
        tmp_path, "--store", "sqlite", "--seconds", "3", "--workers", "1", "--defect", "drop-field"
    )
    assert done.returncode == 1
    for kind in ("memory", "sqlite", "postgresql", "dynamodb"):
        assert f"round trip through {kind}: the export of" in done.stderr
    assert "re-exported {" in done.stderr and "--defect drop-field" in done.stderr
