"""The fleet's ``changes()`` reader: reads the store's change feed and records each change
handed out in the history (one line each, with its position), until its time is up or it
is killed; started again, it resumes after the last position the history holds, as a
consumer that saves its position with its own writes does.

``python -m sandbox_ledger.soak.reader --store URL --history FILE --name NAME --seconds S
[--idle S]``: with ``--idle``, it stops once no change came for that long (the supervisor's
last reader, which reads the feed to its end).
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING, Any

from sandbox_ledger.changes import ChangesTrimmedError
from sandbox_ledger.soak._stores import close_store, process_arguments
from sandbox_ledger.soak.history import History, read_history
from sandbox_ledger.stores import open_store

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["last_position"]


def last_position(path: Path) -> str | None:
    """The position of the last change the history holds, or None (none, or the feed said
    the changes after it were trimmed: it begins again from the oldest one kept)."""
    last = None
    for line in read_history(path):
        if line.get("op") == "change":
            last = line.get("pos")
        elif line.get("op") == "trimmed":
            last = None
    return last if isinstance(last, str) else None


async def read(
    store: Any, history: History, seconds: float, idle: float | None, skip: float = 0.0
) -> None:
    """Read and record changes until ``seconds`` are up (or, with ``idle``, until none came
    for that long). A read that fails (a connection reset, a store that refused) is begun
    again after the last position recorded, as a consumer does; the failure is recorded.
    ``skip``: the share of changes a reader with the known defect ``--defect skip`` passes
    over without handing them out (for proving the checker only)."""
    rng = random.Random(history.process)
    deadline = time.monotonic() + seconds
    while deadline - time.monotonic() > 0:
        after = last_position(history.path)
        stream = store.changes(after=after)
        try:
            if await _drain(stream, history, deadline, idle, rng, skip):
                return
        except ChangesTrimmedError as exc:
            # The changes after the position are lost (a restarted local server's stream is
            # a new one): a consumer starts again from the oldest change kept and reconciles
            # from a listing. The next read begins there.
            history.event("trimmed", after=after, error=str(exc)[:300])
        except Exception as exc:  # begun again after the last position recorded
            history.event("reader_error", error=f"{type(exc).__name__}: {exc}"[:300])
            await asyncio.sleep(0.5)
        finally:
            await stream.aclose()


async def _drain(
    stream: Any,
    history: History,
    deadline: float,
    idle: float | None,
    rng: random.Random,
    skip: float,
) -> bool:
    """Record what ``stream`` hands out until the deadline; True once idle (the end)."""
    while (left := deadline - time.monotonic()) > 0:
        wait = left if idle is None else min(left, idle)
        try:
            change = await asyncio.wait_for(anext(stream), wait)
        except TimeoutError:
            if idle is not None:
                return True
            continue
        if skip and rng.random() < skip:
            continue
        history.event(
            "change",
            k=change.kind.value,
            s=change.sandbox_id,
            at=change.at,
            id=change.id,
            pos=change.position,
        )
    return True


async def main(argv: list[str] | None = None) -> None:
    parser = process_arguments("reader", seeded=False)
    parser.add_argument("--idle", type=float, default=None)
    parser.add_argument("--defect", choices=["skip"], default=None)
    args = parser.parse_args(argv)
    history = History(args.history, args.name)
    store = open_store(args.store)
    try:
        skip = 0.05 if args.defect == "skip" else 0.0
        await read(store, history, args.seconds, args.idle, skip)
    finally:
        await close_store(store)
        history.close()


if __name__ == "__main__":
    asyncio.run(main())
