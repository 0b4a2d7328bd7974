"""cdk-nag AwsSolutions findings this design accepts, each with its reason."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import aws_cdk as cdk
from aws_cdk import aws_sns as sns

if TYPE_CHECKING:
    from constructs import IConstruct

    from .deployment import SandboxLedger

# (construct path under the SandboxLedger construct, rule id, why the finding does not apply
# there); ``{Path}`` in a rule id stands for the logical id of the resource at that path.
ACKNOWLEDGED: list[tuple[str, str, str]] = [
    (
        "UnreportedExpiries",
        "AwsSolutions::AwsSolutions-S1",
        "Only the TTL handler's role writes and reads this bucket, under two prefixes; "
        "an access-log bucket would be one more retained bucket to secure for no reader.",
    ),
    (
        "TtlExpiryRole",
        "AwsSolutions::AwsSolutions-IAM5[Resource::<{UnreportedExpiries}.Arn>/unreported/*]",
        "The handler keeps (and a replay reads back and removes) one object per unreported "
        "TTL removal, named when it happens; the grant is this bucket's unreported/ prefix.",
    ),
    (
        "TtlExpiryRole",
        "AwsSolutions::AwsSolutions-IAM5[Resource::<{UnreportedExpiries}.Arn>/aws/lambda/*]",
        "Lambda writes the stream mapping's discarded batches with this role under aws/lambda/ "
        "(names it chooses); the replay reads and removes them. Only that prefix is granted.",
    ),
    (
        "TtlExpiryRole",
        "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
        "dynamodb:ListStreams, added by the stream event source, has no resource-level scope.",
    ),
]

# With the ``tracing`` option: active tracing grants X-Ray's two write actions.
TRACING_ACKNOWLEDGED: list[tuple[str, str, str]] = [
    (
        "SweeperRole",
        "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
        "xray:PutTraceSegments and xray:PutTelemetryRecords (active tracing) have no "
        "resource-level scope.",
    ),
]


# When the deployment creates its alarm topic.
TOPIC_ACKNOWLEDGED: list[tuple[str, str, str]] = [
    (
        "AlarmTopic",
        "AwsSolutions::AwsSolutions-SNS2",
        "The topic carries alarm names and states, no ledger data; CloudWatch cannot publish "
        "to a topic encrypted with the AWS managed SNS key, and a key of our own for it would "
        "be one more retained key. Give alarm_topic to use an encrypted topic of yours.",
    ),
]


def acknowledge(ledger: SandboxLedger) -> None:
    """Acknowledge each finding of :data:`ACKNOWLEDGED` (with the ``tracing`` setting, of
    :data:`TRACING_ACKNOWLEDGED`; with the topic it creates, of :data:`TOPIC_ACKNOWLEDGED`)
    on its construct of ``ledger`` only."""
    findings = list(ACKNOWLEDGED)
    if ledger.config.tracing:
        findings += TRACING_ACKNOWLEDGED
    if isinstance(ledger.node.try_find_child("AlarmTopic"), sns.Topic):  # created, not given
        findings += TOPIC_ACKNOWLEDGED
    for path, rule, reason in findings:
        scope = _find(ledger, path)
        # A rule naming a resource by its logical id: ``{Path}`` stands for it.
        for name in re.findall(r"\{(\w+)\}", rule):
            cfn = _find(ledger, name).node.default_child
            assert isinstance(cfn, cdk.CfnElement)
            rule = rule.replace(f"{{{name}}}", cdk.Stack.of(cfn).resolve(cfn.logical_id))
        cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))


def _find(root: IConstruct, path: str) -> IConstruct:
    scope = root
    for part in path.split("/"):
        scope = scope.node.find_child(part)
    return scope
