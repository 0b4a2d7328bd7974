"""The fleet's importer: imports export files of sessions of its own making, as an operator
restores a backup, until its time is up or it is killed; started again, it first imports
again every file whose import the history does not hold as acknowledged (as an operator
re-runs an interrupted import), and now and then it re-runs an acknowledged one too.

``python -m sandbox_ledger.soak.importer --store URL --history FILE --name NAME --seed N
--seconds S``. Each file (``imports/NAME-K.jsonl`` beside the history) holds one to three
sessions under sandbox ids of its own (``NAME-K-J``: created, execs on one or two parallel
branches, some a checkpoint, most often closed) and one environment record (``imp-NAME-K``),
drawn from the seed. An import is one operation, ``import``: its invocation names the file
and, for each entry, its session, event, content digest and ``ts`` (``x``), and each
environment record's name and tag (``v``); its completion is ``ok`` (the import reported no
failed line) or ``fail``. The checker holds each entry of an acknowledged import as an
acknowledged append, and of any other as one of unknown outcome (:mod:`.transfers`).
"""

from __future__ import annotations

import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sandbox_ledger.blocking import open_blocking_store
from sandbox_ledger.models import EnvironmentRecord, LedgerEntry, LedgerEvent
from sandbox_ledger.soak._stores import process_arguments
from sandbox_ledger.soak.history import History, read_history
from sandbox_ledger.soak.worker import LEDGER_NAME
from sandbox_ledger.transfer import (
    content_digest,
    entry_line,
    environment_line,
    import_lines,
    parse_line,
)

__all__ = ["grow_file", "make_file", "pending_files"]

RERUN = 0.2
"""The share of imports that re-run a file already imported (acknowledged); of those, a share
:data:`AT_ONCE` runs two imports of it at once (two operators)."""
AT_ONCE = 0.4
GROW = 0.15
"""The share of imports of a newer export of sessions imported before (:func:`grow_file`)."""


DETAILS: list[Any] = [
    None,
    {"z": 1, "a": {"y": [1, 2.5, None, True], "b": ""}},
    'h\u00e9llo \u2713 \U0001f600 e\u0301 \u2028 \u200f \\ "',
    [0.1, 1e100, -0.0, 1.5e-10, 5e-324, 2**63, -(2**53) - 1],
    {"nul": "a\u0000b", "": {}},
]
"""What an exec's payload carries besides its name, drawn for each: nested objects with keys
out of order, text beyond ASCII, floats and integers JSON round trips may change."""


def _session(sid: str, now: int, rng: random.Random) -> list[LedgerEntry]:
    """One session's entries: created, one to four rounds of execs on one or two branches
    (some a checkpoint between), most often closed; each entry's payload names it, an
    exec's carries one of :data:`DETAILS`, one in ten completes with an error, and one in
    ten entries carries a field this version does not know (``traceId``)."""
    events: list[tuple[LedgerEvent, int | None, dict[str, Any]]] = [
        (LedgerEvent.SandboxCreated, None, {})
    ]
    for _ in range(rng.randint(1, 4)):
        for branch in rng.sample([0, 1, 2], rng.randint(1, 2)):
            events.append((LedgerEvent.ExecStarted, branch, {"detail": rng.choice(DETAILS)}))
            if rng.random() < 0.3:
                events.append((LedgerEvent.CheckpointCreated, branch, {"snapshotId": "snap"}))
            events.append((LedgerEvent.ExecComplete, branch, {}))
    if rng.random() < 0.8:
        events.append((LedgerEvent.SandboxClosed, None, {}))
    entries: list[LedgerEntry] = []
    for step, (event, on, payload) in enumerate(events, start=1):
        failed = event == LedgerEvent.ExecComplete and rng.random() < 0.1
        extra = {"traceId": f"t-{rng.randrange(10**6)}"} if rng.random() < 0.1 else {}
        entry = LedgerEntry(
            ts=now + step,
            name=LEDGER_NAME,
            sandbox_id=sid,
            step_index=step,
            branch=on,
            event=event,
            payload={"by": f"{sid}/{step}", **payload},
            error="exit 1: \u2717" if failed else None,
            **extra,
        )
        entries.append(entry)
    return entries


def make_file(path: Path, tag: str, rng: random.Random) -> dict[str, Any]:
    """Write an export file of new sessions to ``path`` (whole, or not at all: written beside
    it and renamed) and return what its ``import`` operation names (``file``, ``x``, ``v``)."""
    now = time.time_ns() // 1_000_000
    entries = [e for j in range(rng.randint(1, 3)) for e in _session(f"{tag}-{j}", now, rng)]
    return _write(path, tag, entries, now)


def grow_file(path: Path, tag: str, older: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Write to ``path`` a newer export of the sessions of the file ``older`` names, as an
    operator takes a newer backup of sessions still running: each of its lines, and after
    each open session's, an exec more on branch 0 (then, most often, its close); an
    environment record of its own."""
    now = time.time_ns() // 1_000_000
    sessions: dict[str, list[LedgerEntry]] = {}
    for raw in Path(older["file"]).read_bytes().splitlines():
        item = parse_line(raw)
        if isinstance(item, LedgerEntry):
            sessions.setdefault(item.sandbox_id, []).append(item)
    entries: list[LedgerEntry] = []
    for sid, held in sessions.items():
        entries += held
        if held[-1].event == LedgerEvent.SandboxClosed:
            continue
        events = [LedgerEvent.ExecStarted, LedgerEvent.ExecComplete]
        events += [LedgerEvent.SandboxClosed] if rng.random() < 0.7 else []
        last = held[-1]
        entries += [
            LedgerEntry(
                ts=last.ts + n,
                name=last.name,
                sandbox_id=sid,
                step_index=last.step_index + n,
                branch=None if event == LedgerEvent.SandboxClosed else 0,
                event=event,
                payload={"by": f"{tag}/{sid}/{n}"},
            )
            for n, event in enumerate(events, start=1)
        ]
    return {**_write(path, tag, entries, now), "from": older["file"]}


def _write(path: Path, tag: str, entries: list[LedgerEntry], now: int) -> dict[str, Any]:
    record = EnvironmentRecord.model_validate({"name": f"imp-{tag}", "builtAt": now, "by": tag})
    lines = [entry_line(e) + "\n" for e in entries] + [environment_line(record) + "\n"]
    partial = path.with_name(path.name + ".partial")
    partial.write_text("".join(lines), encoding="utf-8")
    os.replace(partial, path)
    return {
        "file": str(path),
        "x": [[e.sandbox_id, str(e.event), content_digest(e), e.ts] for e in entries],
        "v": [[record.name, tag]],
    }


def pending_files(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The files of the history's imports: those no import of which was acknowledged (to
    import again first), and those imported (acknowledged), each as its invocation named it
    (``file``, ``x``, ``v``, and ``from``: the file it is a newer export of). Only
    importers' lines are parsed (``"p":"i.``): a long run's history is large, and an
    importer reads it at each start."""
    named: dict[str, dict[str, Any]] = {}
    done: set[str] = set()
    invoked: dict[tuple[str, int], str] = {}
    for line in read_history(path, only=_IMPORTERS):
        key = (str(line["p"]), int(line["i"]))
        if line["t"] == "invoke" and line.get("op") == "import":
            named[str(line["file"])] = {k: line[k] for k in ("file", "x", "v", "from") if k in line}
            invoked[key] = str(line["file"])
        elif line["t"] == "ok" and key in invoked:
            done.add(invoked[key])
    return [f for n, f in named.items() if n not in done], [named[n] for n in sorted(done)]


_IMPORTERS = b'{"p":"i.'
"""How every history line of an importer (process ``i.N``) begins."""


def _import(ledger: Any, history: History, named: dict[str, Any], rerun: bool) -> bool:
    number = history.invoke("import", rerun=rerun, **named)
    try:
        with Path(named["file"]).open("rb") as lines:
            report = import_lines(ledger, lines)
    except Exception as exc:  # recorded: its outcome is unknown
        history.fail(number, exc)
        return False
    if report.failed:
        history.fail(number, ValueError(f"{report.summary()}: {report.failed[:3]}"))
        return False
    history.ok(number, new=report.new, present=report.present)
    return True


class _Replays:
    """A known defect, put in by hand to show the checker bites (``--defect replay``): an
    importer that replays a file instead of reconciling it, appending every line again (a
    re-run stores each entry twice)."""

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def read_stored_sessions(self, sessions: Any) -> list[list[LedgerEntry]]:
        return [[] for _ in sessions]

    def append_once_many(self, items: Any, *, digests: Any = None) -> list[bool]:
        for entry, _ in items:
            self._ledger.append(entry)
        return [True for _ in items]


DEFECTS = {"replay": _Replays}
"""The defects the importer can be run with (``--defect``): for proving the checker only."""


def run(
    ledger: Any, history: History, rng: random.Random, seconds: float, think: float = 0.0
) -> None:
    """Import until ``seconds`` are up; ``think``: the mean pause (drawn) between imports
    (``--think``, as the workers', so a paced run's store is not mostly imported)."""
    deadline = time.monotonic() + seconds
    folder = history.path.parent / "imports"
    folder.mkdir(exist_ok=True)
    pending, imported = pending_files(history.path)
    made = 0
    while time.monotonic() < deadline:
        draw = rng.random()
        if pending:  # an interrupted or failed import: run again, as an operator does
            named, rerun = pending.pop(0), True
        elif imported and draw < RERUN:
            named, rerun = rng.choice(imported), True
        else:
            tag = f"{history.process}-{made}"
            made += 1
            grown = {n.get("from") for n in [*imported, *pending]}
            growable = [n for n in imported if n["file"] not in grown]  # each once
            older = rng.choice(growable) if growable and draw < RERUN + GROW else None
            if older is None:
                named = make_file(folder / f"{tag}.jsonl", tag, rng)
            else:
                named = grow_file(folder / f"{tag}.jsonl", tag, older, rng)
            rerun = False
        if rerun and not pending and rng.random() < AT_ONCE:
            with ThreadPoolExecutor(2) as pool:
                both = [pool.submit(_import, ledger, history, named, True) for _ in range(2)]
                done = [future.result() for future in both]
        else:
            done = [_import(ledger, history, named, rerun)]
        if all(done):
            if named not in imported:
                imported.append(named)
        else:
            pending.append(named)
            time.sleep(0.2)
        if think:
            time.sleep(rng.expovariate(1 / think))


def main(argv: list[str] | None = None) -> None:
    parser = process_arguments("importer")
    parser.add_argument("--defect", choices=sorted(DEFECTS), default=None)
    parser.add_argument("--think", type=float, default=0.0)
    args = parser.parse_args(argv)
    history = History(args.history, args.name)
    ledger: Any = open_blocking_store(args.store)
    if args.defect is not None:
        ledger = DEFECTS[args.defect](ledger)
    try:
        run(ledger, history, random.Random(args.seed), args.seconds, args.think)
    finally:
        ledger.close()
        history.close()


if __name__ == "__main__":
    main()
