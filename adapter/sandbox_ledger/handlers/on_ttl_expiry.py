"""DynamoDB Streams consumer: publishes ResourceExpired for resource records that TTL
removed, so no record disappears unreported. Reports partial batch failures.

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
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)

from sandbox_ledger.errors import StorageError
from sandbox_ledger.handlers._sdk import sdk_session
from sandbox_ledger.resources import EventPublisher, StreamSettings, ttl_expiry

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import (
        DynamoDBRecord,
    )

processor = BatchProcessor(event_type=EventType.DynamoDBStreams)
DEFAULT_NAMESPACE = "SandboxLedger"
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

    def is_own_table(self, event_source_arn: str | None) -> bool:
        """True if a stream record comes from this deployment's table."""
        # arn:aws:dynamodb:<region>:<account>:table/<name>/stream/<label>
        parts = (event_source_arn or "").split(":", 5)
        resource = parts[5] if len(parts) == 6 else ""
        return resource.split("/")[:2] == ["table", self.settings.table_name]


def build(environ: Mapping[str, str], *, session: Any | None = None) -> TtlReporter:
    """Validate the settings (InvalidInputError names the variable) and create the client."""
    settings = StreamSettings.from_env(environ)
    metrics.namespace = environ.get("POWERTOOLS_METRICS_NAMESPACE") or DEFAULT_NAMESPACE
    session, endpoint = sdk_session(environ, session)
    events = session.client("events", endpoint_url=endpoint)
    return TtlReporter(settings, EventPublisher(events, settings.event_bus_name))


@functools.cache
def dependencies() -> TtlReporter:
    """The dependencies built from ``os.environ``, once per cold start."""
    return build(os.environ)


def record_handler(record: DynamoDBRecord) -> None:
    """Publish the expiry of one TTL-removed resource record; raise to mark it failed."""
    reporter = dependencies()
    if not reporter.is_own_table(record.event_source_arn):
        logger.warning(
            "stream record of another table ignored", extra={"arn": record.event_source_arn}
        )
        return
    expiry = ttl_expiry(record.raw_event)
    if expiry is None:
        return
    if reporter.publisher.publish([expiry]):
        raise StorageError(f"ResourceExpired for {expiry.record.id} was not accepted")
    metrics.add_metric(name="Expired", unit=MetricUnit.Count, value=1)
    logger.info("ttl expiry reported", extra={"recordId": expiry.record.id})


@metrics.log_metrics(raise_on_empty_metrics=False)
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Process a stream batch; failed records come back in ``batchItemFailures``."""
    dependencies()  # validate the settings before touching the batch
    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    failures = len(response.get("batchItemFailures", []))
    metrics.add_metric(name="Failed", unit=MetricUnit.Count, value=failures)
    return dict(response)
