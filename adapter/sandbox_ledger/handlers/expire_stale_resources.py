"""Scheduled sweeper: expires stale resource activity records and reports each one.

The logic lives in :func:`sandbox_ledger.resources.sweep`; this module builds its
dependencies once per cold start and turns each run into metrics and one log line.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from sandbox_ledger.handlers._sdk import sdk_session
from sandbox_ledger.handlers.tracing import traced
from sandbox_ledger.resources import (
    EventPublisher,
    SweeperSettings,
    SweepPlan,
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


@dataclass
class Sweeper:
    """The sweeper's dependencies: its settings, the record store and the EventBridge client;
    the bus and windows come from the table's descriptor, read on first use (see
    :meth:`SweeperSettings.plan`)."""

    settings: SweeperSettings
    store: SyncResourceRecordStore
    events: Any
    _plan: SweepPlan | None = field(default=None, repr=False)

    def plan(self) -> SweepPlan:
        """The bus and windows to sweep with (read once; DeploymentMismatchError if the
        environment disagrees with the table)."""
        if self._plan is None:
            self._plan = self.settings.plan(self.store.descriptor())
        return self._plan

    def publisher(self) -> EventPublisher:
        """A publisher to the planned bus."""
        return EventPublisher(self.events, self.plan().event_bus_name)


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
    return Sweeper(settings, store, session.client("events", endpoint_url=endpoint))


def clock() -> datetime:
    """The sweeper's own clock, by which staleness is judged (tests replace it)."""
    return datetime.now(UTC)


@functools.cache
def dependencies() -> Sweeper:
    """The dependencies built from ``os.environ``, once per cold start."""
    return build(os.environ)


def run(sweeper: Sweeper, remaining_ms: Any, *, now: datetime | None = None) -> dict[str, Any]:
    """One bounded sweep with ``sweeper``'s dependencies (at ``now``, the sweeper's clock by
    default); its JSON summary."""
    result = sweep(
        sweeper.store,
        sweeper.publisher(),
        now=now or clock(),
        policy=sweeper.plan().policy,
        dry_run=sweeper.settings.dry_run,
        remaining_ms=remaining_ms,
    )
    metrics.add_metric(name="Expired", unit=MetricUnit.Count, value=len(result.expired))
    metrics.add_metric(name="Skipped", unit=MetricUnit.Count, value=len(result.skipped))
    metrics.add_metric(name="Observed", unit=MetricUnit.Count, value=len(result.observed))
    metrics.add_metric(name="Failed", unit=MetricUnit.Count, value=len(result.failed))
    metrics.add_metric(name="Unreadable", unit=MetricUnit.Count, value=len(result.unreadable))
    metrics.add_metric(name="Lost", unit=MetricUnit.Count, value=len(result.lost))
    for record_id, why in result.unreadable.items():  # the id and why, never the payload
        logger.warning("unreadable resource record", extra={"recordId": record_id, "why": why})
    summary = result.to_dict()
    logger.info(
        "sweep finished",
        extra={key: summary[key] for key in ("dryRun", "remaining", "complete", "failed", "lost")}
        | {
            "expiredCount": len(result.expired),
            "skippedCount": len(result.skipped),
            "observedCount": len(result.observed),
        },
    )
    return summary


@traced("sandbox-ledger-sweeper", os.environ)
@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Run one sweep bounded by the invocation's deadline; returns its JSON summary."""
    return run(dependencies(), context.get_remaining_time_in_millis)
