"""The promises a run's history and final store are held to.

- Every acknowledged append is stored exactly once, whole; one whose outcome is unknown
  (its process killed, or it raised) at most once; nothing is stored that nobody sent.
- Every session's summary is the one the reference (the memory store) makes of its stored
  entries, in the store's append order.
- Every session stored is one the history names.
- An environment holds one of the saves that may have been the last: a save no
  acknowledged save began after (one of unknown outcome may have landed any time after it
  began), and none if no save was acknowledged and none may have landed.
- The change feed, read by a reader killed and resumed from its last saved position,
  delivered every change at least once: a ``session.created`` and ``session.closed`` for
  each such entry stored (acknowledged, for a session deleted since), a
  ``session.deleted`` for each acknowledged delete; a repeat carries its first delivery's
  id and content; a session's changes came in the order they were made.
- Every follow handed out its session's stored entries once each, in the store's append
  order, from the first on: what it handed out is the start of what the session stores,
  all of it when the follow ended on its own (after ``sandbox.closed``, the session's last
  entry). Sessions deleted since are left out: their entries are gone.
- A deleted session holds nothing: no entry, no summary. A delete whose outcome is unknown
  (its worker killed mid-way) is finished as the docs say, by calling it again, first.
- Imports and exports (:mod:`.transfers`): each entry of an import is held as an append, and
  each environment record as a save, acknowledged if the import was; each acknowledged
  export held of each session the start of what it stores.

A violation carries the operations involved, as history lines: the excerpt a run prints.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox_ledger.memory import MemoryAdapter
from sandbox_ledger.soak.transfers import check_exports, count_transfers, imports_as_appends
from sandbox_ledger.transfer import content_digest

if TYPE_CHECKING:
    from sandbox_ledger.soak.history import Operation

__all__ = ["Report", "Violation", "check"]

EXCERPT = 12
"""The most history lines a violation shows."""


@dataclass(frozen=True)
class Violation:
    what: str
    excerpt: list[str]

    def text(self) -> str:
        return "\n".join([self.what, *(f"    {line}" for line in self.excerpt[:EXCERPT])])


@dataclass
class Report:
    """What the checker checked, and what it found wrong."""

    appends: int = 0
    acknowledged: int = 0
    failed: int = 0
    crashed: int = 0
    deletes: int = 0
    deletes_finished: int = 0
    saves: int = 0
    changes: int = 0
    repeats: int = 0
    follows: int = 0
    followed: int = 0
    reads: int = 0
    sessions: int = 0
    entries: int = 0
    imports: int = 0
    reimports: int = 0
    imported: int = 0
    exports: int = 0
    exported: int = 0
    violations: list[Violation] = field(default_factory=list)

    def figures(self) -> dict[str, int]:
        return {
            "appends": self.appends,
            "acknowledged": self.acknowledged,
            "failed": self.failed,
            "crashed": self.crashed,
            "deletes": self.deletes,
            "deletesFinishedAgain": self.deletes_finished,
            "environmentSaves": self.saves,
            "changesDelivered": self.changes,
            "changesRepeated": self.repeats,
            "follows": self.follows,
            "entriesFollowed": self.followed,
            "readsChecked": self.reads,
            "sessions": self.sessions,
            "entriesChecked": self.entries,
            "imports": self.imports,
            "importsRerun": self.reimports,
            "entriesImported": self.imported,
            "exports": self.exports,
            "entriesExported": self.exported,
            "violations": len(self.violations),
        }


async def check(
    operations: list[Operation], store: Any, name: str, *, changes: bool = False
) -> Report:
    """Hold the store ``store`` (the fleet's sessions are under ``name``) to the history's
    ``operations``; with ``changes``, the change feed's deliveries too (a reader ran)."""
    report = Report()
    for op in operations:  # a transport's failure is begun again; a refused position is not
        if op.op == "reader_error" and str(op.invoked.get("error", "")).startswith(
            "InvalidInputError"
        ):
            report.violations.append(
                Violation("the change feed refused a position it handed out", [op.line()])
            )
    count_transfers(operations, report)
    operations = imports_as_appends(operations)
    if changes:
        await _check_changes(operations, store, name, report)
    await _check_follows(operations, store, name, report)
    _check_reads(operations, report)
    sessions: dict[str, list[Operation]] = defaultdict(list)
    deletes: dict[str, Operation] = {}
    saves: dict[str, list[Operation]] = defaultdict(list)
    for op in operations:
        if op.op == "save_environment":
            report.saves += 1
            saves[str(op.invoked["n"])].append(op)
            continue
        if op.op == "delete":
            report.deletes += 1
            deletes[str(op.invoked["s"])] = op
            continue
        if op.op != "append":
            continue
        report.appends += 1
        report.acknowledged += op.acknowledged
        report.failed += op.status == "fail"
        report.crashed += op.status == "crashed"
        sessions[str(op.invoked["s"])].append(op)
    stored_sessions = {sid for n, sid in await store.scan_sessions(name) if n == name}
    for sid in sorted(stored_sessions - set(sessions)):
        report.violations.append(Violation(f"session {sid} is stored, named by no operation", []))
    for environment, tried in sorted(saves.items()):
        await _check_environment(store, environment, tried, report)
    for sid, unfinished in sorted(deletes.items()):
        if not unfinished.acknowledged:  # killed mid-way: finished by calling it again
            await store.delete_sandbox(name, sid)
            report.deletes_finished += 1
    for sid in sorted(sessions):
        delete = deletes.get(sid)
        if delete is None:
            await _check_session(store, name, sid, sessions[sid], report)
        else:
            await _check_deleted(store, name, sid, [*sessions[sid], delete], report)
    await check_exports(operations, store, name, report)
    return report


_LIFECYCLE = {"sandbox.created": "session.created", "sandbox.closed": "session.closed"}
_ORDER = {"session.created": 0, "session.closed": 1, "session.deleted": 2}
_SUMMARY_EVENTS = {"sandbox.created", "sandbox.closed", "exec.complete"}


async def _check_changes(
    operations: list[Operation], store: Any, name: str, report: Report
) -> None:
    delivered: dict[str, dict[str, Any]] = {}  # id -> its first delivery
    first: list[dict[str, Any]] = []
    for op in operations:
        if op.op != "change":
            continue
        report.changes += 1
        line = op.invoked
        seen = delivered.get(str(line["id"]))
        if seen is None:
            delivered[str(line["id"])] = line
            first.append(line)
            continue
        report.repeats += 1
        if (seen["k"], seen["s"], seen["at"]) != (line["k"], line["s"], line["at"]):
            report.violations.append(
                Violation(
                    f"change {line['id']} came again as another change", [str(seen), str(line)]
                )
            )
    got = {(str(d["k"]), str(d["s"]), int(d["at"])) for d in first}
    deleted = {str(op.invoked["s"]) for op in operations if op.op == "delete" and op.acknowledged}
    # A change, with every operation that may have made it (an entry imported again, by a
    # re-run of its import, makes none: the first one did).
    makers: dict[tuple[str, str, int], list[Operation]] = defaultdict(list)
    for op in operations:
        if op.op != "append" or op.invoked["e"] not in _LIFECYCLE:
            continue
        sid = str(op.invoked["s"])
        if sid in deleted and not op.acknowledged:
            continue  # its outcome unknown, and the session gone: it may not have happened
        if sid not in deleted:
            stored = await store.read_in_append_order(name, sid)
            if content_digest_of(op) not in {content_digest(e) for e in stored}:
                continue  # not stored (the checker says so where it should have been)
        want = (_LIFECYCLE[str(op.invoked["e"])], sid, int(op.invoked["w"]["ts"]))
        if want not in got:
            makers[want].append(op)
    for want, ops in makers.items():
        report.violations.append(
            Violation(f"{want[1]}: no {want[0]} was delivered", [op.line() for op in ops])
        )
    summarized = {
        str(op.invoked["s"])
        for op in operations
        if op.op == "append" and op.acknowledged and op.invoked["e"] in _SUMMARY_EVENTS
    }
    delivered_deletes = {s for k, s, _ in got if k == "session.deleted"}
    for op in operations:  # deleting a session without a summary is no change
        sid = str(op.invoked.get("s"))
        if op.op != "delete" or not op.acknowledged or sid not in summarized:
            continue
        if sid in delivered_deletes:
            continue
        report.violations.append(Violation(f"{sid}: no session.deleted was delivered", [op.line()]))
    order: dict[str, list[str]] = defaultdict(list)
    for line in first:
        order[str(line["s"])].append(str(line["k"]))
    for sid, kinds in order.items():
        ranks = [_ORDER.get(kind, -1) for kind in kinds]
        if ranks != sorted(ranks):
            report.violations.append(Violation(f"{sid}: its changes were delivered as {kinds}", []))


async def _check_follows(
    operations: list[Operation], store: Any, name: str, report: Report
) -> None:
    follows: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    ended: set[tuple[str, int]] = set()
    for op in operations:
        if op.op == "followed":
            follows[(op.process, int(op.invoked["f"]))].append(op.invoked)
        elif op.op == "follow_end":
            ended.add((op.process, int(op.invoked["f"])))
            follows.setdefault((op.process, int(op.invoked["f"])), [])
    deleted = {str(op.invoked["s"]) for op in operations if op.op == "delete"}
    stored_of: dict[str, list[str]] = {}
    for key, lines in sorted(follows.items()):
        report.follows += 1
        report.followed += len(lines)
        sid = next((str(line["s"]) for line in lines), None)
        if sid is None or sid in deleted:
            continue
        if sid not in stored_of:
            stored_of[sid] = [
                content_digest(e) for e in await store.read_in_append_order(name, sid)
            ]
        stored = stored_of[sid]
        got = [str(line["d"]) for line in lines]
        whole = key in ended
        if got != stored[: len(got)] or (whole and got != stored):
            report.violations.append(
                Violation(
                    f"{sid}: a follow ({key[0]}#{key[1]}{', ended' if whole else ''}) handed "
                    f"out {len(got)} entries, not the start of the {len(stored)} stored in "
                    "order",
                    [f"handed out {got[:6]}...", f"stored     {stored[:6]}..."],
                )
            )


_RANK = {"running": 0, "completed": 1}


def _check_reads(operations: list[Operation], report: Report) -> None:
    """Each process's reads of a session's summary never go back in time (its execCount never
    falls, a closed session is never running again, and a session once seen is gone only
    after a delete of it began), and each shows the reader's own writes acknowledged before
    it began (read your writes; a session has a summary once its ``sandbox.created`` is
    stored)."""
    deletes = {
        str(op.invoked["s"]): float(op.invoked["at"]) for op in operations if op.op == "delete"
    }
    own: dict[tuple[str, str], list[Operation]] = defaultdict(list)
    for op in operations:
        if op.op == "append" and op.acknowledged and op.completed is not None:
            own[(op.process, str(op.invoked["s"]))].append(op)
    last: dict[tuple[str, str], Operation] = {}
    for op in operations:
        if op.op != "read" or not op.acknowledged or op.completed is None:
            continue
        report.reads += 1
        key = (op.process, str(op.invoked["s"]))
        seen = op.completed
        began = float(op.invoked["at"])
        done = [w for w in own.get(key, []) if float((w.completed or {})["at"]) < began]
        if seen["st"] is None:  # no summary: none before a sandbox.created is stored
            created = any(w.invoked["e"] == "sandbox.created" for w in done)
            if (created or key in last) and deletes.get(key[1], float("inf")) > float(seen["at"]):
                report.violations.append(
                    Violation(
                        f"{key[1]}: a read found nothing of it",
                        [*(w.line() for w in done[-2:]), op.line()],
                    )
                )
            continue
        completes = sum(w.invoked["e"] == "exec.complete" for w in done)
        closed = any(w.invoked["e"] == "sandbox.closed" for w in done)
        if int(seen["n"]) < completes or (closed and seen["st"] != "completed"):
            report.violations.append(
                Violation(
                    f"{key[1]}: a read does not show its reader's own acknowledged writes "
                    f"({completes} exec.complete{', closed' if closed else ''})",
                    [*(w.line() for w in done[-3:]), op.line()],
                )
            )
        before = last.get(key)
        if before is not None and before.completed is not None:
            was = before.completed
            if int(seen["n"]) < int(was["n"]) or _RANK[str(seen["st"])] < _RANK[str(was["st"])]:
                report.violations.append(
                    Violation(f"{key[1]}: a read went back in time", [before.line(), op.line()])
                )
        last[key] = op


def content_digest_of(op: Operation) -> str:
    return str(op.invoked["d"])


async def _check_environment(
    store: Any, environment: str, tried: list[Operation], report: Report
) -> None:
    """Last acknowledged save wins, saves racing: the stored record is a save that no
    acknowledged save began after the end of (an unknown outcome's end: never)."""
    ends = {
        id(op): float(op.completed["at"]) if op.acknowledged and op.completed else float("inf")
        for op in tried
    }
    acknowledged = [op for op in tried if op.acknowledged]
    could_be_last = [
        op
        for op in tried
        if not any(float(later.invoked["at"]) > ends[id(op)] for later in acknowledged)
    ]
    stored = await store.get_environment(environment)
    tag = None if stored is None else (stored.model_extra or {}).get("by")
    if stored is None and not acknowledged:
        return  # none landed, which may be
    if tag not in {op.invoked["by"] for op in could_be_last}:
        report.violations.append(
            Violation(
                f"environment {environment} holds the save of {tag}, not one that may have "
                "been the last",
                [op.line() for op in tried[-EXCERPT:]],
            )
        )


async def _check_deleted(
    store: Any, name: str, sid: str, mine: list[Operation], report: Report
) -> None:
    """A session deleted after its last append (a worker's appends of a session all return
    before it deletes it): nothing of it is left."""
    report.sessions += 1
    stored = await store.read_in_append_order(name, sid)
    details = await store.get_sandbox_details(name, sid)
    if stored or details is not None:
        report.violations.append(
            Violation(
                f"{sid}: deleted, still holds {len(stored)} entries and summary {details}",
                [op.line() for op in mine],
            )
        )


async def _check_session(
    store: Any,
    name: str,
    sid: str,
    mine: list[Operation],
    report: Report,
) -> None:
    report.sessions += 1
    stored = await store.read_in_append_order(name, sid)
    report.entries += len(stored)
    counts = Counter(content_digest(e) for e in stored)
    sent = {str(op.invoked["d"]): op for op in mine}
    for op in mine:
        times = counts.get(str(op.invoked["d"]), 0)
        if op.acknowledged and times != 1:
            report.violations.append(
                Violation(f"{sid}: an acknowledged append is stored {times} times", [op.line()])
            )
        elif not op.acknowledged and times > 1:
            report.violations.append(
                Violation(
                    f"{sid}: an append whose outcome is unknown ({op.status}) is stored "
                    f"{times} times",
                    [op.line()],
                )
            )
    for entry in stored:
        if content_digest(entry) not in sent:
            report.violations.append(
                Violation(f"{sid}: an entry is stored that nobody sent: {entry.wire()}", [])
            )
    reference = MemoryAdapter()
    for entry in stored:
        await reference.append(entry)
    want = await reference.get_sandbox_details(name, sid)
    got = await store.get_sandbox_details(name, sid)
    if got != want:
        report.violations.append(
            Violation(
                f"{sid}: its summary is {got}, its stored entries make {want}",
                [op.line() for op in mine],
            )
        )
