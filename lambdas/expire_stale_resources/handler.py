"""Scheduled sweeper: expires stale resource activity records and reports each one.

Settings come from the environment and are validated at cold start (see
``sandbox_ledger.resources.HandlerSettings``); the clients are built once and reused by warm
invocations. The logic lives in ``sandbox_ledger.resources.sweep``.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from sandbox_ledger.resources import (
    EventPublisher,
    HandlerSettings,
    SyncResourceRecordStore,
    sweep,
)

SETTINGS = HandlerSettings.from_env(os.environ)
STORE = SyncResourceRecordStore(SETTINGS.table_name, shard_count=SETTINGS.shard_count)
PUBLISHER = EventPublisher(boto3.client("events"), SETTINGS.event_bus_name)

logger = Logger(service="sandbox-ledger-sweeper")
metrics = Metrics(
    namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "SandboxLedger",
    service="sandbox-ledger-sweeper",
)


@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Run one bounded sweep; returns its JSON summary (expired, skipped, remaining...)."""
    result = sweep(
        STORE,
        PUBLISHER,
        now=datetime.now(UTC),
        policy=SETTINGS.policy,
        dry_run=SETTINGS.dry_run,
        remaining_ms=context.get_remaining_time_in_millis,
    )
    metrics.add_metric(name="Expired", unit=MetricUnit.Count, value=len(result.expired))
    metrics.add_metric(name="Skipped", unit=MetricUnit.Count, value=len(result.skipped))
    metrics.add_metric(name="Failed", unit=MetricUnit.Count, value=len(result.failed))
    summary = result.to_dict()
    logger.info(
        "sweep finished",
        extra={k: summary[k] for k in ("dryRun", "remaining", "complete", "failed")}
        | {"expiredCount": len(result.expired), "skippedCount": len(result.skipped)},
    )
    return summary
