"""One worker of the fleet: plays sandboxes against a store until its time is up or it is
killed, recording every operation in the history (:mod:`.history`).

``python -m sandbox_ledger.soak.worker --store URL --history FILE --name NAME --seed N
--seconds S``. Each session starts from one of the fleet's shared environments, which it
builds again now and then (a save racing other workers'). It is ``sandbox.created``, execs
on parallel branches (each an ``exec.started`` and an ``exec.complete``, some a checkpoint
between), most often ``sandbox.closed``, and now and then its deletion. Every entry carries
its operation's name in its payload, so the checker tells every stored entry's sender. A
worker killed mid-session leaves it open, as a crashed sandbox client does.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from sandbox_ledger.models import (
    EnvironmentRecord,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
)
from sandbox_ledger.soak._stores import close_store, process_arguments
from sandbox_ledger.soak.history import History
from sandbox_ledger.stores import open_store
from sandbox_ledger.transfer import content_digest

LEDGER_NAME = "soak"
"""The name every session of the fleet is under."""


async def _append(store: Any, history: History, entry: LedgerEntry) -> bool:
    number = history.invoke(
        "append",
        s=entry.sandbox_id,
        e=str(entry.event),
        d=content_digest(entry),
        w=entry.wire(),
    )
    try:
        await store.append(entry)
    except Exception as exc:  # recorded: its outcome is unknown
        history.fail(number, exc)
        return False
    history.ok(number)
    return True


class _Session:
    """One sandbox the worker plays: its entries, numbered."""

    def __init__(self, process: str, sandbox_id: str) -> None:
        self.process, self.sandbox_id, self.step = process, sandbox_id, 0

    def entry(self, event: LedgerEvent, branch: int | None = None, **payload: Any) -> LedgerEntry:
        self.step += 1
        return LedgerEntry(
            ts=time.time_ns() // 1_000_000,
            name=LEDGER_NAME,
            sandbox_id=self.sandbox_id,
            step_index=self.step,
            branch=branch,
            event=event,
            payload={"by": f"{self.process}/{self.step}", **payload},
        )


async def _branch(store: Any, history: History, session: _Session, branch: int, snap: bool) -> None:
    await _append(store, history, session.entry(LedgerEvent.ExecStarted, branch))
    if snap:
        snapshot = f"snap-{session.sandbox_id}-{branch}-{session.step}"
        checkpoint = session.entry(LedgerEvent.CheckpointCreated, branch, snapshotId=snapshot)
        await _append(store, history, checkpoint)
    await _append(store, history, session.entry(LedgerEvent.ExecComplete, branch))


ENVIRONMENTS = 3
"""How many environments the fleet shares (``env-0``...): each session starts from one, and
one session in four builds it again (saves it, racing the other workers' saves)."""


async def _save_environment(store: Any, history: History, name: str, tag: str) -> None:
    built = time.time_ns() // 1_000_000
    record = EnvironmentRecord.model_validate({"name": name, "builtAt": built, "by": tag})
    number = history.invoke("save_environment", n=name, by=tag)
    try:
        await store.save_environment(record)
    except Exception as exc:  # recorded: its outcome is unknown
        history.fail(number, exc)
        return
    history.ok(number)


async def play(
    store: Any, history: History, rng: random.Random, seconds: float, think: float = 0.0
) -> None:
    """Play sessions until ``seconds`` are up; ``think``: the mean pause (drawn) between one
    round of a session's execs and the next, as a sandbox's commands take time (0: none, the
    most pressure)."""
    deadline = time.monotonic() + seconds
    sessions = 0
    while time.monotonic() < deadline:
        session = _Session(history.process, f"{history.process}-{sessions}")
        sessions += 1
        environment = f"env-{rng.randrange(ENVIRONMENTS)}"
        if rng.random() < 0.25:
            await _save_environment(store, history, environment, session.sandbox_id)
        await _append(store, history, session.entry(LedgerEvent.SandboxCreated))
        for _ in range(rng.randint(1, 5)):
            branches = rng.sample([0, 1, 2], rng.randint(1, 2))
            await asyncio.gather(
                *(_branch(store, history, session, b, rng.random() < 0.3) for b in branches)
            )
            await _read(store, history, [session.sandbox_id])
            if think:
                await asyncio.sleep(rng.expovariate(1 / think))
        if rng.random() < 0.85:
            await _append(store, history, session.entry(LedgerEvent.SandboxClosed))
            await _read(store, history, [session.sandbox_id])
        if rng.random() < 0.5:  # others' sessions too, as a client watching the fleet does
            await _read_listed(store, history)
        if rng.random() < 0.15:
            await _delete(store, history, session.sandbox_id)


async def _read(store: Any, history: History, sandbox_ids: list[str]) -> None:
    """Read sessions' summaries, each recorded with what it found (``st`` status, ``n``
    execCount; none: ``st`` null): the checker holds each process's reads of a session to
    never going back in time, and to its own acknowledged writes."""
    for sandbox_id in sandbox_ids:
        number = history.invoke("read", s=sandbox_id)
        try:
            found = await store.get_sandbox_details(LEDGER_NAME, sandbox_id)
        except Exception as exc:  # recorded: it saw nothing
            history.fail(number, exc)
            continue
        seen = {"st": None} if found is None else {"st": found.status, "n": found.exec_count}
        history.ok(number, **seen)


async def _read_listed(store: Any, history: History) -> None:
    """Read again the summaries of the newest sessions a listing names (any worker's)."""
    try:
        page = await store.list_sandbox_page(LEDGER_NAME, ListSandboxOptions(limit=5))
    except Exception:  # a listing's failure is no read of a session
        return
    await _read(store, history, [d.sandbox_id for d in page.sessions])


async def _delete(store: Any, history: History, sandbox_id: str) -> None:
    number = history.invoke("delete", s=sandbox_id)
    try:
        await store.delete_sandbox(LEDGER_NAME, sandbox_id)
    except Exception as exc:  # recorded: its outcome is unknown
        history.fail(number, exc)
        return
    history.ok(number)


class _ResendsTwice:
    """A known defect, put in by hand to show the checker bites (``--defect resend``): a
    client that, about once in 20 appends, sends an append again as a new one, as a retry
    without the store's idempotency would (the entry is stored twice)."""

    def __init__(self, store: Any, seed: int) -> None:
        self._store, self._rng = store, random.Random(seed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def append(self, entry: LedgerEntry) -> None:
        await self._store.append(entry)
        if self._rng.random() < 0.05:
            await self._store.append(entry)


DEFECTS = {"resend": _ResendsTwice}
"""The defects a worker can be run with (``--defect``): for proving the checker only."""


async def main(argv: list[str] | None = None) -> None:
    parser = process_arguments("worker")
    parser.add_argument("--defect", choices=sorted(DEFECTS), default=None)
    parser.add_argument("--think", type=float, default=0.0)
    args = parser.parse_args(argv)
    history = History(args.history, args.name)
    store = open_store(args.store)
    if args.defect is not None:
        store = DEFECTS[args.defect](store, args.seed)
    try:
        await play(store, history, random.Random(args.seed), args.seconds, args.think)
    finally:
        await close_store(store)
        history.close()


if __name__ == "__main__":
    asyncio.run(main())
