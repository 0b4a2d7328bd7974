"""DynamoDB Streams consumer: publishes ResourceExpired for resource records that TTL
removed, so no record disappears unreported. Reports partial batch failures.

Ordinary deletes (the sweeper's, an owner's) and every other item type are ignored.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)

from sandbox_ledger.errors import InvalidInputError, StorageError
from sandbox_ledger.resources import EventPublisher, ttl_expiry

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import (
        DynamoDBRecord,
    )

_BUS = os.environ.get("EVENT_BUS_NAME", "default").strip() or "default"
if not os.environ.get("TABLE_NAME", "").strip():
    raise InvalidInputError("TABLE_NAME", "environment variable is required")
PUBLISHER = EventPublisher(boto3.client("events"), _BUS)

processor = BatchProcessor(event_type=EventType.DynamoDBStreams)
logger = Logger(service="sandbox-ledger-ttl")
metrics = Metrics(
    namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "SandboxLedger",
    service="sandbox-ledger-ttl",
)


def record_handler(record: DynamoDBRecord) -> None:
    """Publish the expiry of one TTL-removed resource record; raise to mark it failed."""
    expiry = ttl_expiry(record.raw_event)
    if expiry is None:
        return
    if PUBLISHER.publish([expiry]):
        raise StorageError(f"ResourceExpired for {expiry.record.id} was not accepted")
    metrics.add_metric(name="Expired", unit=MetricUnit.Count, value=1)
    logger.info("ttl expiry reported", extra={"recordId": expiry.record.id})


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Process a stream batch; failed records come back in ``batchItemFailures``."""
    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    failures = len(response.get("batchItemFailures", []))
    metrics.add_metric(name="Failed", unit=MetricUnit.Count, value=failures)
    return dict(response)
