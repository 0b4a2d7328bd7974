"""The fleet's feed beside concurrent writers and injected faults: what ``changes()`` hands
out (repeats dropped by id) equals the model's own changes, for a reader running all along
and for one killed and resumed from its last position again and again.

Each run draws its schedule from a seed (profiles.py): rounds of 2-6 operations at once from
three clients: sessions created, closed and deleted, and on DynamoDB one fault kind per
round injected into those clients. An operation that fails is in doubt, and the checker
client (no faults) settles it before the model counts it: a create or close by reading the
session, a delete by whether its summary is gone. A session is deleted only once settled.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox_ledger import LedgerEntry, LedgerError, LedgerEvent
from sandbox_ledger.follow import PollSettings

from .profiles import PROFILE, RUN_SEEDS
from .stores import (
    FAULT_KINDS,
    ClientDied,
    DynamoDBSubject,
    FaultBoard,
    MemorySubject,
    Store,
    Subject,
    drive_seeds,
    postgres_subject,
    sqlite_subject,
)

FAST = PollSettings(first=0.01, longest=0.05)
ROUNDS = 8 if PROFILE == "fast" else 30
Seen = dict[str, tuple[str, str | None]]  # id -> (kind, sandbox id)


def _entry(sandbox_id: str, event: str) -> LedgerEntry:
    ts = time.time_ns() // 1_000_000
    return LedgerEntry(ts=ts, name="cm", sandbox_id=sandbox_id, step_index=-1, event=event)


def _keep(seen: Seen, change: Any, prefix: str) -> bool:
    """Record a change of this run (a repeat must be identical); True once the end came."""
    if not (change.sandbox_id or "").startswith(prefix):
        return False  # another run's (an emptied table's deletes)
    what = (change.kind.value, change.sandbox_id)
    assert seen.setdefault(change.id, what) == what, "a repeat differs"
    return what == ("session.created", f"{prefix}end")


async def _read_all_along(checker: Any, prefix: str, seen: Seen, order: list[str]) -> None:
    async for change in checker.changes():
        new = change.id not in seen
        ended = _keep(seen, change, prefix)
        if new and change.id in seen:  # a first sight of a change of this run
            order.append(change.id)
        if ended:
            return


async def _killed_and_resumed(checker: Any, prefix: str, seen: Seen, rng: random.Random) -> None:
    after = None
    while True:
        stop_after, got = rng.randint(1, 5), 0
        stream = checker.changes(after=after)
        try:
            async for change in stream:
                if _keep(seen, change, prefix):
                    return
                after, got = change.position, got + 1
                if got >= stop_after:
                    break
        finally:
            await stream.aclose()


class _Model:
    """Each session's changes as the store must report them, settled by the checker."""

    def __init__(self, checker: Any) -> None:
        self.checker = checker
        self.kinds: dict[str, list[str]] = {}

    async def settle(self, sandbox_id: str) -> None:
        events = [e.event for e in await self.checker.read_all("cm", sandbox_id)]
        # Each entry of the event is a change (a session may be closed more than once).
        self.kinds[sandbox_id] = ["session.created"] * events.count(LedgerEvent.SandboxCreated) + [
            "session.closed"
        ] * events.count(LedgerEvent.SandboxClosed)

    async def settle_delete(self, sandbox_id: str) -> None:
        if self.kinds[sandbox_id] and await self.checker.get_sandbox_details("cm", sandbox_id):
            return  # the delete did not get as far as the summary
        if self.kinds[sandbox_id]:
            self.kinds[sandbox_id].append("session.deleted")


async def _run(store: Store, board: FaultBoard | None, seed: int) -> None:
    rng, checker, prefix = random.Random(seed), store.checker, f"c{seed}-"
    checker.follow_poll = checker.changes_poll = FAST
    model, seen_all, order, seen_resumed = _Model(checker), {}, [], {}
    readers = [
        asyncio.create_task(_read_all_along(checker, prefix, seen_all, order)),
        asyncio.create_task(_killed_and_resumed(checker, prefix, seen_resumed, rng)),
    ]
    created: list[str] = []
    for round_ in range(ROUNDS):
        if board is not None:
            board.switch(rng.choice(FAULT_KINDS), 0.25, seed + round_)
        ops, touched, deleted = [], [], []
        for n in range(rng.randint(2, 6)):
            client = store.clients[rng.randrange(len(store.clients))]
            choice = rng.random()
            # A session touched in this round is not deleted in it, nor touched once deleted:
            # an append racing a delete may land in a new session of the same key.
            free = [c for c in created if c not in touched]
            if choice < 0.5 or not free:
                sandbox_id = f"{prefix}{round_}-{n}"
                ops.append(client.append(_entry(sandbox_id, LedgerEvent.SandboxCreated)))
                touched.append(sandbox_id)
            elif choice < 0.8:
                sandbox_id = rng.choice(free)
                ops.append(client.append(_entry(sandbox_id, LedgerEvent.SandboxClosed)))
                touched.append(sandbox_id)
            else:
                sandbox_id = rng.choice(free)
                created.remove(sandbox_id)
                ops.append(client.delete_sandbox("cm", sandbox_id))
                deleted.append(sandbox_id)
                touched.append(sandbox_id)
        for outcome in await asyncio.gather(*ops, return_exceptions=True):
            assert outcome is None or isinstance(outcome, LedgerError | ClientDied), outcome
        if board is not None:
            board.switch("none", 0.0, 0)
        for sandbox_id in dict.fromkeys(touched):
            if sandbox_id not in deleted:
                await model.settle(sandbox_id)
                if sandbox_id not in created:
                    created.append(sandbox_id)
        for sandbox_id in deleted:
            await model.settle_delete(sandbox_id)
    with contextlib.suppress(LedgerError):
        await checker.append(_entry(f"{prefix}end", LedgerEvent.SandboxCreated))
    await asyncio.wait_for(asyncio.gather(*readers), 120)

    expected = sorted(
        (kind, sandbox_id) for sandbox_id, kinds in model.kinds.items() for kind in kinds
    )
    expected.append(("session.created", f"{prefix}end"))
    for seen in (seen_all, seen_resumed):
        assert sorted(seen.values()) == sorted(expected)
    # Each session's changes in the order they happened.
    for sandbox_id, kinds in model.kinds.items():
        mine = [seen_all[i][0] for i in order if seen_all[i][1] == sandbox_id]
        assert mine == kinds, sandbox_id


def _drive(subject: Subject, *, faults: bool) -> None:
    drive_seeds(subject, _run, RUN_SEEDS, PROFILE, faults=faults)


def test_memory() -> None:
    _drive(MemorySubject(), faults=False)


def test_sqlite(tmp_path: Path) -> None:
    _drive(sqlite_subject(tmp_path), faults=False)


def test_postgres(postgres_dsn: str) -> None:
    _drive(postgres_subject(postgres_dsn, "c"), faults=False)


@pytest.mark.usefixtures("fast_sdk_backoff")
def test_dynamodb_with_faults(moto_endpoint: str) -> None:
    # A table of its own per example: its stream then holds only that example's changes,
    # fewer than the 1,000 the embedded server keeps. On a table emptied between examples, a
    # new reader starts at the oldest change kept, the previous examples' deletes; the reader
    # killed and resumed every 1-5 changes walked those while the writers pushed the window
    # past it, and the store rightly said its position was trimmed (deep seed 121240175).
    _drive(DynamoDBSubject(moto_endpoint, sync=False, recreate_every=1), faults=True)
