"""Checkers: compare what an adapter answered with what the reference model allows.

The contract leaves a few things free, and only those are compared loosely:
- entries with equal ``ts`` appended concurrently (or whose append is in doubt) may come back in
  any order among themselves; everything else comes back in exactly the model's order;
- sessions with equal ``startedAt`` may be listed in any order, so under a ``limit`` that cuts
  through such a tie, any of the tied sessions may fill the last places;
- environment records with equal ``builtAt`` may be listed in any order.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import groupby
from typing import TYPE_CHECKING, Any

from sandbox_ledger import LedgerEvent, SandboxStatus

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from sandbox_ledger import EnvironmentRecord, LedgerEntry, SandboxDetails


class Violation(AssertionError):
    """An adapter's answer that the model does not allow."""


def wire(value: Any) -> str:
    """A canonical text of a model's wire shape, for multiset comparison."""
    return json.dumps(value.wire(), sort_keys=True, ensure_ascii=False)


def _fail(what: str, message: str, actual: Any, expected: Any) -> Violation:
    return Violation(f"{what}: {message}\n  actual:   {actual!r}\n  expected: {expected!r}")


def check_entries(
    what: str,
    actual: Sequence[LedgerEntry],
    expected: Sequence[LedgerEntry],
    free_ts: Iterable[int] = (),
) -> None:
    """``actual`` is ``expected``: same entries, ascending ts, ties in order unless ts is free."""
    free = set(free_ts)
    if [e.ts for e in actual] != [e.ts for e in expected]:
        raise _fail(what, "timestamps differ", [e.ts for e in actual], [e.ts for e in expected])
    i = 0
    for ts, block in groupby(expected, key=lambda e: e.ts):
        want = [wire(e) for e in block]
        got = [wire(e) for e in actual[i : i + len(want)]]
        i += len(want)
        if ts in free:
            if Counter(got) != Counter(want):
                raise _fail(what, f"entries at ts={ts} differ", got, want)
        elif got != want:
            raise _fail(what, f"entries at ts={ts} differ or are out of order", got, want)


def check_last_checkpoint(
    what: str,
    actual: LedgerEntry | None,
    expected: Sequence[LedgerEntry],
    free_ts: Iterable[int] = (),
) -> None:
    """``actual`` is the last checkpoint of ``expected`` (any of the last tie if ts is free)."""
    checkpoints = [e for e in expected if e.event == LedgerEvent.CheckpointCreated]
    if not checkpoints:
        if actual is not None:
            raise _fail(what, "a checkpoint where there is none", wire(actual), None)
        return
    last = checkpoints[-1]
    allowed = {wire(last)}
    if last.ts in set(free_ts):
        allowed = {wire(e) for e in checkpoints if e.ts == last.ts}
    if actual is None or wire(actual) not in allowed:
        raise _fail(what, "not the last checkpoint", actual and wire(actual), sorted(allowed))


def check_listing(
    what: str,
    actual: Sequence[SandboxDetails],
    expected: Sequence[SandboxDetails],
    limit: int | None,
) -> None:
    """``actual`` is ``expected`` (the unlimited answer) cut to ``limit``, ties in any order."""
    keys = [(d.name, d.sandbox_id) for d in actual]
    if len(set(keys)) != len(keys):
        raise _fail(what, "a session listed twice", keys, None)
    by_key = {(d.name, d.sandbox_id): d for d in expected}
    want_len = min(limit, len(expected)) if limit else len(expected)
    if len(actual) != want_len:
        raise _fail(what, f"{len(actual)} sessions, expected {want_len}", keys, list(by_key))
    for d in actual:
        if by_key.get((d.name, d.sandbox_id)) != d:
            raise _fail(what, "a session the model does not list so", d, by_key.get(keys[0]))
    started = [d.started_at for d in actual]
    if started != sorted(started, reverse=True):
        raise _fail(what, "not newest first", started, None)
    if actual:
        cutoff = actual[-1].started_at
        must = {(d.name, d.sandbox_id) for d in expected if d.started_at > cutoff}
        missing = must - set(keys)
        if missing:
            raise _fail(what, "sessions missing before the cut", sorted(missing), None)


def check_listing_left_out(
    what: str,
    actual: Sequence[SandboxDetails],
    expected: Sequence[SandboxDetails],
    limit: int | None,
) -> None:
    """``actual``, made while the store's indexes may lag, is ``expected`` (the unlimited
    answer) with sessions left out: each listed as the model has it, none twice, newest
    first, at most ``limit`` (docs/table-design.md, Listings and index lag)."""
    keys = [(d.name, d.sandbox_id) for d in actual]
    if len(set(keys)) != len(keys):
        raise _fail(what, "a session listed twice", keys, None)
    if limit and len(actual) > limit:
        raise _fail(what, f"{len(actual)} sessions, at most {limit}", keys, None)
    by_key = {(d.name, d.sandbox_id): d for d in expected}
    for d in actual:
        if by_key.get((d.name, d.sandbox_id)) != d:
            raise _fail(what, "a session the model does not list so", d, by_key.get(keys[0]))
    started = [d.started_at for d in actual]
    if started != sorted(started, reverse=True):
        raise _fail(what, "not newest first", started, None)


def check_pages(
    what: str, pages: Sequence[Sequence[SandboxDetails]], expected: Sequence[SandboxDetails]
) -> None:
    """Paging through a listing yields every expected session exactly once, newest first."""
    flat = [d for page in pages for d in page]
    keys = [(d.name, d.sandbox_id) for d in flat]
    counts = Counter(keys)
    twice = sorted(k for k, n in counts.items() if n > 1)
    if twice:
        raise _fail(what, "sessions on more than one page", twice, None)
    want = {(d.name, d.sandbox_id) for d in expected}
    if set(keys) != want:
        raise _fail(what, "pages miss or add sessions", sorted(set(keys)), sorted(want))
    check_listing(what, flat, expected, None)


def check_environments(
    what: str, actual: Sequence[EnvironmentRecord], expected: Sequence[EnvironmentRecord]
) -> None:
    """Same records, newest builtAt first, equal builtAt in any order."""
    got = [(r.built_at, wire(r)) for r in actual]
    want = [(r.built_at, wire(r)) for r in expected]
    if [b for b, _ in got] != [b for b, _ in want] or Counter(got) != Counter(want):
        raise _fail(what, "environment records differ", got, want)


def check_derivable(
    what: str, details: SandboxDetails | None, stored: Sequence[LedgerEntry]
) -> None:
    """A summary says only what the stored events say: listed iff a ``sandbox.created`` is
    stored, execCount counts ``exec.complete``, completed iff a ``sandbox.closed`` is stored,
    startedAt/completedAt the ts of one of those events."""
    created = [e.ts for e in stored if e.event == LedgerEvent.SandboxCreated]
    closed = [e.ts for e in stored if e.event == LedgerEvent.SandboxClosed]
    execs = sum(1 for e in stored if e.event == LedgerEvent.ExecComplete)
    if not created:
        if details is not None:
            raise _fail(what, "a summary without a stored sandbox.created", details, None)
        return
    if details is None:
        raise _fail(what, "no summary although sandbox.created is stored", None, created)
    status = SandboxStatus.Completed if closed else SandboxStatus.Running
    problems = []
    if details.exec_count != execs:
        problems.append(f"execCount {details.exec_count} != {execs} exec.complete stored")
    if details.status != status:
        problems.append(f"status {details.status} but {len(closed)} sandbox.closed stored")
    if details.started_at not in created:
        problems.append(f"startedAt {details.started_at} not the ts of a stored created")
    if closed and details.completed_at not in closed:
        problems.append(f"completedAt {details.completed_at} not the ts of a stored closed")
    if not closed and details.completed_at is not None:
        problems.append("completedAt set without a stored sandbox.closed")
    if problems:
        raise _fail(what, "; ".join(problems), details, [wire(e) for e in stored])


def check_sub_multiset(
    what: str, actual: Sequence[LedgerEntry], allowed: Sequence[LedgerEntry]
) -> None:
    """Every entry of ``actual`` was appended (at most as often as it was appended)."""
    extra = Counter(wire(e) for e in actual) - Counter(wire(e) for e in allowed)
    if extra:
        raise _fail(what, "entries that were never appended (or stored twice)", list(extra), None)


def check_imported(
    what: str,
    actual: Sequence[LedgerEntry],
    before: Sequence[LedgerEntry],
    files: Sequence[Sequence[LedgerEntry]],
) -> None:
    """Exactly once: after importing ``files`` into a session that held ``before``, each entry
    is stored as often as the most of: before, or any one file (a multiset union). Fewer means
    an entry of a file was lost; more means an import duplicated one."""
    want = Counter(wire(e) for e in before)
    for file in files:
        want |= Counter(wire(e) for e in file)
    got = Counter(wire(e) for e in actual)
    if got != want:
        raise _fail(
            what,
            "not each entry exactly once",
            {"duplicated": list((got - want).elements())},
            {"missing": list((want - got).elements())},
        )
