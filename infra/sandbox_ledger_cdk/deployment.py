"""The whole deployment as one construct: the ledger table and its descriptor, the sweeper,
the TTL stream handler, the bus, the alarms and their topic, and the wiring."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsii
from aws_cdk import (
    AssetHashType,
    BundlingOptions,
    CfnOutput,
    Duration,
    RemovalPolicy,
    Stack,
    Tags,
)
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct

from sandbox_ledger import keys as k
from sandbox_ledger.handlers.tracing import TRACING_VARIABLE
from sandbox_ledger.resources.unreported import ON_FAILURE_PREFIX, REPLAY_PREFIXES

from ._logs import log_retention
from .bundling import PipBundling
from .config import ConfigError, LedgerConfig, named_keywords
from .nag import acknowledge
from .table import LedgerTable, family, leading_keys

if TYPE_CHECKING:
    from collections.abc import Mapping

    from aws_cdk import aws_kms as kms

RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
PYTHON_VERSION = "3.14"
ON_FAILURE_METRICS_ID = "OnFailureBatches"
BUS_POLICY_SID = "OnlyTheStacksFunctionsPutEvents"
"""Not the ``cdk-`` id the bus policy had as its own resource: removing that resource on an
update removes its statement id from the bus, which must not be this one."""


@jsii.implements(lambda_.IEventSourceDlq)
class _BucketOnFailure:
    """The stream mapping's S3 on-failure destination, without the read-write grant on the
    whole bucket that ``S3OnFailureDestination`` adds (the stack grants the prefixes)."""

    def __init__(self, bucket: s3.IBucket) -> None:
        self.bucket = bucket

    def bind(
        self, target: lambda_.IEventSourceMapping, target_handler: lambda_.IFunction
    ) -> lambda_.DlqDestinationConfig:
        return lambda_.DlqDestinationConfig(destination=self.bucket.bucket_arn)


class SandboxLedger(Construct):
    """The whole deployment in your own stack; it wires and grants, the constructs and the
    library hold the logic. Give it the id ``Default`` to keep the logical ids of the
    repository's stack (CDK leaves that id out of them).

    Props: ``config`` (every setting, :class:`LedgerConfig`); bring your own ``event_bus``
    (instead of ``config.event_bus``), ``alarm_topic`` (instead of ``config.alarm_topic_arn``
    or the topic created otherwise) and ``encryption_key`` (instead of ``config.kms``);
    ``tags`` put on every resource it creates.

    Attributes: ``ledger`` (:class:`LedgerTable`, with the ``grant_*`` methods of the three
    roles), ``bus``, ``sweeper``, ``ttl_handler``, ``unreported`` (bucket),
    ``worker_policy``, ``alarm_topic``, ``alarms``.

    Raises:
        ConfigError: an unknown prop (naming the nearest one), or conflicting settings.
    """

    @named_keywords("prop of SandboxLedger")
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: LedgerConfig | None = None,
        event_bus: events.IEventBus | None = None,
        alarm_topic: sns.ITopic | None = None,
        encryption_key: kms.IKey | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config = config or LedgerConfig()
        if alarm_topic is not None and config.alarm_topic_arn:
            raise ConfigError("alarm_topic: give either the topic or alarm_topic_arn, not both")
        for key, value in (tags or {}).items():
            Tags.of(self).add(key, value)
        self.bus = event_bus or self._event_bus()
        self.ledger = LedgerTable(
            self, "Ledger", config=config, event_bus=self.bus, encryption_key=encryption_key
        )
        self.descriptor = self.ledger.descriptor
        code = self._lambda_code()
        common_env = {
            "TABLE_NAME": self.ledger.table.table_name,
            "EVENT_BUS_NAME": self.bus.event_bus_name,
            "POWERTOOLS_METRICS_NAMESPACE": "SandboxLedger",
            TRACING_VARIABLE: "true" if config.tracing else "false",
        }
        self.sweeper = self._sweeper(code, common_env)
        self.unreported, self.ttl_handler = self._ttl_handler(code, common_env)
        # What users' own worker functions attach to use the adapter and the stores.
        self.worker_policy = iam.ManagedPolicy(
            self,
            "WorkerPolicy",
            description="Use the sandbox-ledger table through sandbox_ledger (no Scan, no admin)",
            statements=self.ledger.worker_policy_statements(),
        )
        if event_bus is None:
            self._bus_policy()
        self.alarm_topic = alarm_topic or self._alarm_topic()
        self.alarms = self._alarms()
        self.dashboard = self._dashboard()
        self._outputs()
        acknowledge(self)  # cdk-nag findings the design accepts, each with its reason

    def _event_bus(self) -> events.IEventBus:
        if self.config.event_bus == "create":
            return events.EventBus(
                self, "Bus", description="ResourceExpired events of sandbox-ledger"
            )
        return events.EventBus.from_event_bus_name(self, "Bus", "default")

    def _alarm_topic(self) -> sns.ITopic:
        """The topic given by ARN, else one of our own (subscribe to it after deploying)."""
        if self.config.alarm_topic_arn:
            return sns.Topic.from_topic_arn(self, "AlarmTopic", self.config.alarm_topic_arn)
        return sns.Topic(self, "AlarmTopic", display_name="sandbox-ledger alarms", enforce_ssl=True)

    def _bus_policy(self) -> None:
        """A created bus accepts ResourceExpired only from the stack's two functions: nobody
        else in the account can forge one (and have a live sandbox reclaimed).

        The policy is the bus's own ``Policy`` (a full policy document), not an
        ``AWS::Events::EventBusPolicy``: that resource's deprecated ``Principal`` property is
        read by cdk-nag's EVB1 rule on every synth, which prints a deprecation warning even
        when only ``Statement`` is set. The bus's ARN is spelled from its synthesized name,
        since a resource cannot refer to its own ``Arn``."""
        if not isinstance(self.bus, events.EventBus):
            return  # the account's default bus is shared; it is not ours to lock
        bus = self.bus.node.default_child
        assert isinstance(bus, events.CfnEventBus)
        stack = Stack.of(self)
        name = stack.resolve(bus.name)
        assert isinstance(name, str), "the bus's name is known at synth"
        arn = stack.format_arn(service="events", resource="event-bus", resource_name=name)
        roles = [self.sweeper.role, self.ttl_handler.role]
        statement = iam.PolicyStatement(
            sid=BUS_POLICY_SID,
            effect=iam.Effect.DENY,
            principals=[iam.AnyPrincipal()],
            actions=["events:PutEvents"],
            resources=[arn],
            conditions={"StringNotEquals": {"aws:PrincipalArn": [r.role_arn for r in roles if r]}},
        )
        bus.policy = iam.PolicyDocument(statements=[statement]).to_json()

    def _lambda_code(self) -> lambda_.Code:
        """Both functions' code: the library and the handlers, bundled locally with pip."""
        return lambda_.Code.from_asset(
            # The source is unused (its hash is the output's); bundling copies what runs.
            str(Path(__file__).parent),
            asset_hash_type=AssetHashType.OUTPUT,
            exclude=["*"],  # bundling copies exactly what the functions need
            bundling=BundlingOptions(
                image=RUNTIME.bundling_image,
                command=["bash", "-c", "echo 'docker bundling is not used' && exit 1"],
                local=PipBundling(python_version=PYTHON_VERSION, tracing=self.config.tracing),
            ),
        )

    def _sweeper(self, code: lambda_.Code, common_env: dict[str, str]) -> lambda_.Function:
        """The scheduled sweeper: reads candidates from the phase index, claims (UpdateItem),
        reads the records (BatchGetItem), publishes (PutEvents), deletes them (DeleteItem, each
        conditional on its claim)."""
        config, table = self.config, self.ledger.table
        sweeper = self._function(
            "Sweeper",
            code,
            "expire_stale_resources.handler.handler",
            timeout=Duration.minutes(5),
            reserved_concurrency=1,
            environment={
                **common_env,
                "SHARD_COUNT": str(config.shard_count),
                "STALE_AFTER_SECONDS": str(config.stale_after_seconds),
                "RETAIN_FAILED_SECONDS": str(config.retain_failed_seconds),
                "DRY_RUN": "true" if config.dry_run else "false",
            },
            statements=[
                # The phase index's resource partitions (a GSI Query's leading key is the
                # index's partition key: RP#<phase>#<shard>), never its session partitions.
                iam.PolicyStatement(
                    actions=["dynamodb:Query"],
                    resources=[self.ledger.index_arn(k.RESOURCES_BY_PHASE)],
                    conditions=leading_keys(family(k.RESOURCE_PHASE_PREFIX)),
                ),
                # Items: resource records only (their partition keys start with R#).
                iam.PolicyStatement(
                    actions=[
                        "dynamodb:BatchGetItem",
                        "dynamodb:UpdateItem",
                        "dynamodb:DeleteItem",
                    ],
                    resources=[table.table_arn],
                    conditions=leading_keys(family(k.RESOURCE_PREFIX)),
                ),
                # The deployment descriptor, read at the first run.
                self.ledger.descriptor_read(),
                iam.PolicyStatement(
                    actions=["events:PutEvents"], resources=[self.bus.event_bus_arn]
                ),
            ],
        )
        self.ledger.grant_key(sweeper)
        sweeper.node.add_dependency(self.descriptor)  # it reads the descriptor at its first run
        events.Rule(
            self,
            "SweepSchedule",
            schedule=events.Schedule.rate(Duration.minutes(config.sweep_rate_minutes)),
            targets=[targets.LambdaFunction(sweeper, retry_attempts=2)],
        )
        return sweeper

    def _ttl_handler(
        self, code: lambda_.Code, common_env: dict[str, str]
    ) -> tuple[s3.Bucket, lambda_.Function]:
        """The TTL backstop: stream REMOVE records made by the TTL service only, and the
        retained bucket that keeps what could not be reported (the handler's own writes
        under ``unreported/``, the mapping's S3 on-failure destination under ``aws/lambda/``)
        until an operator replays it."""
        bucket = s3.Bucket(
            self,
            "UnreportedExpiries",
            removal_policy=RemovalPolicy.RETAIN,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            # What is kept stays until replayed (that is the point); a replayed object's
            # noncurrent version is an audit trail for 90 days.
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ReplayedVersions",
                    noncurrent_version_expiration=Duration.days(90),
                    expired_object_delete_marker=True,
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                )
            ],
            # Request metrics for the objects Lambda writes there (the alarm's data).
            metrics=[s3.BucketMetrics(id=ON_FAILURE_METRICS_ID, prefix=ON_FAILURE_PREFIX)],
        )
        handler = self._function(
            "TtlExpiry",
            code,
            "on_ttl_expiry.handler.handler",
            timeout=Duration.seconds(60),
            reserved_concurrency=None,
            environment={**common_env, "UNREPORTED_BUCKET": bucket.bucket_name},
            statements=[
                iam.PolicyStatement(
                    actions=["events:PutEvents"], resources=[self.bus.event_bus_arn]
                ),
                # Keep, read back and remove (replay) objects under the two prefixes only;
                # Lambda writes the on-failure objects with this role too.
                iam.PolicyStatement(
                    actions=["s3:PutObject", "s3:GetObject", "s3:DeleteObject"],
                    resources=[bucket.arn_for_objects(f"{p}*") for p in REPLAY_PREFIXES],
                ),
                iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn]),
            ],
        )
        self.ledger.grant_key(handler)
        handler.add_event_source(
            sources.DynamoEventSource(
                self.ledger.table,
                starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                batch_size=100,
                bisect_batch_on_error=True,
                retry_attempts=5,
                max_record_age=Duration.days(1),
                report_batch_item_failures=True,
                on_failure=_BucketOnFailure(bucket),
                filters=[
                    lambda_.FilterCriteria.filter(
                        {
                            "eventName": lambda_.FilterRule.is_equal("REMOVE"),
                            "userIdentity": {
                                "type": lambda_.FilterRule.is_equal("Service"),
                                "principalId": lambda_.FilterRule.is_equal(
                                    "dynamodb.amazonaws.com"
                                ),
                            },
                        }
                    )
                ],
            )
        )
        return bucket, handler

    def _outputs(self) -> None:
        table = self.ledger.table
        CfnOutput(self, "TableName", value=table.table_name)
        CfnOutput(self, "TableArn", value=table.table_arn)
        CfnOutput(self, "WorkerPolicyArn", value=self.worker_policy.managed_policy_arn)
        CfnOutput(self, "EventBusName", value=self.bus.event_bus_name)
        CfnOutput(self, "ShardCount", value=str(self.config.shard_count))
        CfnOutput(self, "UnreportedBucketName", value=self.unreported.bucket_name)
        CfnOutput(self, "TtlFunctionName", value=self.ttl_handler.function_name)
        CfnOutput(self, "AlarmTopicArn", value=self.alarm_topic.topic_arn)
        CfnOutput(self, "DashboardName", value=self.dashboard.dashboard_name)

    def _function(
        self,
        name: str,
        code: lambda_.Code,
        handler: str,
        *,
        timeout: Duration,
        reserved_concurrency: int | None,
        environment: dict[str, str],
        statements: list[iam.PolicyStatement],
    ) -> lambda_.Function:
        log_group = logs.LogGroup(
            self, f"{name}Logs", retention=log_retention(self.config.log_retention_days)
        )
        role = iam.Role(
            self, f"{name}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[log_group.log_group_arn],
            )
        )
        for statement in statements:
            role.add_to_policy(statement)
        return lambda_.Function(
            self,
            name,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=code,
            handler=handler,
            timeout=timeout,
            memory_size=512,
            role=role,
            log_group=log_group,
            reserved_concurrent_executions=reserved_concurrency,
            environment=environment,
            # Active tracing also grants xray:PutTraceSegments and PutTelemetryRecords.
            tracing=lambda_.Tracing.ACTIVE if self.config.tracing else None,
        )

    def _alarms(self) -> list[cw.Alarm]:
        five_minutes = Duration.minutes(5)
        alarms = [
            self._alarm(
                "SweeperErrors",
                self.sweeper.metric_errors(period=five_minutes),
                "The expiry sweeper failed",
            ),
            self._alarm(
                "TtlHandlerErrors",
                self.ttl_handler.metric_errors(period=five_minutes),
                "The TTL stream handler failed",
            ),
            self._alarm(
                "UnreportedExpiriesKept",
                cw.Metric(
                    namespace="SandboxLedger",
                    metric_name="Unreported",
                    dimensions_map={"service": "sandbox-ledger-ttl"},
                    statistic="Sum",
                    period=five_minutes,
                ),
                "TTL removals kept in the unreported bucket: replay them (docs/resource-expiry.md)",
            ),
            self._alarm(
                "StreamFailureBatches",
                cw.Metric(
                    namespace="AWS/S3",
                    metric_name="PutRequests",
                    dimensions_map={
                        "BucketName": self.unreported.bucket_name,
                        "FilterId": ON_FAILURE_METRICS_ID,
                    },
                    statistic="Sum",
                    period=five_minutes,
                ),
                "Stream batches the TTL handler failed on, kept by Lambda: replay them",
            ),
        ]
        for kind in ("ReadThrottleEvents", "WriteThrottleEvents"):
            metric = cw.Metric(
                namespace="AWS/DynamoDB",
                metric_name=kind,
                dimensions_map={"TableName": self.ledger.table.table_name},
                statistic="Sum",
                period=five_minutes,
            )
            alarms.append(
                self._alarm(
                    f"Table{kind}", metric, f"The ledger table is throttled ({kind})", periods=2
                )
            )
        for alarm in alarms:
            alarm.add_alarm_action(cw_actions.SnsAction(self.alarm_topic))
        return alarms

    def _dashboard(self) -> cw.Dashboard:
        """One page: what the sweeps did and how long they took, what the TTL backstop
        reported and could not, and the table's and the functions' throttles, errors and
        latency."""
        period = Duration.minutes(5)

        def ours(name: str, service: str, label: str) -> cw.Metric:
            return cw.Metric(
                namespace="SandboxLedger",
                metric_name=name,
                dimensions_map={"service": service},
                statistic="Sum",
                period=period,
                label=label,
            )

        def table(name: str, statistic: str, **dimensions: str) -> cw.Metric:
            return cw.Metric(
                namespace="AWS/DynamoDB",
                metric_name=name,
                dimensions_map={"TableName": self.ledger.table.table_name, **dimensions},
                statistic=statistic,
                period=period,
                label=" ".join((name, *dimensions.values())),
            )

        sweeper, ttl = "sandbox-ledger-sweeper", "sandbox-ledger-ttl"
        functions = (("sweeper", self.sweeper), ("TTL handler", self.ttl_handler))
        # The operations the adapter and the stores send most (appends are transactions).
        operations = ("TransactWriteItems", "UpdateItem", "GetItem", "Query", "BatchWriteItem")

        def graph(title: str, left: list[cw.IMetric], **options: Any) -> cw.GraphWidget:
            return cw.GraphWidget(title=title, left=left, width=8, **options)

        return cw.Dashboard(
            self,
            "Dashboard",
            period_override=cw.PeriodOverride.AUTO,
            widgets=[
                [
                    graph(
                        "Sweeps: records",
                        [
                            ours("Expired", sweeper, "expired"),
                            ours("Failed", sweeper, "failed"),
                            ours("Unreadable", sweeper, "unreadable"),
                            ours("Skipped", sweeper, "skipped"),
                            ours("Lost", sweeper, "claims lost"),
                        ],
                    ),
                    graph(
                        "Sweeps: duration",
                        [
                            self.sweeper.metric_duration(
                                statistic="Maximum", period=period, label="max"
                            ),
                            self.sweeper.metric_duration(
                                statistic="Average", period=period, label="average"
                            ),
                        ],
                    ),
                    graph(
                        "TTL removals",
                        [
                            ours("Expired", ttl, "reported"),
                            ours("Unreported", ttl, "unreported (kept in the bucket)"),
                            ours("Failed", ttl, "failed"),
                        ],
                    ),
                ],
                [
                    graph(
                        "Table: throttles",
                        [
                            table("ReadThrottleEvents", "Sum"),
                            table("WriteThrottleEvents", "Sum"),
                        ],
                    ),
                    graph(
                        "Table: system errors",
                        [table("SystemErrors", "Sum", Operation=o) for o in operations],
                    ),
                    graph(
                        "Table: latency (ms)",
                        [
                            table("SuccessfulRequestLatency", "Average", Operation=o)
                            for o in operations
                        ],
                    ),
                ],
                [
                    graph(
                        "Functions: errors and throttles",
                        [
                            metric
                            for name, fn in functions
                            for metric in (
                                fn.metric_errors(period=period, label=f"{name} errors"),
                                fn.metric_throttles(period=period, label=f"{name} throttles"),
                            )
                        ],
                    ),
                    graph(
                        "Functions: duration (ms)",
                        [
                            fn.metric_duration(statistic="p99", period=period, label=f"{name} p99")
                            for name, fn in functions
                        ],
                    ),
                    cw.AlarmStatusWidget(title="Alarms", alarms=self.alarms, width=8),
                ],
            ],
        )

    def _alarm(
        self, name: str, metric: cw.IMetric, description: str, *, periods: int = 1
    ) -> cw.Alarm:
        """Alarm at one or more in ``periods`` consecutive periods; no data is not a breach."""
        return cw.Alarm(
            self,
            name,
            metric=metric,
            threshold=1,
            evaluation_periods=periods,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
