"""Followers beside concurrent appenders, deletes of other sessions and injected faults: the
sequence each follower saw equals the store's own order of what it holds, and a follower
killed and resumed from its last position, or resumed from any position, sees the rest.

Each run draws its schedule from a seed (profiles.py: fixed in ``fast``, fresh in ``deep``):
rounds of 2-6 appends at once from three clients (ts stamped as each append starts, as the
client stamps it), to the followed session and to others, deletes of the others, and, on
DynamoDB, one fault kind per round injected into the appending clients (botocore hooks). An
append that fails is in doubt: the store's checker client says whether it landed. Followers
read through the checker (no faults), so what they see is judged against the store alone.
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
ROUNDS = 8 if PROFILE == "fast" else 40


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _entry(sandbox_id: str, event: str, payload: Any, step: int = 0) -> LedgerEntry:
    step = -1 if event.startswith("sandbox.") else step
    return LedgerEntry(
        ts=_now_ms(),
        name="fm",
        sandbox_id=sandbox_id,
        step_index=step,
        event=event,
        payload=payload,
    )


def _wires(followed: list[Any]) -> list[dict[str, Any]]:
    return [f.entry.wire() for f in followed]


async def _follow_all(checker: Any, sandbox_id: str, out: list[Any]) -> None:
    async for followed in checker.follow("fm", sandbox_id):
        out.append(followed)


async def _killed_and_resumed(
    checker: Any, sandbox_id: str, out: list[Any], rng: random.Random
) -> None:
    """A follower stopped after a few entries each time and started again from its last
    position, until the session closes."""
    after = None
    while True:
        stop_after, got, ended = rng.randint(1, 6), 0, True
        stream = checker.follow("fm", sandbox_id, after=after)
        async for followed in stream:
            out.append(followed)
            after, got = followed.position, got + 1
            if got >= stop_after:
                ended = False
                break
        await stream.aclose()
        if ended:
            return


async def _run(store: Store, board: FaultBoard | None, seed: int, append_order: bool) -> None:
    rng = random.Random(seed)
    checker = store.checker
    checker.follow_poll = FAST
    followed_id = f"s-{seed}"
    others = [f"o-{seed}-{i}" for i in range(2)]
    await checker.append(_entry(followed_id, LedgerEvent.SandboxCreated, "start"))
    plain: list[Any] = []
    resumed: list[Any] = []
    tasks = [
        asyncio.create_task(_follow_all(checker, followed_id, plain)),
        asyncio.create_task(_killed_and_resumed(checker, followed_id, resumed, rng)),
    ]
    counter = 0
    for round_ in range(ROUNDS):
        if board is not None:
            board.switch(rng.choice(FAULT_KINDS), 0.25, seed + round_)

        async def one(client: int, sandbox_id: str, n: int) -> None:
            entry = _entry(sandbox_id, rng.choice(["exec.started", "exec.complete"]), n, n)
            # A failure leaves it in doubt: the checker's read below is the truth.
            with contextlib.suppress(LedgerError, ClientDied):
                await store.clients[client % len(store.clients)].append(entry)

        batch = []
        for _ in range(rng.randint(2, 6)):
            counter += 1
            target = followed_id if rng.random() < 0.7 else rng.choice(others)
            batch.append(one(rng.randrange(3), target, counter))
        if rng.random() < 0.3:
            batch.append(_delete(store.clients[0], rng.choice(others)))
        await asyncio.gather(*batch)
        await asyncio.sleep(rng.uniform(0, 0.05))
    if board is not None:
        board.switch("none", 0.0, 0)
        assert sum(board.counts().values()) > 0, "no fault was injected"
    await checker.append(_entry(followed_id, LedgerEvent.SandboxClosed, "end"))
    await asyncio.wait_for(asyncio.gather(*tasks), 120)

    if append_order:
        expected = [e.wire() for e in await checker.read_in_append_order("fm", followed_id)]
    else:
        expected = [e.wire() for e in await checker.read_all("fm", followed_id)]
    assert len(expected) > 2
    assert _wires(plain) == expected
    assert _wires(resumed) == expected
    # Resume from every position: exactly the rest.
    for at, one_followed in enumerate(plain):
        rest: list[Any] = []
        async for followed in checker.follow("fm", followed_id, after=one_followed.position):
            rest.append(followed)
        assert _wires(rest) == expected[at + 1 :], f"resumed after entry {at}"


async def _delete(client: Any, sandbox_id: str) -> None:
    with contextlib.suppress(LedgerError, ClientDied):
        await client.delete_sandbox("fm", sandbox_id)


def _drive(subject: Subject, *, faults: bool, append_order: bool) -> None:
    async def run(store: Store, board: FaultBoard | None, seed: int) -> None:
        await _run(store, board, seed, append_order)

    drive_seeds(subject, run, RUN_SEEDS, PROFILE, faults=faults)


def test_memory() -> None:
    _drive(MemorySubject(), faults=False, append_order=True)


def test_sqlite(tmp_path: Path) -> None:
    _drive(sqlite_subject(tmp_path), faults=False, append_order=True)


def test_postgres(postgres_dsn: str) -> None:
    _drive(postgres_subject(postgres_dsn, "f"), faults=False, append_order=True)


@pytest.mark.usefixtures("fast_sdk_backoff")
def test_dynamodb_with_faults(moto_endpoint: str) -> None:
    _drive(DynamoDBSubject(moto_endpoint, sync=False), faults=True, append_order=True)
