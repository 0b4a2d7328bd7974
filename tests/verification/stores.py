"""Stores under test, and the fault switchboard attached to their botocore clients.

A :class:`Subject` opens a fresh, empty store and hands out several independent clients of it
(plus one ``checker`` client that never sees injected faults, for observations). Adding an
adapter to the model-based runs is one fixture that returns a Subject (see
``test_ledger_model.py``).
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from botocore.config import Config
from botocore.exceptions import ConnectionClosedError

from dynamodb.faults import FailShare, PartialBatches, ResendAfterSuccess
from sandbox_ledger import MemoryAdapter
from sandbox_ledger import keys as k
from sandbox_ledger.awstest.runtable import RunTable

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path


class AsyncOverThreads:
    """A sync adapter seen through the async contract: each call runs in a worker thread."""

    def __init__(self, sync: Any) -> None:
        self._sync = sync

    @property
    def consistent_listings(self) -> bool:
        return bool(getattr(self._sync, "consistent_listings", True))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._sync, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)

        return call


@dataclass
class Store:
    """A store opened once per test run and emptied between examples: ``clients`` (faults may be
    injected into them) and ``checker`` (never faulty)."""

    clients: list[Any]
    checker: Any
    botocore_clients: list[Any] = field(default_factory=list)
    aio: bool = False
    reset: Callable[[], Awaitable[None]] | None = None
    dispose: Callable[[], Awaitable[None]] | None = None
    settle: Callable[[], Awaitable[None]] | None = None
    """Returns once the store's listings show every write made so far (a store whose
    listings are eventually consistent: its server's indexes have caught up)."""


class Subject(Protocol):
    """Opens a store of one adapter kind."""

    label: str

    async def open(self, clients: int) -> Store: ...


class MemorySubject:
    """The reference adapter itself (one process: every client shares one instance)."""

    label = "memory"

    async def open(self, clients: int) -> Store:
        store = Store(clients=[], checker=None)

        async def reset() -> None:
            adapter = MemoryAdapter()
            store.clients, store.checker = [adapter] * clients, adapter

        store.reset = reset
        await reset()
        return store


class FreshPerExample:
    """Any adapter whose stores are cheap to make: ``make(i, example)`` builds client ``i`` of
    a new, empty store for each example (the last one built is the checker); the previous
    example's clients are closed first. The SQL adapters plug in this way."""

    def __init__(self, label: str, make: Callable[[int, int], Any]) -> None:
        self.label, self._make = label, make

    async def open(self, clients: int) -> Store:
        store = Store(clients=[], checker=None)
        examples = 0

        async def close_all() -> None:
            for adapter in {id(a): a for a in [*store.clients, store.checker] if a}.values():
                await adapter.close()

        async def reset() -> None:
            nonlocal examples
            await close_all()
            examples += 1
            made = [self._make(i, examples) for i in range(clients + 1)]
            store.clients, store.checker = made[:-1], made[-1]

        store.reset, store.dispose = reset, close_all
        await reset()
        return store


# Standard retries as the library configures them, fewer attempts so that an injected fault
# sometimes exhausts them: an exhausted call is checked too (its effect is "in doubt").
_FAULTY_CONFIG = Config(retries={"mode": "standard", "max_attempts": 6})

# moto keeps every stream record of a table and copies them on each transaction: a table is
# replaced after this many examples so that a long run does not slow down as it goes.
_EXAMPLES_PER_TABLE = 10


class DynamoDBSubject:
    """One table on the session's moto server, emptied between examples and made anew every
    ``recreate_every`` examples; async or sync twin."""

    def __init__(
        self,
        endpoint: str,
        *,
        sync: bool,
        recreate_every: int = _EXAMPLES_PER_TABLE,
        server: Any = None,
    ) -> None:
        self.endpoint, self.sync, self.recreate_every = endpoint, sync, recreate_every
        self.server = server
        """The session's ``LocalDynamoDB`` (None: a shared server, lenient): its indexes
        lag, and a check of a listing's settled state waits for them."""
        self.label = "dynamodb-sync" if sync else "dynamodb-async"

    async def open(self, clients: int) -> Store:
        from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter

        one_table = os.environ.get("SANDBOX_LEDGER_TEST_TABLE")  # make test-aws
        table = one_table or f"verify-{uuid.uuid4().hex[:12]}"
        maker = SyncDynamoDBAdapter(table, endpoint_url=self.endpoint)
        run = RunTable(maker.client(), table) if one_table else None
        if run is not None:
            await asyncio.to_thread(run.reset, new_stream=True)
        else:
            await asyncio.to_thread(maker.create_table)
        adapters: list[Any] = []
        raw: list[Any] = []
        for i in range(clients + 1):
            config = None if i == clients else _FAULTY_CONFIG
            if self.sync:
                sync = SyncDynamoDBAdapter(table, endpoint_url=self.endpoint, config=config)
                raw.append(sync.client())
                adapters.append(AsyncOverThreads(sync))
            else:
                adapter = DynamoDBAdapter(table, endpoint_url=self.endpoint, config=config)
                raw.append(await adapter.client())
                adapters.append(adapter)
        resets = 0

        async def reset() -> None:
            nonlocal resets
            resets += 1
            if run is not None:  # the run's one table, made as a fresh one
                await asyncio.to_thread(run.reset, new_stream=resets % self.recreate_every == 0)
            elif resets % self.recreate_every == 0:
                await asyncio.to_thread(_recreate, maker)
            else:
                await asyncio.to_thread(_empty, maker.client(), table)

        async def dispose() -> None:
            for adapter in adapters:
                await adapter.close()
            if run is None:
                await asyncio.to_thread(maker.client().delete_table, TableName=table)
            maker.close()

        async def settle() -> None:
            if run is not None:
                await asyncio.to_thread(run.wait_for_indexes)
            elif self.server is not None:
                await asyncio.to_thread(self.server.wait_for_indexes, table)

        return Store(
            clients=adapters[:-1],
            checker=adapters[-1],
            botocore_clients=raw[:-1],
            aio=not self.sync,
            reset=reset,
            dispose=dispose,
            settle=settle,
        )


def _empty(client: Any, table: str) -> None:
    # The deployment descriptor describes the table, not its data: it stays.
    RunTable(client, table).empty(keep=frozenset({k.DESCRIPTOR_PK}))


def _recreate(maker: Any) -> None:
    client = maker.client()
    client.delete_table(TableName=maker.table_name)
    client.get_waiter("table_not_exists").wait(
        TableName=maker.table_name, WaiterConfig={"Delay": 0.05}
    )
    maker.create_table()


class ClientDied(Exception):
    """Raised by the crash hook: the client process stopped between two SDK calls."""


# Hypothesis favours the first choices: the faults that matter most come first, "none" last.
FAULT_KINDS = (
    "lost-response",
    "transaction-conflict",
    "throttle",
    "server-error",
    "connection-reset",
    "partial-batch",
    "none",
)


class FaultBoard:
    """Every fault the runs inject, attached once to each client, switched by the machine.

    All of them go through botocore's event hooks: the adapters run unchanged.
    """

    def __init__(self, clients: list[Any], *, aio: bool) -> None:
        self.kind = "none"
        self.rng = random.Random(0)
        self.share = 0.0
        self.injected: Counter[str] = Counter()
        self._crash_at: int | None = None
        self._calls = 0
        self._lock = threading.Lock()
        self._errors = {
            "throttle": FailShare(0, "ProvisionedThroughputExceededException", aio=aio),
            "server-error": FailShare(0, "InternalServerError", status=500, aio=aio),
            "transaction-conflict": FailShare(
                0,
                "TransactionCanceledException",
                operations={"TransactWriteItems"},
                aio=aio,
                CancellationReasons=[{"Code": "TransactionConflict"}],
            ),
        }
        self._resend = ResendAfterSuccess(
            0, {"PutItem", "TransactWriteItems", "BatchWriteItem", "DeleteItem", "UpdateItem"}
        )
        self._partial = PartialBatches(1.0)
        for client in clients:
            events = client.meta.events
            events.register_first("before-send.dynamodb", self._before_send)
            events.register("needs-retry.dynamodb", self._resend)
            events.register("before-call.dynamodb", self._before_call)
            for op in ("BatchWriteItem", "BatchGetItem"):
                events.register(f"before-parameter-build.dynamodb.{op}", self._partial_before)
                events.register(f"after-call.dynamodb.{op}", self._partial._after)

    def reset(self) -> None:
        """No faults, counters at zero: the start of an example."""
        self.switch("none", 0.0, 0)
        self._crash_at = None
        self.injected.clear()
        self._resend.resent = 0

    def switch(self, kind: str, share: float, seed: int) -> None:
        """Inject ``kind`` into a ``share`` of the matching calls from now on."""
        self.kind, self.share = kind, share
        self.rng = random.Random(seed)
        for name, fault in self._errors.items():
            fault.share = share if name == kind else 0.0
            fault.rng = random.Random(seed)
        self._resend.share = share if kind == "lost-response" else 0.0
        self._resend.rng = random.Random(seed)
        self._partial.rng = random.Random(seed)

    def crash_on_call(self, k: int) -> None:
        """The k-th SDK call from now raises :class:`ClientDied` before it is sent."""
        self._crash_at, self._calls = k, 0

    def disarm(self) -> None:
        """Stop an armed crash that has not fired."""
        self._crash_at = None

    def _before_call(self, model: Any, **_: Any) -> None:
        with self._lock:
            if self._crash_at is None:
                return
            self._calls += 1
            if self._calls < self._crash_at:
                return
            self._crash_at = None
        self.injected["client-died"] += 1
        raise ClientDied(f"client died before {model.name}")

    def _before_send(self, request: Any, **kwargs: Any) -> Any:
        if self.kind == "connection-reset":
            with self._lock:
                hit = self.rng.random() < self.share
            if hit:
                self.injected["connection-reset"] += 1
                raise ConnectionClosedError(endpoint_url=str(request.url))
            return None
        fault = self._errors.get(self.kind)
        if fault is None:
            return None
        response = fault(request, **kwargs)
        if response is not None:
            self.injected[self.kind] += 1
        return response

    def _partial_before(self, **kwargs: Any) -> None:
        if self.kind == "partial-batch":
            with self._lock:
                hit = self.rng.random() < self.share
            if hit:
                self.injected["partial-batch"] += 1
                self._partial._before(**kwargs)

    def counts(self) -> dict[str, int]:
        """How often each fault was injected (resent writes included)."""
        out = dict(self.injected)
        if self._resend.resent:
            out["lost-response"] = self._resend.resent
        return out


def drive_seeds(
    subject: Subject,
    run: Callable[[Store, FaultBoard | None, int], Awaitable[None]],
    seeds: list[int],
    profile: str,
    *,
    faults: bool,
) -> None:
    """Open ``subject`` with three clients and a checker, and ``run`` each seed on it (the
    store emptied between seeds; with ``faults``, a FaultBoard on the clients); a failure
    names its seed."""

    async def main() -> None:
        store = await subject.open(3)
        board = FaultBoard(store.botocore_clients, aio=store.aio) if faults else None
        try:
            for one in seeds:
                if store.reset is not None:
                    await store.reset()
                if board is not None:
                    board.reset()
                try:
                    await run(store, board, one)
                except AssertionError as exc:
                    exc.add_note(f"seed {one} (SANDBOX_LEDGER_VERIFY={profile})")
                    raise
        finally:
            if store.dispose is not None:
                await store.dispose()

    asyncio.run(main())


def sqlite_subject(folder: Path) -> FreshPerExample:
    """A fresh SQLite database per example, in ``folder``."""
    from sandbox_ledger.sqlite import SQLiteAdapter

    return FreshPerExample("sqlite", lambda i, ex: SQLiteAdapter(folder / f"l-{ex}.db"))


def postgres_subject(dsn: str, prefix: str) -> FreshPerExample:
    """A fresh PostgreSQL schema per example (``<prefix>_<run>_<example>``)."""
    from sandbox_ledger.postgres import PostgresAdapter

    run = uuid.uuid4().hex[:8]
    return FreshPerExample(
        "postgres",
        lambda i, ex: PostgresAdapter(dsn, schema=f"{prefix}_{run}_{ex}", max_size=3),
    )
