"""What a run leaves, in which order it goes, and its removal: everything the run created
(registered before each creation, so that a creation cut short is removed too), the stack,
and what the stack retains by design."""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .checks import template_resources
from .plan import TAG, SmokeError

if TYPE_CHECKING:
    from collections.abc import Callable

ORDER = ("function", "role", "rule", "queue", "stack", "table", "bucket", "log group", "folder")
"""Removal order: the run's own resources before the stack (its rule on the stack's bus,
its role holding the stack's managed policy: either would fail the stack's deletion), the
stack, then what the stack retains (``DeletionPolicy: Retain``), then local files."""
RETAINED_KINDS = {
    "AWS::DynamoDB::Table": "table",
    "AWS::S3::Bucket": "bucket",
    "AWS::Logs::LogGroup": "log group",
}
_ABSENT = {
    "ResourceNotFoundException",
    "NoSuchEntity",
    "NoSuchBucket",
    "AWS.SimpleQueueService.NonExistentQueue",
    "QueueDoesNotExist",
}


@dataclass(frozen=True)
class Leftover:
    """Something a run created (or may have): its kind (one of :data:`ORDER`, else only
    reported), its name, and what its removal needs besides (a rule's bus)."""

    kind: str
    name: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass
class Outcome:
    """A run's end: the step that failed and why (None: passed), the signal that ended it,
    what was removed and what is left (with why)."""

    failed_step: str | None = None
    error: str | None = None
    signum: int | None = None
    removed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 passed, 1 failed or something is left, 128 + the signal's number."""
        if self.signum is not None:
            return 128 + self.signum
        return 1 if self.failed_step or self.left else 0


def removal_order(leftovers: list[Leftover]) -> list[Leftover]:
    """``leftovers`` in :data:`ORDER` (registration order within a kind; kinds the run cannot
    remove last), each once."""
    unique = list(dict.fromkeys(leftovers))
    return sorted(unique, key=lambda x: ORDER.index(x.kind) if x.kind in ORDER else len(ORDER))


def retained(template: Any, resources: list[dict[str, Any]]) -> list[Leftover]:
    """What CloudFormation keeps when the stack is deleted: its resources whose template says
    ``DeletionPolicy: Retain`` (and that exist), as leftovers of the kinds the run removes
    (any other type is reported, not removed)."""
    policies = {
        name: (r.get("Type"), r.get("DeletionPolicy"))
        for name, r in template_resources(template).items()
    }
    found = []
    for resource in resources:
        kind, policy = policies.get(resource["LogicalResourceId"], (None, None))
        physical = resource.get("PhysicalResourceId")
        if policy == "Retain" and physical:
            found.append(Leftover(RETAINED_KINDS.get(str(kind), str(kind)), str(physical)))
    return found


def stack_resources(cfn: Any, stack: str) -> list[dict[str, Any]]:
    """Every resource summary of ``stack`` (a name or a stack id)."""
    found: list[dict[str, Any]] = []
    for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack):
        found += page["StackResourceSummaries"]
    return found


def is_absent(exc: Any) -> bool:
    """The ClientError says the resource is not there (removed already, or never made)."""
    error = exc.response.get("Error", {})
    code, message = str(error.get("Code")), str(error.get("Message"))
    return code in _ABSENT or (code == "ValidationError" and "does not exist" in message)


@dataclass
class Remover:
    """Removes leftovers with the account's clients (``client(service)``), saying each."""

    client: Callable[[str], Any]
    say: Callable[[str], None]
    stack_wait_delay: int = 15

    def destroy(self, leftovers: list[Leftover], outcome: Outcome, run: str) -> None:
        """Remove every leftover in :func:`removal_order` (a stack's retained resources join
        the list as it goes); what cannot be removed goes to ``outcome.left``, not raised."""
        pending = removal_order(leftovers)
        while pending:
            leftover = pending.pop(0)
            try:
                found, more = self.remove(leftover)
            except Exception as exc:
                outcome.left.append(f"{leftover}: {type(exc).__name__}: {exc}")
                self.say(f"LEFT {leftover}: {exc}")
                continue
            if found:
                outcome.removed.append(str(leftover))
                self.say(f"removed {leftover}")
            pending = removal_order([*pending, *more])
        if outcome.left:
            self.say(
                f"some resources are left: remove them by hand (each is tagged {TAG}={run}, "
                "or named after the run's stack)"
            )

    def remove(self, leftover: Leftover) -> tuple[bool, list[Leftover]]:
        """Remove one leftover: (whether it was there, what its removal leaves to remove).

        Raises:
            SmokeError: a kind the run does not remove.
        """
        from botocore.exceptions import ClientError

        removers: dict[str, Callable[[Leftover], None]] = {
            "function": lambda x: self.client("lambda").delete_function(FunctionName=x.name),
            "role": self._role,
            "rule": self._rule,
            "queue": self._queue,
            "table": self._table,
            "bucket": self._bucket,
            "log group": lambda x: self.client("logs").delete_log_group(logGroupName=x.name),
            "folder": lambda x: shutil.rmtree(x.name),
        }
        try:
            if leftover.kind == "stack":
                return True, self._stack(leftover.name)
            if leftover.kind not in removers:
                raise SmokeError("a resource of a type the run does not remove")
            removers[leftover.kind](leftover)
        except ClientError as exc:
            if is_absent(exc):
                return False, []
            raise
        except FileNotFoundError:
            return False, []
        return True, []

    def _stack(self, name: str) -> list[Leftover]:
        cfn = self.client("cloudformation")
        [stack] = cfn.describe_stacks(StackName=name)["Stacks"]
        stack_id = stack["StackId"]
        template = cfn.get_template(StackName=stack_id)["TemplateBody"]
        keep = retained(template, stack_resources(cfn, stack_id))
        cfn.delete_stack(StackName=stack_id)
        cfn.get_waiter("stack_delete_complete").wait(
            StackName=stack_id,
            WaiterConfig={
                "Delay": self.stack_wait_delay,
                "MaxAttempts": 3600 // self.stack_wait_delay,
            },
        )
        # A stack deleted mid-creation lists the resources it finished creating only now.
        with contextlib.suppress(Exception):
            keep += retained(template, stack_resources(cfn, stack_id))
        return keep

    def _role(self, leftover: Leftover) -> None:
        iam = self.client("iam")
        attached = iam.list_attached_role_policies(RoleName=leftover.name)["AttachedPolicies"]
        for policy in attached:
            iam.detach_role_policy(RoleName=leftover.name, PolicyArn=policy["PolicyArn"])
        iam.delete_role(RoleName=leftover.name)

    def _rule(self, leftover: Leftover) -> None:
        events, bus = self.client("events"), leftover.detail
        targets = events.list_targets_by_rule(Rule=leftover.name, EventBusName=bus)["Targets"]
        if targets:
            ids = [t["Id"] for t in targets]
            events.remove_targets(Rule=leftover.name, EventBusName=bus, Ids=ids)
        events.delete_rule(Name=leftover.name, EventBusName=bus)

    def _queue(self, leftover: Leftover) -> None:
        sqs = self.client("sqs")
        sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=leftover.name)["QueueUrl"])

    def _table(self, leftover: Leftover) -> None:
        dynamodb = self.client("dynamodb")
        dynamodb.update_table(TableName=leftover.name, DeletionProtectionEnabled=False)
        dynamodb.delete_table(TableName=leftover.name)

    def _bucket(self, leftover: Leftover) -> None:
        s3 = self.client("s3")
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=leftover.name):
            objects = [
                {"Key": o["Key"], "VersionId": o["VersionId"]}
                for o in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
            ]
            for start in range(0, len(objects), 1000):  # DeleteObjects takes 1,000
                chunk = objects[start : start + 1000]
                s3.delete_objects(Bucket=leftover.name, Delete={"Objects": chunk})
        s3.delete_bucket(Bucket=leftover.name)
