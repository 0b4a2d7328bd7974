"""The deployment's scheduled code beside the embedded server (``sandbox-ledger local
--deployment``): what the CDK stack runs in AWS, run here on the server's own table.

- **The sweeper**: :func:`sandbox_ledger.resources.sweep` (what the sweeper Lambda runs) every
  ``sweep_every`` seconds, with the bus and windows the table's descriptor records, bounded as
  the Lambda's run is (its five-minute timeout).
- **The TTL reporter**: the table's stream read as the Lambda's event source mapping reads it
  (from the oldest record, batches of :data:`BATCH_SIZE`), each batch handed to
  :func:`sandbox_ledger.resources.unreported.report_ttl_removals` (what ``on_ttl_expiry`` runs)
  and, while it reports batch item failures, handed again from the first failed record, up
  to :data:`RETRIES` times (the mapping's ``retry_attempts``); then the batch is kept the way
  the mapping's on-failure destination keeps it (a JSON line naming the stream and the
  sequence numbers it spans, in ``failures``) and the reader goes on. Its position, saved in
  ``position`` after each read's batches are reported, holds across a restart (a kill
  between the two reports them again, under the same idempotency keys).
- **The bus**: each event goes to :class:`~sandbox_ledger.local.bus.LocalBus`.

Both run in threads of their own over the server's endpoint (as clients: the strict profile
applies to them, and their writes are saved with ``--data``). :meth:`DeploymentServices.stop`
ends each between two steps, then delivers what the bus accepted.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sandbox_ledger.local.bus import LocalBus

__all__ = ["BATCH_SIZE", "RETRIES", "DeploymentServices"]

BATCH_SIZE = 100
"""Stream records a TTL reporter's batch holds at most (the stack's ``batch_size``)."""
RETRIES = 5
"""Times a batch with failures is handed again (the stack's ``retry_attempts``)."""
SWEEP_MS = 300_000
"""A sweep's time (the sweeper Lambda's timeout: five minutes)."""
POLL_SECONDS = 1.0
"""Seconds between two reads of the stream that found nothing (the mapping polls about
once a second a shard)."""


class DeploymentServices:
    """The sweeper and the TTL reporter of ``table`` on the server at ``endpoint``,
    publishing to ``bus``; ``say`` writes a line for the operator."""

    def __init__(
        self,
        endpoint: str,
        table: str,
        bus: LocalBus,
        *,
        sweep_every: float,
        say: Callable[[str], None],
        failures: Path | None = None,
        position: Path | None = None,
        region: str = "us-east-1",
        retry_wait: float = 0.5,
    ) -> None:
        import boto3

        from sandbox_ledger.resources import SyncResourceRecordStore
        from sandbox_ledger.resources.events import EventPublisher
        from sandbox_ledger.resources.settings import StreamSettings, SweeperSettings

        session = boto3.Session(
            aws_access_key_id="local", aws_secret_access_key="local", region_name=region
        )
        self.table, self.bus, self.say, self.failures = table, bus, say, failures
        self.position = position
        self.sweep_every, self.retry_wait = sweep_every, retry_wait
        self.store = SyncResourceRecordStore(table, endpoint_url=endpoint, session=session)
        self.plan = SweeperSettings.from_env({"TABLE_NAME": table}).plan(self.store.descriptor())
        self.publisher = EventPublisher(bus, self.plan.event_bus_name)
        self.settings = StreamSettings.from_env(
            {"TABLE_NAME": table, "EVENT_BUS_NAME": self.plan.event_bus_name}
        )
        self._dynamodb = session.client("dynamodb", endpoint_url=endpoint)
        self._streams = session.client("dynamodbstreams", endpoint_url=endpoint)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._sweeps, name="local-sweeper", daemon=True),
            threading.Thread(target=self._reports, name="local-ttl-reporter", daemon=True),
        ]
        self.sweeps = 0
        self.expired = 0
        self.reported = 0
        self.kept = 0

    def describe(self) -> list[str]:
        """What runs and on what schedule (the server's start lines)."""
        return [
            f"sweeper: every {self.sweep_every:g} s (stale after "
            f"{self.plan.policy.stale_after.total_seconds():g} s), events to bus "
            f"{self.plan.event_bus_name!r}",
            f"TTL reporter: the table's stream, batches of {BATCH_SIZE}, {RETRIES} retries"
            + (f", failed batches kept in {self.failures}" if self.failures else ""),
            f"event bus: {self.bus.describe()}",
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """End both between two steps, then deliver what the bus accepted."""
        self._stop.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout)
        self.bus.close(timeout)

    # -- the sweeper ----------------------------------------------------------------------

    def _sweeps(self) -> None:
        while not self._stop.wait(self.sweep_every):
            self.sweep_once()

    def sweep_once(self) -> None:
        """One sweep, as one scheduled invocation of the sweeper Lambda."""
        from sandbox_ledger.resources import sweep

        deadline = time.monotonic() + SWEEP_MS / 1000
        try:
            result = sweep(
                self.store,
                self.publisher,
                now=datetime.now(UTC),
                policy=self.plan.policy,
                remaining_ms=lambda: int((deadline - time.monotonic()) * 1000),
            )
        except Exception as exc:  # as the schedule does: said, and the next run tries again
            self.say(f"sweep failed ({type(exc).__name__}: {exc}); the next one tries again")
            return
        self.sweeps += 1
        self.expired += len(result.expired)
        if result.expired or result.failed or result.lost:
            self.say(
                f"sweep: {len(result.expired)} expired, {len(result.failed)} failed, "
                f"{len(result.lost)} lost"
            )

    # -- the TTL reporter -----------------------------------------------------------------

    def _reports(self) -> None:
        from sandbox_ledger.resources.ttl_stream import TtlStream

        stream: TtlStream | None = None
        while not self._stop.is_set():
            try:
                if stream is None:
                    arn = self._dynamodb.describe_table(TableName=self.table)["Table"][
                        "LatestStreamArn"
                    ]
                    stream = TtlStream(self._streams, arn, self._saved_position())
                records = stream.read()
            except Exception as exc:  # the server busy or stopping: read again
                if self._stop.wait(POLL_SECONDS):
                    return
                self.say(f"TTL reporter: reading the stream failed ({type(exc).__name__})")
                continue
            for start in range(0, len(records), BATCH_SIZE):
                self.report_batch(records[start : start + BATCH_SIZE])
            if records:
                self._save_position(stream.position())
            elif self._stop.wait(POLL_SECONDS):
                return

    def _saved_position(self) -> dict[str, Any] | None:
        """Where the reporter was (``position``: kept across a restart, as the mapping
        keeps its own); None: from the oldest record."""
        if self.position is None or not self.position.exists():
            return None
        try:
            from sandbox_ledger._json import loads_unique

            saved = loads_unique(self.position.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.say(f"TTL reporter: {self.position} unreadable; reading from the oldest record")
            return None
        return saved if isinstance(saved, dict) else None

    def _save_position(self, position: dict[str, Any]) -> None:
        """Keep the position once its records are reported (a temporary file renamed)."""
        if self.position is None:
            return
        temporary = self.position.with_name(f"{self.position.name}.tmp")
        try:
            temporary.write_text(json.dumps(position), encoding="utf-8")
            temporary.replace(self.position)
        except OSError as exc:
            self.say(f"TTL reporter: could not keep its position ({exc.strerror or exc})")

    def report_batch(self, batch: list[dict[str, Any]]) -> None:
        """Hand ``batch`` to the reporter, again from its first failed record while it
        reports failures (:data:`RETRIES` times), then keep what is left as failed."""
        from sandbox_ledger.resources.unreported import report_ttl_removals

        pending = batch
        for attempt in range(RETRIES + 1):
            try:
                result = report_ttl_removals(
                    pending, table_name=self.table, publisher=self.publisher, store=None
                )
                failed = set(result.failures)
                self.reported += len(result.published)
            except Exception:  # the handler failed whole: the batch is retried whole
                failed = {str(r["dynamodb"]["SequenceNumber"]) for r in pending}
            if not failed:
                return
            first = next(
                i for i, r in enumerate(pending) if str(r["dynamodb"]["SequenceNumber"]) in failed
            )
            pending = pending[first:]
            if attempt < RETRIES and self._stop.wait(self.retry_wait * 2**attempt):
                break
        self._keep(pending)

    def _keep(self, pending: list[dict[str, Any]]) -> None:
        """What the on-failure destination keeps of a batch given up on: where it is in the
        stream (not its records: they stay in the stream for 24 hours)."""
        self.kept += len(pending)
        numbers = [str(r["dynamodb"]["SequenceNumber"]) for r in pending]
        kept = {
            "stream": pending[0].get("eventSourceARN"),
            "startSequenceNumber": numbers[0],
            "endSequenceNumber": numbers[-1],
            "batchSize": len(pending),
            "time": datetime.now(UTC).isoformat(),
        }
        where = "not kept (no --deployment-failures file)"
        if self.failures is not None:
            with self.failures.open("a", encoding="utf-8") as stream:
                stream.write(json.dumps(kept) + "\n")
            where = f"kept in {self.failures}"
        self.say(
            f"TTL reporter: gave up on {len(pending)} records after {RETRIES} retries "
            f"({numbers[0]} to {numbers[-1]}); {where}"
        )
