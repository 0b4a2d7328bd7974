"""Resource record stores on the ledger's table: :class:`ResourceRecordStore` (async) and
:class:`SyncResourceRecordStore`, over the same operations and client plumbing as the ledger
adapters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sandbox_ledger import keys as k
from sandbox_ledger.deployment import get_descriptor, resolve_shard_count, store_identity
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.resources import _ops
from sandbox_ledger.resources._items import Unreadable, VersionedRecord
from sandbox_ledger.resources._ops import Page
from sandbox_ledger.resources.models import FAILED_PHASES, LIVE_PHASES, ResourceActivityRecord
from sandbox_ledger.resources.settings import resolve_policy
from sandbox_ledger.sdk.client import AsyncClientOwner, SyncClientOwner
from sandbox_ledger.telemetry import RESOURCE_OPERATIONS, Target, instrumented

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

    from botocore.config import Config

    from sandbox_ledger.deployment import TableDescriptor
    from sandbox_ledger.resources.policy import ExpiryPolicy
    from sandbox_ledger.sdk.attributes import Item
    from sandbox_ledger.sdk.paging import ScanStarts
    from sandbox_ledger.sdk.steps import Op

DEFAULT_TTL_HORIZON = timedelta(days=30)

__all__ = [
    "DEFAULT_TTL_HORIZON",
    "Page",
    "ResourceRecordStore",
    "SyncResourceRecordStore",
    "VersionedRecord",
]


def _utcnow() -> datetime:
    return datetime.now(UTC)


Found = list[VersionedRecord | Unreadable]
"""One page of a scan: each record decoded, or why it cannot be."""


def _scan_starts(segments: int, page_size: int) -> ScanStarts:
    if isinstance(segments, bool) or not isinstance(segments, int) or not 1 <= segments <= 64:
        raise InvalidInputError("segments", "must be an integer from 1 to 64")
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise InvalidInputError("page_size", "must be a positive integer")
    return dict.fromkeys(range(segments))


class _Base:
    def __init__(
        self,
        table_name: str,
        *,
        shard_count: int | None,
        ttl_horizon: timedelta,
        clock: Callable[[], datetime] | None,
        policy: ExpiryPolicy | None,
    ) -> None:
        if ttl_horizon <= timedelta(0):
            raise InvalidInputError("ttl_horizon", "must be positive")
        self.table_name = k.check_table_name(table_name)
        self._explicit_shards = None if shard_count is None else k.check_shard_count(shard_count)
        self._shards: int | None = None
        self._described: TableDescriptor | None = None
        self._store: str | None = None
        self._explicit_policy = policy
        self._policy: ExpiryPolicy | None = None
        self.ttl_horizon = ttl_horizon
        self.clock = clock or _utcnow

    def telemetry_target(self) -> Target:
        """``db.system.name`` and ``db.collection.name`` of this store's spans
        (:mod:`sandbox_ledger.telemetry`)."""
        return ("aws.dynamodb", self.table_name, None)

    @property
    def shard_count(self) -> int | None:
        """The shard count in use: the table descriptor's once read (see
        :mod:`sandbox_ledger.deployment`), until then the one given, if any."""
        return self._shards if self._shards is not None else self._explicit_shards

    @property
    def policy(self) -> ExpiryPolicy | None:
        """The expiry policy the TTLs follow: the table descriptor's windows once read, until
        then the one given, if any."""
        return self._policy if self._policy is not None else self._explicit_policy

    def _shard_count(self) -> Op[int]:
        """Read the table's descriptor once; an explicit shard count and policy must agree
        with it."""
        if self._shards is None or self._policy is None:
            described = yield from get_descriptor(self.table_name)
            shards = resolve_shard_count(described, self._explicit_shards, self.table_name)
            self._policy = resolve_policy(described, self._explicit_policy, self.table_name)
            self._shards, self._described = shards, described
        return self._shards

    def _ttls(self) -> Op[dict[str, int | None]]:
        """For each phase, the TTL a write at this store's clock sets: later than the policy's
        own expiry of the record by ``ttl_horizon``; None (no TTL) if the policy keeps it
        forever."""
        yield from self._shard_count()
        assert self._policy is not None
        now_s = self.clock().timestamp()
        out: dict[str, int | None] = {}
        for phase in (*LIVE_PHASES, *FAILED_PHASES):
            latest = self._policy.latest_expiry(phase)
            out[phase] = (
                None if latest is None else int(now_s + latest.total_seconds() + self._horizon)
            )
        return out

    @property
    def _horizon(self) -> int:
        return int(self.ttl_horizon.total_seconds())

    def _now_s(self) -> int:
        return int(self.clock().timestamp())

    def _put(
        self,
        record: ResourceActivityRecord,
        expected_revision: int | None,
        expected_incarnation: str | None = None,
    ) -> Op[VersionedRecord]:
        if not isinstance(record, ResourceActivityRecord):
            raise InvalidInputError(
                "record", f"expected a ResourceActivityRecord, got {type(record).__name__}"
            )
        if expected_incarnation is not None and expected_revision is None:
            raise InvalidInputError("expected_incarnation", "needs expected_revision")
        shards = yield from self._shard_count()
        ttls = yield from self._ttls()
        return (
            yield from _ops.put(
                self.table_name,
                record,
                expected_revision=expected_revision,
                expires_at=ttls[record.phase],
                shard_count=shards,
                expected_incarnation=_ops.AnyIncarnation.ANY
                if expected_incarnation is None
                else expected_incarnation,
            )
        )

    def _touch(self, record_id: str) -> Op[VersionedRecord]:
        ttls = yield from self._ttls()
        return (
            yield from _ops.touch(self.table_name, record_id, now=self.clock(), ttl_by_phase=ttls)
        )

    def _operation(
        self, record_id: str, kind: str, finish: tuple[str, str | None] | None
    ) -> Op[VersionedRecord]:
        shards = yield from self._shard_count()
        ttls = yield from self._ttls()
        return (
            yield from _ops.record_operation(
                self.table_name,
                record_id,
                kind=kind,
                finish=finish,
                now=self.clock(),
                ttl_by_phase=ttls,
                shard_count=shards,
            )
        )

    def _scan(
        self, starts: ScanStarts, segments: int, page_size: int, as_stored: bool = False
    ) -> Op[tuple[Found, ScanStarts]]:
        return _ops.scan_records(
            self.table_name,
            starts,
            total_segments=segments,
            page_size=page_size,
            now_s=0 if as_stored else self._now_s(),  # 0: none is past its TTL
        )

    def _list(
        self, phase: str | None, provider: str | None, limit: int, cursor: str | None
    ) -> Op[Page]:
        shards = yield from self._shard_count()
        if self._store is None:
            self._store = yield from store_identity(self.table_name, self._described)
        return (
            yield from _ops.list_records(
                self.table_name,
                store=self._store,
                phase=phase,
                provider=provider,
                limit=limit,
                cursor=cursor,
                shard_count=shards,
                now_s=self._now_s(),
            )
        )


@instrumented(RESOURCE_OPERATIONS)
class ResourceRecordStore(_Base, AsyncClientOwner):
    """Resource activity records in the ledger table, with aioboto3.

    ``shard_count`` (of the list indexes) comes from the table's deployment descriptor, read
    once on first use; an explicit value must agree with it (DeploymentMismatchError), and is
    used as is on a table without a descriptor (default 4).

    Every write is conditional (a revision counter beside the record), so a sweeper never
    deletes a record its owner refreshed a moment ago. Each write sets the TTL attribute as the
    expiry ``policy`` calls for: on this store's clock, two windows of the record's phase
    (the latest the sweep expires it) plus ``ttl_horizon`` (default 30 days); no TTL for a
    failed-phase record when ``retain_failed`` is 0 (kept forever). The policy is the table
    descriptor's windows (a deployed stack's); an explicit ``policy`` must agree with them
    (DeploymentMismatchError), and is used as is on a table that describes none (default
    :class:`ExpiryPolicy`). Reads hide records past their TTL that DynamoDB has not deleted.
    """

    def __init__(
        self,
        table_name: str,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        session: Any | None = None,
        config: Config | None = None,
        shard_count: int | None = None,
        ttl_horizon: timedelta = DEFAULT_TTL_HORIZON,
        clock: Callable[[], datetime] | None = None,
        policy: ExpiryPolicy | None = None,
    ) -> None:
        super().__init__(
            table_name,
            shard_count=shard_count,
            ttl_horizon=ttl_horizon,
            clock=clock,
            policy=policy,
        )
        self._open(
            endpoint_url=endpoint_url, region_name=region_name, session=session, config=config
        )

    async def put(
        self,
        record: ResourceActivityRecord,
        *,
        expected_revision: int | None = None,
        expected_incarnation: str | None = None,
    ) -> VersionedRecord:
        """Create or replace. Raises ConflictError if ``expected_revision`` does not match (or,
        given with it, ``expected_incarnation``: the ``incarnation`` of the record read, so
        that one deleted and allocated again since, whose revision starts again at 1, is
        refused too), if a newer record is stored, or if a sweeper is expiring it."""
        return await self.run(self._put(record, expected_revision, expected_incarnation))

    async def get(self, record_id: str) -> ResourceActivityRecord | None:
        """The record, or None (absent, or past its TTL)."""
        found = await self.get_versioned(record_id)
        return found.record if found else None

    async def get_versioned(self, record_id: str) -> VersionedRecord | None:
        """The record with its revision, or None."""
        return await self.run(_ops.get(self.table_name, record_id, now_s=self._now_s()))

    async def inspect(self, record_id: str) -> VersionedRecord | Unreadable | None:
        """:meth:`get_versioned`, for an operator looking at what ``list`` or a sweep reports
        as unreadable: such a record comes back as :class:`Unreadable` (why, and its stored
        JSON) instead of raising, and ``record_id`` is read as given, so a record an older
        version stored under another spelling of a UUID can be looked at."""
        return await self.run(_ops.inspect(self.table_name, record_id, now_s=self._now_s()))

    async def list(
        self,
        *,
        phase: str | None = None,
        provider: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """Records newest updatedAt first, by phase and/or provider; ``cursor`` pages on."""
        return await self.run(self._list(phase, provider, limit, cursor))

    async def scan(
        self, *, segments: int = 1, page_size: int = 1000, as_stored: bool = False
    ) -> AsyncIterator[Found]:
        """Every record of the table, a page at a time, whatever its phase: decoded, or
        :class:`Unreadable` saying why not. A Scan of the whole table (cost grows with the
        table, not the result): for exports, not listings. Records past their TTL that
        DynamoDB has not deleted yet are left out, unless ``as_stored`` (what the table
        holds: the embedded server's save, whose restart must leave them to TTL)."""
        starts = _scan_starts(segments, page_size)
        while starts:
            found, starts = await self.run(self._scan(starts, segments, page_size, as_stored))
            yield found

    async def touch(self, record_id: str) -> VersionedRecord:
        """Heartbeat: refresh updatedAt now. Raises ConflictError if the record is gone or
        being expired (the owner should treat its sandbox as reclaimed)."""
        return await self.run(self._touch(record_id))

    async def record_operation_start(self, record_id: str, kind: str) -> VersionedRecord:
        """Count one more running operation of ``kind``."""
        return await self.run(self._operation(record_id, kind, None))

    async def record_operation_finish(
        self, record_id: str, kind: str, outcome: str, *, error: str | None = None
    ) -> VersionedRecord:
        """Count one fewer running ``kind``; set lastOperation, and lastFailure if failed."""
        return await self.run(self._operation(record_id, kind, (outcome, error)))

    async def delete(
        self,
        record_id: str,
        *,
        expected_revision: int | None = None,
        expected_incarnation: str | None = None,
    ) -> bool:
        """Delete (only at ``expected_revision`` and ``expected_incarnation``, each if given:
        see :meth:`put`). True if a record was deleted."""
        return await self.run(
            _ops.delete(
                self.table_name,
                record_id,
                expected_revision=expected_revision,
                expected_incarnation=expected_incarnation,
            )
        )


@instrumented(RESOURCE_OPERATIONS)
class SyncResourceRecordStore(_Base, SyncClientOwner):
    """:class:`ResourceRecordStore` without await, on boto3; safe to share across threads."""

    def __init__(
        self,
        table_name: str,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        session: Any | None = None,
        config: Config | None = None,
        shard_count: int | None = None,
        ttl_horizon: timedelta = DEFAULT_TTL_HORIZON,
        clock: Callable[[], datetime] | None = None,
        policy: ExpiryPolicy | None = None,
    ) -> None:
        super().__init__(
            table_name,
            shard_count=shard_count,
            ttl_horizon=ttl_horizon,
            clock=clock,
            policy=policy,
        )
        self._open(
            endpoint_url=endpoint_url, region_name=region_name, session=session, config=config
        )

    def descriptor(self) -> TableDescriptor | None:
        """The table's deployment descriptor, or None (see :mod:`sandbox_ledger.deployment`)."""
        return self.run(get_descriptor(self.table_name))

    # The sweep's view of the store (see sandbox_ledger.resources.sweeper.SweepStore).

    def candidates(
        self,
        phase: str,
        *,
        before: datetime | None = None,
        after: datetime | None = None,
        page_size: int = 100,
    ) -> Iterator[list[str]]:
        """Pages of ids of records in ``phase`` last updated before ``before`` (oldest first)
        and/or after ``after`` (dated ahead of the sweeper's clock, newest first), shard by
        shard (read from the phase index)."""
        bounds = [(int(t.timestamp() * 1000), t is after) for t in (before, after) if t]
        for shard in range(self.run(self._shard_count())):
            partition = k.resource_phase_pk(phase, shard)
            for bound_ms, later in bounds:
                start: dict[str, Any] | None = None
                while True:
                    ids, start = self.run(
                        _ops.candidate_keys(
                            self.table_name, partition, bound_ms, start, page_size, after=later
                        )
                    )
                    if ids:
                        yield ids
                    if not start:
                        break

    def observe(self, seen: VersionedRecord, at_ms: int) -> bool:
        """Note that the sweeper saw ``seen``'s revision unchanged at ``at_ms`` (its clock),
        without bumping the revision; False if the record changed (or is another incarnation
        under its id) or that revision is observed already."""
        return self.run(_ops.observe(self.table_name, seen, at_ms))

    def get_many(self, record_ids: list[str]) -> dict[str, VersionedRecord | Unreadable]:
        """The stored records among ``record_ids``, by id (strongly consistent); one that
        cannot be decoded comes back as an :class:`Unreadable`."""
        found = self.run(_ops.batch_get_records(self.table_name, record_ids))
        return {v.record_id if isinstance(v, Unreadable) else v.record.id: v for v in found}

    def claim(
        self, judged: VersionedRecord, reason: str, *, owner: str, now_ms: int, until_ms: int
    ) -> VersionedRecord:
        """Claim a record for expiry, for ``owner`` until ``until_ms``, if it is still the one
        ``judged`` (its incarnation, revision, observation and claim owner) and unclaimed (or
        its claim's lease ended before ``now_ms``); from then on its owner can no longer
        refresh it. Returns the claim. Raises ConflictError otherwise."""
        return self.run(
            _ops.mark_expiring(
                self.table_name, judged, reason, owner=owner, now_ms=now_ms, until_ms=until_ms
            )
        )

    def release(self, claimed: VersionedRecord) -> bool:
        """Give back the claim ``claimed`` (as :meth:`claim` returned it); False if it no
        longer stands."""
        return self.run(_ops.release_claim(self.table_name, claimed))

    def delete_claimed(self, claims: list[VersionedRecord]) -> list[str]:
        """Delete each record whose claim (as :meth:`claim` returned it) still stands, one
        conditional delete each; the ids deleted (the others' claims were lost)."""
        return self.run(_ops.delete_claimed(self.table_name, claims))

    def put(
        self,
        record: ResourceActivityRecord,
        *,
        expected_revision: int | None = None,
        expected_incarnation: str | None = None,
    ) -> VersionedRecord:
        """Create or replace (see :meth:`ResourceRecordStore.put`)."""
        return self.run(self._put(record, expected_revision, expected_incarnation))

    def put_stored(self, item: Item) -> None:
        """Write a record item exactly as another table stored it (one this version cannot
        read, :attr:`Unreadable.item`: the local server's data file keeps it so), where no
        record is stored.

        Raises:
            InvalidInputError: the item's key is not a resource record's.
            ConflictError: a record is stored under that key.
        """
        self.run(_ops.put_stored(self.table_name, item))

    def get(self, record_id: str) -> ResourceActivityRecord | None:
        """The record, or None (absent, or past its TTL)."""
        found = self.get_versioned(record_id)
        return found.record if found else None

    def get_versioned(self, record_id: str) -> VersionedRecord | None:
        """The record with its revision, or None."""
        return self.run(_ops.get(self.table_name, record_id, now_s=self._now_s()))

    def inspect(self, record_id: str) -> VersionedRecord | Unreadable | None:
        """The record as stored, readable or not (see :meth:`ResourceRecordStore.inspect`)."""
        return self.run(_ops.inspect(self.table_name, record_id, now_s=self._now_s()))

    def list(
        self,
        *,
        phase: str | None = None,
        provider: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """Records newest updatedAt first, by phase and/or provider; ``cursor`` pages on."""
        return self.run(self._list(phase, provider, limit, cursor))

    def scan(
        self, *, segments: int = 1, page_size: int = 1000, as_stored: bool = False
    ) -> Iterator[Found]:
        """Every record of the table, a page at a time (see :meth:`ResourceRecordStore.scan`;
        ``as_stored``: those past their TTL too)."""
        starts = _scan_starts(segments, page_size)
        while starts:
            found, starts = self.run(self._scan(starts, segments, page_size, as_stored))
            yield found

    def touch(self, record_id: str) -> VersionedRecord:
        """Heartbeat: refresh updatedAt now."""
        return self.run(self._touch(record_id))

    def record_operation_start(self, record_id: str, kind: str) -> VersionedRecord:
        """Count one more running operation of ``kind``."""
        return self.run(self._operation(record_id, kind, None))

    def record_operation_finish(
        self, record_id: str, kind: str, outcome: str, *, error: str | None = None
    ) -> VersionedRecord:
        """Count one fewer running ``kind``; set lastOperation, and lastFailure if failed."""
        return self.run(self._operation(record_id, kind, (outcome, error)))

    def delete(
        self,
        record_id: str,
        *,
        expected_revision: int | None = None,
        expected_incarnation: str | None = None,
    ) -> bool:
        """Delete (see :meth:`ResourceRecordStore.delete`). True if a record was deleted."""
        return self.run(
            _ops.delete(
                self.table_name,
                record_id,
                expected_revision=expected_revision,
                expected_incarnation=expected_incarnation,
            )
        )
