"""The run: its steps in order, each a small method over the run's state, and the removal
of everything the run created, whatever happened (a failed step, Ctrl-C, SIGTERM)."""

from __future__ import annotations

import contextlib
import json
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .checks import (
    EVENT_PATTERN,
    alarm_names,
    check_worker_answers,
    expired_event,
    library_asset,
    missing_alarms,
    physical_id,
    queue_policy,
    smoke_record,
    sweep_summary,
    trust_policy,
    worker_events,
    worker_zip,
)
from .cleanup import Leftover, Outcome, Remover, stack_resources
from .plan import STALE_AFTER_SECONDS, SmokeError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .plan import Names

SWEEPS = 3
EVENT_WAIT_SECONDS = 120.0
ROLE_WAIT_SECONDS = 60
"""How long a new role may stay unassumable by Lambda (IAM is eventually consistent)."""

Deploy = Callable[["Names", Path], Path]
"""Deploys the scratch stack (given a scratch folder for its cloud assembly); returns the
cloud assembly's folder."""
Invoke = Callable[[str, dict[str, Any]], dict[str, Any]]
"""Invokes a Lambda function with a JSON payload; returns its JSON answer."""


class Interrupted(BaseException):
    """SIGTERM arrived during a step (Ctrl-C raises KeyboardInterrupt)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Smoke:
    """One run: its names, the account's clients (boto3 ``session`` at ``endpoint_url``),
    how it deploys and invokes, and what it must remove (``leftovers``, each registered
    before its creation)."""

    names: Names
    session: Any
    deploy: Deploy
    invoke: Invoke
    worker_handler: Path
    endpoint_url: str | None = None
    sleep: Callable[[float], None] = time.sleep
    say: Callable[[str], None] = print
    event_wait_seconds: float = EVENT_WAIT_SECONDS
    stack_wait_delay: int = 15
    leftovers: list[Leftover] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    """What the steps found: the table, the sweeper, the bus, the record, ..."""
    _clients: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(service, endpoint_url=self.endpoint_url)
        return self._clients[service]

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        return [
            ("deploy the scratch stack", self.deploy_stack),
            ("read the stack and its descriptor", self.read_stack),
            ("subscribe a queue to the stack's bus", self.subscribe),
            ("create the worker function", self.create_worker),
            ("invoke the worker", self.invoke_worker),
            ("sweep a stale resource record", self.sweep),
            ("receive its ResourceExpired event", self.receive),
            ("check the alarms", self.check_alarms),
        ]

    def run(self) -> Outcome:
        """Every step, then the removal of everything registered, whatever happened."""
        outcome, started, step = Outcome(), time.monotonic(), ""
        with _signals(self.say) as removing:
            try:
                for step, action in self.steps():
                    began = time.monotonic()
                    self.say(f"... {step}")
                    action()
                    self.say(f"ok  {step} ({time.monotonic() - began:.0f} s)")
            except Interrupted as exc:
                outcome.failed_step, outcome.error, outcome.signum = step, str(exc), exc.signum
            except KeyboardInterrupt:
                outcome.failed_step, outcome.error = step, "interrupted (Ctrl-C)"
                outcome.signum = signal.SIGINT
            except Exception as exc:
                outcome.failed_step, outcome.error = step, f"{type(exc).__name__}: {exc}"
            removing()
            if outcome.failed_step:
                self.say(f"FAILED {outcome.failed_step}: {outcome.error}")
            remover = Remover(self.client, self.say, self.stack_wait_delay)
            remover.destroy(self.leftovers, outcome, self.names.run)
        verdict = "FAILED" if outcome.failed_step else "passed"
        self.say(f"deploy smoke test {verdict} in {time.monotonic() - started:.0f} s")
        return outcome

    def deploy_stack(self) -> None:
        outdir = Path(tempfile.mkdtemp(prefix=f"{self.names.stack}-"))
        self.leftovers += [
            Leftover("folder", str(outdir)),
            Leftover("stack", self.names.stack),
            # The stack retains its table; named by the run, it is removed even when the
            # deploy fails before the stack lists it.
            Leftover("table", self.names.table),
        ]
        self.state["assembly"] = self.deploy(self.names, outdir)

    def read_stack(self) -> None:
        cfn = self.client("cloudformation")
        [stack] = cfn.describe_stacks(StackName=self.names.stack)["Stacks"]
        if stack["StackStatus"] not in ("CREATE_COMPLETE", "UPDATE_COMPLETE"):
            raise SmokeError(f"the stack is {stack['StackStatus']}")
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        missing = {"TableName", "WorkerPolicyArn"} - set(outputs)
        if missing:
            raise SmokeError(f"the stack has no output {', '.join(sorted(missing))}")
        resources = stack_resources(cfn, self.names.stack)
        table = outputs["TableName"]
        descriptor = self._store(table).descriptor()
        if descriptor is None or not descriptor.event_bus_name:
            raise SmokeError(f"the table {table} has no descriptor naming a bus")
        self.state.update(
            table=table,
            worker_policy=outputs["WorkerPolicyArn"],
            sweeper=physical_id(resources, "AWS::Lambda::Function", "Sweeper"),
            bus=descriptor.event_bus_name,
            window=descriptor.stale_after_seconds or STALE_AFTER_SECONDS,
        )
        self.say(f"    table {table}, bus {descriptor.event_bus_name}")

    def subscribe(self) -> None:
        sqs, events, bus, name = (
            self.client("sqs"),
            self.client("events"),
            self.state["bus"],
            self.names.events,
        )
        self.leftovers += [Leftover("rule", name, bus), Leftover("queue", name)]
        tags = [{"Key": k, "Value": v} for k, v in self.names.tags.items()]
        rule_arn = events.put_rule(
            Name=name, EventBusName=bus, EventPattern=json.dumps(EVENT_PATTERN), Tags=tags
        )["RuleArn"]
        url = sqs.create_queue(QueueName=name, tags=self.names.tags)["QueueUrl"]
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        queue_arn = attributes["Attributes"]["QueueArn"]
        sqs.set_queue_attributes(
            QueueUrl=url, Attributes={"Policy": queue_policy(queue_arn, rule_arn)}
        )
        events.put_targets(Rule=name, EventBusName=bus, Targets=[{"Id": "smoke", "Arn": queue_arn}])
        self.state["queue"] = url

    def create_worker(self) -> None:
        from botocore.exceptions import ClientError

        from sandbox_ledger_cdk.deployment import ARCHITECTURE, RUNTIME

        iam, lam, name = self.client("iam"), self.client("lambda"), self.names.worker
        code = worker_zip(library_asset(self.state["assembly"]), self.worker_handler)
        self.leftovers.append(Leftover("role", name))
        role = iam.create_role(
            RoleName=name,
            AssumeRolePolicyDocument=trust_policy("lambda.amazonaws.com"),
            Tags=[{"Key": k, "Value": v} for k, v in self.names.tags.items()],
        )["Role"]["Arn"]
        iam.attach_role_policy(RoleName=name, PolicyArn=self.state["worker_policy"])
        self.leftovers += [Leftover("function", name), Leftover("log group", f"/aws/lambda/{name}")]
        deadline = time.monotonic() + ROLE_WAIT_SECONDS
        while True:
            try:
                lam.create_function(
                    FunctionName=name,
                    Runtime=RUNTIME.name,
                    Architectures=[ARCHITECTURE.name],
                    Role=role,
                    Handler="handler.handler",
                    Code={"ZipFile": code},
                    Timeout=30,
                    MemorySize=512,
                    Environment={"Variables": {"TABLE_NAME": self.state["table"]}},
                    Tags=self.names.tags,
                )
                break
            except ClientError as exc:
                code_ = exc.response["Error"]["Code"]
                if code_ != "InvalidParameterValueException" or time.monotonic() > deadline:
                    raise
                self.sleep(5)  # the new role is not assumable yet
        for _ in range(30):
            state = lam.get_function_configuration(FunctionName=name).get("State", "Active")
            if state == "Active":
                return
            if state == "Failed":
                raise SmokeError(f"the worker function {name} failed to become active")
            self.sleep(2)
        raise SmokeError(f"the worker function {name} is still {state} after a minute")

    def invoke_worker(self) -> None:
        answers = [self.invoke(self.names.worker, e) for e in worker_events(self.names.run)]
        check_worker_answers(answers)

    def sweep(self) -> None:
        from sandbox_ledger.resources import ResourceActivityRecord

        store = self._store(self.state["table"])
        record = ResourceActivityRecord.model_validate(
            smoke_record(self.names.run, datetime.now(UTC))
        )
        store.put(record)
        self.state["record"] = record.id
        for sweep in range(1, SWEEPS + 1):
            summary = self.invoke(self.state["sweeper"], {})
            if record.id in summary.get("expired", []):
                self.say(f"    sweep {sweep} expired the record {record.id}")
                return
            if store.get(record.id) is None:
                self.say(f"    the scheduled sweep expired the record {record.id}")
                return
            if sweep < SWEEPS:
                wait = self.state["window"] + 10
                self.say(f"    sweep {sweep}: {sweep_summary(summary)}; waiting {wait} s")
                self.sleep(wait)
        raise SmokeError(f"the record {record.id} is still there after {SWEEPS} sweeps")

    def receive(self) -> None:
        sqs, url = self.client("sqs"), self.state["queue"]
        deadline = time.monotonic() + self.event_wait_seconds
        while (remaining := deadline - time.monotonic()) > 0:
            got = sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=min(20, int(remaining))
            )
            for message in got.get("Messages", []):
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
                event = expired_event(message["Body"], self.state["record"])
                if event is not None:
                    self.say(f"    event {event.get('id')}: {event['detail']['reason']}")
                    return
        raise SmokeError(
            f"no ResourceExpired event for {self.state['record']} arrived in "
            f"{self.event_wait_seconds:.0f} s"
        )

    def check_alarms(self) -> None:
        cfn, cloudwatch = self.client("cloudformation"), self.client("cloudwatch")
        template = cfn.get_template(StackName=self.names.stack)["TemplateBody"]
        resources = stack_resources(cfn, self.names.stack)
        names, described = alarm_names(resources), []
        for start in range(0, len(names), 100):  # DescribeAlarms takes 100 names
            got = cloudwatch.describe_alarms(AlarmNames=names[start : start + 100])
            described += [a["AlarmName"] for a in got["MetricAlarms"]]
        missing = missing_alarms(template, resources, described)
        if missing:
            raise SmokeError(f"alarms in the template but not in CloudWatch: {', '.join(missing)}")
        self.say(f"    {len(described)} alarms: {', '.join(sorted(described))}")

    def _store(self, table: str) -> Any:
        from sandbox_ledger.resources import SyncResourceRecordStore

        return SyncResourceRecordStore(table, session=self.session, endpoint_url=self.endpoint_url)


@contextlib.contextmanager
def _signals(say: Callable[[str], None]) -> Iterator[Callable[[], None]]:
    """While the steps run, SIGTERM raises :class:`Interrupted` (Ctrl-C KeyboardInterrupt);
    once the caller calls the function yielded, the removal has begun and either signal is
    noted, not obeyed: stopping the removal would leave resources behind."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    removing = False

    def handle(signum: int, frame: Any) -> None:
        if removing:
            say(f"{signal.Signals(signum).name}: removing what the run created first")
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            raise Interrupted(signum)

    def begin_removal() -> None:
        nonlocal removing
        removing = True

    previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield begin_removal
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
