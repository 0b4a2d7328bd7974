"""The DynamoDB adapters: :class:`DynamoDBAdapter` (async) and :class:`SyncDynamoDBAdapter`.

Both run the same operations from :mod:`._ops`; only the I/O differs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from sandbox_ledger import keys as k
from sandbox_ledger._poll import DEFAULT_POLL, PollSettings
from sandbox_ledger.deployment import ShardCount, store_identity
from sandbox_ledger.dynamodb import _delete, _ops
from sandbox_ledger.dynamodb._items import order_ids
from sandbox_ledger.dynamodb._sequence import Sequencer
from sandbox_ledger.dynamodb._session_locks import AsyncSessionLocks, SessionLocks
from sandbox_ledger.dynamodb.import_items import checked
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.models import EnvironmentRecord, LedgerEntry, require_storable
from sandbox_ledger.sdk.client import AsyncClientOwner, SyncClientOwner
from sandbox_ledger.summary import validate_list_options
from sandbox_ledger.telemetry import Target, instrumented

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Generator, Sequence
    from datetime import timedelta

    from botocore.config import Config

    from sandbox_ledger.changes import Change, ChangeBatch, ChangeFlow
    from sandbox_ledger.deployment import SweepSettings
    from sandbox_ledger.dynamodb._follow import SessionPoller
    from sandbox_ledger.dynamodb._stream import StreamReader
    from sandbox_ledger.follow import Batch, Flow, FollowedEntry, Poll
    from sandbox_ledger.models import (
        CheckpointInfo,
        ListSandboxOptions,
        SandboxDetails,
        SandboxPage,
    )
    from sandbox_ledger.sdk.steps import Op

_SCAN_SEGMENTS = 4
"""``scan_sessions``' default parallelism: Scan segments read at once."""


def _entry(entry: object) -> LedgerEntry:
    return checked(entry)


def _session(entry: object) -> str:
    """Which session's appends ``entry`` queues behind (see :mod:`._session_locks`)."""
    if not isinstance(entry, LedgerEntry):
        return ""  # refused by the append itself
    return f"{len(entry.name)}#{entry.name}#{entry.sandbox_id}"


def _record(record: object) -> EnvironmentRecord:
    if not isinstance(record, EnvironmentRecord):
        raise InvalidInputError(
            "record", f"expected an EnvironmentRecord, got {type(record).__name__}"
        )
    require_storable(record)
    return record


class _Base:
    record_trace_ids: bool | None = None
    """Whether ``append`` records its span's trace and span ids into the entry (True, False),
    or as ``SANDBOX_LEDGER_RECORD_TRACE_IDS`` says (None: :func:`sandbox_ledger.telemetry.
    records_trace_ids`)."""

    consistent_listings: ClassVar[bool] = False
    """Listings read the session indexes, which DynamoDB keeps eventually consistent: a
    session created, closed or deleted is listed as it now is once the indexes have the write
    (DynamoDB: "within a fraction of a second, under normal conditions"). Until then a listing
    may miss it, never more: each session listed is read fresh from the table (its details as
    they now are, filtered again), none twice, none deleted (docs/table-design.md, Listings
    and index lag)."""

    def __init__(
        self, table_name: str, shard_count: int | None, retention: timedelta | None
    ) -> None:
        self.table_name = k.check_table_name(table_name)
        self._retention = k.check_retention(retention)
        self.retention = retention
        self._shards = ShardCount(self.table_name, shard_count, self._retention)
        self._store: str | None = None
        self._sequencer = Sequencer()
        self._locks = SessionLocks()
        self._async_locks = AsyncSessionLocks()

    @property
    def shard_count(self) -> int | None:
        """The shard count in use: the table descriptor's once read (see
        :mod:`sandbox_ledger.deployment`), until then the one given, if any."""
        return self._shards.known

    # Each method returns the operation to run; the twins run it.
    def _resolve_shards(self) -> Op[int]:
        return self._shards.resolve(writing=False)

    def telemetry_target(self) -> Target:
        """``db.system.name``, ``db.collection.name`` and ``db.namespace`` of this store's
        spans (:mod:`sandbox_ledger.telemetry`)."""
        return ("aws.dynamodb", self.table_name, None)

    def _create_table(self, sweep: SweepSettings | None, store_id: str | None) -> Op[bool]:
        shards = self._shards.explicit or k.DEFAULT_SHARD_COUNT
        created, described = yield from _ops.create_table(
            self.table_name, shards, self._retention, sweep, store_id
        )
        self._shards.agree(described)
        return created

    def _append(self, entry: LedgerEntry, claim: str | None = None) -> Op[bool]:
        # A client's first write of any event reads the descriptor (one GetItem per client):
        # its ledger retention must be the table's before it writes a TTL, whatever the
        # event. Only the index keys of created and closed use the shard count. A refused
        # key is refused before reading it.
        k.check_session_key(entry.name, entry.sandbox_id)
        shards = yield from self._shards.resolve()
        ttl = k.ledger_expires_at(entry.ts, self._retention)
        return (
            yield from _ops.append(
                self.table_name,
                entry,
                order_ids.next(),
                shards,
                self._sequencer,
                claim=claim,
                ttl=ttl,
            )
        )

    def _append_once(self, entry: LedgerEntry, occurrence: int) -> Op[bool]:
        # Here: a worker that only appends does not load the import/export module.
        from sandbox_ledger.transfer import content_digest

        occurrence = k.check_occurrence(occurrence)
        claim = k.claim_sk(content_digest(_entry(entry)), occurrence)
        return self._append(entry, claim)

    def _append_once_many(
        self, items: Sequence[tuple[LedgerEntry, int]], digests: Sequence[str] | None
    ) -> Op[list[bool | InvalidInputError]]:
        from sandbox_ledger.dynamodb import _bulk  # an import's: a worker never loads it

        shards = yield from self._shards.resolve()
        return (
            yield from _bulk.append_once_many(
                self.table_name,
                items,
                shards,
                self._retention,
                self._sequencer,
                check=_entry,
                digests=digests,
            )
        )

    def _read_stored_sessions(
        self, sessions: Sequence[tuple[str, str]]
    ) -> Op[list[list[LedgerEntry]]]:
        from sandbox_ledger.dynamodb import _bulk

        return _bulk.read_each_stored(self.table_name, sessions, self._sequencer)

    def _scan(self, name: str | None, segments: int | None) -> Op[list[tuple[str, str]]]:
        if name is not None:
            k.by_name_pk(name)
        segments = k.check_segments(segments) or _SCAN_SEGMENTS
        return _ops.scan_sessions(self.table_name, name=name, segments=segments)

    def _identity(self) -> Op[str]:
        """What cursors and positions are bound to (read with the descriptor, once)."""
        if self._store is None:
            described = yield from self._shards.described()
            self._store = yield from store_identity(self.table_name, described)
        return self._store

    follow_poll: PollSettings = DEFAULT_POLL
    """How often ``follow`` polls while idle (see :class:`~sandbox_ledger.follow.PollSettings`)."""

    def _follower(
        self, store: str, name: str, sandbox_id: str, after: str | None, until_closed: bool
    ) -> tuple[Flow, SessionPoller]:
        """The follow loop of one follower and its poller (see :mod:`._follow`)."""
        # Here: a worker that only appends does not load the follow loop.
        from sandbox_ledger.dynamodb import _follow
        from sandbox_ledger.follow import Position, start

        k.check_session_key(name, sandbox_id)
        poll = self.follow_poll
        position = Position(store, name, sandbox_id)
        flow = start(position, after, _follow.check_state, until_closed=until_closed, settings=poll)
        poller = _follow.SessionPoller(self.table_name, name, sandbox_id, poll)
        return flow, poller

    changes_poll: PollSettings = PollSettings(first=0.25, longest=1.0)
    """How often ``changes`` reads the stream while idle: a ``GetRecords`` per open shard per
    poll (see :mod:`._stream` and docs/live.md, what an idle minute costs)."""

    def _reader(self) -> Op[tuple[str, str]]:
        """What a ``changes`` reader is bound to: the store's identity and its stream."""
        from sandbox_ledger.dynamodb import _stream  # a change reader's: a worker never loads it

        store = yield from self._identity()
        return store, (yield from _stream.latest_stream(self.table_name))

    def _changes(
        self, bound: tuple[str, str], after: str | None
    ) -> tuple[ChangeFlow, StreamReader]:
        """The feed loop of one ``changes`` reader and its stream reader (see
        :mod:`._stream`), from what :meth:`_reader` bound it to."""
        from sandbox_ledger.changes import start_changes
        from sandbox_ledger.dynamodb import _stream

        store, arn = bound
        flow = start_changes(store, after, _stream.check_state, settings=self.changes_poll)
        return flow, _stream.StreamReader(arn)

    def _list(self, name: str | None, opts: Any) -> Op[list[SandboxDetails]]:
        page = yield from self._page(name, opts)
        return page.sessions

    def _page(self, name: str | None, opts: Any) -> Op[SandboxPage]:
        if name is not None:
            k.by_name_pk(name)
        checked = validate_list_options(opts)
        # Listing one name reads its own index partition: no shard count needed.
        shards = 0 if name is not None else (yield from self._shards.resolve(writing=False))
        # A listing that reads or makes a cursor needs the table's identity: read with the
        # descriptor, once per client (a whole listing of one name needs neither).
        paged = checked is not None and (checked.cursor is not None or bool(checked.limit))
        store = (yield from self._identity()) if paged else None
        return (
            yield from _ops.list_details(
                self.table_name, name=name, opts=checked, shard_count=shards, store=store
            )
        )


@instrumented()
class DynamoDBAdapter(_Base, AsyncClientOwner):
    """The ledger contract on one DynamoDB table, with aioboto3.

    Args:
        table_name: the table (``create_table()`` or the CDK stack makes it).
        endpoint_url: a local endpoint (moto); default from the environment.
        region_name: AWS region; default from the environment.
        session: an ``aioboto3.Session`` (credentials, profile).
        config: a ``botocore.config.Config`` merged over the defaults (standard retries).
        shard_count: shards of the list-all index key. Default: the table's, from its
            deployment descriptor (read once, on the first append of a created or closed
            event or the first list of every name; see :mod:`sandbox_ledger.deployment`);
            a value given must agree with it (``DeploymentMismatchError`` names both). On a
            table without a descriptor, the value given (default 4) is used and a warning
            logged; ``create_table()`` records it.
        retention: how long ledger items are kept (a positive ``timedelta``); None (the
            default) keeps them forever. Every item of an entry gets the TTL attribute from
            the entry's own ``ts`` plus the retention; a session's summary from the latest entry
            that changed it. Reads hide expired items; environment records are kept forever.
            It must agree with the table's descriptor (``create_table()`` records it, the CDK
            stack's ``ledger_retention_days``): ``DeploymentMismatchError`` names both values,
            checked when the descriptor is read. See docs/table-design.md, Ledger retention.
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
        retention: timedelta | None = None,
    ) -> None:
        super().__init__(table_name, shard_count, retention)
        self._open(
            endpoint_url=endpoint_url, region_name=region_name, session=session, config=config
        )

    async def create_table(
        self, *, sweep: SweepSettings | None = None, store_id: str | None = None
    ) -> bool:
        """Create the table as the CDK stack provisions it, if absent; wait until ACTIVE.
        With ``sweep``, its descriptor also records the resource sweep's bus and windows (the
        settings it already records are kept), so ``resources sweep`` needs no flags.
        ``store_id`` is the identity paging cursors and ``changes()`` positions are bound to
        (default: a fresh one); a table made again from saved data (``sandbox-ledger local
        --data``) passes the one it had, so the cursors it handed out stay good.

        Returns True if this call created it.
        """
        return await self.run(self._create_table(sweep, store_id))

    async def table_shard_count(self) -> int:
        """The table's shard count: its descriptor's, read once per client (see
        ``shard_count`` above). Raises DeploymentMismatchError if the given one disagrees."""
        return await self.run(self._resolve_shards())

    async def append(self, entry: LedgerEntry) -> None:
        """Persist one entry exactly once (one round trip; more only for entries over 350 KB,
        and a Query first for a session this client has not written yet)."""
        entry = _entry(entry)
        async with self._async_locks.held(_session(entry)):
            await self.run(self._append(entry))

    async def append_once(self, entry: LedgerEntry, occurrence: int) -> bool:
        """Append the ``occurrence``-th copy (1-based) of this content in its session unless
        a previous ``append_once`` stored it: the import identity (see
        :mod:`sandbox_ledger.transfer`). True if this call stored it. One transaction."""
        async with self._async_locks.held(_session(entry)):
            return await self.run(self._append_once(entry, occurrence))

    async def read_stored_sessions(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]:
        """``read_stored`` of each session, in order (one query each)."""
        return await self.run(self._read_stored_sessions(sessions))

    async def append_once_many(
        self,
        items: Sequence[tuple[LedgerEntry, int]],
        *,
        digests: Sequence[str] | None = None,
    ) -> list[bool | InvalidInputError]:
        """``append_once`` of each item in order (a session's entries together in one
        transaction where they fit, see :mod:`._bulk`), a refused item's error as its
        outcome; ``digests``: the items' content digests, if the caller has them."""
        return await self.run(self._append_once_many(items, digests))

    async def read_in_append_order(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry of the session in the order it was appended (what an export replays)."""
        return await self.run(_ops.read_in_append_order(self.table_name, name, sandbox_id))

    async def read_sessions_in_append_order(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]:
        """``read_in_append_order`` of each session, in order (one query each)."""
        return await self.run(_ops.read_each_in_append_order(self.table_name, sessions))

    async def read_sessions_marked(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[tuple[LedgerEntry, tuple[int, str] | None, str]]]:
        """:meth:`read_sessions_in_append_order`, each entry with its sequence mark's number
        and incarnation (None: stored without one) and its order id (the one its writer
        chose, in its head's key), as of the same read: what a local server's save names a
        session's sequence and its entries' keys by (see :mod:`._sequence`)."""
        return await self.run(_ops.read_each_marked(self.table_name, sessions))

    async def follow(
        self, name: str, sandbox_id: str, *, after: str | None = None, until_closed: bool = True
    ) -> AsyncGenerator[FollowedEntry, None]:
        """The session's entries in ``read_all`` order as they are stored whole: one Query on
        its partition per poll, backing off while idle (see :mod:`._follow` and
        docs/live.md for what is held back and what an idle minute costs)."""
        from sandbox_ledger.follow import drive_async  # here, as in _follower

        store = await self.run(self._identity())
        flow, poller = self._follower(store, name, sandbox_id, after, until_closed)

        async def step(request: Poll) -> Batch:
            return await self.run(poller.poll(request))

        traced = (self, "follow", {"sandbox.name": name, "sandbox.id": sandbox_id})
        async for followed in drive_async(flow, step, traced=traced):
            yield followed

    async def changes(self, *, after: str | None = None) -> AsyncGenerator[Change, None]:
        """The fleet's changes from the table's stream, at least once (see
        :mod:`._stream`, :mod:`._changes` and docs/live.md)."""
        from sandbox_ledger.follow import drive_async

        flow, reader = self._changes(await self.run(self._reader()), after)

        async def step(request: Poll) -> ChangeBatch:
            return await self.run_streams(reader.poll(request))

        async for change in drive_async(flow, step, traced=(self, "changes", {})):
            yield change

    async def ledger_retention(self) -> int | None:
        """The ledger retention this client writes with (seconds; None: keep forever; a
        table whose descriptor says otherwise refuses its first write): what an import
        checks entries against, so it never writes one already expired."""
        return self._retention

    async def read_stored(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry still stored, those past their TTL included until DynamoDB deletes
        them (what an import reconciles a file against, so a re-import writes nothing
        twice)."""
        return await self.run(_ops.read_stored(self.table_name, name, sandbox_id))

    async def scan_sessions(
        self, name: str | None = None, *, segments: int | None = None
    ) -> list[tuple[str, str]]:
        """Every (name, sandboxId) with at least one entry, listed or not, sorted: a parallel
        Scan of the whole table in ``segments`` segments (default 4; see docs/table-design.md
        for its cost); for exports."""
        return await self.run(self._scan(name, segments))

    async def read_all(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry of the session, ascending ts, ties in append order."""
        return await self.run(_ops.read_all(self.table_name, name, sandbox_id))

    async def last_checkpoint(self, name: str, sandbox_id: str) -> LedgerEntry | None:
        """The last checkpoint entry (two requests), or None."""
        return await self.run(_ops.last_checkpoint(self.table_name, name, sandbox_id))

    async def list_sandbox_details(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of one name, newest first (one query and one batch get per page)."""
        return await self.run(self._list(name, opts))

    async def list_all_sandbox_details(
        self, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of every name, newest first (one query per shard and one batch get)."""
        return await self.run(self._list(None, opts))

    async def list_sandbox_page(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> SandboxPage:
        """One page of sessions of one name and the cursor of the next."""
        return await self.run(self._page(name, opts))

    async def list_all_sandbox_page(self, opts: ListSandboxOptions | None = None) -> SandboxPage:
        """One page of sessions of every name and the cursor of the next."""
        return await self.run(self._page(None, opts))

    async def get_sandbox_details(self, name: str, sandbox_id: str) -> SandboxDetails | None:
        """One session's summary (one strongly consistent read), or None."""
        return await self.run(_ops.get_sandbox_details(self.table_name, name, sandbox_id))

    async def delete_sandbox(self, name: str, sandbox_id: str) -> None:
        """Delete the session's summary, entries and checkpoints; appends racing it land
        either before (deleted) or after (a new session counting exactly its own entries)."""
        pk = k.session_pk(name, sandbox_id)
        await self.run(
            _delete.delete_session(self.table_name, pk, self._retention, self._resolve_shards)
        )
        self._sequencer.forget(pk)  # a session begun again starts a new sequence

    async def list_checkpoints(self, name: str, sandbox_id: str) -> list[CheckpointInfo]:
        """Checkpoints in creation order, from their markers (entries are not read)."""
        return await self.run(_ops.list_checkpoints(self.table_name, name, sandbox_id))

    async def get_environment(self, name: str) -> EnvironmentRecord | None:
        """The environment record, or None."""
        return await self.run(_ops.get_environment(self.table_name, name))

    async def save_environment(self, record: EnvironmentRecord) -> None:
        """Create or replace the record."""
        await self.run(_ops.save_environment(self.table_name, _record(record), order_ids.next()))

    async def delete_environment(self, name: str) -> None:
        """Remove the record if present."""
        await self.run(_ops.delete_environment(self.table_name, name))

    async def list_environments(self) -> list[EnvironmentRecord]:
        """Every environment record, newest builtAt first, ties in first-saved order."""
        return await self.run(_ops.list_environments(self.table_name))


@instrumented()
class SyncDynamoDBAdapter(_Base, SyncClientOwner):
    """:class:`DynamoDBAdapter` without await, on boto3; safe to share across threads."""

    def __init__(
        self,
        table_name: str,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        session: Any | None = None,
        config: Config | None = None,
        shard_count: int | None = None,
        retention: timedelta | None = None,
    ) -> None:
        super().__init__(table_name, shard_count, retention)
        self._open(
            endpoint_url=endpoint_url, region_name=region_name, session=session, config=config
        )

    def create_table(
        self, *, sweep: SweepSettings | None = None, store_id: str | None = None
    ) -> bool:
        """Create the table as the CDK stack provisions it, if absent; wait until ACTIVE
        (``sweep``, ``store_id``: see DynamoDBAdapter)."""
        return self.run(self._create_table(sweep, store_id))

    def table_shard_count(self) -> int:
        """The table's shard count, read once per client (see DynamoDBAdapter)."""
        return self.run(self._resolve_shards())

    def append(self, entry: LedgerEntry) -> None:
        """Persist one entry exactly once."""
        entry = _entry(entry)
        with self._locks.held(_session(entry)):
            self.run(self._append(entry))

    def append_once(self, entry: LedgerEntry, occurrence: int) -> bool:
        """Append one identified copy unless stored (see DynamoDBAdapter.append_once)."""
        with self._locks.held(_session(entry)):
            return self.run(self._append_once(entry, occurrence))

    def read_stored_sessions(self, sessions: Sequence[tuple[str, str]]) -> list[list[LedgerEntry]]:
        """``read_stored`` of each session (see DynamoDBAdapter.read_stored_sessions)."""
        return self.run(self._read_stored_sessions(sessions))

    def append_once_many(
        self,
        items: Sequence[tuple[LedgerEntry, int]],
        *,
        digests: Sequence[str] | None = None,
    ) -> list[bool | InvalidInputError]:
        """``append_once`` of each item (see DynamoDBAdapter.append_once_many)."""
        return self.run(self._append_once_many(items, digests))

    def read_in_append_order(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry of the session in the order it was appended."""
        return self.run(_ops.read_in_append_order(self.table_name, name, sandbox_id))

    def read_sessions_in_append_order(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[LedgerEntry]]:
        """``read_in_append_order`` of each session (one query each)."""
        return self.run(_ops.read_each_in_append_order(self.table_name, sessions))

    def read_sessions_marked(
        self, sessions: Sequence[tuple[str, str]]
    ) -> list[list[tuple[LedgerEntry, tuple[int, str] | None, str]]]:
        """:meth:`DynamoDBAdapter.read_sessions_marked`."""
        return self.run(_ops.read_each_marked(self.table_name, sessions))

    def follow(
        self, name: str, sandbox_id: str, *, after: str | None = None, until_closed: bool = True
    ) -> Generator[FollowedEntry, None, None]:
        """:meth:`DynamoDBAdapter.follow` as a plain iterator."""
        from sandbox_ledger.follow import drive  # here, as in _follower

        store = self.run(self._identity())
        flow, poller = self._follower(store, name, sandbox_id, after, until_closed)
        traced = (self, "follow", {"sandbox.name": name, "sandbox.id": sandbox_id})
        return drive(flow, lambda request: self.run(poller.poll(request)), traced=traced)

    def changes(self, *, after: str | None = None) -> Generator[Change, None, None]:
        """:meth:`DynamoDBAdapter.changes` as a plain iterator."""
        from sandbox_ledger.follow import drive

        flow, reader = self._changes(self.run(self._reader()), after)
        return drive(
            flow,
            lambda request: self.run_streams(reader.poll(request)),
            traced=(self, "changes", {}),
        )

    def ledger_retention(self) -> int | None:
        """The ledger retention this client writes with (see DynamoDBAdapter)."""
        return self._retention

    def read_stored(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry still stored, expired ones included (see DynamoDBAdapter.read_stored)."""
        return self.run(_ops.read_stored(self.table_name, name, sandbox_id))

    def scan_sessions(
        self, name: str | None = None, *, segments: int | None = None
    ) -> list[tuple[str, str]]:
        """Every (name, sandboxId) with at least one entry (a parallel Scan; for exports)."""
        return self.run(self._scan(name, segments))

    def read_all(self, name: str, sandbox_id: str) -> list[LedgerEntry]:
        """Every entry of the session, ascending ts, ties in append order."""
        return self.run(_ops.read_all(self.table_name, name, sandbox_id))

    def last_checkpoint(self, name: str, sandbox_id: str) -> LedgerEntry | None:
        """The last checkpoint entry, or None."""
        return self.run(_ops.last_checkpoint(self.table_name, name, sandbox_id))

    def list_sandbox_details(
        self, name: str, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of one name, newest first."""
        return self.run(self._list(name, opts))

    def list_all_sandbox_details(
        self, opts: ListSandboxOptions | None = None
    ) -> list[SandboxDetails]:
        """Sessions of every name, newest first."""
        return self.run(self._list(None, opts))

    def list_sandbox_page(self, name: str, opts: ListSandboxOptions | None = None) -> SandboxPage:
        """One page of sessions of one name and the cursor of the next."""
        return self.run(self._page(name, opts))

    def list_all_sandbox_page(self, opts: ListSandboxOptions | None = None) -> SandboxPage:
        """One page of sessions of every name and the cursor of the next."""
        return self.run(self._page(None, opts))

    def get_sandbox_details(self, name: str, sandbox_id: str) -> SandboxDetails | None:
        """One session's summary, or None."""
        return self.run(_ops.get_sandbox_details(self.table_name, name, sandbox_id))

    def delete_sandbox(self, name: str, sandbox_id: str) -> None:
        """Delete the session's summary, entries and checkpoints."""
        pk = k.session_pk(name, sandbox_id)
        self.run(_delete.delete_session(self.table_name, pk, self._retention, self._resolve_shards))
        self._sequencer.forget(pk)  # a session begun again starts a new sequence

    def list_checkpoints(self, name: str, sandbox_id: str) -> list[CheckpointInfo]:
        """Checkpoints in creation order."""
        return self.run(_ops.list_checkpoints(self.table_name, name, sandbox_id))

    def get_environment(self, name: str) -> EnvironmentRecord | None:
        """The environment record, or None."""
        return self.run(_ops.get_environment(self.table_name, name))

    def save_environment(self, record: EnvironmentRecord) -> None:
        """Create or replace the record."""
        self.run(_ops.save_environment(self.table_name, _record(record), order_ids.next()))

    def delete_environment(self, name: str) -> None:
        """Remove the record if present."""
        self.run(_ops.delete_environment(self.table_name, name))

    def list_environments(self) -> list[EnvironmentRecord]:
        """Every environment record, newest builtAt first."""
        return self.run(_ops.list_environments(self.table_name))
