"""cdk-nag AwsSolutions findings this design accepts, each with its reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

import aws_cdk as cdk

if TYPE_CHECKING:
    from constructs import IConstruct

# (construct path under the stack, rule id, why the finding does not apply there)
ACKNOWLEDGED: list[tuple[str, str, str]] = [
    (
        "StreamFailures",
        "AwsSolutions::AwsSolutions-SQS3",
        "This queue is the on-failure destination (DLQ) of the stream mapping itself.",
    ),
    (
        "TtlExpiryRole",
        "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
        "dynamodb:ListStreams, added by the stream event source, has no resource-level scope.",
    ),
]


def acknowledge(stack: IConstruct) -> None:
    """Acknowledge each finding of :data:`ACKNOWLEDGED` on its construct only."""
    for path, rule, reason in ACKNOWLEDGED:
        scope = stack
        for part in path.split("/"):
            scope = scope.node.find_child(part)
        cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))
