"""When a resource activity record expires: pure functions of the record, what the sweeper
observed of it and the sweeper's clock.

Staleness is judged by the sweeper's own clock, never the owner's (the way the awslabs
DynamoDB lock client judges a lease: a record version that has not changed for the lease
period, as measured by the observer). The owner's ``updatedAt`` only *hints* which records to
look at: one more than half a window away from the sweeper's clock, either way. The sweeper
records in the item the revision it saw and when (its clock); the record expires once a later
sweep finds that same revision a whole window after the observation. Any owner write changes
the revision, which voids the observation. See docs/resource-expiry.md ("Clocks").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.resources.phases import FAILED_PHASES, LIVE_PHASES

if TYPE_CHECKING:
    from datetime import datetime

    from sandbox_ledger.resources.models import ResourceActivityRecord

DEFAULT_STALE_AFTER = timedelta(minutes=15)
DEFAULT_RETAIN_FAILED = timedelta(days=7)
HINT_FRACTION = 0.5
"""A record is a candidate when its ``updatedAt`` is more than this fraction of its window
away from the sweeper's clock (before or after)."""
EXPIRY_BOUND = 2
"""A dead record expires at most this many windows (plus three sweep intervals) after its
owner's last write, whatever the owner's clock (docs/resource-expiry.md, "Clocks")."""


@dataclass(frozen=True)
class ExpiryPolicy:
    """``stale_after``: how long a live-phase record may go without a heartbeat.
    ``retain_failed``: how long a failed-phase record is kept for attention (0: forever).
    Both are measured by the sweeper's clock, from its observation of an unchanged revision."""

    stale_after: timedelta = DEFAULT_STALE_AFTER
    retain_failed: timedelta = DEFAULT_RETAIN_FAILED

    def __post_init__(self) -> None:
        if self.stale_after <= timedelta(0):
            raise InvalidInputError("stale_after", "must be positive")
        if self.retain_failed < timedelta(0):
            raise InvalidInputError("retain_failed", "must be zero (keep forever) or positive")

    def window(self, phase: str) -> timedelta | None:
        """How long a record in ``phase`` must stay unchanged to expire (None: never)."""
        if phase in LIVE_PHASES:
            return self.stale_after
        return self.retain_failed or None

    def hint_bands(self, now: datetime) -> dict[str, tuple[datetime, datetime] | None]:
        """For each phase, ``(older, newer)``: candidates are the records whose updatedAt is
        before ``older`` or after ``newer`` (None: the phase never expires)."""
        out: dict[str, tuple[datetime, datetime] | None] = {}
        for phase in (*LIVE_PHASES, *FAILED_PHASES):
            window = self.window(phase)
            out[phase] = None if window is None else (now - window / 2, now + window / 2)
        return out

    def is_hint(self, record: ResourceActivityRecord, now: datetime) -> bool:
        """True if ``record`` is worth observing at ``now`` (see :meth:`hint_bands`)."""
        band = self.hint_bands(now)[record.phase]
        if band is None:
            return False
        ms = record.updated_at_ms
        return ms < band[0].timestamp() * 1000 or ms > band[1].timestamp() * 1000

    def earliest_expiry(self, record: ResourceActivityRecord) -> datetime | None:
        """The soonest a sweep may expire ``record`` if its owner writes it no more (by a
        sweeper's clock that agrees with the owner's): a sweep observes it once it is a
        candidate (:data:`HINT_FRACTION` of a window after its last write) and expires it a
        whole window after that. None: the policy keeps it forever."""
        from datetime import UTC, datetime

        window = self.window(record.phase)
        if window is None:
            return None
        written = datetime.fromtimestamp(record.updated_at_ms / 1000, UTC)
        return written + window * HINT_FRACTION + window

    def latest_expiry(self, phase: str) -> timedelta | None:
        """How long after its last write a record in ``phase`` may still be kept by the
        policy, sweep intervals aside (None: forever): ``EXPIRY_BOUND`` windows."""
        window = self.window(phase)
        return None if window is None else window * EXPIRY_BOUND


def expiry_reason(
    record: ResourceActivityRecord,
    *,
    unchanged_for: timedelta,
    policy: ExpiryPolicy = ExpiryPolicy(),
    owner_alive: bool | None = None,
) -> str | None:
    """Why ``record`` has expired, given that a sweeper has seen its revision unchanged for
    ``unchanged_for`` (on the sweeper's clock), or None if it has not.

    A record in ``allocating``, ``ready`` or ``closing`` expires once unchanged for
    ``stale_after`` (its owner stopped refreshing it), unless ``owner_alive`` is True (a
    same-host check proved the owner still runs). A record in ``cleanup-failed`` or
    ``allocation-uncertain`` names a resource that still needs attention: it expires only
    after ``retain_failed``, never when that is zero.
    """
    window = policy.window(record.phase)
    if window is None or unchanged_for < window:
        return None
    if record.phase in LIVE_PHASES:
        if owner_alive is True:
            return None
        owner = "owner process gone" if owner_alive is False else "no heartbeat"
        return f"stale: {owner} for {_human(unchanged_for)} in phase {record.phase}"
    return f"retention elapsed: {record.phase} unchanged for {_human(unchanged_for)}"


def _human(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400}d{(seconds % 86400) // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{(seconds % 3600) // 60}m"
    return f"{seconds // 60}m{seconds % 60}s"
