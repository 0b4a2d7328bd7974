"""The promises of import and export under the fleet's faults, and the final round trip.

- **Imports** (:mod:`.importer`): each entry of an import is an append of the importer's,
  acknowledged if the import was, of unknown outcome otherwise (the importer killed
  mid-import, or the import raised); each environment record a save the same way.
  :func:`imports_as_appends` turns the history's imports into those, so the checker holds
  them as it holds every append and save: every entry of an acknowledged import stored
  exactly once (re-runs of the same file included), of any other at most once, and each
  session's summary the one its stored entries make.
- **Exports** (:mod:`.exporter`), as docs/table-design.md promises ("a session whole as of
  one moment, or not at all"): each session an acknowledged export held is a prefix, in
  append order, of what the store holds at the end; a session deleted since held no entry
  whose append was invoked after another's that it lacks was acknowledged (a prefix of the
  appends in real time); a session exported with no line was deleted (it held entries when
  it was listed).
- **The round trip** (:func:`round_trip`): the whole store exported at the end, imported
  into a fresh store of each kind, exported again: byte-identical.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from sandbox_ledger.soak.history import Operation

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from sandbox_ledger.soak.checker import Report, Violation

__all__ = ["check_exports", "imports_as_appends", "round_trip"]


def imports_as_appends(operations: list[Operation]) -> list[Operation]:
    """The operations, each import followed by an append per entry it names and a save per
    environment record, with the import's invocation time and completion (an append's
    excerpt line names the import's file)."""
    out: list[Operation] = []
    for op in operations:
        out.append(op)
        if op.op != "import":
            continue
        base = {"p": op.process, "i": op.number, "t": "invoke", "at": op.invoked["at"]}
        via = {"import": op.invoked.get("file")}
        for sid, event, digest, ts in op.invoked["x"]:
            line = {**base, "op": "append", "s": sid, "e": event, "d": digest, "w": {"ts": ts}}
            out.append(Operation(op.process, op.number, "append", {**line, **via}, op.completed))
        for name, tag in op.invoked["v"]:
            line = {**base, "op": "save_environment", "n": name, "by": tag}
            out.append(Operation(op.process, op.number, "save_environment", line, op.completed))
    return out


def count_transfers(operations: list[Operation], report: Report) -> None:
    """The figures: imports (re-runs), distinct entries of acknowledged imports, exports."""
    imported: set[str] = set()
    for op in operations:
        if op.op == "import":
            report.imports += 1
            report.reimports += bool(op.invoked.get("rerun"))
            if op.acknowledged:
                imported.update(str(x[2]) for x in op.invoked["x"])
        elif op.op == "export" and op.acknowledged:
            report.exports += 1
    report.imported = len(imported)


async def check_exports(operations: list[Operation], store: Any, name: str, report: Report) -> None:
    """Hold every acknowledged export to the store's final state (see the module)."""
    from sandbox_ledger.soak.checker import Violation
    from sandbox_ledger.transfer import content_digest

    deleted = {str(op.invoked["s"]) for op in operations if op.op == "delete"}
    appends: dict[str, list[Operation]] = defaultdict(list)
    for op in operations:
        if op.op == "append":
            appends[str(op.invoked["s"])].append(op)
    stored_of: dict[str, list[str]] = {}
    for op in operations:
        if op.op != "export" or not op.acknowledged or op.completed is None:
            continue
        got: dict[str, list[str]] = op.completed.get("got", {})
        for sid in op.invoked["sessions"]:
            held = [str(d) for d in got.get(sid, [])]
            report.exported += len(held)
            if sid in deleted:
                found = _not_a_prefix_of_appends(held, appends[sid])
                if found:
                    report.violations.append(Violation(f"{sid}: {found}", [op.line()]))
                continue
            if sid not in stored_of:
                stored_of[sid] = [
                    content_digest(e) for e in await store.read_in_append_order(name, sid)
                ]
            stored = stored_of[sid]
            if not held or held != stored[: len(held)]:
                report.violations.append(
                    Violation(
                        f"{sid}: an export held {len(held)} entries, not the start of the "
                        f"{len(stored)} stored in order"
                        + (" (it was listed with entries, and never deleted)" if not held else ""),
                        [op.line(), f"exported {held[:6]}...", f"stored   {stored[:6]}..."],
                    )
                )


def _not_a_prefix_of_appends(
    held: list[str],
    appends: list[Operation],
) -> str | None:
    """What is wrong with an export of a session deleted since, None if nothing: each entry
    one that was sent, once, and none missing
    whose append was acknowledged before the append of one held was invoked."""
    sent = {str(op.invoked["d"]): op for op in appends}
    repeated = [d for d, n in Counter(held).items() if n > 1]
    if repeated:
        return f"an export held entries twice: {repeated[:3]}"
    strangers = [d for d in held if d not in sent]
    if strangers:
        return f"an export held entries nobody sent: {strangers[:3]}"
    if not held:
        return None
    latest = max(float(sent[d].invoked["at"]) for d in held)
    missing = [
        d
        for d, op in sent.items()
        if d not in held
        and op.acknowledged
        and op.completed is not None
        and float(op.completed["at"]) < latest
    ]
    if missing:
        return (
            f"an export held {len(held)} entries, not a prefix of its appends: it lacks "
            f"{missing[:3]}, acknowledged before an entry it holds was sent"
        )
    return None


def _export(ledger: Any) -> list[str]:
    """A whole-store export's lines (as ``sandbox-ledger export`` writes them)."""
    from sandbox_ledger.transfer import export_lines

    return list(export_lines(ledger, ledger.scan_sessions(), ledger.list_environments()))


def round_trip(
    source: Any, targets: list[tuple[str, Any]], wrap: Callable[[Any], Any] | None = None
) -> list[Violation]:
    """Export the whole of ``source`` (a synchronous store), import it into each of
    ``targets`` (a kind and a fresh synchronous store; through ``wrap``, for a defect put in
    by hand), export each again: a target whose export is not byte-identical, or whose import
    failed a line, is a violation naming its first differing line."""
    from sandbox_ledger.soak.checker import Violation
    from sandbox_ledger.transfer import import_lines

    lines = _export(source)
    found: list[Violation] = []
    for kind, target in targets:
        report = import_lines(wrap(target) if wrap else target, (x.encode() for x in lines))
        again = _export(target)
        if report.failed:
            found.append(Violation(f"round trip through {kind}: {report.summary()}", []))
        if again == lines:
            continue
        number = next(
            (n for n, (a, b) in enumerate(zip(lines, again, strict=False), 1) if a != b),
            min(len(lines), len(again)) + 1,
        )
        exported = lines[number - 1].rstrip("\n") if number <= len(lines) else "(the end)"
        back = again[number - 1].rstrip("\n") if number <= len(again) else "(the end)"
        found.append(
            Violation(
                f"round trip through {kind}: the export of {len(lines)} lines came back as "
                f"{len(again)}, first differing at line {number}",
                [f"exported    {exported}", f"re-exported {back}"],
            )
        )
    return found


@contextlib.contextmanager
def fresh_stores(kind: str, direct: str, folder: Path) -> Iterator[list[tuple[str, Any]]]:
    """A fresh synchronous store of each kind, closed (and any server started for it
    stopped) at the end: memory; a SQLite file in ``folder``; a new database on the run's
    PostgreSQL server (``kind`` postgresql, ``direct`` its URL) or on one started for it; a
    table on an embedded DynamoDB started for it (strict, at DynamoDB's rates)."""
    from sandbox_ledger.blocking import BlockingAdapter, open_blocking_store
    from sandbox_ledger.memory import MemoryAdapter

    with contextlib.ExitStack() as stack:
        stores: list[tuple[str, Any]] = []

        def add(label: str, ledger: Any) -> None:
            stack.callback(ledger.close)
            stores.append((label, ledger))

        add("memory", BlockingAdapter(MemoryAdapter()))
        sqlite = folder / "roundtrip.db"
        for stale in folder.glob("roundtrip.db*"):
            stale.unlink()
        add("sqlite", open_blocking_store(f"sqlite:///{sqlite.resolve()}"))
        add("postgresql", open_blocking_store(_fresh_database(kind, direct, stack)))
        add("dynamodb", open_blocking_store(_fresh_table(stack)))
        yield stores


def _fresh_database(kind: str, direct: str, stack: contextlib.ExitStack) -> str:
    import psycopg

    if kind == "postgresql":
        base = direct
    else:
        from sandbox_ledger.local.postgres import LocalPostgres

        server = LocalPostgres()
        base = server.start()
        stack.callback(server.stop)
    with psycopg.connect(base, autocommit=True) as connection:
        connection.execute("DROP DATABASE IF EXISTS soak_roundtrip")
        connection.execute("CREATE DATABASE soak_roundtrip")
    return base.rsplit("/", 1)[0] + "/soak_roundtrip"


ROUND_TRIP_TABLE = "soak-roundtrip"


def _fresh_table(stack: contextlib.ExitStack) -> str:
    from sandbox_ledger.dynamodb import DynamoDBAdapter

    # A server of its own, in a child process, on the strict profile (DynamoDB's limits) at
    # DynamoDB's rates (the run's is throttled to a twentieth), without the profile's 20 ms
    # hold of each transaction or its index lag: an import's transactions one after another
    # would wait that long each, minutes for a store of tens of thousands of entries.
    from sandbox_ledger.local import LocalDynamoDBProcess, StrictProfile

    profile = StrictProfile(conflict_hold=0.0, index_delay=(0.0, 0.0))
    server = LocalDynamoDBProcess(strict=profile)
    endpoint = server.start()
    stack.callback(server.stop)

    async def create() -> None:
        async with DynamoDBAdapter(
            ROUND_TRIP_TABLE, endpoint_url=endpoint, region_name="us-east-1"
        ) as ledger:
            await ledger.create_table()

    asyncio.run(create())
    return f"dynamodb://{ROUND_TRIP_TABLE}?region=us-east-1&endpoint_url={endpoint}"


class _DropsAField:
    """A known defect, put in by hand to show the round trip bites (``--defect drop-field``):
    an import that loses the payload's ``by`` of every entry it writes."""

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def append_once_many(self, items: Any, *, digests: Any = None) -> Any:
        dropped = [
            (e.model_copy(update={"payload": {k: v for k, v in e.payload.items() if k != "by"}}), n)
            for e, n in items
        ]
        return self._ledger.append_once_many(dropped)


DROPS_A_FIELD: Callable[[Any], Any] = _DropsAField
"""The round trip's defect (``--defect drop-field``): for proving the checker only."""
