"""The fleet's sweeper (DynamoDB only): runs :func:`~sandbox_ledger.resources.sweep` on its
schedule and reports the TTL removals the table's stream shows, recording every expiry it
publishes in the history, until its time is up or it is killed (mid-sweep included).

``python -m sandbox_ledger.soak.sweeper --store URL --history FILE --name NAME --seconds S
[--pause S] [--idle S] [--defect early|republish]``. Each run is a ``sweep`` operation of
the history (its figures in the completion line). Its publisher stands for EventBridge: each
``ResourceExpired`` it is given is one ``expired`` line (the record id ``r``, its
``createdAt``, the ``revision`` the expiry is about, the event's ``key``, its ``trigger``
and ``expiredAt``). Between runs it reads the table's stream from its last saved position and
hands the batch to :func:`~sandbox_ledger.resources.report_ttl_removals` as the stream
handler is handed it, then saves the position (a ``ttl_position`` line): a sweeper killed
between the two reports those removals again when started again (at least once, under the
same ``key``).

``--pause``: the process waits that long before its first run (an outage of the sweeper,
drawn by the supervisor, during which the TTL backstop may remove dead records first).
``--idle``: the last sweeper of a run, which stops once the table holds no resource record
and the stream gave nothing for that long (or its time is up).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sandbox_ledger.resources.settings import resolve_sweep
from sandbox_ledger.resources.sweeper import sweep
from sandbox_ledger.resources.ttl_stream import TtlStream
from sandbox_ledger.resources.unreported import report_ttl_removals
from sandbox_ledger.soak._stores import process_arguments
from sandbox_ledger.soak.history import History, read_history
from sandbox_ledger.stores import parse_store_url

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from pathlib import Path

    from sandbox_ledger.resources.events import Expiry

__all__ = [
    "DEFECTS",
    "INTERVAL",
    "LEASE",
    "WINDOW",
    "HistoryPublisher",
    "last_ttl_position",
]

WINDOW = timedelta(seconds=4)
"""The table's ``stale_after`` in a run (15 minutes deployed): what the supervisor writes in
the table's descriptor, as the stack does, and every owner and sweeper reads there."""
INTERVAL = 1.0
"""Seconds between two sweeps (``sweep_rate_minutes`` of a deployment, compressed)."""
LEASE = timedelta(seconds=4)
"""A claim's lease (two minutes deployed, compressed as the windows are)."""


class HistoryPublisher:
    """Stands for EventBridge: each expiry published is one ``expired`` line of the history."""

    def __init__(self, history: History) -> None:
        self.history = history

    def publish(self, expiries: Sequence[Expiry]) -> set[str]:
        """Record every expiry; none fails."""
        for expiry in expiries:
            self._line(expiry, expiry.idempotency_key)
        return set()

    def _line(self, expiry: Expiry, key: str) -> None:
        self.history.event(
            "expired",
            r=expiry.record.id,
            created=expiry.record.created_at,
            rev=expiry.revision,
            key=key,
            trigger=expiry.trigger,
            expiredAt=expiry.expired_at,
        )


class _Republishes(HistoryPublisher):
    """A known defect, put in by hand to show the checker bites (``--defect republish``):
    each expiry is published twice, the second time under a new key (a retry that makes a
    new event instead of resending the one it made)."""

    def publish(self, expiries: Sequence[Expiry]) -> set[str]:
        for expiry in expiries:
            self._line(expiry, expiry.idempotency_key)
            self._line(expiry, f"{expiry.idempotency_key}/{time.time_ns()}")
        return set()


DEFECTS = ("early", "republish")
"""The defects a sweeper can be run with (``--defect``): for proving the checker only.
``early`` judges staleness by a fortieth of the table's window, so it expires the records of
owners that heartbeat on time; ``republish`` publishes each expiry twice under two keys."""


def last_ttl_position(path: Path) -> dict[str, Any] | None:
    """The TTL reporter's last saved stream position in the history, or None."""
    last = None
    for line in read_history(path):
        if line.get("op") == "ttl_position":
            last = line.get("pos")
    return last if isinstance(last, dict) else None


def run(args: argparse.Namespace) -> None:
    import boto3

    from sandbox_ledger.resources.store import SyncResourceRecordStore

    deadline = time.monotonic() + args.seconds
    _, kwargs = parse_store_url(args.store)
    table = kwargs["table_name"]
    client: dict[str, Any] = {
        "endpoint_url": kwargs.get("endpoint_url"),
        "region_name": kwargs.get("region_name"),
    }
    history = History(args.history, args.name)
    history.event("sweeper_start", pause=args.pause)
    time.sleep(min(args.pause, args.seconds))
    store = SyncResourceRecordStore(table, **client)
    streams = boto3.client("dynamodbstreams", **client)
    try:
        while True:  # a start the proxy's faults outlast is begun again, not given up
            try:
                # The bus and windows are the table's (its descriptor), as deployed.
                policy = resolve_sweep(store.descriptor(), table).policy
                described = boto3.client("dynamodb", **client).describe_table(TableName=table)
                break
            except Exception as exc:
                history.event("sweeper_error", error=f"{type(exc).__name__}: {exc}"[:300])
                if time.monotonic() >= deadline:
                    return
                time.sleep(INTERVAL)
        if args.defect == "early":
            from sandbox_ledger.resources.policy import ExpiryPolicy

            policy = ExpiryPolicy(policy.stale_after / 40, policy.retain_failed)
        publisher = (
            _Republishes(history) if args.defect == "republish" else HistoryPublisher(history)
        )
        arn = described["Table"]["LatestStreamArn"]
        ddb = boto3.client("dynamodb", **client)

        def latest() -> str:
            return str(ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"])

        stream = TtlStream(streams, arn, last_ttl_position(args.history), latest)
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            started = time.monotonic()
            busy = _sweep(store, publisher, history, policy)
            busy |= _report_ttl(stream, publisher, history, table)
            if args.idle is not None:
                if busy or _holds_records(store):
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= args.idle:
                    return
            time.sleep(max(0.0, started + INTERVAL - time.monotonic()))
    finally:
        store.close()
        history.close()


def _sweep(store: Any, publisher: HistoryPublisher, history: History, policy: Any) -> bool:
    """One sweep as an operation of the history; True unless it completed having expired,
    lost and left nothing (a quiet sweep)."""
    number = history.invoke("sweep")
    try:
        result = sweep(store, publisher, now=datetime.now(UTC), policy=policy, lease=LEASE)
    except Exception as exc:  # recorded; the next run goes on
        history.fail(number, exc)
        return True
    history.ok(
        number,
        expired=len(result.expired),
        observed=len(result.observed),
        lost=len(result.lost),
        failed=len(result.failed),
    )
    return bool(result.expired or result.failed or result.lost)


def _report_ttl(stream: TtlStream, publisher: Any, history: History, table: str) -> bool:
    """Report what the stream holds after the saved position, then save the position; True
    if it held anything."""
    try:
        records = stream.read()
        report = report_ttl_removals(records, table_name=table, publisher=publisher, store=None)
    except Exception as exc:  # read again from the saved position next time
        history.event("ttl_error", error=f"{type(exc).__name__}: {exc}"[:300])
        stream.at, stream.done = _saved(history)
        return True
    if report.failures:
        stream.at, stream.done = _saved(history)
        return True
    for lost in stream.lost:
        history.event("ttl_trimmed", at_position=lost)
    stream.lost.clear()
    history.event("ttl_position", pos=stream.position())
    return bool(report.published)


def _saved(history: History) -> tuple[dict[str, str], set[str]]:
    saved = last_ttl_position(history.path) or {}
    return dict(saved.get("at", {})), set(saved.get("done", []))


def _holds_records(store: Any) -> bool:
    """Whether the table holds a resource record (one past its TTL, hidden here, is removed
    within a second and shows on the stream)."""
    try:
        page = store.list(limit=1)
    except Exception:  # not known: asked again at the next run
        return True
    return bool(page.records or page.unreadable)


def main(argv: list[str] | None = None) -> None:
    parser = process_arguments("sweeper", seeded=False)
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--idle", type=float, default=None)
    parser.add_argument("--defect", choices=DEFECTS, default=None)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
