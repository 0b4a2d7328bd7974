"""The expiry sweep: find stale records through the phase index, claim, report, delete."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sandbox_ledger.errors import ConflictError
from sandbox_ledger.resources.events import Expiry
from sandbox_ledger.resources.models import to_iso
from sandbox_ledger.resources.policy import ExpiryPolicy, expiry_reason

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from datetime import datetime

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

    def get_many(self, record_ids: list[str]) -> dict[str, VersionedRecord]:
        """The stored records among ``record_ids``, by id."""
        ...

    def claim(self, record_id: str, revision: int, reason: str) -> VersionedRecord:
        """Claim for expiry at ``revision``; ConflictError if it changed or is claimed."""
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
            "remaining": self.remaining,
            "complete": self.complete,
        }


class _OutOfTime(Exception):
    pass


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
) -> SweepResult:
    """Expire every record the policy says is stale, until done or ``safety_ms`` before the
    deadline ``remaining_ms()`` reports (the rest is left to the next run).

    Each expiry is: claim the record with a conditional write on the revision read (if the
    owner touched it meanwhile the claim fails: skipped), publish ResourceExpired, then delete
    it (batched). A run that dies between two steps leaves a claimed record that the
    next run publishes again and deletes: reporting is at least once, never lost.
    In a dry run nothing is claimed, published or deleted.
    """
    if not dry_run and publisher is None:
        raise ValueError("publisher: required unless dry_run")
    result = SweepResult(dry_run=dry_run)

    def check_time() -> None:
        if remaining_ms is not None and remaining_ms() < safety_ms:
            raise _OutOfTime

    try:
        for phase, cutoff in policy.cutoffs(now).items():
            if cutoff is None:
                continue
            check_time()
            for ids in store.candidates(phase, cutoff, page_size=page_size):
                _expire_page(store, publisher, ids, now, policy, dry_run, result, check_time)
                check_time()
    except _OutOfTime:
        result.complete = False
    return result


def _expire_page(
    store: SweepStore,
    publisher: Publisher | None,
    ids: list[str],
    now: datetime,
    policy: ExpiryPolicy,
    dry_run: bool,
    result: SweepResult,
    check_time: Callable[[], None],
) -> None:
    if not ids:
        return
    found = store.get_many(ids)
    claimed: list[tuple[VersionedRecord, str]] = []
    for position, record_id in enumerate(ids):
        try:
            check_time()
        except _OutOfTime:
            result.remaining += len(ids) - position
            _publish_and_delete(store, publisher, claimed, now, result)
            raise
        stored = found.get(record_id)
        if stored is None:  # deleted since the index was read
            result.skipped.append(record_id)
            continue
        reason = stored.expiring or expiry_reason(stored.record, now=now, policy=policy)
        if reason is None:  # refreshed since the index was read
            result.skipped.append(record_id)
            continue
        if dry_run:
            result.expired.append(record_id)
            result.reasons[record_id] = reason
            continue
        if stored.expiring is None:
            try:
                stored = store.claim(record_id, stored.revision, reason)
            except ConflictError:  # the owner touched it between our read and our claim
                result.skipped.append(record_id)
                continue
        claimed.append((stored, reason))
    _publish_and_delete(store, publisher, claimed, now, result)


def _publish_and_delete(
    store: SweepStore,
    publisher: Publisher | None,
    claimed: list[tuple[VersionedRecord, str]],
    now: datetime,
    result: SweepResult,
) -> None:
    if not claimed or publisher is None:
        return
    expiries = [
        Expiry(
            record=v.record,
            reason=reason,
            trigger="sweeper",
            revision=v.revision,
            expired_at=to_iso(now),
        )
        for v, reason in claimed
    ]
    failed = publisher.publish(expiries)
    store.delete_claimed([s.record.id for s, _ in claimed if s.record.id not in failed])
    for stored, reason in claimed:
        record_id = stored.record.id
        if record_id in failed:  # stays claimed: the next run publishes it again
            result.failed.append(record_id)
        else:
            result.expired.append(record_id)
            result.reasons[record_id] = reason
