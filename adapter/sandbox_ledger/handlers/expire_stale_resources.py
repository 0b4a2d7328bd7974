"""Scheduled sweeper: expires stale resource activity records and reports each one.

The logic lives in :func:`sandbox_ledger.resources.sweep`; this module builds its
dependencies once per cold start and turns each run into metrics and one log line.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from sandbox_ledger.handlers._sdk import sdk_session
from sandbox_ledger.resources import (
    EventPublisher,
    SweeperSettings,
    SyncResourceRecordStore,
    sweep,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_NAMESPACE = "SandboxLedger"
logger = Logger(service="sandbox-ledger-sweeper")
metrics = Metrics(
    namespace=DEFAULT_NAMESPACE,
    service="sandbox-ledger-sweeper",
)


@dataclass(frozen=True)
class Sweeper:
    """The sweeper's dependencies: its settings, the record store and the event publisher."""

    settings: SweeperSettings
    store: SyncResourceRecordStore
    publisher: EventPublisher


def build(environ: Mapping[str, str], *, session: Any | None = None) -> Sweeper:
    """Validate the settings (InvalidInputError names the variable) and create the clients,
    with ``session`` (a boto3 session, default a new one) at ``AWS_ENDPOINT_URL`` if set."""
    settings = SweeperSettings.from_env(environ)
    metrics.namespace = environ.get("POWERTOOLS_METRICS_NAMESPACE") or DEFAULT_NAMESPACE
    session, endpoint = sdk_session(environ, session)
    store = SyncResourceRecordStore(
        settings.table_name,
        session=session,
        endpoint_url=endpoint,
        shard_count=settings.shard_count,
    )
    events = session.client("events", endpoint_url=endpoint)
    return Sweeper(settings, store, EventPublisher(events, settings.event_bus_name))


@functools.cache
def dependencies() -> Sweeper:
    """The dependencies built from ``os.environ``, once per cold start."""
    return build(os.environ)


def run(sweeper: Sweeper, remaining_ms: Any) -> dict[str, Any]:
    """One bounded sweep with ``sweeper``'s dependencies; its JSON summary."""
    settings = sweeper.settings
    result = sweep(
        sweeper.store,
        sweeper.publisher,
        now=datetime.now(UTC),
        policy=settings.policy,
        dry_run=settings.dry_run,
        remaining_ms=remaining_ms,
    )
    metrics.add_metric(name="Expired", unit=MetricUnit.Count, value=len(result.expired))
    metrics.add_metric(name="Skipped", unit=MetricUnit.Count, value=len(result.skipped))
    metrics.add_metric(name="Failed", unit=MetricUnit.Count, value=len(result.failed))
    summary = result.to_dict()
    logger.info(
        "sweep finished",
        extra={key: summary[key] for key in ("dryRun", "remaining", "complete", "failed")}
        | {"expiredCount": len(result.expired), "skippedCount": len(result.skipped)},
    )
    return summary


@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Run one sweep bounded by the invocation's deadline; returns its JSON summary."""
    return run(dependencies(), context.get_remaining_time_in_millis)
