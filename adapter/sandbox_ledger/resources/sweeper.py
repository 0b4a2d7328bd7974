"""The expiry sweep: find stale records through the phase index, claim, report, delete."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from sandbox_ledger.errors import ConflictError
from sandbox_ledger.resources._items import Unreadable
from sandbox_ledger.resources.events import Expiry
from sandbox_ledger.resources.models import to_iso
from sandbox_ledger.resources.policy import ExpiryPolicy, expiry_reason

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from sandbox_ledger.resources._items import VersionedRecord


class Publisher(Protocol):
    """Where expiries go (:class:`~sandbox_ledger.resources.EventPublisher` is one)."""

    def publish(self, expiries: Sequence[Expiry]) -> set[str]:
        """Publish every expiry; the ids of records whose event could not be published."""
        ...


class SweepStore(Protocol):
    """What the sweep needs of a record store (:class:`SyncResourceRecordStore` has it)."""

    def candidates(
        self, phase: str, before: datetime, *, page_size: int = 100
    ) -> Iterator[list[str]]:
        """Pages of ids of records in ``phase`` last updated before ``before``."""
        ...

    def get_many(self, record_ids: list[str]) -> dict[str, VersionedRecord | Unreadable]:
        """The stored records among ``record_ids``, by id."""
        ...

    def claim(
        self, record_id: str, revision: int, reason: str, *, owner: str, now_ms: int, until_ms: int
    ) -> VersionedRecord:
        """Claim for expiry at ``revision`` for ``owner`` until ``until_ms``; ConflictError if
        it changed or another claim's lease has not ended at ``now_ms``."""
        ...

    def release(self, record_id: str, owner: str) -> bool:
        """Give back ``owner``'s claim."""
        ...

    def delete_claimed(self, record_ids: list[str]) -> None:
        """Delete claimed records."""
        ...


@dataclass
class SweepResult:
    """What one sweep did. ``complete`` is False when it stopped for the deadline."""

    dry_run: bool
    expired: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """Records that cannot be decoded (also in ``failed``): id -> why. Reported every run,
    never expired, never in the way of the others."""
    remaining: int = 0
    complete: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable summary (the handler's return value)."""
        return {
            "dryRun": self.dry_run,
            "expired": self.expired,
            "skipped": self.skipped,
            "failed": self.failed,
            "reasons": self.reasons,
            "unreadable": self.unreadable,
            "remaining": self.remaining,
            "complete": self.complete,
        }


class _OutOfTime(Exception):
    pass


DEFAULT_LEASE = timedelta(minutes=2)


@dataclass
class _Run:
    """One sweep's identity and clock: claims carry its run id and a lease on its clock."""

    store: SweepStore
    publisher: Publisher | None
    now: datetime
    policy: ExpiryPolicy
    dry_run: bool
    lease_ms: int
    result: SweepResult
    check_time: Callable[[], None]
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: float = field(default_factory=time.monotonic)

    def clock_ms(self) -> int:
        """The sweeper's own clock: ``now`` plus the time this run has taken."""
        return int(self.now.timestamp() * 1000 + (time.monotonic() - self.started) * 1000)


def sweep(
    store: SweepStore,
    publisher: Publisher | None,
    *,
    now: datetime,
    policy: ExpiryPolicy = ExpiryPolicy(),  # noqa: B008 - immutable
    dry_run: bool = False,
    remaining_ms: Callable[[], int] | None = None,
    safety_ms: int = 10_000,
    page_size: int = 100,
    lease: timedelta = DEFAULT_LEASE,
) -> SweepResult:
    """Expire every record the policy says is stale, until done or ``safety_ms`` before the
    deadline ``remaining_ms()`` reports (the rest is left to the next run).

    Each expiry follows the claim protocol (docs/resource-expiry.md): claim the record with a
    conditional write on the revision read, as a lease of ``lease`` on this run's clock (if
    the owner touched it meanwhile the claim fails: skipped; a live claim of another run is
    left to it: skipped), publish ResourceExpired, then delete it (batched). A claim whose
    event could not be published is released, so its owner is never locked out. A run that
    dies leaves claims that a later run takes over once their lease ends: reporting is at
    least once, never lost. In a dry run nothing is claimed, published or deleted.
    """
    if not dry_run and publisher is None:
        raise ValueError("publisher: required unless dry_run")
    result = SweepResult(dry_run=dry_run)

    def check_time() -> None:
        if remaining_ms is not None and remaining_ms() < safety_ms:
            raise _OutOfTime

    run = _Run(
        store,
        publisher,
        now,
        policy,
        dry_run,
        int(lease.total_seconds() * 1000),
        result,
        check_time,
    )
    try:
        for phase, cutoff in policy.cutoffs(now).items():
            if cutoff is None:
                continue
            check_time()
            for ids in store.candidates(phase, cutoff, page_size=page_size):
                _expire_page(run, ids)
                check_time()
    except _OutOfTime:
        result.complete = False
    return result


def _expire_page(run: _Run, ids: list[str]) -> None:
    if not ids:
        return
    result = run.result
    found = run.store.get_many(ids)
    claimed: list[tuple[VersionedRecord, str, float]] = []
    for position, record_id in enumerate(ids):
        try:
            run.check_time()
        except _OutOfTime:
            result.remaining += len(ids) - position
            _publish_and_delete(run, claimed)
            raise
        stored = found.get(record_id)
        if stored is None:  # deleted since the index was read
            result.skipped.append(record_id)
            continue
        if isinstance(stored, Unreadable):  # reported; the sweep goes on with the others
            result.failed.append(record_id)
            result.unreadable[record_id] = stored.reason
            continue
        if _held_by_another(run, stored):  # its run publishes it, or a later one takes over
            result.skipped.append(record_id)
            continue
        reason = stored.expiring or expiry_reason(stored.record, now=run.now, policy=run.policy)
        if reason is None:  # refreshed since the index was read
            result.skipped.append(record_id)
            continue
        if run.dry_run:
            result.expired.append(record_id)
            result.reasons[record_id] = reason
            continue
        now_ms = run.clock_ms()
        try:
            stored = run.store.claim(
                record_id,
                stored.revision,
                reason,
                owner=run.run_id,
                now_ms=now_ms,
                until_ms=now_ms + run.lease_ms,
            )
        except ConflictError:  # touched, or claimed by another run, since our read
            result.skipped.append(record_id)
            continue
        claimed.append((stored, reason, time.monotonic()))
    _publish_and_delete(run, claimed)


def _held_by_another(run: _Run, stored: VersionedRecord) -> bool:
    return (
        stored.expiring is not None
        and stored.claimed_by != run.run_id
        and stored.claim_until_ms is not None
        and stored.claim_until_ms >= run.clock_ms()
    )


def _publish_and_delete(run: _Run, claimed: list[tuple[VersionedRecord, str, float]]) -> None:
    if not claimed or run.publisher is None:
        return
    result = run.result
    # Publish only under a lease with time to spare: past half of it, another run may take
    # the claim over and publish; leave those to it (they stay claimed, reported as failed).
    fresh = [c for c in claimed if (time.monotonic() - c[2]) * 1000 < run.lease_ms / 2]
    for stored, _, _ in claimed:
        if all(stored is not f[0] for f in fresh):
            result.failed.append(stored.record.id)
    at = to_iso(datetime.fromtimestamp(run.clock_ms() / 1000, UTC))
    expiries = [
        Expiry(
            record=v.record, reason=reason, trigger="sweeper", revision=v.revision, expired_at=at
        )
        for v, reason, _ in fresh
    ]
    failed = run.publisher.publish(expiries)
    run.store.delete_claimed([v.record.id for v, _, _ in fresh if v.record.id not in failed])
    for stored, reason, _ in fresh:
        record_id = stored.record.id
        if record_id in failed:  # released: the owner may refresh it; a later run retries
            run.store.release(record_id, run.run_id)
            result.failed.append(record_id)
        else:
            result.expired.append(record_id)
            result.reasons[record_id] = reason
