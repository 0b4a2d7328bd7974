"""The CDK stack: one synthesized template per test session, checked with aws_cdk.assertions,
cdk-nag (part of the synth), cfn-lint, and by creating it in moto's CloudFormation."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
ROOT = Path(__file__).parents[2]
sys.path[:0] = [str(ROOT)]

aws_cdk = pytest.importorskip("aws_cdk")
from aws_cdk import assertions  # noqa: E402
from infra.app import build  # noqa: E402

from deploy import least_privilege as lp  # noqa: E402
from deploy.moto_cloudformation import create_stack, resolve_descriptor_call  # noqa: E402
from deploy.synthesis import CONTEXT, REAL_PIP, synth  # noqa: E402
from sandbox_ledger import keys as k  # noqa: E402
from sandbox_ledger_cdk import ConfigError, LedgerConfig  # noqa: E402
from sandbox_ledger_cdk.bundling import RUNTIME_LOCK, TRACING_LOCK, PipBundling  # noqa: E402
from sandbox_ledger_cdk.nag import ACKNOWLEDGED  # noqa: E402

# Every test here runs with pip once per set of requirements (tests/deploy/conftest.py).
pytestmark = pytest.mark.usefixtures("pip_once_per_requirements")


@pytest.fixture(scope="session")
def template(synthesized: tuple[dict[str, Any], Path]) -> assertions.Template:
    return assertions.Template.from_json(synthesized[0])


def resources(raw: dict[str, Any], kind: str) -> dict[str, Any]:
    return {name: r for name, r in raw["Resources"].items() if r["Type"] == kind}


def test_table_matches_the_key_schema_module(synthesized: tuple[dict[str, Any], Path]) -> None:
    [table] = resources(synthesized[0], "AWS::DynamoDB::Table").values()
    props = table["Properties"]
    definition = k.table_definition("x")
    assert props["KeySchema"] == definition["KeySchema"]
    assert sorted(props["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == sorted(
        definition["AttributeDefinitions"], key=lambda a: a["AttributeName"]
    )  # type: ignore[arg-type]
    assert [
        (g["IndexName"], g["KeySchema"], g["Projection"]) for g in props["GlobalSecondaryIndexes"]
    ] == [
        (g["IndexName"], g["KeySchema"], g["Projection"])
        for g in definition["GlobalSecondaryIndexes"]  # type: ignore[attr-defined]
    ]
    assert props["TimeToLiveSpecification"] == {"AttributeName": k.TTL_ATTRIBUTE, "Enabled": True}
    assert props["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert props["DeletionProtectionEnabled"] is True
    assert table["DeletionPolicy"] == "Retain" and table["UpdateReplacePolicy"] == "Retain"


def test_functions(template: assertions.Template) -> None:
    # The two handlers, and the provider of the descriptor's custom resource.
    template.resource_count_is("AWS::Lambda::Function", 3)
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": "expire_stale_resources.handler.handler",
            "Runtime": "python3.14",
            "Architectures": ["arm64"],
            "ReservedConcurrentExecutions": 1,
            "Environment": {
                "Variables": assertions.Match.object_like(
                    {
                        "STALE_AFTER_SECONDS": "900",
                        "RETAIN_FAILED_SECONDS": "604800",
                        "DRY_RUN": "false",
                        "SHARD_COUNT": "4",
                    }
                )
            },
        },
    )
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": "on_ttl_expiry.handler.handler",
            "Runtime": "python3.14",
            "Architectures": ["arm64"],
        },
    )
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})
    template.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(5 minutes)"})
    template.resource_count_is("AWS::Events::EventBus", 1)


def test_stream_mapping(template: assertions.Template) -> None:
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "BisectBatchOnFunctionError": True,
            "MaximumRetryAttempts": 5,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "DestinationConfig": {"OnFailure": {"Destination": assertions.Match.any_value()}},
            "MaximumRecordAgeInSeconds": 86400,
            "FilterCriteria": {
                "Filters": [
                    {
                        "Pattern": json.dumps(
                            {
                                "eventName": ["REMOVE"],
                                "userIdentity": {
                                    "type": ["Service"],
                                    "principalId": ["dynamodb.amazonaws.com"],
                                },
                            },
                            separators=(",", ":"),
                        )
                    }
                ]
            },
        },
    )


def test_alarms(template: assertions.Template) -> None:
    template.resource_count_is("AWS::CloudWatch::Alarm", 6)
    for metric in ("Errors", "ReadThrottleEvents", "WriteThrottleEvents"):
        template.has_resource_properties("AWS::CloudWatch::Alarm", {"MetricName": metric})


def test_alarms_notify_a_topic_the_stack_creates(synthesized: tuple[dict[str, Any], Path]) -> None:
    """Without ``alarm_topic_arn``, every alarm notifies a TLS-only topic of the stack's own,
    whose ARN is an output to subscribe to."""
    raw = synthesized[0]
    [topic_id] = resources(raw, "AWS::SNS::Topic")
    alarms = resources(raw, "AWS::CloudWatch::Alarm").values()
    assert all(a["Properties"]["AlarmActions"] == [{"Ref": topic_id}] for a in alarms)
    assert raw["Outputs"]["AlarmTopicArn"]["Value"] == {"Ref": topic_id}
    [policy] = resources(raw, "AWS::SNS::TopicPolicy").values()
    [tls] = policy["Properties"]["PolicyDocument"]["Statement"]
    assert tls["Effect"] == "Deny" and tls["Condition"] == {
        "Bool": {"aws:SecureTransport": "false"}
    }


def test_the_dashboard_shows_sweeps_ttl_removals_and_the_table_and_functions(
    synthesized: tuple[dict[str, Any], Path],
) -> None:
    """One dashboard: sweeps (expired, failed, unreadable, lost claims, duration), TTL removals
    (reported, unreported), the table's throttles, errors and latency, the functions'
    errors, throttles and duration, and the alarms; its name is an output."""
    raw = synthesized[0]
    [(dashboard_id, dashboard)] = resources(raw, "AWS::CloudWatch::Dashboard").items()
    assert raw["Outputs"]["DashboardName"]["Value"] == {"Ref": dashboard_id}
    body = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else "<ref>" for p in body)
    widgets = json.loads(text.replace('"<ref>"', '"x"').replace("<ref>", "x"))["widgets"]
    graphs = {w["properties"]["title"]: w["properties"] for w in widgets}
    labels = {
        title: [m[-1]["label"] for m in props.get("metrics", [])] for title, props in graphs.items()
    }
    assert labels["Sweeps: records"] == [
        "expired",
        "failed",
        "unreadable",
        "skipped",
        "claims lost",
    ]
    assert labels["Sweeps: duration"] == ["max", "average"]
    assert labels["TTL removals"] == ["reported", "unreported (kept in the bucket)", "failed"]
    assert labels["Table: throttles"] == ["ReadThrottleEvents", "WriteThrottleEvents"]
    assert "SystemErrors TransactWriteItems" in labels["Table: system errors"]
    assert "SuccessfulRequestLatency Query" in labels["Table: latency (ms)"]
    assert labels["Functions: errors and throttles"] == [
        "sweeper errors",
        "sweeper throttles",
        "TTL handler errors",
        "TTL handler throttles",
    ]
    assert len(graphs["Alarms"]["alarms"]) == 6
    namespaces = {m[0] for props in graphs.values() for m in props.get("metrics", []) if len(m) > 1}
    assert namespaces == {"SandboxLedger", "AWS/DynamoDB", "AWS/Lambda"}


def test_unknown_settings_are_refused_naming_the_nearest_key() -> None:
    """A misspelt context key or prop fails at synth, naming it and the key meant; CDK's own
    context keys pass."""
    from sandbox_ledger_cdk import SandboxLedger

    with pytest.raises(
        ConfigError, match=r"^shard_cont: not a known context key \(did you mean shard_count\?\)"
    ):
        LedgerConfig.from_context({"shard_cont": "8"})
    app = aws_cdk.App(context={**CONTEXT, "shard_cont": 8, "stack_nme": "x"})
    with pytest.raises(ConfigError, match="did you mean shard_count"):
        build(app)
    with pytest.raises(ConfigError, match=r"stack_nme: .*did you mean stack_name"):
        LedgerConfig.from_context({"stack_nme": "x"}, also_known=("stack_name",))
    cdk_keys = {"aws:cdk:enable-path-metadata": True, "@aws-cdk/core:newStyleStackSynthesis": 1}
    assert LedgerConfig.from_context({**CONTEXT, **cdk_keys}).shard_count == 4
    with pytest.raises(ConfigError, match=r"^shard_cont: not a known prop.*shard_count"):
        LedgerConfig(shard_cont=8)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="shard_count: must be an integer"):
        LedgerConfig(shard_count="8")  # type: ignore[arg-type]
    stack = aws_cdk.Stack(aws_cdk.App(), "Props")
    with pytest.raises(ConfigError, match=r"alarm_topc: .*did you mean alarm_topic\?"):
        SandboxLedger(stack, "Ledger", alarm_topc=None)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="tags: must be a JSON object"):
        build(aws_cdk.App(context={**CONTEXT, "tags": "team=x"}))


def test_the_construct_takes_your_bus_topic_key_and_tags(tmp_path: Path) -> None:
    """Bring your own: the construct creates no bus, topic or key of its own, names your bus
    in the descriptor and the functions' settings, alarms to your topic, encrypts with your
    key, and tags what it creates (with the app's tags too)."""
    from aws_cdk import aws_events as events
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_sns as sns

    from sandbox_ledger_cdk import SandboxLedger

    app = aws_cdk.App(outdir=str(tmp_path))
    stack = aws_cdk.Stack(app, "Mine")
    aws_cdk.Tags.of(app).add("cost-center", "42")
    bus = events.EventBus(stack, "MyBus")
    topic = sns.Topic(stack, "MyTopic")
    key = kms.Key(stack, "MyKey", enable_key_rotation=True)
    ledger = SandboxLedger(
        stack,
        "Ledger",
        config=LedgerConfig(shard_count=8),
        event_bus=bus,
        alarm_topic=topic,
        encryption_key=key,
        tags={"team": "sandboxes"},
    )
    assert ledger.bus is bus and ledger.alarm_topic is topic and ledger.ledger.key is key
    raw = assertions.Template.from_stack(stack).to_json()
    assert list(resources(raw, "AWS::Events::EventBus")) == [
        stack.get_logical_id(bus.node.default_child)
    ]
    assert len(resources(raw, "AWS::SNS::Topic")) == 1 and len(resources(raw, "AWS::KMS::Key")) == 1
    bus_ref = {"Ref": stack.get_logical_id(bus.node.default_child)}
    topic_ref = {"Ref": stack.get_logical_id(topic.node.default_child)}
    alarms = resources(raw, "AWS::CloudWatch::Alarm").values()
    assert alarms and all(a["Properties"]["AlarmActions"] == [topic_ref] for a in alarms)
    [table] = resources(raw, "AWS::DynamoDB::Table").values()
    key_arn = {"Fn::GetAtt": [stack.get_logical_id(key.node.default_child), "Arn"]}
    assert table["Properties"]["SSESpecification"]["KMSMasterKeyId"] == key_arn
    tags = {t["Key"]: t["Value"] for t in table["Properties"]["Tags"]}
    assert tags == {"team": "sandboxes", "cost-center": "42"}
    for function in resources(raw, "AWS::Lambda::Function").values():
        env = function["Properties"].get("Environment", {}).get("Variables", {})
        if "EVENT_BUS_NAME" in env:
            assert env["EVENT_BUS_NAME"] == bus_ref
    assert f'"{k.DESCRIPTOR_SHARD_COUNT}":{{"N":"8"}}' in _descriptor_create(raw)


def test_unreported_ttl_removals_are_kept_in_a_retained_locked_bucket(
    synthesized: tuple[dict[str, Any], Path],
) -> None:
    """The bucket that keeps TTL removals the handler could not publish, and the stream
    mapping's S3 on-failure destination: retained, encrypted, private, TLS only, versioned,
    alarmed; only the TTL handler's role may touch it, and only under its two prefixes."""
    raw = synthesized[0]
    [(bucket_id, bucket)] = resources(raw, "AWS::S3::Bucket").items()
    props = bucket["Properties"]
    assert bucket["DeletionPolicy"] == "Retain" and bucket["UpdateReplacePolicy"] == "Retain"
    [sse] = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms")
    assert set(props["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(props["PublicAccessBlockConfiguration"]) == 4
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    [rule] = props["LifecycleConfiguration"]["Rules"]
    assert "ExpirationInDays" not in rule  # kept until replayed, never expired unreported
    assert rule["NoncurrentVersionExpiration"]["NoncurrentDays"] >= 30
    [bucket_policy] = resources(raw, "AWS::S3::BucketPolicy").values()
    [tls] = bucket_policy["Properties"]["PolicyDocument"]["Statement"]
    assert tls["Effect"] == "Deny" and tls["Condition"] == {
        "Bool": {"aws:SecureTransport": "false"}
    }
    # The mapping hands discarded batches (with their records) to this bucket.
    [mapping] = resources(raw, "AWS::Lambda::EventSourceMapping").values()
    destination = mapping["Properties"]["DestinationConfig"]["OnFailure"]["Destination"]
    assert destination == {"Fn::GetAtt": [bucket_id, "Arn"]}
    [handler] = [
        r
        for r in resources(raw, "AWS::Lambda::Function").values()
        if r["Properties"]["Handler"] == "on_ttl_expiry.handler.handler"
    ]
    env = handler["Properties"]["Environment"]["Variables"]
    assert env["UNREPORTED_BUCKET"] == {"Ref": bucket_id}
    # Grants: the TTL role only, on the two prefixes; no one else names the bucket.
    s3_statements = [
        (n, s)
        for n, s in _statements(raw)
        if any(a.startswith("s3:") for a in _actions(s)) and n != "UnreportedExpiriesPolicy"
    ]
    assert s3_statements and all(n.startswith("TtlExpiryRole") for n, _ in s3_statements)
    arn = {"Fn::GetAtt": [bucket_id, "Arn"]}
    objects = {
        "s3:PutObject": ["/unreported/*", "/aws/lambda/*"],
        "s3:GetObject": ["/unreported/*", "/aws/lambda/*"],
        "s3:DeleteObject": ["/unreported/*", "/aws/lambda/*"],
    }
    for _, statement in s3_statements:
        for action in _actions(statement):
            if action == "s3:ListBucket":
                assert statement["Resource"] == arn
            else:
                suffixes = [r["Fn::Join"][1][1] for r in statement["Resource"]]
                assert [r["Fn::Join"][1][0] for r in statement["Resource"]] == [arn, arn]
                assert suffixes == objects[action], (action, suffixes)
    granted = {a for _, s in s3_statements for a in _actions(s)}
    assert granted == {"s3:PutObject", "s3:GetObject", "s3:DeleteObject", "s3:ListBucket"}
    # Alarms: what the handler kept (its Unreported metric) and what Lambda wrote there.
    alarms = resources(raw, "AWS::CloudWatch::Alarm").values()
    kept = [a for a in alarms if a["Properties"].get("MetricName") == "Unreported"]
    assert [a["Properties"]["Namespace"] for a in kept] == ["SandboxLedger"]
    assert kept[0]["Properties"]["Dimensions"] == [
        {"Name": "service", "Value": "sandbox-ledger-ttl"}
    ]
    [written] = [a for a in alarms if a["Properties"].get("MetricName") == "PutRequests"]
    dimensions = {d["Name"]: d["Value"] for d in written["Properties"]["Dimensions"]}
    assert dimensions == {"BucketName": {"Ref": bucket_id}, "FilterId": "OnFailureBatches"}
    assert props["MetricsConfigurations"] == [{"Id": "OnFailureBatches", "Prefix": "aws/lambda/"}]
    for alarm in (kept[0], written):
        assert alarm["Properties"]["Threshold"] == 1
        assert alarm["Properties"]["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def _statements(raw: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, r in raw["Resources"].items():
        if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for s in r["Properties"]["PolicyDocument"]["Statement"]:
                out.append((name, s))
    return out


def test_least_privilege(synthesized: tuple[dict[str, Any], Path]) -> None:
    raw = synthesized[0]
    for name, statement in _statements(raw):
        actions = (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        assert all("*" not in a for a in actions), (name, actions)
        assert "dynamodb:Scan" not in actions
    sweeper = {
        a
        for n, s in _statements(raw)
        if n.startswith("SweeperRole")
        for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    }
    assert sweeper == {
        "dynamodb:Query",
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "events:PutEvents",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    }
    worker = {
        a
        for n, s in _statements(raw)
        if n.startswith("WorkerPolicy") and s["Effect"] == "Allow"
        for a in _actions(s)
    }
    assert worker >= {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:Query",
        "dynamodb:BatchWriteItem",
    }
    assert not {"dynamodb:CreateTable", "dynamodb:DeleteTable"} & worker
    assert resources(raw, "AWS::IAM::Role") != {}
    for role in resources(raw, "AWS::IAM::Role").values():
        assert "ManagedPolicyArns" not in role["Properties"]  # no AWS managed policies


def test_grant_worker_gives_the_worker_policys_statements_and_the_key() -> None:
    """A role granted with ``grant_worker`` may do exactly what the managed policy allows."""
    from aws_cdk import aws_iam as iam

    from sandbox_ledger_cdk.table import KMS_ACTIONS, LedgerTable

    app = aws_cdk.App()
    stack = aws_cdk.Stack(app, "WorkerGrant")
    ledger = LedgerTable(stack, "Ledger", config=LedgerConfig(kms="create"))
    role = iam.Role(stack, "Worker", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    ledger.grant_worker(role)
    iam.ManagedPolicy(stack, "Managed", statements=ledger.worker_policy_statements())
    raw = assertions.Template.from_stack(stack).to_json()
    [managed] = resources(raw, "AWS::IAM::ManagedPolicy").values()
    granted = lp.role_statements(raw, "Worker")
    table_arn = _table_arn(raw)
    assert lp.allowed_triples(granted, raw, table_arn) == lp.allowed_triples(
        managed["Properties"]["PolicyDocument"]["Statement"], raw, table_arn
    )
    assert not lp.allows(granted, "dynamodb:PutItem", table_arn, frozenset({k.DESCRIPTOR_PK}), raw)
    [key_id] = resources(raw, "AWS::KMS::Key")
    assert {
        "Action": list(KMS_ACTIONS),
        "Effect": "Allow",
        "Resource": {"Fn::GetAtt": [key_id, "Arn"]},
    } in granted


def test_outputs(template: assertions.Template) -> None:
    for output in (
        "TableName",
        "TableArn",
        "WorkerPolicyArn",
        "EventBusName",
        "UnreportedBucketName",
        "TtlFunctionName",
    ):
        template.has_output(output, {})


def test_nag_acknowledgments_have_reasons() -> None:
    assert ACKNOWLEDGED and all(len(reason) > 20 for _, _, reason in ACKNOWLEDGED)


def test_cfn_lint_has_no_errors(synthesized: tuple[dict[str, Any], Path]) -> None:
    path = synthesized[1] / "SandboxLedger.template.json"
    done = subprocess.run(
        [sys.executable, "-m", "cfnlint", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode & 2 == 0, done.stdout  # bit 2: errors; warnings are reported
    assert not [line for line in done.stdout.splitlines() if line[:1] == "E"], done.stdout


def test_options_synthesize(tmp_path: Path) -> None:
    raw, _ = synth(
        tmp_path,
        billing="provisioned",
        kms="create",
        event_bus="default",
        sweep_rate_minutes=15,
        min_capacity=2,
        max_capacity=40,
        tracing=True,
    )
    table = next(iter(resources(raw, "AWS::DynamoDB::Table").values()))["Properties"]
    assert table["SSESpecification"]["SSEType"] == "KMS"
    assert table["ProvisionedThroughput"] == {"ReadCapacityUnits": 2, "WriteCapacityUnits": 2}
    assert len(resources(raw, "AWS::ApplicationAutoScaling::ScalableTarget")) == 2 + 2 * 4
    assert resources(raw, "AWS::Events::EventBus") == {}
    assert resources(raw, "AWS::KMS::Key")
    worker = [s for n, s in _statements(raw) if n.startswith("WorkerPolicy")]
    assert any("kms:Decrypt" in s["Action"] for s in worker)
    # tracing=true: active tracing on both handlers, the X-Ray grant, the handlers' setting.
    _check_tracing(raw, on=True)


def test_tracing_is_off_by_default(synthesized: tuple[dict[str, Any], Path]) -> None:
    _check_tracing(synthesized[0], on=False)


def _check_tracing(raw: dict[str, Any], *, on: bool) -> None:
    handlers = [
        r["Properties"]
        for r in resources(raw, "AWS::Lambda::Function").values()
        if r["Properties"]["Handler"].endswith(".handler.handler")
    ]
    assert len(handlers) == 2
    for props in handlers:
        assert props["Environment"]["Variables"]["SANDBOX_LEDGER_TRACING"] == str(on).lower()
        assert props.get("TracingConfig") == ({"Mode": "Active"} if on else None)
    for role in ("SweeperRole", "TtlExpiryRole"):
        xray = [
            s
            for n, s in _statements(raw)
            if n.startswith(role) and any(a.startswith("xray:") for a in _actions(s))
        ]
        if not on:
            assert xray == [], role
            continue
        [statement] = xray
        assert set(_actions(statement)) == {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}


def _descriptor_create(raw: dict[str, Any]) -> str:
    [resource] = resources(raw, "Custom::AWS").values()
    return "".join(
        p if isinstance(p, str) else "<ref>"
        for p in resource["Properties"]["Create"]["Fn::Join"][1]
    )


def test_ledger_retention_is_forever_unless_given(
    synthesized: tuple[dict[str, Any], Path],
) -> None:
    assert LedgerConfig.from_context({}).ledger_retention_days is None
    assert LedgerConfig.from_context({"ledger_retention_days": "30"}).ledger_retention_days == 30
    assert k.DESCRIPTOR_LEDGER_RETENTION not in _descriptor_create(synthesized[0])


def test_replicas_make_a_global_table(tmp_path: Path) -> None:
    # One non-default synth for both: replicas, and a ledger retention in the descriptor.
    raw, _ = synth(
        tmp_path,
        replica_regions="eu-west-1,ap-southeast-2",
        region="us-east-1",
        ledger_retention_days=30,
    )
    create = _descriptor_create(raw)
    assert f'"{k.DESCRIPTOR_LEDGER_RETENTION}":{{"N":"2592000"}}' in create
    [table] = resources(raw, "AWS::DynamoDB::GlobalTable").values()
    regions = {r["Region"] for r in table["Properties"]["Replicas"]}
    assert {"eu-west-1", "ap-southeast-2"} <= regions


@pytest.mark.parametrize(
    ("context", "key"),
    [
        ({"stale_after_seconds": "soon"}, "stale_after_seconds"),
        ({"stale_after_seconds": 5}, "stale_after_seconds"),
        ({"shard_count": 0}, "shard_count"),
        ({"billing": "free"}, "billing"),
        ({"kms": "mine"}, "kms"),
        ({"replica_regions": ["moon-1"]}, "replica_regions"),
        ({"table_name": "a"}, "table_name"),
        ({"event_bus": "other"}, "event_bus"),
        ({"min_capacity": 10, "max_capacity": 5}, "min_capacity"),
        ({"dry_run": "maybe"}, "dry_run"),
        ({"tracing": "maybe"}, "tracing"),
        ({"ledger_retention_days": "a month"}, "ledger_retention_days"),
        ({"ledger_retention_days": 0}, "ledger_retention_days"),
        ({"multi_region_consistency": "strong"}, "support neither transactions"),
        ({"multi_region_consistency": "weak"}, "multi_region_consistency"),
    ],
)
def test_bad_context_is_refused_with_the_key(context: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        LedgerConfig.from_context(context)


def test_deployed_stack_serves_the_library(
    synthesized: tuple[dict[str, Any], Path],
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    """Create the synthesized stack in moto's CloudFormation, then run the adapter, the
    resource store and the sweeper against the table it created."""
    raw, outdir = synthesized
    outputs, descriptor_call = create_stack(raw, outdir, "SandboxLedger", moto_endpoint)
    table = outputs["TableName"]
    lam = boto3.client("lambda", endpoint_url=moto_endpoint)
    mappings = lam.list_event_source_mappings()["EventSourceMappings"]
    assert len(mappings) == 1 and ":table/" + table in mappings[0]["EventSourceArn"]
    # moto delivers stream records to the mapped function synchronously, inside each write,
    # through docker (absent here) and fails on binary attributes; deleting the mapping does
    # not detach it from the table. Detach it in the (in-process) backend: the mapping itself
    # is checked on the template above.
    from moto.dynamodb.models import dynamodb_backends

    dynamodb_backends["123456789012"]["us-east-1"].get_table(
        table
    ).lambda_event_source_mappings.clear()

    from sandbox_ledger import LedgerEntry, ListSandboxOptions
    from sandbox_ledger.deployment import TableDescriptor
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.resources import (
        EventPublisher,
        SyncResourceRecordStore,
        resolve_sweep,
        sweep,
    )

    described = boto3.client("dynamodb", endpoint_url=moto_endpoint).describe_table(
        TableName=table
    )["Table"]
    assert {g["IndexName"] for g in described["GlobalSecondaryIndexes"]} == {
        i.name for i in k.INDEXES
    }
    ledger = SyncDynamoDBAdapter(table, endpoint_url=moto_endpoint)
    for event, ts in [("sandbox.created", 1), ("exec.complete", 2), ("sandbox.closed", 3)]:
        ledger.append(
            LedgerEntry(ts=ts, name="deployed", sandbox_id="sb", step_index=-1, event=event)
        )
    wait_for_indexes()  # the listings' indexes have the writes (index lag waited out)
    [details] = ledger.list_all_sandbox_details(ListSandboxOptions(limit=10))
    assert (details.exec_count, str(details.status)) == (1, "completed")
    assert len(ledger.read_all("deployed", "sb")) == 3

    from resources.resource_fixtures import observed_earlier, record

    events = boto3.client("events", endpoint_url=moto_endpoint)
    # moto renders Ref of an EventBus as an object repr; find the bus the stack created.
    [bus] = [
        b["Name"]
        for b in events.list_event_buses()["EventBuses"]
        if b["Name"].startswith("SandboxLedger")
    ]
    refs = {"LedgerTable": table, "Bus": bus}
    call = resolve_descriptor_call(descriptor_call, refs)
    assert (call["service"], call["action"]) == ("DynamoDB", "putItem")
    dynamodb = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    dynamodb.put_item(**call["parameters"])
    dynamodb.put_item(**call["parameters"])  # the next deploy, unchanged
    # A deploy with another shard count fails its descriptor write (CloudFormation then rolls
    # the update back): the stored items were hashed into the table's shards.
    fewer = json.loads(json.dumps(call["parameters"]))
    fewer["Item"][k.DESCRIPTOR_SHARD_COUNT] = {"N": "2"}
    fewer["ExpressionAttributeValues"][":shards"] = {"N": "2"}
    with pytest.raises(dynamodb.exceptions.ConditionalCheckFailedException):
        dynamodb.put_item(**fewer)

    store = SyncResourceRecordStore(table, endpoint_url=moto_endpoint)
    assert store.descriptor() == TableDescriptor(
        shard_count=4, event_bus_name=bus, stale_after_seconds=900, retain_failed_seconds=604800
    )
    plan = resolve_sweep(store.descriptor(), table, require_deployment=True)
    assert plan.event_bus_name == bus
    stored = store.put(record(age=timedelta(hours=1)))
    stale = stored.record
    observed_earlier(store, stored, timedelta(minutes=16))  # by an earlier scheduled run
    wait_for_indexes()  # the sweep's index has the record (index lag waited out)
    result = sweep(store, EventPublisher(events, plan.event_bus_name), now=datetime.now(UTC))
    assert result.expired == [stale.id] and store.get(stale.id) is None


def test_the_stack_writes_the_descriptor_with_least_privilege(
    synthesized: tuple[dict[str, Any], Path],
) -> None:
    """One PutItem at deploy, by a role that can put only the descriptor item."""
    raw = synthesized[0]
    [resource] = resources(raw, "Custom::AWS").values()
    create = "".join(
        p if isinstance(p, str) else "<ref>"
        for p in resource["Properties"]["Create"]["Fn::Join"][1]
    )
    assert '"action":"putItem"' in create and f'"PK":{{"S":"{k.DESCRIPTOR_PK}"}}' in create
    assert resource["Properties"]["Update"] == resource["Properties"]["Create"]
    statements = [s for n, s in _statements(raw) if n.startswith("LedgerDescriptorRole")]
    put = [s for s in statements if s["Action"] == "dynamodb:PutItem"]
    assert len(put) == 1
    assert put[0]["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [k.DESCRIPTOR_PK]}
    }
    actions = {
        a
        for s in statements
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert actions == {"dynamodb:PutItem", "logs:CreateLogStream", "logs:PutLogEvents"}


def test_sweeper_and_ttl_roles_touch_only_resource_records(
    synthesized: tuple[dict[str, Any], Path],
) -> None:
    raw = synthesized[0]
    item_actions = {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchGetItem",
        "dynamodb:BatchWriteItem",
    }
    for role, allowed in (("SweeperRole", f"{k.RESOURCE_PREFIX}*"), ("TtlExpiryRole", None)):
        for _, statement in [(n, s) for n, s in _statements(raw) if n.startswith(role)]:
            actions = statement["Action"]
            actions = {actions} if isinstance(actions, str) else set(actions)
            if not actions & item_actions:
                continue
            assert allowed is not None, (role, actions)  # the TTL role has no item actions
            keys = next(iter(statement["Condition"].values()))["dynamodb:LeadingKeys"]
            assert keys in ([allowed], [k.DESCRIPTOR_PK]), (role, statement)
            if keys == [k.DESCRIPTOR_PK]:
                assert actions == {"dynamodb:GetItem"}


def test_only_the_stacks_functions_can_put_events_on_its_bus(
    synthesized: tuple[dict[str, Any], Path],
) -> None:
    """The bus's own policy denies PutEvents to every principal but the two functions' roles
    (no AWS::Events::EventBusPolicy, whose deprecated Principal cdk-nag reads)."""
    raw = synthesized[0]
    assert resources(raw, "AWS::Events::EventBusPolicy") == {}
    [bus] = resources(raw, "AWS::Events::EventBus").values()
    policy = bus["Properties"]["Policy"]
    assert policy["Version"] == "2012-10-17"
    [statement] = policy["Statement"]
    assert statement["Effect"] == "Deny" and statement["Action"] == "events:PutEvents"
    assert statement["Principal"] == {"AWS": "*"}
    resource = json.dumps(statement["Resource"])
    assert f"event-bus/{bus['Properties']['Name']}" in resource and "GetAtt" not in resource
    arns = statement["Condition"]["StringNotEquals"]["aws:PrincipalArn"]
    roles = sorted(a["Fn::GetAtt"][0] for a in arns)
    assert [r.rstrip("0123456789ABCDEF") for r in roles] == ["SweeperRole", "TtlExpiryRole"]


@pytest.mark.slow  # a second synth, in a fresh process (about 25 s)
def test_synth_prints_no_deprecation_warning(tmp_path: Path) -> None:
    """A fresh process synthesizes the stack (cdk-nag included) without a jsii deprecation
    warning on stderr."""
    script = (
        "import json, sys; sys.path[:0] = ['.', 'adapter']\n"
        "import aws_cdk; from infra.app import build\n"
        "ctx = json.load(open('cdk.json'))['context']\n"
        f"app = aws_cdk.App(context={{**ctx, 'local': True}}, outdir={str(tmp_path)!r})\n"
        "build(app); app.synth()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"},
    )
    assert done.returncode == 0, done.stderr
    assert "deprecated" not in done.stdout + done.stderr


# Least privilege, per role: what each role's code sends in these tests (recorded with a
# botocore hook on its clients) against what its policy in the synthesized template allows
# (tests/deploy/least_privilege.py evaluates the statements).


def _table_arn(raw: dict[str, Any]) -> str:
    [table_id] = resources(raw, "AWS::DynamoDB::Table")
    return lp.resolve({"Fn::GetAtt": [table_id, "Arn"]}, raw)


def _worker_statements(raw: dict[str, Any]) -> list[dict[str, Any]]:
    [policy] = resources(raw, "AWS::IAM::ManagedPolicy").values()
    return list(policy["Properties"]["PolicyDocument"]["Statement"])


def test_the_policy_evaluator_allows_and_denies_as_iam_does() -> None:
    """The evaluator the least-privilege tests rely on, on known allows and denies."""
    raw = {"Resources": {}}
    table = "arn:aws:dynamodb:us-east-1:1:table/t"
    like = {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["R#*", "ENV"]}}
    allow = [
        {"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": table, "Condition": like}
    ]
    assert lp.allows(allow, "dynamodb:GetItem", table, frozenset({"R#1"}), raw)
    assert lp.allows(allow, "dynamodb:GetItem", table, frozenset({"ENV"}), raw)
    assert lp.allows(allow, "dynamodb:GetItem", table, frozenset({"R#1", "ENV"}), raw)
    assert not lp.allows(allow, "dynamodb:GetItem", table, frozenset({"S#1#a#b"}), raw)
    assert not lp.allows(allow, "dynamodb:GetItem", table, frozenset({"ENV#x"}), raw)
    assert not lp.allows(allow, "dynamodb:GetItem", table, frozenset({"R#1", "S#1"}), raw)
    assert not lp.allows(allow, "dynamodb:PutItem", table, frozenset({"R#1"}), raw)
    assert not lp.allows(allow, "dynamodb:GetItem", f"{table}/index/i", frozenset({"R#1"}), raw)
    # IAM's trap: ForAllValues holds for a request with no leading key (a Scan).
    assert lp.allows(allow, "dynamodb:GetItem", table, None, raw)
    broad = [{"Effect": "Allow", "Action": "dynamodb:*", "Resource": "*"}]
    deny = {
        "Effect": "Deny",
        "Action": ["dynamodb:PutItem"],
        "Resource": table,
        "Condition": {"ForAnyValue:StringEquals": {"dynamodb:LeadingKeys": ["DEPLOYMENT"]}},
    }
    assert lp.allows(broad, "dynamodb:PutItem", table, frozenset({"DEPLOYMENT"}), raw)
    assert not lp.allows([*broad, deny], "dynamodb:PutItem", table, frozenset({"DEPLOYMENT"}), raw)
    assert not lp.allows(
        [*broad, deny], "dynamodb:PutItem", table, frozenset({"S#1", "DEPLOYMENT"}), raw
    )
    assert lp.allows([*broad, deny], "dynamodb:PutItem", table, frozenset({"S#1"}), raw)
    assert lp.allows([*broad, deny], "dynamodb:PutItem", table, None, raw)  # ForAnyValue: no key
    # Template ARNs: a GetAtt and a Join of it.
    ref = {"Fn::GetAtt": ["T", "Arn"]}
    joined = [
        {
            "Effect": "Allow",
            "Action": "dynamodb:Query",
            "Resource": {"Fn::Join": ["", [ref, "/index/i"]]},
        }
    ]
    assert lp.allows(joined, "dynamodb:Query", "arn:T/index/i", frozenset({"x"}), raw)
    assert not lp.allows(joined, "dynamodb:Query", "arn:T", frozenset({"x"}), raw)
    # What it does not model, it refuses to guess.
    single = [{**allow[0], "Condition": {"StringLike": {"dynamodb:LeadingKeys": ["R#*"]}}}]
    with pytest.raises(NotImplementedError):
        lp.allows(single, "dynamodb:GetItem", table, frozenset({"R#1"}), raw)
    with pytest.raises(NotImplementedError):
        lp.allows([{**allow[0], "NotAction": "x"}], "dynamodb:GetItem", table, None, raw)
    # The request model: a GSI Query's leading key is the index's partition key value.
    [query] = lp.requests(
        "Query",
        {
            "IndexName": k.BY_NAME.name,
            "KeyConditionExpression": "#pk = :pk AND #sk > :t",
            "ExpressionAttributeNames": {"#pk": k.BY_NAME.partition_key, "#sk": k.INDEX_SORT_KEY},
            "ExpressionAttributeValues": {":pk": {"S": k.by_name_pk("n")}, ":t": {"N": "1"}},
        },
    )
    assert query == lp.Request("dynamodb:Query", k.BY_NAME.name, frozenset({k.by_name_pk("n")}))
    transaction = lp.requests(
        "TransactWriteItems",
        {
            "TransactItems": [
                {"Put": {"Item": {"PK": {"S": "S#1"}}}},
                {"Update": {"Key": {"PK": {"S": "S#2"}}}},
                {"ConditionCheck": {"Key": {"PK": {"S": "ENV"}}}},
            ]
        },
    )
    assert [r.action for r in transaction] == [
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:ConditionCheckItem",
    ]


@pytest.fixture(scope="module")
def role_calls(moto_endpoint: str, moto_server: Any) -> dict[str, lp.CallRecorder]:
    """Every call a worker's adapter (``ledger``) and resource store (``resources``) make,
    through each public method, and the calls of their read methods alone (``reader``).
    Each listing runs once the indexes have the writes before it: it then reads what it
    finds (a BatchGetItem), as a listing of a settled table does."""

    def settle() -> None:
        if moto_server is not None:
            moto_server.wait_for_indexes()

    from resources.resource_fixtures import record
    from sandbox_ledger import LedgerEntry, ListSandboxOptions
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.errors import ConflictError
    from sandbox_ledger.models import EnvironmentRecord
    from sandbox_ledger.resources import SyncResourceRecordStore

    table = f"ledger-lp-{os.getpid()}"
    with SyncDynamoDBAdapter(table, endpoint_url=moto_endpoint) as admin:
        admin.create_table()  # an operator's call, not a worker's: not recorded
    recorder, store_recorder = lp.CallRecorder(), lp.CallRecorder()
    ledger = SyncDynamoDBAdapter(table, endpoint_url=moto_endpoint)
    recorder.watch(ledger.client())
    events = [("sandbox.created", 1), ("exec.complete", 2), ("checkpoint.created", 3)]
    for event, ts in [*events, ("sandbox.closed", 4)]:
        extra = {"snapshot_id": "snap"} if event.startswith("checkpoint") else {}
        ledger.append(
            LedgerEntry(ts=ts, name="w", sandbox_id="sb", step_index=-1, event=event, **extra)
        )
    big = LedgerEntry(  # split into part items
        ts=5, name="w", sandbox_id="big", step_index=0, event="exec.complete", stdout="x" * 900_000
    )
    ledger.append(big)
    entry = LedgerEntry(ts=6, name="w", sandbox_id="sb2", step_index=-1, event="sandbox.created")
    assert ledger.append_once(entry, 1) and not ledger.append_once(entry, 1)
    ledger.read_in_append_order("w", "big")
    ledger.read_stored("w", "sb")
    ledger.read_all("w", "big")
    ledger.last_checkpoint("w", "sb")
    ledger.list_checkpoints("w", "sb")
    ledger.get_sandbox_details("w", "sb")
    settle()  # the listings' indexes have the writes (index lag waited out)
    for status in (None, "running", "completed"):
        opts = ListSandboxOptions(limit=10, **({"status": status} if status else {}))
        ledger.list_sandbox_details("w", opts)
        ledger.list_all_sandbox_details(opts)
        page = ledger.list_sandbox_page("w", ListSandboxOptions(limit=1))
        ledger.list_sandbox_page("w", ListSandboxOptions(limit=1, cursor=page.cursor))
        ledger.list_all_sandbox_page(opts)
    ledger.save_environment(EnvironmentRecord(name="env", built_at=1))
    ledger.get_environment("env")
    ledger.list_environments()
    ledger.delete_environment("env")
    ledger.delete_sandbox("w", "sb")
    ledger.delete_sandbox("w", "big")
    store = SyncResourceRecordStore(table, endpoint_url=moto_endpoint)
    store_recorder.watch(store.client())
    stored = store.put(record())
    rid = stored.record.id
    store.put(stored.record, expected_revision=stored.revision)
    store.get(rid)
    store.get_versioned(rid)
    settle()  # the listings' indexes have the writes (index lag waited out)
    for phase, provider in ((None, None), ("ready", None), (None, "docker"), ("ready", "docker")):
        store.list(phase=phase, provider=provider)
    store.touch(rid)
    store.record_operation_start(rid, "exec")
    store.record_operation_finish(rid, "exec", "failed", error="exit 1")
    with pytest.raises(ConflictError):
        store.delete(rid, expected_revision=99)
    assert store.delete(rid) is True
    ledger.close()
    store.close()
    asyncio.run(_async_worker(table, moto_endpoint, recorder, store_recorder, settle))
    return {
        "ledger": recorder,
        "resources": store_recorder,
        "reader": _reader_calls(table, moto_endpoint, settle),
    }


def _reader_calls(table: str, endpoint: str, settle: Callable[[], None]) -> lp.CallRecorder:
    """A reader's calls: every read method of the adapter and the store, nothing else."""
    from resources.resource_fixtures import record
    from sandbox_ledger import LedgerEntry, ListSandboxOptions
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.resources import SyncResourceRecordStore

    with SyncDynamoDBAdapter(table, endpoint_url=endpoint) as writer:
        writer.append(
            LedgerEntry(ts=1, name="r", sandbox_id="s", step_index=-1, event="sandbox.created")
        )
    with SyncResourceRecordStore(table, endpoint_url=endpoint) as owner:
        rid = owner.put(record()).record.id
    settle()  # the listings' indexes have the writes (index lag waited out)
    recorder = lp.CallRecorder()
    with SyncDynamoDBAdapter(table, endpoint_url=endpoint) as ledger:
        recorder.watch(ledger.client())
        ledger.read_all("r", "s")
        ledger.read_stored("r", "s")
        ledger.read_in_append_order("r", "s")
        ledger.last_checkpoint("r", "s")
        ledger.list_checkpoints("r", "s")
        ledger.get_sandbox_details("r", "s")
        for status in (None, "running", "completed"):
            opts = ListSandboxOptions(limit=10, **({"status": status} if status else {}))
            ledger.list_sandbox_details("r", opts)
            ledger.list_all_sandbox_details(opts)
            ledger.list_sandbox_page("r", opts)
            ledger.list_all_sandbox_page(opts)
        ledger.get_environment("env")
        ledger.list_environments()
    with SyncResourceRecordStore(table, endpoint_url=endpoint) as store:
        recorder.watch(store.client())
        store.get(rid)
        store.get_versioned(rid)
        for phase, provider in ((None, None), ("ready", None), (None, "docker")):
            store.list(phase=phase, provider=provider)
    return recorder


@pytest.fixture(scope="module")
def worker_calls(role_calls: dict[str, lp.CallRecorder]) -> lp.CallRecorder:
    """Every call of a worker's adapter and resource store (the ``WorkerPolicy``'s code)."""
    union = lp.CallRecorder()
    union.requests = [*role_calls["ledger"].requests, *role_calls["resources"].requests]
    return union


async def _async_worker(
    table: str,
    endpoint: str,
    recorder: lp.CallRecorder,
    store_recorder: lp.CallRecorder,
    settle: Callable[[], None],
) -> None:
    """The async twins' main paths, on the same recorders (they send the same calls)."""
    from resources.resource_fixtures import record
    from sandbox_ledger import LedgerEntry, ListSandboxOptions
    from sandbox_ledger.dynamodb import DynamoDBAdapter
    from sandbox_ledger.resources import ResourceRecordStore

    async with DynamoDBAdapter(table, endpoint_url=endpoint) as ledger:
        recorder.watch(await ledger.client())
        entry = LedgerEntry(ts=1, name="a", sandbox_id="s", step_index=-1, event="sandbox.created")
        await ledger.append(entry)
        await ledger.read_all("a", "s")
        await asyncio.to_thread(
            settle
        )  # the listings' indexes have the writes (index lag waited out)
        await ledger.list_all_sandbox_details(ListSandboxOptions(limit=5))
        await ledger.delete_sandbox("a", "s")
    async with ResourceRecordStore(table, endpoint_url=endpoint) as store:
        store_recorder.watch(await store.client())
        stored = await store.put(record())
        await asyncio.to_thread(
            settle
        )  # the listings' indexes have the writes (index lag waited out)
        await store.list(phase="ready")
        await store.delete(stored.record.id)


def test_the_worker_policy_allows_exactly_the_key_families_its_code_sends(
    synthesized: tuple[dict[str, Any], Path], worker_calls: lp.CallRecorder
) -> None:
    """Every call the worker's adapter and store make is allowed; on the table and on each
    index the policy allows exactly the key families (and actions) the code sends there, no
    other prefix, no keyless call (a Scan); the descriptor only for the GetItem every
    client's first append makes."""
    raw = synthesized[0]
    statements, table_arn = _worker_statements(raw), _table_arn(raw)
    for request in worker_calls.requests:
        target = lp.arn(table_arn, request.resource)
        assert lp.allows(statements, request.action, target, request.keys, raw), request
    sent = worker_calls.triples()
    allowed = lp.allowed_triples(statements, raw, table_arn)
    assert {(r, f) for _, r, f in allowed} == {(r, f) for _, r, f in sent}
    assert {(a, r) for a, r, _ in allowed} == {(a, r) for a, r, _ in sent}
    reads = {a for a, _, f in sent if f == k.DESCRIPTOR_PK}
    assert reads == {"dynamodb:GetItem"}
    assert {a for a, _, f in allowed if f == k.DESCRIPTOR_PK} == reads
    # What the sessions' indexes hold is what the code queries there, and no more.
    assert {f for _, r, f in allowed if r == k.ALL.name} == {f"{k.ALL_PREFIX}*"}
    assert {f for _, r, f in allowed if r == k.BY_NAME.name} == {
        f"{k.BY_NAME_PREFIX}*",
        f"{k.RESOURCE_PHASE_PREFIX}*",
    }


@pytest.fixture(scope="module")
def granted_roles() -> dict[str, Any]:
    """A user's stack: a table and one function role granted each access."""
    from aws_cdk import aws_iam as iam

    from sandbox_ledger_cdk import LedgerTable

    stack = aws_cdk.Stack(aws_cdk.App(), "Granted")
    ledger = LedgerTable(stack, "Ledger", config=LedgerConfig(kms="create"))
    for name, grant in (
        ("LedgerWriter", ledger.grant_ledger),
        ("ResourceOwner", ledger.grant_resources),
        ("Reader", ledger.grant_read),
    ):
        grant(iam.Role(stack, name, assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")))
    return assertions.Template.from_stack(stack).to_json()


@pytest.mark.parametrize(
    ("role", "calls"),
    [("LedgerWriter", "ledger"), ("ResourceOwner", "resources"), ("Reader", "reader")],
)
def test_each_role_allows_exactly_what_its_code_sends(
    granted_roles: dict[str, Any],
    role_calls: dict[str, lp.CallRecorder],
    role: str,
    calls: str,
) -> None:
    """``grant_ledger``, ``grant_resources`` and ``grant_read``: every call of the role's
    code is allowed; on the table and each index the role's policy allows exactly the key
    families and the actions its code sends there; the descriptor is only read; a reader
    can write nothing, and only decrypt with the key."""
    raw = granted_roles
    statements, table_arn = lp.role_statements(raw, role), _table_arn(raw)
    recorder = role_calls[calls]
    for request in recorder.requests:
        target = lp.arn(table_arn, request.resource)
        assert lp.allows(statements, request.action, target, request.keys, raw), request
    sent, allowed = recorder.triples(), lp.allowed_triples(statements, raw, table_arn)
    assert {(r, f) for _, r, f in allowed} == {(r, f) for _, r, f in sent}
    assert {(a, r) for a, r, _ in allowed} == {(a, r) for a, r, _ in sent}
    assert {a for a, _, f in allowed if f == k.DESCRIPTOR_PK} == {"dynamodb:GetItem"}
    kms = {a for s in statements for a in _actions(s) if a.startswith("kms:")}
    if role == "Reader":
        assert not {a for a, _, _ in allowed} & lp.WRITE_ACTIONS
        assert kms == {"kms:Decrypt", "kms:DescribeKey"}
    else:
        assert "kms:GenerateDataKey" in kms


@pytest.mark.parametrize(
    "action",
    [
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
    ],
)
def test_a_worker_cannot_write_the_descriptor(
    synthesized: tuple[dict[str, Any], Path], action: str
) -> None:
    """Not with the worker policy, and not even beside a broader grant on the same role
    (the policy denies it): one worker cannot change every client's shard count or
    retention."""
    raw = synthesized[0]
    statements, table_arn = _worker_statements(raw), _table_arn(raw)
    descriptor = frozenset({k.DESCRIPTOR_PK})
    assert not lp.allows(statements, action, table_arn, descriptor, raw)
    broad = {"Effect": "Allow", "Action": "dynamodb:*", "Resource": "*"}
    assert not lp.allows([*statements, broad], action, table_arn, descriptor, raw)
    mixed = frozenset({k.DESCRIPTOR_PK, k.session_pk("n", "s")})
    assert not lp.allows([*statements, broad], action, table_arn, mixed, raw)
    assert lp.allows(statements, "dynamodb:GetItem", table_arn, descriptor, raw)


def test_the_sweeper_role_allows_exactly_what_the_sweeper_sends(
    synthesized: tuple[dict[str, Any], Path],
    moto_endpoint: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    """The sweeper handler's calls (a real run: observe, then claim, read, delete) against
    its role: the same (action, table-or-index, key family) triples, no more; its Query of
    the phase index carries the resource phase partitions only."""

    from resources.resource_fixtures import FakeContext, record
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.handlers import expire_stale_resources as handler
    from sandbox_ledger.resources import SyncResourceRecordStore

    table = f"ledger-sweep-{os.getpid()}"
    with SyncDynamoDBAdapter(table, endpoint_url=moto_endpoint) as admin:
        admin.create_table()
    bus = f"bus-{table}"
    boto3.client("events", endpoint_url=moto_endpoint).create_event_bus(Name=bus)
    owner = SyncResourceRecordStore(table, endpoint_url=moto_endpoint)
    now = datetime.now(UTC)
    stale = owner.put(record(age=timedelta(hours=1), now=now)).record
    owner.put(record(age=timedelta(days=9), phase="cleanup-failed", now=now))
    wait_for_indexes()  # the sweep's index has the records (index lag waited out)
    recorder = lp.CallRecorder()
    session = boto3.session.Session()
    recorder.watch_session(session)
    environ = {"TABLE_NAME": table, "EVENT_BUS_NAME": bus, "AWS_ENDPOINT_URL": moto_endpoint}
    sweeper = handler.build(environ, session=session)
    first = handler.run(sweeper, FakeContext().get_remaining_time_in_millis, now=now)
    later = now + timedelta(minutes=16)
    second = handler.run(sweeper, FakeContext().get_remaining_time_in_millis, now=later)
    assert first["expired"] == [] and stale.id in second["expired"]
    raw = synthesized[0]
    statements = lp.role_statements(raw, "SweeperRole")
    allowed = lp.allowed_triples(statements, raw, _table_arn(raw))
    assert allowed == recorder.triples()
    assert {f for _, r, f in allowed if r == k.RESOURCES_BY_PHASE.name} == {
        f"{k.RESOURCE_PHASE_PREFIX}*"
    }


def test_the_ttl_role_allows_no_dynamodb_call_but_the_mappings_stream_reads(
    synthesized: tuple[dict[str, Any], Path], moto_endpoint: str
) -> None:
    """The TTL handler reports a removal and replays without one DynamoDB call; its role
    holds only the stream reads the event source mapping makes (Lambda reads the stream
    with the function's role), on the stream, with no item or query action."""
    from resources.resource_fixtures import FakeContext, record
    from resources.test_lambdas import _stream_record
    from sandbox_ledger.handlers import on_ttl_expiry
    from sandbox_ledger.resources import _items as ri

    table = f"ledger-ttl-{os.getpid()}"
    bus = f"bus-{table}"
    boto3.client("events", endpoint_url=moto_endpoint).create_event_bus(Name=bus)
    bucket = f"unreported-{os.getpid()}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    recorder = lp.CallRecorder()
    session = boto3.session.Session()
    recorder.watch_session(session)
    environ = {
        "TABLE_NAME": table,
        "EVENT_BUS_NAME": bus,
        "UNREPORTED_BUCKET": bucket,
        "AWS_ENDPOINT_URL": moto_endpoint,
    }
    reporter = on_ttl_expiry.build(environ, session=session)
    r = record()
    item = {
        **ri.record_key(r.id),
        "rev": {"N": "1"},
        **ri.write_values(r, expires_at=1, shard_count=4),
    }
    batch = {"Records": [_stream_record(item, ttl=True, seq="1", table=table)]}
    assert on_ttl_expiry.report(reporter, batch) == {"batchItemFailures": []}
    on_ttl_expiry.replay(reporter, {"action": on_ttl_expiry.REPLAY_ACTION}, FakeContext())
    assert recorder.triples() == set()
    raw = synthesized[0]
    allowed = lp.allowed_triples(lp.role_statements(raw, "TtlExpiryRole"), raw, _table_arn(raw))
    # ListStreams has no resource-level permission: its Resource is "*" (every probe).
    everywhere = (lp.TABLE, *(i.name for i in k.INDEXES), lp.STREAM)
    assert allowed == {
        *(
            (f"dynamodb:{a}", lp.STREAM, lp.NO_KEY)
            for a in ("DescribeStream", "GetRecords", "GetShardIterator")
        ),
        *(("dynamodb:ListStreams", name, lp.NO_KEY) for name in everywhere),
    }


def test_the_descriptor_role_allows_exactly_the_descriptors_put(
    synthesized: tuple[dict[str, Any], Path],
) -> None:
    """The custom resource's one call, the descriptor's PutItem, is all its role allows."""
    from sandbox_ledger.deployment import TableDescriptor, deploy_descriptor_request

    raw = synthesized[0]
    request = deploy_descriptor_request("t", TableDescriptor(shard_count=4))
    sent = {t for r in lp.requests("PutItem", request) for t in r.triples()}
    allowed = lp.allowed_triples(
        lp.role_statements(raw, "LedgerDescriptorRole"), raw, _table_arn(raw)
    )
    assert allowed == sent == {("dynamodb:PutItem", lp.TABLE, k.DESCRIPTOR_PK)}


# The Lambda asset: exact packages from the lock files, no host bytecode, reproducible.


def _lock(path: Path) -> dict[str, str]:
    from packaging.utils import canonicalize_name

    pins = [line.split("==") for line in path.read_text().splitlines() if "==" in line]
    return {canonicalize_name(name): version for name, version in pins}


def _asset(outdir: Path, raw: dict[str, Any]) -> Path:
    [sweeper] = [
        r["Properties"]
        for r in resources(raw, "AWS::Lambda::Function").values()
        if r["Properties"]["Handler"].startswith("expire_stale_resources")
    ]
    return outdir / f"asset.{sweeper['Code']['S3Key'].removesuffix('.zip')}"


# What the Lambda Python runtime ships: never bundled.
RUNTIME_PROVIDED = {"boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "urllib3"}


def test_the_lambda_lock_matches_the_packages_dependencies(
    synthesized: tuple[dict[str, Any], Path],
) -> None:
    """The asset holds exactly the locked packages; the lock satisfies what the package
    declares for its handlers (its dependencies and the ``lambda`` extra, the runtime's own
    aside), and every dependency of a locked package is locked too, or comes with the
    runtime. A dependency bump without a lock update fails here."""
    from importlib.metadata import requires

    from packaging.metadata import Metadata
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    lock, tracing = _lock(RUNTIME_LOCK), _lock(TRACING_LOCK)
    declared = [Requirement(r) for r in requires("sandbox-ledger-dynamodb") or []]
    for requirement in declared:
        name = canonicalize_name(requirement.name)
        marker = requirement.marker
        if name in RUNTIME_PROVIDED or (
            marker is not None and not marker.evaluate({"extra": "lambda"})
        ):
            continue
        assert name in lock, f"{name} is a dependency of the handlers but not locked"
        assert requirement.specifier.contains(lock[name]), (requirement, lock[name])
    asset = _asset(synthesized[1], synthesized[0])
    bundled = {}
    environment = {
        "python_version": "3.14",
        "python_full_version": "3.14.0",
        "sys_platform": "linux",
        "platform_machine": "aarch64",
        "implementation_name": "cpython",
        "extra": "",
    }
    for info in asset.glob("*.dist-info"):
        metadata = Metadata.from_email((info / "METADATA").read_text(), validate=False)
        bundled[canonicalize_name(metadata.name)] = str(metadata.version)
        for requirement in metadata.requires_dist or []:
            if requirement.marker is None or requirement.marker.evaluate(environment):
                name = canonicalize_name(requirement.name)
                assert name in lock or name in RUNTIME_PROVIDED, (metadata.name, requirement)
                if name in lock:
                    assert requirement.specifier.contains(lock[name]), (requirement, lock[name])
    assert bundled == lock
    assert not set(lock) & set(tracing)


def test_the_asset_has_no_host_bytecode(synthesized: tuple[dict[str, Any], Path]) -> None:
    asset = _asset(synthesized[1], synthesized[0])
    assert (asset / "sandbox_ledger" / "keys.py").is_file()
    assert [p for p in asset.rglob("*") if p.suffix == ".pyc" or p.name == "__pycache__"] == []


def test_two_synths_give_the_same_asset_hash(
    synthesized: tuple[dict[str, Any], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second synth with a fresh pip run (not the session's cached copy) gives the same
    asset, byte for byte: its hash is the session synth's."""
    monkeypatch.setattr(PipBundling, "_pip", REAL_PIP)
    again, _ = synth(tmp_path, local=True)
    assert _asset(tmp_path, again).name == _asset(synthesized[1], synthesized[0]).name


# pip with no reachable index: a port that refuses, no configuration file, no find-links.
OFFLINE_PIP = {
    "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
    "PIP_EXTRA_INDEX_URL": "",
    "PIP_FIND_LINKS": "",
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_RETRIES": "0",
}


def _bundling_failure(tmp_path: Path, **env: str) -> str:
    from sandbox_ledger_cdk.bundling import BundlingError

    bundling = PipBundling(python_version="3.14")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**OFFLINE_PIP, **env}.items():
            patch.setenv(name, value)
        with pytest.raises(BundlingError) as caught:
            REAL_PIP(bundling, tmp_path / "out", ("-r", str(RUNTIME_LOCK)), "--no-deps")
    return str(caught.value)


def test_bundling_without_the_index_fails_in_one_line_naming_what_it_needs(
    tmp_path: Path,
) -> None:
    """It raised pip's whole stderr (a wall of retries), not saying how to go offline."""
    message = _bundling_failure(tmp_path)
    assert "\n" not in message
    assert "annotated-types==0.8.0" in message and "package index" in message
    assert "python -m sandbox_ledger_cdk.wheelhouse DIR" in message
    assert "SANDBOX_LEDGER_WHEELHOUSE=DIR" in message


def test_bundling_from_a_wheelhouse_missing_a_wheel_names_it(tmp_path: Path) -> None:
    (tmp_path / "house").mkdir()
    message = _bundling_failure(tmp_path, SANDBOX_LEDGER_WHEELHOUSE=str(tmp_path / "house"))
    assert "\n" not in message
    assert f"the wheelhouse {tmp_path / 'house'} (SANDBOX_LEDGER_WHEELHOUSE) has no" in message
    assert "annotated-types==0.8.0" in message and "make deploy-tools" in message


# What `make deploy-tools` and `make synth` read, copied as the working tree holds them.
DEPLOY_FILES = (
    "Makefile",
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "CHANGELOG.md",
    "package.json",
    "package-lock.json",
    "cdk.json",
)


@pytest.mark.slow  # makes a deploy venv (about 2 min with the network, pip's cache cold)
def test_make_synth_is_offline_after_make_deploy_tools(tmp_path: Path) -> None:
    """`make deploy-tools` with the network, then an edit of pyproject.toml (the deploy
    venv's stamp depends on it) and `make synth` with pip's index refusing connections: it
    synthesized nothing ("No matching distribution found for annotated-types==0.8.0" after
    pip's retries, once for the venv's reinstall and once for the Lambda asset), and every
    synth said "85 feature flags are not configured"."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in DEPLOY_FILES:
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, repo / name)
    for folder in ("adapter", "infra", "lambdas"):
        shutil.copytree(
            ROOT / folder, repo / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
        )
    if (ROOT / "node_modules" / ".bin" / "cdk").exists():
        (repo / "node_modules").symlink_to(ROOT / "node_modules")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))} | {
        "PYTHONDONTWRITEBYTECODE": "1"
    }
    tools = subprocess.run(
        ["make", "deploy-tools", f"PYTHON={sys.executable}"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tools.returncode == 0, tools.stderr
    (repo / "pyproject.toml").touch()
    done = subprocess.run(
        ["make", "synth", "CDK_ARGS=--quiet -c local=true"],
        cwd=repo,
        env=env | OFFLINE_PIP | {"PIP_RETRIES": "5"},
        capture_output=True,
        text=True,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Retrying" not in output and "No matching distribution" not in output
    assert "end-of-life" not in output  # jsii's Node banner
    assert "feature flags are not configured" not in output  # every flag set in cdk.json
    template = json.loads((repo / "cdk.out" / "SandboxLedger.template.json").read_text())
    assert any(r["Type"] == "AWS::Lambda::Function" for r in template["Resources"].values())


def test_importing_the_construct_library_is_quiet() -> None:
    """jsii printed its Node end-of-life banner (as Python bytes lines) on this machine's Node
    20 at the first import; the package sets jsii's variable, only when it is unset."""
    env = {
        k: v for k, v in os.environ.items() if k != "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"
    }
    probe = (
        "import os, sandbox_ledger_cdk, aws_cdk\n"
        "aws_cdk.App()\n"
        "print(os.environ['JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "20" in done.stdout.strip().split(",")
    mine = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**env, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "22"},
        check=False,
    )
    assert mine.stdout.strip() == "22"  # a value of the user's is left alone


BASIC_EXECUTION = (
    "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/"
    "service-role/AWSLambdaBasicExecutionRole]"
)


def _users_worker_app(tmp_path: Path, acknowledged: bool) -> None:
    from aws_cdk import aws_lambda as lambda_
    from cdk_nag import AwsSolutionsChecks

    app = aws_cdk.App(outdir=str(tmp_path))
    stack = aws_cdk.Stack(app, "Mine")
    worker = lambda_.Function(
        stack,
        "Worker",
        runtime=lambda_.Runtime.PYTHON_3_13,
        handler="w.handler",
        code=lambda_.Code.from_inline("def handler(event, context):\n    return event\n"),
    )
    if acknowledged:  # as docs/deploy.md shows ("Acknowledging a finding")
        for rule, reason in (
            ("AwsSolutions::AwsSolutions-L1", "Pinned to Python 3.13 for our dependencies."),
            (BASIC_EXECUTION, "Lambda's basic execution policy: its own logs only."),
        ):
            aws_cdk.Validations.of(worker).acknowledge(
                aws_cdk.Acknowledgment(id=rule, reason=reason)
            )
    aws_cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()


def test_a_users_finding_is_acknowledged_as_the_docs_show(tmp_path: Path) -> None:
    """A function with the role CDK makes and an older runtime fails cdk-nag (IAM4, L1: the
    docs' sample said "it passes"); acknowledged on the function as docs/deploy.md shows, it
    passes."""
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        _users_worker_app(tmp_path / "plain", acknowledged=False)
    report = (tmp_path / "plain" / "validation-report.json").read_text()
    assert "AwsSolutions-IAM4" in report and "AwsSolutions-L1" in report
    _users_worker_app(tmp_path / "acknowledged", acknowledged=True)
    assert BASIC_EXECUTION.split("[")[0] in (ROOT / "docs" / "deploy.md").read_text()
