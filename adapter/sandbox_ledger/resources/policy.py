"""When a resource activity record expires: a pure function of the record and the clock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.resources.models import FAILED_PHASES, LIVE_PHASES, parse_iso

if TYPE_CHECKING:
    from datetime import datetime

    from sandbox_ledger.resources.models import ResourceActivityRecord

DEFAULT_STALE_AFTER = timedelta(minutes=15)
DEFAULT_RETAIN_FAILED = timedelta(days=7)


@dataclass(frozen=True)
class ExpiryPolicy:
    """``stale_after``: how long a live-phase record may go without a heartbeat.
    ``retain_failed``: how long a failed-phase record is kept for attention (0: forever)."""

    stale_after: timedelta = DEFAULT_STALE_AFTER
    retain_failed: timedelta = DEFAULT_RETAIN_FAILED

    def __post_init__(self) -> None:
        if self.stale_after <= timedelta(0):
            raise InvalidInputError("stale_after", "must be positive")
        if self.retain_failed < timedelta(0):
            raise InvalidInputError("retain_failed", "must be zero (keep forever) or positive")

    def cutoffs(self, now: datetime) -> dict[str, datetime | None]:
        """For each phase, the updatedAt before which a record expires (None: never)."""
        out: dict[str, datetime | None] = {p: now - self.stale_after for p in LIVE_PHASES}
        for phase in FAILED_PHASES:
            out[phase] = now - self.retain_failed if self.retain_failed else None
        return out


def expiry_reason(
    record: ResourceActivityRecord,
    *,
    now: datetime,
    policy: ExpiryPolicy = ExpiryPolicy(),
    owner_alive: bool | None = None,
) -> str | None:
    """Why ``record`` has expired at ``now``, or None if it has not.

    A record in ``allocating``, ``ready`` or ``closing`` expires once its updatedAt is older
    than ``stale_after`` (its owner stopped refreshing it), unless ``owner_alive`` is True (a
    same-host check proved the owner still runs). A record in ``cleanup-failed`` or
    ``allocation-uncertain`` names a resource that still needs attention: it expires only
    after ``retain_failed``, never when that is zero.
    """
    age = now - parse_iso(record.updated_at)
    if record.phase in LIVE_PHASES:
        if age > policy.stale_after and owner_alive is not True:
            owner = "owner process gone" if owner_alive is False else "no heartbeat"
            return f"stale: {owner} for {_human(age)} in phase {record.phase}"
        return None
    if policy.retain_failed and age > policy.retain_failed:
        return f"retention elapsed: {record.phase} for {_human(age)}"
    return None


def _human(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400}d{(seconds % 86400) // 3600}h"
    if seconds >= 3600:
        return f"{seconds // 3600}h{(seconds % 3600) // 60}m"
    return f"{seconds // 60}m{seconds % 60}s"
