"""What a run is called, deploys with, and costs; whether it may start at all."""

from __future__ import annotations

import json
import secrets
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

OPT_IN = "SANDBOX_LEDGER_AWS_TESTS"
PREFIX = "sandbox-ledger-smoke-"
TAG = "sandbox-ledger-smoke"
"""The tag every resource of a run carries, its value the run's id."""
STALE_AFTER_SECONDS = 60
"""The scratch stack's window (the shortest the construct allows): a record the first sweep
observes expires at a sweep this long after."""

ESTIMATE = (
    "cost and time (an estimate: no run on a real account has been made yet): under "
    "US$0.05 per run (Lambda, DynamoDB on-demand, EventBridge, SQS and S3 requests in the "
    "cents or below; the six alarms and the dashboard billed by the hour they exist; the "
    "stack's Lambda asset, a few MB, stays in the CDK bootstrap bucket, as every cdk deploy "
    "leaves it); 10 to 15 minutes (CloudFormation creates the stack in 3 to 6, the sweep "
    "waits out a 60 s window, the stack and its retained table, bucket and log groups go in "
    "3 to 5)"
)


class SmokeError(RuntimeError):
    """A step found the deployment other than it should be; the message says what."""


class RefusedError(SmokeError):
    """The run does not start: not opted in, no credentials, no region."""


@dataclass(frozen=True)
class Names:
    """Every name of one run, from its id (hex): the stack, its table and the run's own
    resources start with ``sandbox-ledger-smoke-<id>``."""

    run: str

    @classmethod
    def new(cls) -> Names:
        return cls(secrets.token_hex(4))

    @property
    def stack(self) -> str:
        return PREFIX + self.run

    @property
    def table(self) -> str:
        return self.stack

    @property
    def events(self) -> str:
        """The run's SQS queue and the rule that feeds it from the stack's bus."""
        return f"{self.stack}-events"

    @property
    def worker(self) -> str:
        """The worker function and its role."""
        return f"{self.stack}-worker"

    @property
    def tags(self) -> dict[str, str]:
        return {TAG: self.run}

    def context(self) -> dict[str, str]:
        """The app's context for the scratch stack (``cdk deploy -c key=value``)."""
        return {
            "stack_name": self.stack,
            "table_name": self.table,
            "stale_after_seconds": str(STALE_AFTER_SECONDS),
            "log_retention_days": "1",
            "tags": json.dumps(self.tags, separators=(",", ":")),
        }


def deploy_command(cdk: str, names: Names, outdir: Path) -> str:
    """The shell command deploying the scratch stack: ``cdk`` (the Makefile's offline CDK
    CLI, environment assignments included) with the run's context, no approval prompt, the
    cloud assembly written to ``outdir``."""
    args = ["deploy", "--no-notices", "--require-approval", "never", "--output", str(outdir)]
    for key, value in names.context().items():
        args += ["-c", f"{key}={value}"]
    return f"{cdk} {shlex.join([*args, names.stack])}"


def refusal(environ: Mapping[str, str]) -> str | None:
    """Why the run must not start given ``environ`` (None: opted in)."""
    if environ.get(OPT_IN) != "1":
        return (
            f"{OPT_IN}=1 is not set: the deploy smoke test creates and destroys a stack on "
            "the AWS account of your credentials, at a small cost; set it to run"
        )
    return None


@dataclass(frozen=True)
class Caller:
    account: str
    arn: str
    region: str


def identify(session: Any, endpoint_url: str | None) -> Caller:
    """Who the credentials are (STS GetCallerIdentity) and the region.

    Raises:
        RefusedError: no region, no credentials, or STS refused them.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    region = session.region_name
    if not region:
        raise RefusedError("no region: set AWS_REGION (or AWS_DEFAULT_REGION, or a profile's)")
    try:
        who = session.client("sts", endpoint_url=endpoint_url).get_caller_identity()
    except (BotoCoreError, ClientError) as exc:
        raise RefusedError(f"the credentials do not resolve: {exc}") from exc
    return Caller(account=who["Account"], arn=who["Arn"], region=region)


def introduction(caller: Caller, names: Names) -> list[str]:
    """What the run says before it starts."""
    return [
        f"account {caller.account} ({caller.arn}), region {caller.region}",
        f"scratch stack {names.stack} (tag {TAG}={names.run}), removed at the end",
        ESTIMATE,
    ]
