"""The fleet's follower: follows live sessions (``follow``) and records each entry handed
out in the history, until its time is up or it is killed.

``python -m sandbox_ledger.soak.follower --store URL --history FILE --name NAME --seed N
--seconds S``. It picks a running session from a listing, follows it until the follow ends
(after ``sandbox.closed``, or the session's deletion) or for at most
:data:`FOLLOW_SECONDS`, and picks another. Each entry is a ``followed`` line (the follow's
number ``f``, the session, the entry's digest, its place ``n``), and a follow that ended on
its own a ``follow_end`` line.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from sandbox_ledger.models import ListSandboxOptions, SandboxStatus
from sandbox_ledger.soak._stores import close_store, process_arguments
from sandbox_ledger.soak.history import History
from sandbox_ledger.soak.worker import LEDGER_NAME
from sandbox_ledger.stores import open_store
from sandbox_ledger.transfer import content_digest

FOLLOW_SECONDS = 10.0
"""The longest one follow lasts before the follower picks another session."""


async def _follow(store: Any, history: History, follow: int, sandbox_id: str) -> None:
    stream = store.follow(LEDGER_NAME, sandbox_id)
    deadline = time.monotonic() + FOLLOW_SECONDS
    place = 0
    try:
        while (left := deadline - time.monotonic()) > 0:
            try:
                followed = await asyncio.wait_for(anext(stream), left)
            except StopAsyncIteration:
                history.event("follow_end", f=follow, s=sandbox_id, n=place)
                return
            except TimeoutError:
                return
            digest = content_digest(followed.entry)
            history.event("followed", f=follow, s=sandbox_id, d=digest, n=place)
            place += 1
    finally:
        await stream.aclose()


async def run(store: Any, history: History, rng: random.Random, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    follow = 0
    running = ListSandboxOptions(status=SandboxStatus.Running, limit=20)
    while time.monotonic() < deadline:
        live = await store.list_sandbox_details(LEDGER_NAME, running)
        if not live:
            await asyncio.sleep(0.2)
            continue
        await _follow(store, history, follow, rng.choice(live).sandbox_id)
        follow += 1


async def main(argv: list[str] | None = None) -> None:
    parser = process_arguments("follower")
    args = parser.parse_args(argv)
    history = History(args.history, args.name)
    store = open_store(args.store)
    try:
        await run(store, history, random.Random(args.seed), args.seconds)
    finally:
        await close_store(store)
        history.close()


if __name__ == "__main__":
    asyncio.run(main())
