"""What each step sends and what it checks, as pure functions of what it read."""

from __future__ import annotations

import io
import json
import uuid
import zipfile
from datetime import UTC, timedelta
from typing import TYPE_CHECKING, Any

from sandbox_ledger import loads_unique
from sandbox_ledger.resources import DETAIL_TYPE, SOURCE

from .plan import SmokeError

if TYPE_CHECKING:
    from datetime import datetime
    from pathlib import Path

EVENT_PATTERN = {"source": [SOURCE], "detail-type": [DETAIL_TYPE]}
"""The run's rule on the stack's bus: every ResourceExpired event."""


def physical_id(resources: list[dict[str, Any]], kind: str, logical_prefix: str) -> str:
    """The physical id of the one resource of type ``kind`` whose logical id starts with
    ``logical_prefix``, among a stack's resource summaries.

    Raises:
        SmokeError: none, or more than one.
    """
    found = [
        r.get("PhysicalResourceId")
        for r in resources
        if r["ResourceType"] == kind and r["LogicalResourceId"].startswith(logical_prefix)
    ]
    if len(found) != 1 or not found[0]:
        raise SmokeError(f"the stack has {len(found)} {kind} named {logical_prefix}*, not one")
    return str(found[0])


def library_asset(outdir: Path) -> Path:
    """The folder of the stack's Lambda asset in the cloud assembly at ``outdir``: the one
    file asset holding the library (``sandbox_ledger/``).

    Raises:
        SmokeError: none, or more than one.
    """
    found: list[Path] = []
    for manifest in sorted(outdir.glob("*.assets.json")):
        try:
            files = loads_unique(manifest.read_text(encoding="utf-8"))["files"]
            folders = [outdir / str(asset["source"]["path"]) for asset in files.values()]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SmokeError(f"{manifest}: not a CDK assets manifest: {exc}") from exc
        found += [folder for folder in folders if (folder / "sandbox_ledger").is_dir()]
    if len(found) != 1:
        raise SmokeError(f"{outdir}: {len(found)} Lambda assets hold the library, not one")
    return found[0]


def worker_zip(asset: Path, handler: Path) -> bytes:
    """The worker function's code: the stack's Lambda asset with ``handler`` as
    ``handler.py`` (its entry point ``handler.handler``)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(asset.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(asset).as_posix())
        archive.write(handler, "handler.py")
    return buffer.getvalue()


def trust_policy(service: str) -> str:
    """A role's trust policy: ``service`` may assume it."""
    statement = {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def worker_events(run: str) -> list[dict[str, Any]]:
    """The ledger entries the worker is invoked with (wire shape): a session created and one
    exec, the second sent twice as a retried delivery would."""
    base = {"name": "smoke", "sandboxId": f"sb-{run}"}
    created = {**base, "ts": 1, "stepIndex": -1, "event": "sandbox.created"}
    done = {**base, "ts": 2, "stepIndex": 0, "event": "exec.complete", "payload": {"exit": 0}}
    return [created, done, done]


def check_worker_answers(answers: list[dict[str, Any]]) -> None:
    """The worker stored the first two entries once each, the repeat not again, and the
    session shows one exec, running.

    Raises:
        SmokeError: naming the answer that differs.
    """
    stored = [a.get("stored") for a in answers]
    if [a.get("ok") for a in answers] != [True] * 3 or stored != [True, True, False]:
        raise SmokeError(f"the worker answered {answers}: expected ok, stored once each")
    session = answers[-1].get("session") or {}
    if (session.get("execCount"), session.get("status")) != (1, "running"):
        raise SmokeError(f"the worker's session is {session}: expected 1 exec, running")


def smoke_record(run: str, now: datetime) -> dict[str, Any]:
    """A resource record (wire shape) whose owner stopped an hour ago: the sweeper expires it
    once it has seen it unchanged for the stack's window."""
    updated = now - timedelta(hours=1)
    at = updated.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {
        "version": 1,
        "id": str(uuid.uuid4()),
        "pid": 1,
        "sandboxProvider": "smoke",
        "placement": "remote",
        "workspace": f"deploy-smoke/{run}",
        "createdAt": at,
        "updatedAt": at,
        "phase": "ready",
        "operations": [],
    }


def sweep_summary(summary: dict[str, Any]) -> str:
    """A sweep's answer in a few words."""
    return ", ".join(
        f"{key} {len(summary.get(key) or [])}" for key in ("observed", "expired", "failed")
    )


def queue_policy(queue_arn: str, rule_arn: str) -> str:
    """The queue's policy: EventBridge may send to it for the run's rule only."""
    statement = {
        "Effect": "Allow",
        "Principal": {"Service": "events.amazonaws.com"},
        "Action": "sqs:SendMessage",
        "Resource": queue_arn,
        "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}},
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def expired_event(body: str, record_id: str) -> dict[str, Any] | None:
    """The ``ResourceExpired`` event in an SQS message body if it is the record's, else None.

    Raises:
        SmokeError: the body is not an EventBridge event, or the record's event says it was
            expired other than by the sweeper for staleness.
    """
    try:
        event = loads_unique(body)
        detail = event["detail"]
        matches = (
            event["source"] == SOURCE
            and event["detail-type"] == DETAIL_TYPE
            and detail["record"]["id"] == record_id
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise SmokeError(
            f"a message on the run's queue is not a ResourceExpired event: {exc}"
        ) from exc
    if not matches:
        return None
    if detail.get("trigger") != "sweeper" or not str(detail.get("reason")).startswith("stale"):
        raise SmokeError(f"the record's event says {detail.get('trigger')}: {detail.get('reason')}")
    if not detail.get("idempotencyKey"):
        raise SmokeError("the record's event carries no idempotencyKey")
    return dict(event)


def template_resources(template: Any) -> dict[str, Any]:
    """The ``Resources`` of a template as GetTemplate gives it (parsed, or JSON text).

    Raises:
        SmokeError: it has none.
    """
    if isinstance(template, str):
        template = loads_unique(template)
    resources = template.get("Resources") if isinstance(template, dict) else None
    if not isinstance(resources, dict):
        raise SmokeError("the stack's template has no Resources")
    return resources


def alarm_names(resources: list[dict[str, Any]]) -> list[str]:
    """The names of the alarms among a stack's resource summaries."""
    return [
        str(r["PhysicalResourceId"])
        for r in resources
        if r["ResourceType"] == "AWS::CloudWatch::Alarm" and r.get("PhysicalResourceId")
    ]


def missing_alarms(
    template: Any, resources: list[dict[str, Any]], described: list[str]
) -> list[str]:
    """The template's alarms (logical ids) that the stack did not create or CloudWatch does
    not describe (``described``: the alarm names DescribeAlarms returned)."""
    created = {
        r["LogicalResourceId"]: r.get("PhysicalResourceId")
        for r in resources
        if r["ResourceType"] == "AWS::CloudWatch::Alarm"
    }
    return sorted(
        name
        for name, resource in template_resources(template).items()
        if resource.get("Type") == "AWS::CloudWatch::Alarm"
        and created.get(name) not in set(described)
    )
