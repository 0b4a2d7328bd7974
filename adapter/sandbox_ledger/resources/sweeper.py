"""The expiry sweep: find candidates through the phase index, observe them on the sweeper's
clock, and claim, report and delete those whose observed revision outlived the window."""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from sandbox_ledger.errors import ConflictError
from sandbox_ledger.resources._items import Unreadable, check_page_size
from sandbox_ledger.resources.events import Expiry
from sandbox_ledger.resources.models import to_iso
from sandbox_ledger.resources.policy import ExpiryPolicy, expiry_reason
from sandbox_ledger.telemetry import traced_run

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
        self,
        phase: str,
        *,
        before: datetime | None = None,
        after: datetime | None = None,
        page_size: int = 100,
    ) -> Iterator[list[str]]:
        """Pages of ids of records in ``phase`` last updated before ``before`` and/or after
        ``after``."""
        ...

    def observe(self, seen: VersionedRecord, at_ms: int) -> bool:
        """Record the sweeper's observation of ``seen``'s revision at ``at_ms`` (its clock)
        without bumping the revision; False if the record changed (or is another incarnation
        under its id) or it is observed already."""
        ...

    def get_many(self, record_ids: list[str]) -> dict[str, VersionedRecord | Unreadable]:
        """The stored records among ``record_ids``, by id."""
        ...

    def claim(
        self, judged: VersionedRecord, reason: str, *, owner: str, now_ms: int, until_ms: int
    ) -> VersionedRecord:
        """Claim the record ``judged`` for expiry for ``owner`` until ``until_ms``, and return
        the claim; ConflictError if the stored record is no longer the one judged (another
        revision, or another incarnation under its id) or another claim's lease has not ended
        at ``now_ms``."""
        ...

    def release(self, claimed: VersionedRecord) -> bool:
        """Give back the claim ``claimed`` (as :meth:`claim` returned it); False if it no
        longer stands."""
        ...

    def delete_claimed(self, claims: list[VersionedRecord]) -> list[str]:
        """Delete each record whose claim (as :meth:`claim` returned it) still stands, and
        nothing else; the ids deleted."""
        ...


@dataclass
class SweepResult:
    """What one sweep did. ``complete`` is False when it stopped for the deadline."""

    dry_run: bool
    expired: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Candidates not expired by this run (refreshed, observed, still within their window,
    or claimed by another run)."""
    observed: list[str] = field(default_factory=list)
    """Candidates whose revision this run started watching (also in ``skipped``): they expire
    if a later run finds the same revision a whole window later by the sweeper's clock."""
    unobserved: list[str] = field(default_factory=list)
    """Candidates a dry run with ``observe=False`` left unwatched (also in ``skipped``): a
    real run would observe them now; their ``due`` counts from this run's clock."""
    due: dict[str, str] = field(default_factory=dict)
    """Skipped records this run watches (observed now or by an earlier run) -> when a sweep
    expires them if they stay unchanged (ISO 8601, by the sweeper's clock: a sweep at or
    after that moment, the next scheduled one at the latest)."""
    failed: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """Records that cannot be decoded (also in ``failed``): id -> why. Reported every run,
    never expired, never in the way of the others."""
    lost: list[str] = field(default_factory=list)
    """Records this run claimed (and published) whose claim no longer stood when it came to
    delete them: its lease ran out (a stall, a clock behind) and another run took the claim
    over, or the record was deleted meanwhile. Not deleted by this run and not in
    ``expired``: the run holding the claim expires and reports them."""
    remaining: int = 0
    complete: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable summary (the handler's return value)."""
        return {
            "dryRun": self.dry_run,
            "expired": self.expired,
            "skipped": self.skipped,
            "observed": self.observed,
            "unobserved": self.unobserved,
            "due": self.due,
            "failed": self.failed,
            "reasons": self.reasons,
            "unreadable": self.unreadable,
            "lost": self.lost,
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
    observing: bool = True
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # Looked up at each run (not bound at import), so a test can freeze the elapsed time.
    started: float = field(default_factory=lambda: time.monotonic())

    def clock_ms(self) -> int:
        """The sweeper's own clock: ``now`` plus the time this run has taken."""
        return int(self.now.timestamp() * 1000 + (time.monotonic() - self.started) * 1000)


def _described(result: SweepResult) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """A sweep's span: its counts, and an event per record it expired."""
    counts = {
        "sandbox_ledger.sweep.dry_run": result.dry_run,
        "sandbox_ledger.sweep.complete": result.complete,
        "sandbox_ledger.sweep.expired": len(result.expired),
        "sandbox_ledger.sweep.skipped": len(result.skipped),
        "sandbox_ledger.sweep.observed": len(result.observed),
        "sandbox_ledger.sweep.unobserved": len(result.unobserved),
        "sandbox_ledger.sweep.failed": len(result.failed),
        "sandbox_ledger.sweep.unreadable": len(result.unreadable),
        "sandbox_ledger.sweep.lost": len(result.lost),
    }
    return counts, [("expired", {"resource.id": record_id}) for record_id in result.expired]


@traced_run("sweep", _described)
def sweep(
    store: SweepStore,
    publisher: Publisher | None,
    *,
    now: datetime,
    policy: ExpiryPolicy = ExpiryPolicy(),  # noqa: B008 - immutable
    dry_run: bool = False,
    observe: bool = True,
    remaining_ms: Callable[[], int] | None = None,
    safety_ms: int = 10_000,
    page_size: int = 100,
    lease: timedelta = DEFAULT_LEASE,
) -> SweepResult:
    """Expire every record the policy says is stale, until done or ``safety_ms`` before the
    deadline ``remaining_ms()`` reports (the rest is left to the next run).

    Staleness is judged on this sweeper's clock (``now``, advanced by the run's own elapsed
    time): candidates are the records whose ``updatedAt`` is more than half their window away
    from ``now`` (either way); a candidate is first *observed* (its revision and this clock's
    time noted in the item, the revision not bumped) and expires only when a later run finds
    the same revision at least a window after that observation. An owner's write changes the
    revision and voids the observation, whatever the owner's clock says.

    Each expiry follows the claim protocol (docs/resource-expiry.md): claim the record with a
    conditional write on the record read (its incarnation and revision), as a lease of
    ``lease`` on this run's clock (if the owner touched it, or deleted and allocated it again,
    meanwhile the claim fails: skipped; a live claim of another run is left to it: skipped),
    publish ResourceExpired, then delete it, conditional on this run's claim still standing
    (a claim another run took over after the lease ran out is not deleted: ``lost``). A claim
    whose event could not be published is released, so its owner is never locked out; so are
    a page's claims not yet published when a store's error (throttled past its retries) ends
    the run, before the error goes up. A run that dies leaves claims that a later run takes
    over once their lease ends: reporting is at least once, never lost. In a dry run nothing
    is claimed, published or deleted, but candidates are observed as in a real run (an
    observation bumps no revision and is voided by any owner write, so it changes nothing an
    owner or another sweeper relies on): dry runs a window apart report what real runs at
    those moments would expire.

    A dry run with ``observe=False`` writes nothing at all (a reader's forecast, such as the
    operator's console): it reports what a real run now would expire, and the candidates no
    sweep observes yet as ``unobserved``, due a window after this run's clock.
    """
    if not dry_run and publisher is None:
        raise ValueError("publisher: required unless dry_run")
    if not observe and not dry_run:
        raise ValueError("observe: a sweep that expires records observes them (dry_run only)")
    check_page_size(page_size)  # the phase index Query's Limit, sent unchecked
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
        observing=observe,
    )
    try:
        bands = [(p, b) for p, b in policy.hint_bands(now).items() if b is not None]
        # The records dated behind first (the backlog of a deadline-bound run), then the
        # few dated ahead of this clock.
        ranges = [{"before": b[0]} for _, b in bands] + [{"after": b[1]} for _, b in bands]
        for (phase, _), bound in zip(bands * 2, ranges, strict=True):
            check_time()
            for ids in store.candidates(phase, **bound, page_size=page_size):
                _expire_page(run, ids)
                check_time()
    except _OutOfTime:
        result.complete = False
    return result


def _expire_page(run: _Run, ids: list[str]) -> None:
    if not ids:
        return
    found = run.store.get_many(ids)
    claimed: list[tuple[VersionedRecord, str, float]] = []
    try:
        _claim_page(run, ids, found, claimed)
    except _OutOfTime:
        _publish_and_delete(run, claimed)
        raise
    except BaseException:  # a store's error (throttled) part way: nothing left claimed
        _release_all(run, claimed)
        raise
    _publish_and_delete(run, claimed)


def _release_all(run: _Run, claimed: list[tuple[VersionedRecord, str, float]]) -> None:
    """Give back claims not yet published (best effort: a claim that stays is taken over
    by a later run once its lease ends, as a dead run's)."""
    for stored, _, _ in claimed:
        with contextlib.suppress(Exception):
            run.store.release(stored)


def _claim_page(
    run: _Run,
    ids: list[str],
    found: dict[str, VersionedRecord | Unreadable],
    claimed: list[tuple[VersionedRecord, str, float]],
) -> None:
    """Judge the page's records and claim those that expire (into ``claimed``)."""
    result = run.result
    for position, record_id in enumerate(ids):
        try:
            run.check_time()
        except _OutOfTime:
            result.remaining += len(ids) - position
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
        reason = stored.expiring or _judge(run, stored)
        if reason is None:  # refreshed, observed now, or still within its window
            result.skipped.append(record_id)
            continue
        if run.dry_run:
            result.expired.append(record_id)
            result.reasons[record_id] = reason
            continue
        now_ms = run.clock_ms()
        try:
            stored = run.store.claim(
                stored,
                reason,
                owner=run.run_id,
                now_ms=now_ms,
                until_ms=now_ms + run.lease_ms,
            )
        # Touched, claimed by another run, or deleted and allocated again, since our read.
        except ConflictError:
            result.skipped.append(record_id)
            continue
        claimed.append((stored, reason, time.monotonic()))


def _judge(run: _Run, stored: VersionedRecord) -> str | None:
    """Why ``stored`` expires now, by this sweeper's clock; None if it does not (and then,
    unless it is refreshed or already observed, observe it)."""
    now_ms = run.clock_ms()
    observed = stored.observed_ms
    record_id = stored.record.id
    if observed is not None:
        unchanged = timedelta(milliseconds=max(0, now_ms - observed))
        reason = expiry_reason(stored.record, unchanged_for=unchanged, policy=run.policy)
        if reason is None:
            _note_due(run, stored, observed)
        return reason
    now = datetime.fromtimestamp(now_ms / 1000, UTC)
    if not run.policy.is_hint(stored.record, now):  # refreshed since the index was read
        return None
    if not run.observing:
        run.result.unobserved.append(record_id)
        _note_due(run, stored, now_ms)
        return None
    if run.store.observe(stored, now_ms):
        run.result.observed.append(record_id)
        _note_due(run, stored, now_ms)
    return None


def _note_due(run: _Run, stored: VersionedRecord, observed_ms: int) -> None:
    window = run.policy.window(stored.record.phase)
    if window is not None:
        due = datetime.fromtimestamp(observed_ms / 1000, UTC) + window
        run.result.due[stored.record.id] = to_iso(due)


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
            record=v.record,
            reason=reason,
            trigger="sweeper",
            revision=v.expired_revision,
            expired_at=at,
        )
        for v, reason, _ in fresh
    ]
    failed = run.publisher.publish(expiries)
    # Each delete is conditional on this run's claim still standing: publishing may have
    # outlasted the lease (a stall), and the run that took the claim over may have deleted
    # the record and its owner allocated it again under its id.
    deleted = set(run.store.delete_claimed([v for v, _, _ in fresh if v.record.id not in failed]))
    for stored, reason, _ in fresh:
        record_id = stored.record.id
        if record_id in failed:  # released: the owner may refresh it; a later run retries
            run.store.release(stored)
            result.failed.append(record_id)
        elif record_id in deleted:
            result.expired.append(record_id)
            result.reasons[record_id] = reason
        else:  # the run that took the claim over reports it
            result.lost.append(record_id)
