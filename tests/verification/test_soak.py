"""The fleet under faults (sandbox_ledger/soak, docs/reliability.md): its history, its
proxy's faults, its checker, and short runs that must pass and, with a known defect put back
in, fail."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from sandbox_ledger import EnvironmentRecord, LedgerEntry, LedgerEvent, MemoryAdapter
from sandbox_ledger.soak.checker import check
from sandbox_ledger.soak.history import History, operations, read_history
from sandbox_ledger.soak.proxy import FaultProxy, Faults
from sandbox_ledger.transfer import content_digest

from .soak_runs import run_soak

NAME = "soak"


def _entry(sid: str, event: LedgerEvent, ts: int, by: str) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name=NAME, sandbox_id=sid, step_index=ts, event=event, payload={"by": by}
    )


def _invoke(history: History, entry: LedgerEntry) -> int:
    return history.invoke(
        "append", s=entry.sandbox_id, e=str(entry.event), d=content_digest(entry), w=entry.wire()
    )


def test_a_torn_last_line_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    history = History(path, "w0")
    number = history.invoke("append", s="x")
    history.ok(number)
    history.close()
    with path.open("ab") as torn:
        torn.write(b'{"p": "w1", "i": 0, "t": "inv')  # killed mid-line
    lines = list(read_history(path))
    assert [line["t"] for line in lines] == ["invoke", "ok"]
    [op] = operations(iter(lines))
    assert op.acknowledged and op.status == "ok"


def _checked(tmp_path: Path, store: Any) -> list[str]:
    ops = operations(read_history(tmp_path / "h.jsonl"))
    report = asyncio.run(check(ops, store, NAME))
    return [v.what for v in report.violations]


def test_the_checker_passes_a_history_the_store_keeps(tmp_path: Path) -> None:
    store, history = MemoryAdapter(), History(tmp_path / "h.jsonl", "w0")
    created = _entry("s", LedgerEvent.SandboxCreated, 1, "a")
    history.ok(_invoke(history, created))
    asyncio.run(store.append(created))
    crashed = _entry("s", LedgerEvent.ExecComplete, 2, "b")
    _invoke(history, crashed)  # no completion: killed; stored once, which may be
    asyncio.run(store.append(crashed))
    lost = _entry("s", LedgerEvent.ExecComplete, 3, "c")
    history.fail(_invoke(history, lost), TimeoutError("gone"))  # raised, never stored: fine
    assert _checked(tmp_path, store) == []


def test_the_checker_fails_duplicates_losses_and_strangers(tmp_path: Path) -> None:
    store, history = MemoryAdapter(), History(tmp_path / "h.jsonl", "w0")
    twice = _entry("s", LedgerEvent.SandboxCreated, 1, "a")
    history.ok(_invoke(history, twice))
    lost = _entry("s", LedgerEvent.ExecComplete, 2, "b")
    history.ok(_invoke(history, lost))
    unknown = _entry("s", LedgerEvent.ExecComplete, 3, "c")
    _invoke(history, unknown)
    stranger = _entry("s", LedgerEvent.ExecComplete, 4, "nobody")
    for entry in (twice, twice, unknown, unknown, stranger):
        asyncio.run(store.append(entry))
    asyncio.run(store.append(_entry("other", LedgerEvent.SandboxCreated, 5, "nobody")))
    found = _checked(tmp_path, store)
    assert "s: an acknowledged append is stored 2 times" in found
    assert "s: an acknowledged append is stored 0 times" in found
    assert "s: an append whose outcome is unknown (crashed) is stored 2 times" in found
    assert any(f.startswith("s: an entry is stored that nobody sent") for f in found)
    assert "session other is stored, named by no operation" in found


def test_the_checker_fails_a_summary_its_entries_do_not_make(tmp_path: Path) -> None:
    class Miscounting(MemoryAdapter):
        async def get_sandbox_details(self, name: str, sandbox_id: str) -> Any:
            details = await super().get_sandbox_details(name, sandbox_id)
            return None if details is None else details.model_copy(update={"exec_count": 7})

    store, history = Miscounting(), History(tmp_path / "h.jsonl", "w0")
    created = _entry("s", LedgerEvent.SandboxCreated, 1, "a")
    history.ok(_invoke(history, created))
    asyncio.run(store.append(created))
    [found] = _checked(tmp_path, store)
    assert found.startswith("s: its summary is") and "exec_count=7" in found


def test_a_deleted_session_holds_nothing_and_an_unfinished_delete_is_finished(
    tmp_path: Path,
) -> None:
    class Forgetful(MemoryAdapter):
        async def delete_sandbox(self, name: str, sandbox_id: str) -> None:
            if sandbox_id != "kept":  # a delete that leaves the session behind
                await super().delete_sandbox(name, sandbox_id)

    store, history = Forgetful(), History(tmp_path / "h.jsonl", "w0")
    for sid in ("gone", "unfinished", "kept"):
        created = _entry(sid, LedgerEvent.SandboxCreated, 1, sid)
        history.ok(_invoke(history, created))
        asyncio.run(store.append(created))
    history.ok(history.invoke("delete", s="gone"))
    asyncio.run(store.delete_sandbox(NAME, "gone"))
    history.invoke("delete", s="unfinished")  # killed before it ran: the checker finishes it
    history.ok(history.invoke("delete", s="kept"))  # acknowledged, yet the session stays
    ops = operations(read_history(tmp_path / "h.jsonl"))
    report = asyncio.run(check(ops, store, NAME))
    assert [v.what for v in report.violations] == [
        "kept: deleted, still holds 1 entries and summary "
        + str(asyncio.run(store.get_sandbox_details(NAME, "kept")))
    ]
    assert (report.deletes, report.deletes_finished) == (3, 1)


def _save(history: History, name: str, tag: str, *, ok: bool = True) -> None:
    number = history.invoke("save_environment", n=name, by=tag)
    if ok:
        history.ok(number)


def _env(name: str, tag: str) -> EnvironmentRecord:
    return EnvironmentRecord.model_validate({"name": name, "builtAt": 1, "by": tag})


@pytest.mark.parametrize(
    ("stored", "violation"), [("second", False), ("first", True), ("killed", False)]
)
def test_an_environment_holds_a_save_that_may_have_been_the_last(
    tmp_path: Path, stored: str, violation: bool
) -> None:
    store, history = MemoryAdapter(), History(tmp_path / "h.jsonl", "w0")
    _save(history, "env", "first")
    _save(history, "env", "second")  # begun after the first returned: it wins
    _save(history, "env", "killed", ok=False)  # unknown: it may have landed after
    asyncio.run(store.save_environment(_env("env", stored)))
    found = _checked(tmp_path, store)
    assert found == (
        ["environment env holds the save of first, not one that may have been the last"]
        if violation
        else []
    )


def _change(history: History, kind: str, sid: str, at: int, change_id: str) -> None:
    history.event("change", k=kind, s=sid, at=at, id=change_id, pos=f"p-{change_id}")


def test_the_feed_must_deliver_every_change_once_in_order(tmp_path: Path) -> None:
    store, history = MemoryAdapter(), History(tmp_path / "h.jsonl", "w0")
    for sid in ("whole", "missing", "reordered"):
        for event, ts in ((LedgerEvent.SandboxCreated, 1), (LedgerEvent.SandboxClosed, 2)):
            entry = _entry(sid, event, ts, f"{sid}{ts}")
            history.ok(_invoke(history, entry))
            asyncio.run(store.append(entry))
    _change(history, "session.created", "whole", 1, "a")
    _change(history, "session.created", "whole", 1, "a")  # a repeat, the same: fine
    _change(history, "session.closed", "whole", 2, "b")
    _change(history, "session.created", "missing", 1, "c")  # its closed never came
    _change(history, "session.closed", "reordered", 2, "d")
    _change(history, "session.created", "reordered", 1, "e")
    _change(history, "session.closed", "whole", 9, "b")  # id b again, as another change
    ops = operations(read_history(tmp_path / "h.jsonl"))
    report = asyncio.run(check(ops, store, NAME, changes=True))
    assert sorted(v.what for v in report.violations) == [
        "change b came again as another change",
        "missing: no session.closed was delivered",
        "reordered: its changes were delivered as ['session.closed', 'session.created']",
    ]
    assert (report.changes, report.repeats) == (7, 2)


def test_a_follow_hands_out_the_start_of_what_is_stored_in_order(tmp_path: Path) -> None:
    store, history = MemoryAdapter(), History(tmp_path / "h.jsonl", "w0")
    entries = [
        _entry("s", LedgerEvent.SandboxCreated, 1, "a"),
        _entry("s", LedgerEvent.ExecComplete, 2, "b"),
        _entry("s", LedgerEvent.SandboxClosed, 3, "c"),
    ]
    for entry in entries:
        history.ok(_invoke(history, entry))
        asyncio.run(store.append(entry))
    digests = [content_digest(e) for e in entries]

    def follow(number: int, handed: list[str], *, ended: bool) -> None:
        for place, digest in enumerate(handed):
            history.event("followed", f=number, s="s", d=digest, n=place)
        if ended:
            history.event("follow_end", f=number, s="s", n=len(handed))

    follow(0, digests[:2], ended=False)  # cut short: the start, fine
    follow(1, digests, ended=True)  # whole: fine
    follow(2, digests[:2], ended=True)  # ended, one short
    follow(3, [digests[0], digests[2]], ended=False)  # skipped one
    follow(4, [digests[0], digests[0]], ended=False)  # handed out twice
    found = _checked(tmp_path, store)
    assert [f.split(" handed")[0] for f in found] == [
        "s: a follow (w0#2, ended)",
        "s: a follow (w0#3)",
        "s: a follow (w0#4)",
    ]


def _server(answered: list[bytes]) -> tuple[socket.socket, int]:
    """A server that answers each line it reads with ``ok``, noting the line first."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                while data := connection.recv(1024):
                    answered.append(data)
                    connection.sendall(b"ok\n")

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def test_the_proxy_drops_a_response_after_the_server_acted(tmp_path: Path) -> None:
    answered: list[bytes] = []
    listener, port = _server(answered)
    proxy = FaultProxy(("127.0.0.1", port), seed=1, faults=Faults(drop=1.0, reset=0, delay=0))
    try:
        with socket.create_connection(("127.0.0.1", proxy.start())) as client:
            client.sendall(b"append\n")
            client.settimeout(10)
            try:
                reply = client.recv(1024)
            except ConnectionResetError:
                reply = b""
            assert reply == b""  # no answer: the connection was aborted
        assert answered == [b"append\n"]  # the server acted on it
        assert proxy.counts["dropped"] == 1
    finally:
        proxy.stop()
        listener.close()


def test_the_proxy_passes_what_it_does_not_fault() -> None:
    answered: list[bytes] = []
    listener, port = _server(answered)
    proxy = FaultProxy(("127.0.0.1", port), seed=1, faults=Faults(drop=0, reset=0, delay=0))
    try:
        with socket.create_connection(("127.0.0.1", proxy.start())) as client:
            client.settimeout(10)
            for _ in range(3):
                client.sendall(b"x\n")
                assert client.recv(1024) == b"ok\n"
        assert proxy.counts["dropped"] == proxy.counts["reset"] == 0
    finally:
        proxy.stop()
        listener.close()


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_soak(tmp_path, *args)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "dynamodb", "postgresql"])
def test_a_short_run_under_kills_and_lost_responses_passes(tmp_path: Path, store: str) -> None:
    paced = ("--think", "0.05") if store != "dynamodb" else ()  # its round trip: seconds
    done = _run(
        tmp_path, "--store", store, "--seconds", "8", "--workers", "2", "--kill-every", "2", *paced
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout.splitlines()[-1])
    assert figures["violations"] == 0 and figures["killed"] >= 1, figures
    assert figures["acknowledged"] > 0 and figures["entriesChecked"] > 0, figures
    assert figures["changesDelivered"] > 0, figures


@pytest.mark.slow
def test_the_checker_bites_a_run_with_a_known_defect(tmp_path: Path) -> None:
    """An append that is sent again as a new one (no idempotency on resend) fails the run,
    with the operation's history line, the seed and the command that runs it again."""
    done = _run(
        tmp_path, "--store", "sqlite", "--seconds", "4", "--workers", "2", "--defect", "resend"
    )
    assert done.returncode == 1
    assert "an acknowledged append is stored 2 times" in done.stderr
    assert "-> ok" in done.stderr  # the excerpt: the operation's history line
    assert "--seed 1" in done.stderr and "--defect resend" in done.stderr


@pytest.mark.slow
def test_the_checker_bites_a_change_reader_that_skips(tmp_path: Path) -> None:
    done = _run(
        tmp_path, "--store", "sqlite", "--seconds", "4", "--workers", "2", "--defect", "skip"
    )
    assert done.returncode == 1
    assert "was delivered" in done.stderr and "--defect skip" in done.stderr
