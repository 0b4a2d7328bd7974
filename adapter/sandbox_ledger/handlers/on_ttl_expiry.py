"""DynamoDB Streams consumer: publishes ResourceExpired for resource records that TTL
removed, so no record disappears unreported.

A removal it cannot publish is written, whole, to the ``UNREPORTED_BUCKET`` before the batch
is acknowledged; only one it can neither publish nor write is a batch item failure (Lambda
retries it, then hands the batch to the mapping's on-failure destination). The logic is
:func:`sandbox_ledger.resources.report_ttl_removals`. Invoked with
``{"action": "replay-unreported"}`` (optionally ``"dryRun": true``, ``"maxObjects": N``)
instead of a stream batch, it replays what the bucket keeps
(:func:`sandbox_ledger.resources.replay_failed_expiries`): this function's role is the one
the bus lets publish.

Ordinary deletes (the sweeper's, an owner's), every other item type and stream records of
any table but its own are ignored.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.handlers._sdk import LazyClient, sdk_session
from sandbox_ledger.handlers.tracing import traced
from sandbox_ledger.resources import EventPublisher, StreamSettings
from sandbox_ledger.resources.unreported import (
    UnreportedStore,
    is_own_table,
    replay_failed_expiries,
    report_ttl_removals,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_NAMESPACE = "SandboxLedger"
REPLAY_ACTION = "replay-unreported"
logger = Logger(service="sandbox-ledger-ttl")
metrics = Metrics(
    namespace=DEFAULT_NAMESPACE,
    service="sandbox-ledger-ttl",
)


@dataclass(frozen=True)
class TtlReporter:
    """The stream handler's dependencies."""

    settings: StreamSettings
    publisher: EventPublisher
    unreported: UnreportedStore | None = None

    def is_own_table(self, event_source_arn: str | None) -> bool:
        """True if a stream record comes from this deployment's table."""
        return is_own_table(self.settings.table_name, event_source_arn)


def build(environ: Mapping[str, str], *, session: Any | None = None) -> TtlReporter:
    """Validate the settings (InvalidInputError names the variable) and create the clients."""
    settings = StreamSettings.from_env(environ)
    metrics.namespace = environ.get("POWERTOOLS_METRICS_NAMESPACE") or DEFAULT_NAMESPACE
    session, endpoint = sdk_session(environ, session)
    events = session.client("events", endpoint_url=endpoint)
    unreported = None
    if settings.unreported_bucket:
        # Used only when a publish fails, or on a replay: created then, not at cold start.
        s3 = LazyClient(session, "s3", endpoint)
        unreported = UnreportedStore(s3, settings.unreported_bucket)
    return TtlReporter(settings, EventPublisher(events, settings.event_bus_name), unreported)


@functools.cache
def dependencies() -> TtlReporter:
    """The dependencies built from ``os.environ``, once per cold start."""
    return build(os.environ)


def _foreign(arn: str | None) -> None:
    logger.warning("stream record of another table ignored", extra={"arn": arn})


def report(reporter: TtlReporter, event: dict[str, Any]) -> dict[str, Any]:
    """Report one stream batch; the partial batch response."""
    result = report_ttl_removals(
        event.get("Records") or [],
        table_name=reporter.settings.table_name,
        publisher=reporter.publisher,
        store=reporter.unreported,
        on_foreign=_foreign,
    )
    for record_id in result.published:
        logger.info("ttl expiry reported", extra={"recordId": record_id})
    for key, why in result.kept.items():  # where it is and why, never the image
        logger.warning("ttl expiry kept unreported", extra={"key": key, "why": why})
    metrics.add_metric(name="Expired", unit=MetricUnit.Count, value=len(result.published))
    metrics.add_metric(name="Unreported", unit=MetricUnit.Count, value=len(result.kept))
    metrics.add_metric(name="Failed", unit=MetricUnit.Count, value=len(result.failures))
    return result.response()


def replay(reporter: TtlReporter, event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Replay the bucket's unreported expiries; the run's JSON summary."""
    store = reporter.unreported
    if store is None:
        raise InvalidInputError("UNREPORTED_BUCKET", "is not set: there is nothing to replay")
    dry_run = event.get("dryRun", False)
    max_objects = event.get("maxObjects")
    if not isinstance(dry_run, bool):
        raise InvalidInputError("dryRun", f"must be true or false, got {dry_run!r}")
    if max_objects is not None and (not isinstance(max_objects, int) or max_objects < 1):
        raise InvalidInputError("maxObjects", f"must be a positive integer, got {max_objects!r}")
    result = replay_failed_expiries(
        store.client,
        reporter.publisher,
        store.bucket,
        table_name=reporter.settings.table_name,
        dry_run=dry_run,
        max_objects=max_objects,
        remaining_ms=getattr(context, "get_remaining_time_in_millis", None),
    )
    if not dry_run:
        metrics.add_metric(name="Replayed", unit=MetricUnit.Count, value=len(result.published))
    logger.info(
        "unreported expiries replayed",
        extra={
            "dryRun": dry_run,
            "objects": len(result.replayed),
            "failed": result.failed,
            "skipped": len(result.skipped),
        },
    )
    return result.to_dict() | {"dryRun": dry_run}


@traced("sandbox-ledger-ttl", os.environ)
@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Process a stream batch (failed records come back in ``batchItemFailures``), or replay
    the unreported expiries when invoked with ``{"action": "replay-unreported"}``."""
    reporter = dependencies()  # validate the settings before touching the batch
    if "Records" in event:
        return report(reporter, event)
    if event.get("action") == REPLAY_ACTION:
        metrics.add_metric(name="ReplayRuns", unit=MetricUnit.Count, value=1)
        return replay(reporter, event, context)
    metrics.add_metric(name="InvalidEvents", unit=MetricUnit.Count, value=1)
    raise InvalidInputError(
        "event", f"neither a stream batch nor {{'action': {REPLAY_ACTION!r}}}: {sorted(event)}"
    )
