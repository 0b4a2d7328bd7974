"""The account's side of a run (the CDK CLI deploys, Lambda invokes) and the command line:
``python -m sandbox_ledger_cdk.smoke`` (``make deploy-smoke``)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox_ledger import loads_unique

from .plan import (
    OPT_IN,
    Caller,
    Names,
    RefusedError,
    SmokeError,
    deploy_command,
    identify,
    introduction,
    refusal,
)
from .run import Smoke

if TYPE_CHECKING:
    from collections.abc import Callable

    from .run import Invoke

REPOSITORY = Path(__file__).resolve().parents[3]
"""The checkout this module runs from (its cdk.json and examples/worker)."""


@dataclass(frozen=True)
class CdkDeploy:
    """Deploys with the CDK CLI (``command``, the Makefile's offline settings included) from
    the repository at ``app_dir``, once the account is known to be bootstrapped."""

    command: str
    app_dir: Path
    session: Any
    caller: Caller
    endpoint_url: str | None = None

    def __call__(self, names: Names, outdir: Path) -> Path:
        from botocore.exceptions import ClientError

        cfn = self.session.client("cloudformation", endpoint_url=self.endpoint_url)
        try:
            cfn.describe_stacks(StackName="CDKToolkit")
        except ClientError as exc:
            raise SmokeError(
                f"the account is not bootstrapped for the CDK in {self.caller.region}: run "
                f"npx cdk bootstrap aws://{self.caller.account}/{self.caller.region}"
            ) from exc
        env = {**os.environ, "AWS_REGION": self.caller.region}
        if self.endpoint_url:
            env["AWS_ENDPOINT_URL"] = self.endpoint_url
        done = subprocess.run(
            ["sh", "-c", deploy_command(self.command, names, outdir)],
            cwd=self.app_dir,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise SmokeError(f"cdk deploy failed (exit {done.returncode}; its output is above)")
        return outdir


def lambda_invoker(client: Any, sleep: Callable[[float], None] = time.sleep) -> Invoke:
    """Invoke through Lambda, synchronously; a function error raises :class:`SmokeError`
    with its message. A throttled invocation (the sweeper's reserved concurrency is 1, and
    its schedule may be running it) did not run: it is tried again, up to five times."""

    def invoke(name: str, payload: dict[str, Any]) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        for attempt in range(5):
            try:
                answer = client.invoke(FunctionName=name, Payload=json.dumps(payload).encode())
                break
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TooManyRequestsException" or attempt == 4:
                    raise
                sleep(2 * (attempt + 1))
        body = answer["Payload"].read()
        if answer.get("FunctionError"):
            raise SmokeError(f"{name} failed: {body[:2000]!r}")
        try:
            value = loads_unique(body)
        except ValueError as exc:
            raise SmokeError(f"{name} answered other than JSON: {body[:200]!r}") from exc
        if not isinstance(value, dict):
            raise SmokeError(f"{name} answered {value!r}, not an object")
        return value

    return invoke


def main(argv: list[str] | None = None) -> int:
    """The command line: 0 passed, 1 failed (or something is left), 2 refused to start,
    128 + the signal's number when Ctrl-C or SIGTERM ended it."""
    parser = argparse.ArgumentParser(
        prog="python -m sandbox_ledger_cdk.smoke",
        description="Deploy the stack as a scratch stack, exercise it and destroy it "
        f"(needs {OPT_IN}=1 and AWS credentials).",
    )
    parser.add_argument("--cdk", default="npx cdk", help="the CDK CLI command (make: $(CDK))")
    parser.add_argument("--app-dir", type=Path, default=REPOSITORY, help="holds cdk.json")
    parser.add_argument("--worker", type=Path, help="default: examples/worker/handler.py")
    parser.add_argument("--endpoint-url", help="an endpoint in place of AWS's (tests)")
    args = parser.parse_args(argv)

    def refuse(why: str) -> int:
        print(f"deploy-smoke: refused: {why}", file=sys.stderr)
        return 2

    why = refusal(os.environ)
    if why:
        return refuse(why)
    worker = args.worker or args.app_dir / "examples" / "worker" / "handler.py"
    if not (args.app_dir / "cdk.json").is_file() or not worker.is_file():
        return refuse(f"{args.app_dir} is not the repository (no cdk.json or {worker})")
    import boto3
    from botocore.config import Config

    # AWS_REGION as the AWS CLI and the CDK read it (boto3 alone reads AWS_DEFAULT_REGION).
    session = boto3.session.Session(region_name=os.environ.get("AWS_REGION") or None)
    try:
        caller = identify(session, args.endpoint_url)
    except RefusedError as exc:
        return refuse(str(exc))
    names = Names.new()
    for line in introduction(caller, names):
        print(f"deploy-smoke: {line}")
    # A sweep may take its function's whole timeout (5 minutes); an invocation is never
    # retried (a retry would be a second sweep, or a delivery the run did not mean).
    no_retry = Config(read_timeout=330, retries={"total_max_attempts": 1})
    smoke = Smoke(
        names=names,
        session=session,
        deploy=CdkDeploy(args.cdk, args.app_dir, session, caller, args.endpoint_url),
        invoke=lambda_invoker(
            session.client("lambda", endpoint_url=args.endpoint_url, config=no_retry)
        ),
        worker_handler=worker,
        endpoint_url=args.endpoint_url,
        say=lambda line: print(f"deploy-smoke: {line}", flush=True),
    )
    return smoke.run().exit_code
