"""The deploy smoke test (``make deploy-smoke``, ``sandbox_ledger_cdk.smoke``): its refusals,
its pure pieces, and its run against moto as far as moto's CloudFormation allows.

What moto cannot do, and what stands in for it here:

- ``cdk deploy`` (asset publishing, bootstrap, CloudFormation's own engine): the session's
  synthesized template is created in moto's CloudFormation (``moto_cloudformation``), the
  descriptor's custom resource written by hand (moto runs custom resources in docker) and
  the bus's name given for its ``Ref`` (moto renders it as an object);
- Lambda invocations (moto runs them in docker): the functions' own code runs in process
  with the environment moto holds for each, the worker from the very zip the run uploaded;
- CloudWatch alarms (moto's CloudFormation skips the type): the run reports the six alarms
  missing, and the check's pass is tested on its own;
- IAM's evaluation of the worker policy, Lambda's runtime and packaging, EventBridge's
  delivery timing and real durations: only a run on an account shows them.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

pytest.importorskip("aws_cdk")
from deploy.moto_cloudformation import (
    create_stack,
    remove_what_delete_stack_leaves,
    resolve_descriptor_call,
)
from sandbox_ledger_cdk import LedgerConfig
from sandbox_ledger_cdk.config import APP_CONTEXT_KEYS
from sandbox_ledger_cdk.smoke import checks, cleanup, cli, plan
from sandbox_ledger_cdk.smoke import run as runner

ROOT = Path(__file__).parents[2]
WORKER = ROOT / "examples" / "worker" / "handler.py"
ALARMS = [
    "StreamFailureBatchesA452D4CD",
    "SweeperErrors22EBBC0D",
    "TableReadThrottleEventsEA46911D",
    "TableWriteThrottleEvents81E442D3",
    "TtlHandlerErrors4BF43043",
    "UnreportedExpiriesKept21D69AC0",
]


# --- Refusals ----------------------------------------------------------------------------


def test_it_refuses_without_the_opt_in(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(plan.OPT_IN, raising=False)
    assert cli.main([]) == 2
    assert "SANDBOX_LEDGER_AWS_TESTS=1 is not set" in capsys.readouterr().err
    monkeypatch.setenv(plan.OPT_IN, "yes")  # only 1 opts in
    assert cli.main([]) == 2


def test_it_refuses_without_credentials(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv(plan.OPT_IN, "1")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert cli.main([]) == 2
    assert "the credentials do not resolve: Unable to locate credentials" in (
        capsys.readouterr().err
    )
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert cli.main([]) == 2
    assert "no region" in capsys.readouterr().err


def test_it_refuses_outside_the_repository(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv(plan.OPT_IN, "1")
    assert cli.main(["--app-dir", str(tmp_path)]) == 2
    assert "is not the repository" in capsys.readouterr().err


def test_it_says_who_where_what_and_the_estimate(moto_endpoint: str) -> None:
    session = boto3.session.Session()
    caller = plan.identify(session, moto_endpoint)
    assert (caller.account, caller.region) == ("123456789012", "us-east-1")
    names = plan.Names("0a1b2c3d")
    lines = plan.introduction(caller, names)
    assert lines[0].startswith("account 123456789012 (arn:aws:") and "us-east-1" in lines[0]
    assert "sandbox-ledger-smoke-0a1b2c3d" in lines[1]
    assert "an estimate" in lines[2] and "no run on a real account" in lines[2]


# --- Pure pieces -------------------------------------------------------------------------


def test_names_are_unique_per_run_and_the_context_is_the_apps() -> None:
    names = plan.Names.new()
    assert names != plan.Names.new()
    assert names.stack == f"sandbox-ledger-smoke-{names.run}" and len(names.run) == 8
    context = names.context()
    config = LedgerConfig.from_context(context, also_known=APP_CONTEXT_KEYS)
    assert (config.table_name, config.stale_after_seconds) == (names.stack, 60)
    assert json.loads(context["tags"]) == {"sandbox-ledger-smoke": names.run}


def test_the_deploy_command_is_one_shell_line_of_the_makefiles_cdk() -> None:
    names = plan.Names("00ff00ff")
    command = plan.deploy_command('PATH="/v/bin:$PATH" npx cdk', names, Path("/tmp/out dir"))
    assert command.startswith('PATH="/v/bin:$PATH" npx cdk deploy --no-notices ')
    assert "--require-approval never --output '/tmp/out dir'" in command
    assert """-c 'tags={"sandbox-ledger-smoke":"00ff00ff"}'""" in command
    assert command.endswith(" sandbox-ledger-smoke-00ff00ff")
    done = subprocess.run(
        ["sh", "-c", command.replace("npx cdk", "printf '%s\\n'")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.splitlines()[-1] == "sandbox-ledger-smoke-00ff00ff"
    assert 'tags={"sandbox-ledger-smoke":"00ff00ff"}' in done.stdout.splitlines()


def test_the_worker_answers_are_checked() -> None:
    session = {"name": "smoke", "sandboxId": "sb", "status": "running", "execCount": 1}
    good = [
        {"ok": True, "stored": True, "session": {**session, "execCount": 0}},
        {"ok": True, "stored": True, "session": session},
        {"ok": True, "stored": False, "session": session},
    ]
    checks.check_worker_answers(good)
    with pytest.raises(plan.SmokeError, match="stored once each"):
        checks.check_worker_answers([*good[:2], {**good[2], "stored": True}])
    with pytest.raises(plan.SmokeError, match="1 exec, running"):
        checks.check_worker_answers([*good[:2], {**good[2], "session": None}])


def _event(record_id: str, **detail: Any) -> str:
    return json.dumps(
        {
            "id": "e-1",
            "source": "sandbox-ledger.resources",
            "detail-type": "ResourceExpired",
            "detail": {
                "record": {"id": record_id},
                "reason": "stale: no heartbeat for 1m0s in phase ready",
                "trigger": "sweeper",
                "idempotencyKey": f"{record_id}/x/1",
                **detail,
            },
        }
    )


def test_the_event_is_recognised_and_checked() -> None:
    assert checks.expired_event(_event("r-1"), "r-1")["id"] == "e-1"  # type: ignore[index]
    assert checks.expired_event(_event("r-2"), "r-1") is None
    with pytest.raises(plan.SmokeError, match="ttl"):
        checks.expired_event(_event("r-1", trigger="ttl"), "r-1")
    with pytest.raises(plan.SmokeError, match="not a ResourceExpired event"):
        checks.expired_event('{"detail": 1, "detail": 2}', "r-1")  # a key named twice
    with pytest.raises(plan.SmokeError, match="not a ResourceExpired event"):
        checks.expired_event("[]", "r-1")


def test_alarms_pass_when_each_of_the_templates_exists(
    synthesized: tuple[dict[str, Any], Path],
) -> None:
    template = synthesized[0]
    resources = [
        {
            "LogicalResourceId": name,
            "ResourceType": "AWS::CloudWatch::Alarm",
            "PhysicalResourceId": f"s-{name}-X",
        }
        for name in ALARMS
    ]
    described = [f"s-{name}-X" for name in ALARMS]
    assert checks.missing_alarms(template, resources, described) == []
    assert checks.missing_alarms(json.dumps(template), resources, described[1:]) == ALARMS[:1]
    assert checks.missing_alarms(template, resources[2:], described) == ALARMS[:2]


def test_removal_order_puts_the_runs_own_resources_before_the_stack() -> None:
    given = [
        cleanup.Leftover("folder", "/tmp/x"),
        cleanup.Leftover("stack", "s"),
        cleanup.Leftover("table", "t"),
        cleanup.Leftover("rule", "r", "bus"),
        cleanup.Leftover("queue", "q"),
        cleanup.Leftover("role", "w"),
        cleanup.Leftover("function", "w"),
        cleanup.Leftover("AWS::Some::Thing", "p"),
        cleanup.Leftover("table", "t"),
    ]
    assert [x.kind for x in cleanup.removal_order(given)] == [
        "function",
        "role",
        "rule",
        "queue",
        "stack",
        "table",
        "folder",
        "AWS::Some::Thing",
    ]


def test_what_the_stack_retains_is_found_on_its_template(
    synthesized: tuple[dict[str, Any], Path],
) -> None:
    template = synthesized[0]
    resources = [
        {"LogicalResourceId": name, "ResourceType": r["Type"], "PhysicalResourceId": f"p-{name}"}
        for name, r in template["Resources"].items()
    ]
    assert sorted((x.kind, x.name) for x in cleanup.retained(template, resources)) == [
        ("bucket", "p-UnreportedExpiriesC263E78D"),
        ("log group", "p-LedgerDescriptorLogsD54BD619"),
        ("log group", "p-SweeperLogs977E0681"),
        ("log group", "p-TtlExpiryLogs0F050EFD"),
        ("table", "p-LedgerTable9343E4AA"),
    ]


def test_the_worker_is_the_example_on_the_stacks_lambda_asset(
    synthesized: tuple[dict[str, Any], Path],
) -> None:
    asset = checks.library_asset(synthesized[1])
    with zipfile.ZipFile(io.BytesIO(checks.worker_zip(asset, WORKER))) as archive:
        names = set(archive.namelist())
        assert archive.read("handler.py") == WORKER.read_bytes()
    assert {"sandbox_ledger/__init__.py", "pydantic/__init__.py"} <= names
    assert not any(n.startswith("boto3/") for n in names)  # the Lambda runtime ships it


# --- The run against moto ------------------------------------------------------------


class MotoAccount:
    """What stands in for the account: the deploy creates the session's template in moto's
    CloudFormation, invocations run the functions' code in process, and sleeping moves the
    sweeper's clock instead of waiting."""

    def __init__(
        self,
        synthesized: tuple[dict[str, Any], Path],
        endpoint: str,
        wait_for_indexes: Callable[[], None],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        self.template, self.outdir = synthesized
        self.endpoint = endpoint
        self.wait_for_indexes = wait_for_indexes
        self.monkeypatch = monkeypatch
        self.slept = 0.0
        self.stacks: list[str] = []
        self.invoked: list[str] = []
        self.worker: dict[str, Any] = {}
        """The worker function as Lambda holds it: runtime, architecture, its role's policies."""
        self.on_invoke: Callable[[], None] | None = None

    def deploy(self, names: plan.Names, scratch: Path) -> Path:
        assert scratch.is_dir()
        deployable = json.loads(json.dumps(self.template))
        resources = deployable["Resources"]
        [bus] = [n for n, r in resources.items() if r["Type"] == "AWS::Events::EventBus"]
        bus_name = f"{names.stack}-bus"  # one per run on the session's server
        resources[bus]["Properties"]["Name"] = bus_name
        deployable = _replace(deployable, {"Ref": bus}, bus_name)
        self.stacks.append(names.stack)
        outputs, create = create_stack(
            deployable, self.outdir, names.stack, self.endpoint, artifact="SandboxLedger"
        )
        table = outputs["TableName"]
        # moto delivers stream records to the mapped function inside each write, in docker
        # (absent here): detached in the in-process backend, as test_infra.py does.
        from moto.dynamodb.models import dynamodb_backends

        backend = dynamodb_backends["123456789012"]["us-east-1"]
        backend.get_table(table).lambda_event_source_mappings.clear()
        call = resolve_descriptor_call(create, {"LedgerTable": table, "Bus": bus_name})
        boto3.client("dynamodb", endpoint_url=self.endpoint).put_item(**call["parameters"])
        return self.outdir

    def invoke(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        self.invoked.append(name)
        if self.on_invoke is not None:
            self.on_invoke()
        config = boto3.client("lambda", endpoint_url=self.endpoint).get_function_configuration(
            FunctionName=name
        )
        env = {
            **config["Environment"]["Variables"],
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
        }
        if config["Handler"] == "handler.handler":
            role = config["Role"].rsplit("/", 1)[1]
            iam = boto3.client("iam", endpoint_url=self.endpoint)
            attached = iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]
            self.worker = {
                "runtime": (config["Runtime"], config["Architectures"]),
                "policies": [a["PolicyName"] for a in attached],
                "inline": iam.list_role_policies(RoleName=role)["PolicyNames"],
                "environment": config["Environment"]["Variables"],
            }
            answer = self._worker(name, env).handler(payload, None)
        else:
            from sandbox_ledger.handlers import expire_stale_resources as sweeper

            assert config["Handler"] == "expire_stale_resources.handler.handler"
            self.wait_for_indexes()  # the sweep's index has the record (strict lag waited)
            now = datetime.now(UTC) + timedelta(seconds=self.slept)
            answer = sweeper.run(sweeper.build(env), lambda: 60_000, now=now)
        return json.loads(json.dumps(answer))  # as Lambda serializes it

    def _worker(self, name: str, env: dict[str, str]) -> Any:
        """The worker's module from the zip the run uploaded, imported with its environment."""
        from moto.awslambda.models import lambda_backends

        code = lambda_backends["123456789012"]["us-east-1"].get_function(name).code_bytes
        with zipfile.ZipFile(io.BytesIO(code)) as archive:
            source = archive.read("handler.py")
        for key, value in env.items():
            self.monkeypatch.setenv(key, value)
        spec = importlib.util.spec_from_loader("smoke_worker", loader=None)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        exec(compile(source, "handler.py", "exec"), module.__dict__)
        return module

    def sleep(self, seconds: float) -> None:
        self.slept += seconds


def _replace(value: Any, old: Any, new: Any) -> Any:
    if value == old:
        return new
    if isinstance(value, dict):
        return {k: _replace(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, old, new) for v in value]
    return value


@pytest.fixture
def account(
    synthesized: tuple[dict[str, Any], Path],
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[MotoAccount]:
    account = MotoAccount(synthesized, moto_endpoint, wait_for_indexes, monkeypatch)
    yield account
    for stack in account.stacks:
        remove_what_delete_stack_leaves(stack, moto_endpoint)


def _smoke(account: MotoAccount, lines: list[str]) -> runner.Smoke:
    return runner.Smoke(
        names=plan.Names.new(),
        session=boto3.session.Session(),
        deploy=account.deploy,
        invoke=account.invoke,
        worker_handler=WORKER,
        endpoint_url=account.endpoint,
        sleep=account.sleep,
        say=lines.append,
        event_wait_seconds=5,
        stack_wait_delay=1,
    )


def _nothing_left(run: runner.Smoke, endpoint: str) -> None:
    """Nothing the run removes itself is left on the server: its own resources (worker
    function and role, queue, rule) and what the stack retains (table, bucket, log groups);
    the stack is deleted. (moto's DeleteStack itself leaves the stack's functions, roles,
    policies, bus, topic and schedule rule, which CloudFormation deletes.)"""
    stack, names = run.names.stack, run.names

    def client(service: str) -> Any:
        return boto3.client(service, endpoint_url=endpoint)

    stacks = client("cloudformation").list_stacks()["StackSummaries"]
    assert {s["StackStatus"] for s in stacks if s["StackName"] == stack} <= {"DELETE_COMPLETE"}
    assert not [t for t in client("dynamodb").list_tables()["TableNames"] if stack in t]
    assert not [b for b in client("s3").list_buckets()["Buckets"] if stack[:23] in b["Name"]]
    groups = client("logs").describe_log_groups()["logGroups"]
    assert not [g for g in groups if stack in g["logGroupName"]]
    functions = client("lambda").list_functions()["Functions"]
    assert names.worker not in [f["FunctionName"] for f in functions]
    assert names.worker not in [r["RoleName"] for r in client("iam").list_roles()["Roles"]]
    assert not client("sqs").list_queues(QueueNamePrefix=stack).get("QueueUrls")
    for bus in client("events").list_event_buses()["EventBuses"]:
        rules = client("events").list_rules(EventBusName=bus["Name"])["Rules"]
        assert names.events not in [r["Name"] for r in rules]


def test_the_run_against_moto_goes_to_the_alarms_and_removes_everything(
    account: MotoAccount,
) -> None:
    """Every step up to the alarms passes on moto: the stack, its descriptor, the queue on its
    bus, the worker from the stack's asset (twice the same entry: stored once), a record
    observed by a sweep and expired by the next (the window passed on the sweeper's clock),
    its event received; moto's CloudFormation creates no alarm, which the run reports. Then
    everything is removed: the run's own resources, the stack, and what the stack retains
    (the table with its deletion protection, the versioned bucket, three log groups)."""
    lines: list[str] = []
    run = _smoke(account, lines)
    outcome = run.run()
    assert outcome.failed_step == "check the alarms", lines
    assert outcome.error == (
        f"SmokeError: alarms in the template but not in CloudWatch: {', '.join(ALARMS)}"
    )
    assert outcome.exit_code == 1 and outcome.left == []
    passed = [line for line in lines if line.startswith("ok  ")]
    assert [p.split(" (")[0] for p in passed] == [f"ok  {title}" for title, _ in run.steps()[:-1]]
    worker, sweeper = run.names.worker, run.state["sweeper"]
    # The stack's runtime and architecture (its asset's), the stack's worker policy alone.
    assert account.worker["runtime"] == ("python3.14", ["arm64"])
    [policy] = account.worker["policies"]
    assert policy.startswith(f"{run.names.stack}-WorkerPolicy") and account.worker["inline"] == []
    assert account.worker["environment"] == {"TABLE_NAME": run.state["table"]}
    assert account.invoked == [worker] * 3 + [sweeper] * 2
    assert account.slept == 900 + 10  # the session template's window, then another sweep
    record = run.state["record"]
    assert f"    sweep 2 expired the record {record}" in lines
    assert any(line.startswith("    event ") and "stale: no heartbeat" in line for line in lines)
    assert sorted(r.split(" ", 1)[0] for r in outcome.removed) == sorted(
        [
            "function",
            "role",
            "rule",
            "queue",
            "stack",
            "table",
            "bucket",
            "log",
            "log",
            "log",
            "folder",
        ]
    )
    _nothing_left(run, account.endpoint)


def test_a_step_that_raises_still_removes_everything(account: MotoAccount) -> None:
    def fail() -> None:
        if len(account.invoked) == 2:
            raise RuntimeError("the worker's second answer was lost")

    account.on_invoke = fail
    lines: list[str] = []
    run = _smoke(account, lines)
    outcome = run.run()
    assert (outcome.failed_step, outcome.exit_code) == ("invoke the worker", 1)
    assert outcome.error == "RuntimeError: the worker's second answer was lost"
    assert "FAILED invoke the worker: RuntimeError: the worker's second answer was lost" in lines
    assert "removed stack " + run.names.stack in lines and outcome.left == []
    _nothing_left(run, account.endpoint)


def test_sigterm_during_a_step_still_removes_everything(account: MotoAccount) -> None:
    account.on_invoke = lambda: os.kill(os.getpid(), signal.SIGTERM)
    lines: list[str] = []
    run = _smoke(account, lines)
    previous = signal.getsignal(signal.SIGTERM)
    outcome = run.run()
    assert signal.getsignal(signal.SIGTERM) == previous  # put back
    assert (outcome.failed_step, outcome.signum, outcome.exit_code) == (
        "invoke the worker",
        signal.SIGTERM,
        143,
    )
    assert outcome.left == [] and "removed stack " + run.names.stack in lines
    _nothing_left(run, account.endpoint)


def test_a_failed_deploy_removes_what_it_created(account: MotoAccount) -> None:
    """A deploy that fails after CloudFormation made the stack (here: the stack is created,
    then the deploy reports failure) leaves nothing behind; a deploy that fails before any
    stack exists has nothing to remove but its scratch folder."""
    created = account.deploy

    def half(names: plan.Names, scratch: Path) -> Path:
        created(names, scratch)
        raise plan.SmokeError("cdk deploy failed (exit 1; its output is above)")

    lines: list[str] = []
    run = _smoke(account, lines)
    run.deploy = half
    outcome = run.run()
    assert outcome.failed_step == "deploy the scratch stack" and outcome.left == []
    assert {r.split(" ", 1)[0] for r in outcome.removed} >= {"stack", "table", "bucket"}
    _nothing_left(run, account.endpoint)

    def refused(names: plan.Names, scratch: Path) -> Path:
        raise plan.SmokeError("the account is not bootstrapped for the CDK in us-east-1")

    run = _smoke(account, lines)
    run.deploy = refused
    outcome = run.run()
    assert outcome.failed_step == "deploy the scratch stack" and outcome.left == []
    assert [r.split(" ", 1)[0] for r in outcome.removed] == ["folder"]


def test_what_cannot_be_removed_is_reported(account: MotoAccount) -> None:
    lines: list[str] = []
    run = _smoke(account, lines)
    run.leftovers.append(cleanup.Leftover("AWS::Some::Thing", "p-1"))
    outcome = cleanup.Outcome()
    cleanup.Remover(run.client, lines.append).destroy(run.leftovers, outcome, run.names.run)
    assert outcome.left == [
        "AWS::Some::Thing p-1: SmokeError: a resource of a type the run does not remove"
    ]
    assert outcome.exit_code == 1
    assert lines[-1].startswith("some resources are left: remove them by hand")


def test_make_deploy_smoke_runs_the_module_with_the_makefiles_cdk() -> None:
    makefile = (ROOT / "Makefile").read_text()
    phony = next(line for line in makefile.splitlines() if line.startswith(".PHONY:"))
    assert "deploy-smoke" in phony.split()
    # Run as from a shell, not as a sub-make of `make test` (whose MAKEFLAGS and MAKELEVEL
    # would add "Entering/Leaving directory" lines).
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MAKELEVEL", "MFLAGS"}}
    done = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", "deploy-smoke", "DEPLOY_VENV=/nonexistent"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("/nonexistent/bin/python -m sandbox_ledger_cdk.smoke --cdk '")
    assert "CDK_DISABLE_CLI_TELEMETRY=true" in last and last.endswith("npx cdk'")


def test_main_deploys_with_the_cdk_command_after_checking_the_bootstrap(
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """The command line against moto: an account without the CDK's bootstrap stack is
    refused before any deploy; with it, the CDK command runs from the repository with the
    run's arguments, and its failure ends the run (nothing else was created)."""
    monkeypatch.setenv(plan.OPT_IN, "1")
    calls = tmp_path / "calls"
    fake_cdk = tmp_path / "cdk.py"
    fake_cdk.write_text(
        "import json, os, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps([os.getcwd(), sys.argv[1:]]) + '\\n')\n"
        "sys.exit(3)\n"
    )
    cdk = f"{sys.executable} {fake_cdk}"
    args = ["--endpoint-url", moto_endpoint, "--cdk", cdk]
    assert cli.main(args) == 1
    out = capsys.readouterr().out
    assert "deploy-smoke: account 123456789012" in out
    assert "npx cdk bootstrap aws://123456789012/us-east-1" in out
    assert not calls.exists()

    cfn = boto3.client("cloudformation", endpoint_url=moto_endpoint)
    cfn.create_stack(
        StackName="CDKToolkit",
        TemplateBody=json.dumps(
            {"Resources": {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {}}}}
        ),
    )
    try:
        assert cli.main(args) == 1
    finally:
        cfn.delete_stack(StackName="CDKToolkit")
    out = capsys.readouterr().out
    assert "FAILED deploy the scratch stack: SmokeError: cdk deploy failed (exit 3" in out
    [(cwd, argv)] = [json.loads(line) for line in calls.read_text().splitlines()]
    stack = next(a for a in argv if a.startswith("stack_name=")).split("=", 1)[1]
    assert cwd == str(ROOT) and argv[:4] == [
        "deploy",
        "--no-notices",
        "--require-approval",
        "never",
    ]
    assert argv[-1] == stack and f"table_name={stack}" in argv
    assert "deploy-smoke: removed folder " in out and "removed stack" not in out


def test_a_throttled_invocation_is_tried_again_and_a_function_error_is_said() -> None:
    from botocore.exceptions import ClientError

    class Lambda:
        def __init__(self, *answers: Any) -> None:
            self.answers, self.calls = list(answers), 0

        def invoke(self, **request: Any) -> dict[str, Any]:
            self.calls += 1
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    def throttled() -> ClientError:
        error = {"Error": {"Code": "TooManyRequestsException", "Message": "Rate exceeded"}}
        return ClientError(error, "Invoke")  # type: ignore[arg-type]

    def body(data: bytes, **more: Any) -> dict[str, Any]:
        return {"Payload": io.BytesIO(data), **more}

    slept: list[float] = []
    client = Lambda(throttled(), throttled(), body(b'{"expired": []}'))
    assert cli.lambda_invoker(client, slept.append)("f", {}) == {"expired": []}
    assert (client.calls, slept) == (3, [2, 4])
    failed = body(b'{"errorMessage": "boom"}', FunctionError="Unhandled")
    with pytest.raises(plan.SmokeError, match=r"f failed: .*boom"):
        cli.lambda_invoker(Lambda(failed), slept.append)("f", {})
    with pytest.raises(plan.SmokeError, match="answered other than JSON"):
        cli.lambda_invoker(Lambda(body(b"nope")), slept.append)("f", {})
    with pytest.raises(ClientError):
        cli.lambda_invoker(Lambda(*[throttled()] * 5), slept.append)("f", {})
