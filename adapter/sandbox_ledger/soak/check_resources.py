"""The promises the fleet's resource records are held to (DynamoDB only), on the history of
the owners (:mod:`.owner`) and the sweeper (:mod:`.sweeper`) and the records stored at the
end. ``W`` is the table's window (``stale_after``), ``L`` the claims' lease, and ``I``, for
each record, the longest interval between two sweeps that completed (a sweep killed
mid-way or that raised counts for none) from its last write to its expiry (or the end), as
the history shows: the schedule's second, or longer (a sweeper killed or out, throttling).

- **No live owner's record expired.** A record reported expired at revision ``R`` was not
  written again by its owner: no acknowledged owner write made a later revision, and no
  acknowledged owner delete removed it. Nor was it reported less than ``W`` after the write
  that made ``R`` began (the claim protocol expires a revision only once a sweeper saw it
  unchanged for a window; when no acknowledged write made ``R``, the earliest write of
  unknown outcome that may have).
- **Every dead owner's record expired within the documented bound.** A record still stored
  at the end was last written (the latest invocation of any write, acknowledged or not) at
  most ``2 W + 3 I + 2 L`` before the end, and a record reported expired was reported at
  most that long after its last write before: docs/resource-expiry.md's latest expiry for
  any owner clock (``2 W + 3 I``), plus a lease for a claim whose sweeper was killed (a later
  run takes it over once the lease ends) and one for a claim left to a takeover because
  its run reached the second half of its lease before publishing.
- **Each expiry reported once, its repeats recognisable.** Every report of one record (the
  sweeper's, a takeover's, the TTL stream's, a reporter's again after a kill) carries one
  and the same key; a repeat under that key is a recognised duplicate, two keys a violation.
- **Nothing is left unreported.** A record that existed (an acknowledged write) and is gone
  at the end was reported expired, or its owner may have deleted it (a delete that returned
  or whose outcome is unknown).
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox_ledger.resources.models import parse_iso
from sandbox_ledger.soak.checker import Violation

if TYPE_CHECKING:
    from collections.abc import Collection

    from sandbox_ledger.soak.history import Operation

__all__ = ["WRITES", "ResourceReport", "Timing", "check_resources"]

WRITES = frozenset({"r_put", "r_touch", "r_op_start", "r_op_finish", "r_delete"})
"""The owners' writes of a record, as history operations."""
_HEARTBEATS = frozenset({"r_touch", "r_op_start", "r_op_finish"})
_SLACK = 0.01
"""Seconds of rounding between the history's clock and an event's ``expiredAt`` (ms)."""


@dataclass(frozen=True)
class Timing:
    """The run's windows, in seconds: the table's ``window``, the claims' ``lease``, and the
    sweeper's scheduled ``interval`` (the least ``I`` is taken to be)."""

    window: float
    lease: float
    interval: float

    def bound(self, longest_interval: float) -> float:
        """How long after its last write a dead record may still be stored."""
        return 2 * self.window + 3 * max(self.interval, longest_interval) + 2 * self.lease


@dataclass
class ResourceReport:
    """What the resource checker checked, and what it found wrong."""

    records: int = 0
    heartbeats: int = 0
    abandoned: int = 0
    reclaimed: int = 0
    expired: int = 0
    reports: int = 0
    ttl_reports: int = 0
    duplicates: int = 0
    sweeps: int = 0
    sweeps_failed: int = 0
    sweeps_killed: int = 0
    """Sweeps whose process was killed mid-way (no completion)."""
    stream_trimmed: int = 0
    """Positions of the TTL reporter the stream had trimmed (removals after them lost)."""
    longest_interval: float = 0.0
    bound: float = 0.0
    violations: list[Violation] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {
            "resourceRecords": self.records,
            "heartbeats": self.heartbeats,
            "recordsAbandoned": self.abandoned,
            "recordsReclaimed": self.reclaimed,
            "recordsExpired": self.expired,
            "expiriesReported": self.reports,
            "ttlReports": self.ttl_reports,
            "duplicatesRecognised": self.duplicates,
            "sweeps": self.sweeps,
            "sweepsFailed": self.sweeps_failed,
            "sweepsKilled": self.sweeps_killed,
            "streamTrimmed": self.stream_trimmed,
            "longestSweepInterval": round(self.longest_interval, 1),
            "expiryBound": round(self.bound, 1),
        }


def _at(op: Operation) -> float:
    return float(op.invoked["at"])


def _expired_at(report: Operation) -> float:
    return parse_iso(str(report.invoked["expiredAt"])).timestamp()


def _report_line(report: Operation) -> str:
    line = report.invoked
    return (
        f"{report.process}#{report.number} expired {line['r']} rev {line['rev']} "
        f"key {line['key']} ({line['trigger']}, at {line['expiredAt']})"
    )


def check_resources(
    operations: list[Operation], stored: Collection[str], timing: Timing, *, end: float
) -> ResourceReport:
    """Hold the history's ``operations`` and the ids of the records ``stored`` at ``end``
    (the history's clock, once the last sweeper went quiet) to the promises above."""
    report = ResourceReport()
    writes: dict[str, list[Operation]] = defaultdict(list)
    reports: dict[str, list[Operation]] = defaultdict(list)
    sweeps: list[float] = []
    for op in operations:
        if op.op in WRITES:
            writes[str(op.invoked["r"])].append(op)
            report.heartbeats += op.op in _HEARTBEATS and op.acknowledged
        elif op.op == "expired":
            reports[str(op.invoked["r"])].append(op)
        elif op.op == "sweep":
            if op.acknowledged:
                sweeps.append(_at(op))
            report.sweeps += op.acknowledged
            report.sweeps_failed += op.status == "fail"
            report.sweeps_killed += op.status == "crashed"
        report.abandoned += op.op == "r_abandon"
        report.reclaimed += op.op == "r_reclaimed"
        report.stream_trimmed += op.op == "ttl_trimmed"
    completed = _Sweeps(sorted(sweeps))
    first = min((_at(op) for ops in writes.values() for op in ops), default=end)
    report.longest_interval = completed.longest(first, end)
    report.bound = timing.bound(report.longest_interval)
    report.records = len(writes)
    for record_id, mine in sorted(writes.items()):
        mine.sort(key=_at)
        reported = sorted(reports.get(record_id, []), key=_expired_at)
        if reported:
            _check_reports(record_id, mine, reported, timing, completed, report)
        elif record_id not in stored and _existed(mine) and not _may_have_deleted(mine):
            # Its TTL removal falls about two windows and a second after its last write.
            report.violations.append(
                Violation(
                    f"record {record_id} is gone, yet nobody reported it expired and its "
                    "owner never deleted it",
                    [op.line() for op in mine[-6:]],
                )
            )
        if record_id in stored:
            last = max(_at(op) for op in mine)
            bound = timing.bound(completed.longest(last, end))
            if end - last > bound:
                report.violations.append(
                    Violation(
                        f"record {record_id} is still stored {end - last:.1f} s after its "
                        f"last write, beyond the bound of {bound:.1f} s (a dead owner's "
                        "record not expired)",
                        [op.line() for op in mine[-6:]],
                    )
                )
    for record_id in sorted(set(reports) - set(writes)):
        report.violations.append(
            Violation(
                f"record {record_id} was reported expired, written by no owner",
                [_report_line(r) for r in reports[record_id]],
            )
        )
    return report


@dataclass(frozen=True)
class _Sweeps:
    """When the sweeps that completed began, in order."""

    starts: list[float]

    def longest(self, since: float, until: float) -> float:
        """The longest interval without a sweep beginning, from ``since`` to ``until``."""
        inside = self.starts[
            bisect.bisect_left(self.starts, since) : bisect.bisect_right(self.starts, until)
        ]
        points = [since, *inside, max(since, until)]
        return max(b - a for a, b in itertools.pairwise(points))


def _existed(mine: list[Operation]) -> bool:
    return any(op.acknowledged for op in mine)


def _may_have_deleted(mine: list[Operation]) -> bool:
    """Whether an owner's delete of the record returned having deleted it, or may have
    (its outcome unknown)."""
    return any(
        op.op == "r_delete"
        and (not op.acknowledged or bool(op.completed and op.completed.get("deleted")))
        for op in mine
    )


def _check_reports(
    record_id: str,
    mine: list[Operation],
    reported: list[Operation],
    timing: Timing,
    sweeps: _Sweeps,
    report: ResourceReport,
) -> None:
    report.expired += 1
    report.reports += len(reported)
    report.ttl_reports += sum(r.invoked.get("trigger") == "ttl" for r in reported)
    keys = {str(r.invoked["key"]) for r in reported}
    excerpt = [op.line() for op in mine[-6:]] + [_report_line(r) for r in reported]
    if len(keys) > 1:
        report.violations.append(
            Violation(
                f"record {record_id} was reported expired {len(reported)} times under "
                f"{len(keys)} different keys: {sorted(keys)}",
                excerpt,
            )
        )
    else:
        report.duplicates += len(reported) - 1
    first = reported[0]
    revision = int(first.invoked["rev"])
    at = _expired_at(first)
    acked = [op for op in mine if op.acknowledged]
    later = [op for op in acked if op.completed and int(op.completed.get("rev", 0)) > revision]
    deleted = [op for op in acked if op.op == "r_delete" and (op.completed or {}).get("deleted")]
    if later or deleted:
        what = "its owner's write made a later revision" if later else "its owner deleted it"
        report.violations.append(
            Violation(
                f"record {record_id} of a live owner was expired at revision {revision}, yet "
                f"{what} (acknowledged)",
                [op.line() for op in (later or deleted)[:3]] + [_report_line(first)],
            )
        )
    began = _began(mine, revision)
    if began is not None and at < began + timing.window - _SLACK:
        report.violations.append(
            Violation(
                f"record {record_id} of a live owner was expired {at - began:.2f} s after the "
                f"write of revision {revision} began, within its window of "
                f"{timing.window:.1f} s",
                excerpt,
            )
        )
    before = [_at(op) for op in mine if _at(op) <= at]
    bound = timing.bound(sweeps.longest(max(before), at)) if before else 0.0
    if before and at - max(before) > bound:
        report.violations.append(
            Violation(
                f"record {record_id} was expired {at - max(before):.1f} s after its last "
                f"write, beyond the bound of {bound:.1f} s",
                excerpt,
            )
        )


def _began(mine: list[Operation], revision: int) -> float | None:
    """When the write that made ``revision`` began, at the earliest: the acknowledged write
    that answered it, else the first write of unknown outcome after the last acknowledged
    one below it (one of those made it); None if no write may have."""
    below: float | None = None
    for op in mine:
        if not op.acknowledged or op.completed is None or "rev" not in op.completed:
            continue
        made = int(op.completed["rev"])
        if made == revision:
            return _at(op)
        if made < revision:
            below = _at(op) if below is None else max(below, _at(op))
    unknown = [
        _at(op)
        for op in mine
        if op.op != "r_delete" and not op.acknowledged and (below is None or _at(op) >= below)
    ]
    return min(unknown) if unknown else None


def check_stored(url: str, operations: list[Operation], *, end: float) -> ResourceReport:
    """:func:`check_resources` against the records the DynamoDB store ``url`` holds now (read
    by id, strongly consistent, a record past its TTL included: it is still stored)."""
    from sandbox_ledger.resources.store import SyncResourceRecordStore
    from sandbox_ledger.soak.sweeper import INTERVAL, LEASE
    from sandbox_ledger.stores import parse_store_url

    _, kwargs = parse_store_url(url)
    store = SyncResourceRecordStore(
        kwargs["table_name"],
        endpoint_url=kwargs.get("endpoint_url"),
        region_name=kwargs.get("region_name"),
    )
    try:
        ids = sorted({str(op.invoked["r"]) for op in operations if op.op in WRITES})
        stored: set[str] = set()
        for start in range(0, len(ids), 100):
            stored |= set(store.get_many(ids[start : start + 100]))
        descriptor = store.descriptor()
    finally:
        store.close()
    window = descriptor.stale_after_seconds if descriptor is not None else None
    if window is None:
        raise ValueError(f"store: table of {url} describes no expiry window")
    timing = Timing(window=float(window), lease=LEASE.total_seconds(), interval=INTERVAL)
    return check_resources(operations, stored, timing, end=end)
