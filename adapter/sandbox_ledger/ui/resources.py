"""The console's resources page: a DynamoDB table's resource activity records, each with what
the sweeper will do to it, from the sweep's own dry run (one that observes nothing: the
console writes nothing) and the policy's own :meth:`~ExpiryPolicy.earliest_expiry`, never a
second copy of either."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sandbox_ledger.resources.phases import FAILED_PHASES

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox_ledger.resources import (
        ExpiryPolicy,
        Page,
        SweepResult,
        SyncResourceRecordStore,
        VersionedRecord,
    )

PAGE = 50
"""Records per page."""
BUDGET_MS = 3_000
"""How long a page's forecast may read (a backlog of stale records larger than it reads in
that time is counted as "at least")."""


@dataclass
class Resources:
    """Where the page reads: the table's records, and its sweep's policy (``policy()``: the
    table descriptor's windows; it raises InvalidInputError, naming the settings, for a table
    that records none)."""

    store: SyncResourceRecordStore
    policy: Callable[[], ExpiryPolicy]


@dataclass
class Shown:
    """One page as the template shows it."""

    rows: list[dict[str, Any]]
    cursor: str | None
    expiring: int
    """Records a sweep now expires, in the whole table (not only this page)."""
    awaiting: int
    """Stale records no sweep has observed yet, in the whole table."""
    complete: bool = True
    """False: the forecast stopped at its time budget (the counts are lower bounds)."""
    problem: str | None = None
    """Why there is no forecast (a table that records no sweep settings)."""


def forecast(
    store: Any, policy: ExpiryPolicy, now: datetime, budget_ms: int | None = None
) -> SweepResult:
    """What a sweep at ``now`` does: the sweep itself, as a dry run that observes nothing,
    for at most ``budget_ms`` (default :data:`BUDGET_MS`; then ``complete`` is False)."""
    import time

    from sandbox_ledger.resources import sweep

    budget = BUDGET_MS if budget_ms is None else budget_ms
    deadline = time.monotonic() + budget / 1000
    return sweep(
        store,
        None,
        now=now,
        policy=policy,
        dry_run=True,
        observe=False,
        remaining_ms=lambda: int((deadline - time.monotonic()) * 1000),
        safety_ms=0,
    )


def page(
    resources: Resources,
    *,
    phase: str | None,
    provider: str | None,
    cursor: str | None,
    now: datetime,
) -> Shown:
    """One page of records, newest heartbeat first, with their forecast.

    Raises:
        InvalidInputError: a bad phase or cursor (naming it).
    """
    from sandbox_ledger.errors import InvalidInputError

    found = resources.store.list(phase=phase, provider=provider, limit=PAGE, cursor=cursor)
    try:
        policy = resources.policy()
    except InvalidInputError as exc:
        rows = [_row(v, None, None, now) for v in found.records]
        return Shown(rows + _unreadable(found), found.cursor, 0, 0, problem=str(exc))
    result = forecast(resources.store, policy, now)
    rows = [_row(v, result, policy, now) for v in found.records]
    return Shown(
        rows + _unreadable(found),
        found.cursor,
        len(result.expired),
        len(result.unobserved),
        complete=result.complete,
    )


def _row(
    versioned: VersionedRecord,
    result: SweepResult | None,
    policy: ExpiryPolicy | None,
    now: datetime,
) -> dict[str, Any]:
    record = versioned.record
    owner = f"pid {record.pid}" + (f" on {record.identity.host}" if record.identity else "")
    operations = ", ".join(f"{o.kind} x{o.count}" for o in record.operations if o.count)
    failure = record.last_failure
    return {
        "id": record.id,
        "phase": record.phase,
        "provider": record.sandbox_provider,
        "owner": owner,
        "workspace": record.workspace,
        "heartbeat": record.updated_at,
        "age": age(now.timestamp() * 1000 - record.updated_at_ms),
        "operations": operations or "none running",
        "failure": None if failure is None else f"{failure.kind}: {failure.error or 'failed'}",
        **_verdict(versioned, result, policy, now),
    }


def _verdict(
    versioned: VersionedRecord,
    result: SweepResult | None,
    policy: ExpiryPolicy | None,
    now: datetime,
) -> dict[str, str]:
    """What the sweeper does to the record: ``kind`` (a CSS class) and ``text``."""
    record_id = versioned.record.id
    if versioned.expiring is not None:
        return {"kind": "expiring", "text": f"claimed by a sweep: {versioned.expiring}"}
    if result is None or policy is None:
        return {"kind": "unknown", "text": "no forecast"}
    if record_id in result.expired:
        return {"kind": "expiring", "text": f"a sweep now expires it: {result.reasons[record_id]}"}
    due = result.due.get(record_id)
    if due is not None and record_id in result.unobserved:
        return {
            "kind": "stale",
            "text": f"stale: the next sweep observes it; expires from {due} if unchanged",
        }
    if due is not None:
        return {"kind": "stale", "text": f"unchanged since a sweep observed it; expires from {due}"}
    judged = record_id in result.skipped or record_id in result.failed
    if not result.complete and not judged and policy.is_hint(versioned.record, now):
        return {
            "kind": "stale",
            "text": "stale: past what this page's forecast read in its time (a backlog); "
            "sweeps observe it, then expire it a window later if unchanged",
        }
    earliest = policy.earliest_expiry(versioned.record)
    if earliest is None:
        return {"kind": "kept", "text": f"kept: the policy never expires {versioned.record.phase}"}
    when = earliest.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    if versioned.record.phase in FAILED_PHASES:
        text = f"kept for attention: expires no sooner than {when} if left unwritten"
        return {"kind": "kept", "text": text}
    return {"kind": "fresh", "text": f"fresh: expires no sooner than {when} if left unwritten"}


def _unreadable(found: Page) -> list[dict[str, Any]]:
    """Records this version cannot read: shown as such, with why (never expired by it)."""
    return [
        {
            "id": bad.record_id,
            "phase": "unreadable",
            "kind": "unreadable",
            "text": f"this version cannot read it: {bad.reason}",
        }
        for bad in found.unreadable
    ]


def age(ms: float) -> str:
    """A duration in words a glance reads: ``42s``, ``7m05s``, ``3h12m``, ``2d4h``; a time
    ahead of now (an owner's clock ahead) as ``-``."""
    if ms < 0:
        return f"-{age(-ms)}"
    seconds = int(ms // 1000)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    return f"{seconds // 86400}d{(seconds % 86400) // 3600}h"


def now() -> datetime:
    return datetime.now(UTC)
