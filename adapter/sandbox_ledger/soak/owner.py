"""One owner of resource records in the fleet (DynamoDB only): allocates records, heartbeats
them, lets some die, and records every write in the history (:mod:`.history`).

``python -m sandbox_ledger.soak.owner --store URL --history FILE --name NAME --seed N
--seconds S``. The owner holds up to :data:`HELD` records (each a fresh id: a sandbox it
provisioned). Every :data:`BEAT_FRACTION` of the table's window it writes each held record
once, a ``touch`` or, one time in four, an operation's start and finish; now and then it
releases one (a ``delete`` at the revision and incarnation it last wrote) or lets one die:
it stops writing it on purpose (an ``r_abandon`` line). A record whose write is refused
(ConflictError: a sweeper claimed it, or it is gone) is taken as reclaimed (``r_reclaimed``)
and dropped. When its time is up it releases every record it still holds; an owner killed
with SIGKILL leaves all of its records dead.

Each write is an operation of the history: ``r_put``, ``r_touch``, ``r_op_start``,
``r_op_finish``, ``r_delete``, with the record id ``r``; an acknowledged one carries the
revision ``rev`` and incarnation ``inc`` the store answered. The policy (the window) is the
table's, from its deployment descriptor, as every writer of a deployed table reads it.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sandbox_ledger.errors import ConflictError
from sandbox_ledger.resources.models import ResourceActivityRecord, to_iso
from sandbox_ledger.soak._stores import process_arguments
from sandbox_ledger.soak.history import History
from sandbox_ledger.stores import parse_store_url

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["HELD", "TTL_HORIZON", "record_store"]

HELD = 3
"""The most records an owner holds at once."""
BEAT_FRACTION = 0.25
"""An owner writes each held record once per this share of the window."""
ABANDON = 0.03
"""The chance, per beat and record, that the owner lets the record die."""
RELEASE = 0.03
"""The chance, per beat and record, that the owner releases (deletes) the record."""
TTL_HORIZON = timedelta(seconds=1)
"""The owners' ``ttl_horizon``: a record's TTL falls one second after the policy's own latest
expiry (two windows), so the TTL backstop removes what no sweeper expired in time."""


def record_store(url: str, **options: Any) -> Any:
    """The resource record store (async) of the fleet's DynamoDB store URL."""
    from sandbox_ledger.resources.store import ResourceRecordStore

    kind, kwargs = parse_store_url(url)
    if kind != "dynamodb":
        raise ValueError(f"store: resource records are kept on DynamoDB only, not {kind}")
    table = kwargs.pop("table_name")
    kwargs.pop("retention_days", None)
    return ResourceRecordStore(table, **kwargs, **options)


def _record(record_id: str) -> ResourceActivityRecord:
    now = to_iso(datetime.now(UTC))
    return ResourceActivityRecord.model_validate(
        {
            "version": 1,
            "id": record_id,
            "pid": 1,
            "sandboxProvider": "soak",
            "placement": "remote",
            "workspace": f"/soak/{record_id}",
            "createdAt": now,
            "updatedAt": now,
            "phase": "ready",
            "operations": [],
        }
    )


async def _write(history: History, op: str, record_id: str, call: Any) -> Any:
    """Run one write as an operation of the history; its answer, or the exception."""
    number = history.invoke(op, r=record_id)
    try:
        written = await call
    except Exception as exc:  # recorded: its outcome is unknown
        history.fail(number, exc)
        return exc
    if isinstance(written, bool):  # a delete: whether it deleted
        history.ok(number, deleted=written)
    else:
        history.ok(number, rev=written.revision, inc=written.incarnation)
    return written


async def play(store: Any, history: History, rng: random.Random, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    held: dict[str, Any] = {}  # id -> the VersionedRecord last written
    while time.monotonic() < deadline:
        started = time.monotonic()
        if len(held) < HELD:
            record_id = str(uuid.uuid4())
            written = await _write(history, "r_put", record_id, store.put(_record(record_id)))
            if not isinstance(written, Exception):
                held[record_id] = written
        for record_id in list(held):
            roll = rng.random()
            if roll < ABANDON:
                history.event("r_abandon", r=record_id)
                del held[record_id]
            elif roll < ABANDON + RELEASE:
                await _release(store, history, held.pop(record_id))
            else:
                await _heartbeat(store, history, rng, held, record_id)
        beat = _window(store).total_seconds() * BEAT_FRACTION
        await asyncio.sleep(max(0.0, started + beat - time.monotonic()))
    for versioned in held.values():
        await _release(store, history, versioned)


def _window(store: Any) -> timedelta:
    """The table's window (``stale_after``), as the store read it from the descriptor with
    its first write (a second until then)."""
    policy = store.policy
    return policy.stale_after if policy is not None else timedelta(seconds=1)


async def _heartbeat(
    store: Any, history: History, rng: random.Random, held: dict[str, Any], record_id: str
) -> None:
    calls: list[tuple[str, Callable[[], Awaitable[Any]]]]
    if rng.random() < 0.25:
        calls = [
            ("r_op_start", lambda: store.record_operation_start(record_id, "exec")),
            (
                "r_op_finish",
                lambda: store.record_operation_finish(record_id, "exec", "completed"),
            ),
        ]
    else:
        calls = [("r_touch", lambda: store.touch(record_id))]
    for op, call in calls:
        written = await _write(history, op, record_id, call())
        if isinstance(written, ConflictError):  # claimed by a sweeper, or gone: reclaimed
            history.event("r_reclaimed", r=record_id, error=str(written)[:200])
            held.pop(record_id, None)
            return
        if not isinstance(written, Exception):
            held[record_id] = written


async def _release(store: Any, history: History, versioned: Any) -> None:
    record_id = versioned.record.id
    await _write(
        history,
        "r_delete",
        record_id,
        store.delete(
            record_id,
            expected_revision=versioned.revision,
            expected_incarnation=versioned.incarnation,
        ),
    )


async def main(argv: list[str] | None = None) -> None:
    parser = process_arguments("owner")
    args = parser.parse_args(argv)
    history = History(args.history, args.name)
    store = record_store(args.store, ttl_horizon=TTL_HORIZON)
    try:
        await play(store, history, random.Random(args.seed), args.seconds)
    finally:
        await store.close()
        history.close()


if __name__ == "__main__":
    asyncio.run(main())
