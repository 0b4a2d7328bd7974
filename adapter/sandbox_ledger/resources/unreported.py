"""TTL removals that could not be reported: kept durably in S3, and replayed from there.

A TTL removal exists only as a DynamoDB stream record (the item is gone, the stream keeps it
24 hours), so the stream handler must never acknowledge one it has not published. When
EventBridge refuses or is down, :func:`report_ttl_removals` writes the whole stream record
(its ``OldImage``: the final record) to ``s3://BUCKET/unreported/TABLE/DATE/SEQUENCE.json``
before acknowledging it; only a record it could neither publish nor write is reported back
as a batch item failure, for Lambda to retry and, once the retries are spent, to hand to the
stream mapping's on-failure destination (the same bucket, under ``aws/lambda/``: Lambda's
invocation record, whose ``payload`` is the whole batch).

:func:`replay_failed_expiries` publishes what both kinds of object hold and removes each
object once every expiry in it was accepted, so a second replay publishes nothing again.
Delivery stays at least once: a replay that dies between publishing and removing an object,
or a handler invocation that dies after writing one, publishes its expiries again; every
``ResourceExpired`` event carries ``idempotencyKey`` for consumers to drop repeats.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from sandbox_ledger.errors import LedgerError, translate_client_error
from sandbox_ledger.resources.stream import created_at, member, ttl_expiry
from sandbox_ledger.telemetry import traced_run

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from sandbox_ledger.resources.events import EventPublisher, Expiry

UNREPORTED_PREFIX = "unreported/"
"""Where the stream handler writes the stream records it could not publish."""
ON_FAILURE_PREFIX = "aws/lambda/"
"""Where Lambda writes the batches a stream mapping discarded (its S3 on-failure destination)."""
REPLAY_PREFIXES = (UNREPORTED_PREFIX, ON_FAILURE_PREFIX)
OBJECT_VERSION = 1
_CHUNK = 10  # one PutEvents request's worth; a bus found down stops further attempts


def is_own_table(table_name: str, event_source_arn: object) -> bool:
    """True if a stream record's ``eventSourceARN`` is a stream of table ``table_name``."""
    # arn:aws:dynamodb:<region>:<account>:table/<name>/stream/<label>
    if not isinstance(event_source_arn, str):
        return False
    parts = event_source_arn.split(":", 5)
    resource = parts[5] if len(parts) == 6 else ""
    return resource.split("/")[:2] == ["table", table_name]


def _sequence(stream_record: dict[str, Any]) -> str:
    """The stream record's sequence number: its ``itemIdentifier`` in a partial batch
    response, and (unique in its stream) its object's name."""
    for found in (
        member(member(stream_record, "dynamodb"), "SequenceNumber"),
        member(stream_record, "eventID"),
    ):
        if isinstance(found, str) and found:
            return found
    return ""


def _unnamed(stream_record: dict[str, Any]) -> str:
    raw = json.dumps(stream_record, sort_keys=True, ensure_ascii=True, default=repr)
    return f"unknown-{hashlib.sha256(raw.encode()).hexdigest()[:32]}"


@dataclass(frozen=True)
class UnreportedStore:
    """The S3 bucket (and prefix) that keeps unreported TTL removals; ``client`` is a boto3
    S3 client."""

    client: Any
    bucket: str
    prefix: str = UNREPORTED_PREFIX

    def key(self, table_name: str, stream_record: dict[str, Any]) -> str:
        """Where ``stream_record`` is kept: the same key for every retry of the same record,
        so a retried batch overwrites its object instead of adding one."""
        when = created_at(stream_record) or datetime.now(UTC)
        # A record without a sequence number (never one DynamoDB wrote) is named by its
        # content, so two of them are two objects and its retries one.
        sequence = _sequence(stream_record) or _unnamed(stream_record)
        return f"{self.prefix}{table_name}/{when:%Y/%m/%d}/{sequence}.json"

    def put(self, table_name: str, stream_record: dict[str, Any], *, why: str) -> str:
        """Write one stream record, whole, with why it was not reported; returns its key.

        Raises:
            StorageError: S3 did not take it (the caller must not acknowledge the record).
        """
        key = self.key(table_name, stream_record)
        body = {
            "version": OBJECT_VERSION,
            "table": table_name,
            "why": why,
            "keptAt": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "streamRecord": stream_record,
        }
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=json.dumps(body, ensure_ascii=False).encode("utf-8"),
                ContentType="application/json",
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate_client_error(exc, operation="PutObject") from exc
        return key


@dataclass
class BatchReport:
    """What :func:`report_ttl_removals` did with one stream batch."""

    published: list[str] = field(default_factory=list)
    """Ids of the records whose ``ResourceExpired`` EventBridge accepted."""
    kept: dict[str, str] = field(default_factory=dict)
    """S3 key of each record written to the bucket instead, with why."""
    failures: list[str] = field(default_factory=list)
    """Sequence numbers of records neither published nor kept: the batch item failures."""
    ignored: int = 0
    """Records of another table, or removals that are not TTL removals of resource records."""

    def response(self) -> dict[str, Any]:
        """The partial batch response Lambda expects (``ReportBatchItemFailures``)."""
        return {"batchItemFailures": [{"itemIdentifier": s} for s in self.failures]}


def _described(report: BatchReport) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """A batch's span: its counts, and an event per expiry reported."""
    counts = {
        "sandbox_ledger.ttl.reported": len(report.published),
        "sandbox_ledger.ttl.kept": len(report.kept),
        "sandbox_ledger.ttl.failed": len(report.failures),
        "sandbox_ledger.ttl.ignored": report.ignored,
    }
    return counts, [("expired", {"resource.id": record_id}) for record_id in report.published]


@traced_run("report ttl removals", _described)
def report_ttl_removals(
    records: Sequence[dict[str, Any]],
    *,
    table_name: str,
    publisher: EventPublisher,
    store: UnreportedStore | None,
    on_foreign: Callable[[str | None], None] | None = None,
) -> BatchReport:
    """Publish ``ResourceExpired`` for each TTL removal of a resource record of ``table_name``
    in a stream batch; keep the stream record of each one that cannot be published (the bus
    refused it or is down, or the image cannot be decoded) in ``store``. With no store, or
    when the store fails too, the record is a batch item failure.

    Stream records of any other table are ignored (``on_foreign`` is told their ARN).
    """
    report = BatchReport()
    pending: list[tuple[dict[str, Any], Expiry]] = []

    def keep(stream_record: dict[str, Any], why: str) -> None:
        if store is not None:
            try:
                report.kept[store.put(table_name, stream_record, why=why)] = why
                return
            except LedgerError:
                pass
        report.failures.append(_sequence(stream_record))

    for stream_record in records:
        arn = member(stream_record, "eventSourceARN")
        if not is_own_table(table_name, arn):
            if on_foreign is not None:
                on_foreign(arn if isinstance(arn, str) else None)
            report.ignored += 1
            continue
        try:
            expiry = ttl_expiry(stream_record)
        except ValueError as exc:
            keep(stream_record, f"undecodable: {exc}")
            continue
        if expiry is None:
            report.ignored += 1
            continue
        pending.append((stream_record, expiry))

    bus_down: str | None = None
    for start in range(0, len(pending), _CHUNK):
        chunk = pending[start : start + _CHUNK]
        if bus_down is not None:
            for stream_record, _ in chunk:
                keep(stream_record, f"not attempted: {bus_down}")
            continue
        try:
            refused = publisher.publish([expiry for _, expiry in chunk])
        except LedgerError as exc:
            bus_down = f"PutEvents failed: {exc}"
            for stream_record, _ in chunk:
                keep(stream_record, bus_down)
            continue
        for stream_record, expiry in chunk:
            if expiry.record.id in refused:
                keep(stream_record, "EventBridge did not accept the event after retries")
            else:
                report.published.append(expiry.record.id)
    return report


@dataclass
class ReplayResult:
    """What one :func:`replay_failed_expiries` run did."""

    published: list[str] = field(default_factory=list)
    """Idempotency keys of the events published (each object's, in order)."""
    replayed: list[str] = field(default_factory=list)
    """Keys of the objects whose every expiry was published, then removed."""
    failed: dict[str, str] = field(default_factory=dict)
    """Keys of the objects kept, with why (the next replay tries them again)."""
    skipped: list[str] = field(default_factory=list)
    """Keys of the objects listed but gone when read: another replay running at the same
    time replayed and removed them (not a failure)."""
    ignored: int = 0
    """Stream records in the objects that are not TTL removals of this table's records."""
    complete: bool = True
    """False when the run stopped early (``max_objects`` or the deadline): run it again."""

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data."""
        return {
            "published": self.published,
            "replayed": self.replayed,
            "failed": self.failed,
            "skipped": self.skipped,
            "ignored": self.ignored,
            "complete": self.complete,
        }


def _object_keys(client: Any, bucket: str, prefixes: Sequence[str]) -> Iterator[str]:
    for prefix in prefixes:
        token: str | None = None
        while True:
            request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
            if token:
                request["ContinuationToken"] = token
            page = client.list_objects_v2(**request)
            for item in page.get("Contents", []):
                yield str(item["Key"])
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                break


def _already_removed(exc: ClientError | BotoCoreError) -> bool:
    """True when GetObject found no object (NoSuchKey, or a bare 404)."""
    if not isinstance(exc, ClientError):
        return False
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return error.get("Code") in ("NoSuchKey", "404", "NotFound") or status == 404


def stream_records_of(body: object) -> list[dict[str, Any]]:
    """The stream records an object holds: the one the handler kept, or the batch of a
    Lambda on-failure invocation record (its ``payload``).

    Raises:
        ValueError: the object is neither (or an on-failure record without its payload).
    """
    if not isinstance(body, dict):
        raise ValueError(f"a JSON {type(body).__name__}, not an object")
    if body.get("version") == OBJECT_VERSION and isinstance(body.get("streamRecord"), dict):
        return [body["streamRecord"]]
    if "payload" in body:
        payload = body["payload"]
        event = json.loads(payload) if isinstance(payload, str) else payload
        records = event.get("Records") if isinstance(event, dict) else None
        if isinstance(records, list):
            return [r for r in records if isinstance(r, dict)]
    if "DDBStreamBatchInfo" in body:
        raise ValueError("an on-failure record without its payload (batch metadata only)")
    raise ValueError("not a kept stream record nor a Lambda on-failure invocation record")


def replay_failed_expiries(
    s3: Any,
    publisher: EventPublisher,
    bucket: str,
    *,
    table_name: str,
    dry_run: bool = False,
    max_objects: int | None = None,
    remaining_ms: Callable[[], int] | None = None,
    prefixes: Sequence[str] = REPLAY_PREFIXES,
) -> ReplayResult:
    """Publish the expiries kept in ``bucket`` (see the module docstring) with
    ``publisher``, removing each object once all of its expiries were accepted; an object
    that cannot be read, decoded or published whole is kept and reported in ``failed``. An
    object listed but gone when read (another replay at the same time removed it after
    publishing it) is reported in ``skipped``.

    ``dry_run`` publishes and removes nothing and lists what would be published. The run
    stops (``complete`` False) after ``max_objects`` objects, or when ``remaining_ms()``
    falls under 10 seconds (a Lambda deadline).
    """
    result = ReplayResult()
    for count, key in enumerate(_object_keys(s3, bucket, prefixes)):
        out_of_time = remaining_ms is not None and remaining_ms() < 10_000
        if (max_objects is not None and count >= max_objects) or out_of_time:
            result.complete = False
            break
        try:
            raw = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            records = stream_records_of(json.loads(raw))
            expiries = []
            for stream_record in records:
                if not is_own_table(table_name, member(stream_record, "eventSourceARN")):
                    result.ignored += 1
                    continue
                expiry = ttl_expiry(stream_record)
                if expiry is None:
                    result.ignored += 1
                else:
                    expiries.append(expiry)
        except (ClientError, BotoCoreError) as exc:
            if _already_removed(exc):  # a concurrent replay published and removed it
                result.skipped.append(key)
                continue
            result.failed[key] = str(translate_client_error(exc, operation="GetObject"))
            continue
        # json.JSONDecodeError is a ValueError; JSON nested past the decoder's depth is a
        # RecursionError: either is this object's fault, never the run's.
        except (ValueError, RecursionError) as exc:
            result.failed[key] = f"cannot be replayed: {exc}"
            continue
        if dry_run:
            result.published.extend(e.idempotency_key for e in expiries)
            continue
        try:
            refused = publisher.publish(expiries) if expiries else set()
        except LedgerError as exc:
            result.failed[key] = f"PutEvents failed: {exc}"
            continue
        accepted = [e for e in expiries if e.record.id not in refused]
        result.published.extend(e.idempotency_key for e in accepted)
        if refused:
            result.failed[key] = f"EventBridge did not accept {len(refused)} of {len(expiries)}"
            continue
        # Unconditional, yet only ever of what was published: a key names one stream record
        # (its sequence number; an on-failure object's name is unique), so an object written
        # again under it since the read holds the same removal. In a versioned bucket the
        # delete leaves the version read as a noncurrent one, kept 90 days.
        try:
            s3.delete_object(Bucket=bucket, Key=key)
        except (ClientError, BotoCoreError) as exc:
            error = translate_client_error(exc, operation="DeleteObject")
            result.failed[key] = (
                f"published, but not removed (a replay publishes it again): {error}"
            )
            continue
        result.replayed.append(key)
    return result
