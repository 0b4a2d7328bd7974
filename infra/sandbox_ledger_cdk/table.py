"""The ledger table as a reusable construct, built from the library's key schema."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from sandbox_ledger import keys as k
from sandbox_ledger.deployment import TableDescriptor, deploy_descriptor_request

from ._logs import log_retention
from .config import ConfigError, LedgerConfig, named_keywords

if TYPE_CHECKING:
    from collections.abc import Sequence

    from aws_cdk import aws_events as events

_TYPES = {"S": ddb.AttributeType.STRING, "N": ddb.AttributeType.NUMBER}
_PROJECTIONS = {"KEYS_ONLY": ddb.ProjectionType.KEYS_ONLY, "ALL": ddb.ProjectionType.ALL}

# The item actions the adapter and the resource stores send on the table (appends go through
# TransactWriteItems, which IAM authorizes as the PutItem/UpdateItem it contains, and the
# ConditionCheckItem of the session's sequence mark before the entry's own). Queries of
# the table and of its indexes are granted apart, each on its own key families.
WORKER_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:Query",
    "dynamodb:BatchGetItem",
    "dynamodb:BatchWriteItem",
)
READ_ACTIONS = ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem")
# The resource store writes a record with UpdateItem (conditioned on its revision) and lists
# through the indexes: no PutItem, no batch write, no Query of the table.
RESOURCE_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchGetItem",
)

# What can change an item: denied to workers on the deployment descriptor (PartiQL's writes
# too, in case a broader grant on the worker's role allows them).
WRITE_ACTIONS = (
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
)


def family(prefix: str) -> str:
    """The ``dynamodb:LeadingKeys`` pattern of every partition key starting with ``prefix``."""
    return f"{prefix}*"


# A customer-managed table key, named action by action (no wildcards); a reader only
# decrypts.
KMS_ACTIONS = (
    "kms:Decrypt",
    "kms:Encrypt",
    "kms:GenerateDataKey",
    "kms:ReEncryptFrom",
    "kms:ReEncryptTo",
    "kms:DescribeKey",
)
KMS_READ_ACTIONS = ("kms:Decrypt", "kms:DescribeKey")
STREAM_READ_ACTIONS = ("DescribeStream", "GetShardIterator", "GetRecords")
"""What ``changes()`` reads the table's stream with (``grant_changes``)."""


@dataclass(frozen=True)
class Access:
    """What one kind of application function may do on the table: item actions on its
    partition key families of the table, a Query of each index on the index's families it
    uses, a read of the descriptor, and these actions on a customer-managed key. Every
    access is also denied any write of the descriptor, even beside broader grants."""

    name: str
    actions: tuple[str, ...]
    table_keys: tuple[str, ...]
    index_uses: tuple[tuple[k.IndexSpec, str], ...]
    """(logical index, its partition key prefix): IAM checks a GSI Query's leading key
    against the index's partition key, not the table's."""
    kms_actions: tuple[str, ...]

    def index_keys(self, index: k.IndexSpec) -> tuple[str, ...]:
        """The leading key families of the physical ``index`` this access queries."""
        return tuple(family(p) for use, p in self.index_uses if use.name == index.name)


_LEDGER_INDEXES = (
    (k.BY_NAME, k.BY_NAME_PREFIX),
    (k.BY_NAME_STATUS, k.BY_NAME_STATUS_PREFIX),
    (k.ALL, k.ALL_PREFIX),
    (k.ALL_STATUS, k.ALL_STATUS_PREFIX),
)
_RESOURCE_INDEXES = (
    (k.RESOURCES_BY_PHASE, k.RESOURCE_PHASE_PREFIX),
    (k.RESOURCES_BY_PROVIDER, k.RESOURCE_PROVIDER_PREFIX),
)
_LEDGER_KEYS = (family(k.SESSION_PREFIX), k.ENVIRONMENT_PK)
_RESOURCE_KEYS = (family(k.RESOURCE_PREFIX),)

LEDGER = Access("ledger", WORKER_ACTIONS, _LEDGER_KEYS, _LEDGER_INDEXES, KMS_ACTIONS)
"""Append to and read the ledger (sessions and environment records): ``DynamoDBAdapter``."""
RESOURCES = Access("resources", RESOURCE_ACTIONS, _RESOURCE_KEYS, _RESOURCE_INDEXES, KMS_ACTIONS)
"""Own resource records (put, heartbeat, list, delete): ``ResourceRecordStore``."""
READER = Access(
    "reader",
    READ_ACTIONS,
    (*_LEDGER_KEYS, *_RESOURCE_KEYS),
    (*_LEDGER_INDEXES, *_RESOURCE_INDEXES),
    KMS_READ_ACTIONS,
)
"""Read the ledger and the resource records, change nothing."""
WORKER = Access(
    "worker",
    WORKER_ACTIONS,
    (*_LEDGER_KEYS, *_RESOURCE_KEYS),
    (*_LEDGER_INDEXES, *_RESOURCE_INDEXES),
    KMS_ACTIONS,
)
"""Both writers' access at once: the stack's ``WorkerPolicy``."""


def leading_keys(*patterns: str) -> dict[str, dict[str, list[str]]]:
    """A condition: every partition key the request carries matches one of ``patterns``
    (an exact value, or a :func:`family`).

    ``ForAllValues`` holds for a request that carries no leading key at all, so it must only
    condition actions that always carry one (item actions and Query, never Scan)."""
    operator = (
        "ForAllValues:StringLike"
        if any("*" in p for p in patterns)
        else "ForAllValues:StringEquals"
    )
    return {operator: {"dynamodb:LeadingKeys": list(patterns)}}


def _attribute(name: str) -> ddb.Attribute:
    return ddb.Attribute(name=name, type=_TYPES[k.KEY_ATTRIBUTE_TYPES[name]])


class LedgerTable(Construct):
    """The single table: keys, the four indexes and the TTL attribute from
    ``sandbox_ledger.keys``; on-demand (or provisioned with auto scaling), point-in-time
    recovery, deletion protection, RETAIN, encryption, a NEW_AND_OLD_IMAGES stream, optional
    replica regions (a global table), and its deployment descriptor, written at every
    deploy (what the adapters, the sweeper and the CLI read).

    Props: ``config`` (the table's settings and what the descriptor records),
    ``event_bus`` (the bus the descriptor names for ``ResourceExpired`` events, if any) and
    ``encryption_key`` (your own key; else ``config.kms`` decides).

    Raises:
        ConfigError: an unknown prop (naming the nearest one), or conflicting settings.
    """

    @named_keywords("prop of LedgerTable")
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: LedgerConfig | None = None,
        event_bus: events.IEventBus | None = None,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config = config or LedgerConfig()
        self.key: kms.IKey | None = None
        if encryption_key is not None:
            if config.kms != "aws-owned":
                raise ConfigError("encryption_key: give either the key or config.kms, not both")
            if config.replica_regions:
                raise ConfigError("encryption_key: replica regions need a key per region")
            self.key = encryption_key
        elif config.kms == "create":
            self.key = kms.Key(
                self,
                "Key",
                enable_key_rotation=True,
                description="sandbox-ledger table encryption",
                removal_policy=RemovalPolicy.RETAIN,
            )
        elif config.kms != "aws-owned":
            self.key = kms.Key.from_key_arn(self, "Key", config.kms)
        pitr = ddb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True)
        self.table: ddb.ITable
        if config.replica_regions:
            self.table = self._global_table(config.table_name, pitr, config.replica_regions)
        else:
            self.table = self._regional_table(
                config.table_name, pitr, config.billing, config.min_capacity, config.max_capacity
            )
        self.descriptor = self._descriptor(event_bus)

    def _descriptor(self, event_bus: events.IEventBus | None) -> cr.AwsCustomResource:
        """The table's deployment descriptor, written at every deploy (one PutItem by a role
        that may put only that item): what every client of the table must agree on."""
        config = self.config
        request = deploy_descriptor_request(
            self.table.table_name,
            TableDescriptor(
                shard_count=config.shard_count,
                event_bus_name=None if event_bus is None else event_bus.event_bus_name,
                stale_after_seconds=config.stale_after_seconds,
                retain_failed_seconds=config.retain_failed_seconds,
                ledger_retention_seconds=None
                if config.ledger_retention_days is None
                else config.ledger_retention_days * 86400,
            ),
        )
        call = cr.AwsSdkCall(
            service="DynamoDB",
            action="putItem",
            parameters=request,
            physical_resource_id=cr.PhysicalResourceId.of("deployment-descriptor"),
        )
        log_group = logs.LogGroup(
            self, "DescriptorLogs", retention=log_retention(config.log_retention_days)
        )
        role = iam.Role(
            self, "DescriptorRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[log_group.log_group_arn],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["dynamodb:PutItem"],
                resources=[self.table.table_arn],
                conditions=leading_keys(k.DESCRIPTOR_PK),
            )
        )
        self.grant_key(role)
        return cr.AwsCustomResource(
            self,
            "Descriptor",
            on_create=call,
            on_update=call,
            role=role,
            log_group=log_group,
            install_latest_aws_sdk=False,
        )

    def _regional_table(
        self,
        table_name: str | None,
        pitr: ddb.PointInTimeRecoverySpecification,
        billing: str,
        min_capacity: int,
        max_capacity: int,
    ) -> ddb.Table:
        provisioned = billing == "provisioned"
        table = ddb.Table(
            self,
            "Table",
            table_name=table_name,
            partition_key=_attribute(k.PARTITION_KEY),
            sort_key=_attribute(k.SORT_KEY),
            billing_mode=ddb.BillingMode.PROVISIONED
            if provisioned
            else ddb.BillingMode.PAY_PER_REQUEST,
            read_capacity=min_capacity if provisioned else None,
            write_capacity=min_capacity if provisioned else None,
            encryption=ddb.TableEncryption.CUSTOMER_MANAGED
            if self.key is not None
            else ddb.TableEncryption.DEFAULT,
            encryption_key=self.key,
            point_in_time_recovery_specification=pitr,
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
            time_to_live_attribute=k.TTL_ATTRIBUTE,
            stream=ddb.StreamViewType.NEW_AND_OLD_IMAGES,
        )
        for index in k.INDEXES:
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=_attribute(index.partition_key),
                sort_key=_attribute(index.sort_key),
                projection_type=_PROJECTIONS[index.projection],
                read_capacity=min_capacity if provisioned else None,
                write_capacity=min_capacity if provisioned else None,
            )
        if provisioned:
            for scaling in (
                table.auto_scale_read_capacity(
                    min_capacity=min_capacity, max_capacity=max_capacity
                ),
                table.auto_scale_write_capacity(
                    min_capacity=min_capacity, max_capacity=max_capacity
                ),
                *(
                    fn(index.name, min_capacity=min_capacity, max_capacity=max_capacity)
                    for index in k.INDEXES
                    for fn in (
                        table.auto_scale_global_secondary_index_read_capacity,
                        table.auto_scale_global_secondary_index_write_capacity,
                    )
                ),
            ):
                scaling.scale_on_utilization(target_utilization_percent=70)
        return table

    def _global_table(
        self,
        table_name: str | None,
        pitr: ddb.PointInTimeRecoverySpecification,
        replica_regions: Sequence[str],
    ) -> ddb.TableV2:
        return ddb.TableV2(
            self,
            "Table",
            table_name=table_name,
            partition_key=_attribute(k.PARTITION_KEY),
            sort_key=_attribute(k.SORT_KEY),
            global_secondary_indexes=[
                ddb.GlobalSecondaryIndexPropsV2(
                    index_name=index.name,
                    partition_key=_attribute(index.partition_key),
                    sort_key=_attribute(index.sort_key),
                    projection_type=_PROJECTIONS[index.projection],
                )
                for index in k.INDEXES
            ],
            billing=ddb.Billing.on_demand(),
            encryption=ddb.TableEncryptionV2.customer_managed_key(self.key)
            if self.key is not None
            else ddb.TableEncryptionV2.dynamo_owned_key(),
            point_in_time_recovery_specification=pitr,
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
            time_to_live_attribute=k.TTL_ATTRIBUTE,
            dynamo_stream=ddb.StreamViewType.NEW_AND_OLD_IMAGES,
            replicas=[ddb.ReplicaTableProps(region=r) for r in replica_regions],
        )

    @property
    def index_arns(self) -> list[str]:
        return [self.index_arn(index) for index in k.INDEXES]

    def index_arn(self, index: k.IndexSpec) -> str:
        """The ARN of one of the table's indexes."""
        return f"{self.table.table_arn}/index/{index.name}"

    def grant_ledger(self, grantee: iam.IGrantable) -> iam.Grant:
        """Append to and read the ledger (:data:`LEDGER`): what ``DynamoDBAdapter`` sends."""
        return self.grant(grantee, LEDGER)

    def grant_resources(self, grantee: iam.IGrantable) -> iam.Grant:
        """Own resource records (:data:`RESOURCES`): what ``ResourceRecordStore`` sends."""
        return self.grant(grantee, RESOURCES)

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read the ledger and the resource records, write nothing (:data:`READER`)."""
        return self.grant(grantee, READER)

    def grant_worker(self, grantee: iam.IGrantable) -> iam.Grant:
        """Both the ledger's and the resource records' access (:data:`WORKER`), the
        statements of :meth:`worker_policy_statements`; no table management, no Scan."""
        return self.grant(grantee, WORKER)

    def grant_changes(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read the fleet's change feed, write nothing: the statements of
        :meth:`changes_policy_statements`, what ``changes()`` and ``sandbox-ledger watch``
        send."""
        return self.grant_statements(grantee, self.changes_policy_statements())

    def changes_policy_statements(self) -> list[iam.PolicyStatement]:
        """The change feed's access: read the table's stream (``DescribeStream``,
        ``GetShardIterator``, ``GetRecords`` on the stream's ARN only), find it
        (``DescribeTable`` on the table, so no ``ListStreams``, which only takes ``*``), read
        the descriptor (the store's identity its positions are bound to), and decrypt with
        the key if customer-managed."""
        stream_arn = self.table.table_stream_arn
        assert stream_arn is not None, "the table is made with a stream"
        statements = [
            iam.PolicyStatement(
                actions=[f"dynamodb:{a}" for a in STREAM_READ_ACTIONS], resources=[stream_arn]
            ),
            iam.PolicyStatement(
                actions=["dynamodb:DescribeTable"], resources=[self.table.table_arn]
            ),
            self.descriptor_read(),
        ]
        if self.key is not None:
            statements.append(
                iam.PolicyStatement(actions=list(KMS_READ_ACTIONS), resources=[self.key.key_arn])
            )
        return statements

    def grant(self, grantee: iam.IGrantable, access: Access) -> iam.Grant:
        """Add the statements of ``access`` (:meth:`policy_statements`) to the grantee's
        policy."""
        return self.grant_statements(grantee, self.policy_statements(access))

    @staticmethod
    def grant_statements(
        grantee: iam.IGrantable, statements: list[iam.PolicyStatement]
    ) -> iam.Grant:
        """Add ``statements`` to the grantee's policy as one grant (a deny as it is, so it
        holds against broader grants the role has)."""
        grants = []
        for statement in statements:
            if statement.effect == iam.Effect.DENY:
                grantee.grant_principal.add_to_principal_policy(statement)
                continue
            grants.append(
                iam.Grant.add_to_principal(
                    grantee=grantee,
                    actions=statement.actions,
                    resource_arns=statement.resources,
                    conditions=statement.conditions or None,
                )
            )
        grant = grants[0]
        for other in grants[1:]:
            grant = grant.combine(other)
        return grant

    def grant_key(self, grantee: iam.IGrantable) -> None:
        """Use of the customer-managed key, if the table has one."""
        if self.key is not None:
            iam.Grant.add_to_principal(
                grantee=grantee, actions=list(KMS_ACTIONS), resource_arns=[self.key.key_arn]
            )

    def descriptor_read(self) -> iam.PolicyStatement:
        """Read the deployment descriptor (every client does, at its first append or sweep)."""
        return iam.PolicyStatement(
            actions=["dynamodb:GetItem"],
            resources=[self.table.table_arn],
            conditions=leading_keys(k.DESCRIPTOR_PK),
        )

    def worker_policy_statements(self) -> list[iam.PolicyStatement]:
        """The :data:`WORKER` access as statements, for a managed policy."""
        return self.policy_statements(WORKER)

    def policy_statements(self, access: Access) -> list[iam.PolicyStatement]:
        """An access as statements: its item actions on its key families of the table, a
        read of the descriptor, a Query of each index it uses on its families there, its
        actions on the key if customer-managed, and an explicit deny of any write of the
        descriptor (which also holds against broader grants the role has)."""
        statements = [
            iam.PolicyStatement(
                actions=list(access.actions),
                resources=[self.table.table_arn],
                conditions=leading_keys(*access.table_keys),
            ),
            self.descriptor_read(),
            *(
                iam.PolicyStatement(
                    actions=["dynamodb:Query"],
                    resources=[self.index_arn(index)],
                    conditions=leading_keys(*access.index_keys(index)),
                )
                for index in k.INDEXES
                if access.index_keys(index)
            ),
            iam.PolicyStatement(
                effect=iam.Effect.DENY,
                actions=list(WRITE_ACTIONS),
                resources=[self.table.table_arn],
                conditions={
                    "ForAnyValue:StringEquals": {"dynamodb:LeadingKeys": [k.DESCRIPTOR_PK]}
                },
            ),
        ]
        if self.key is not None:
            statements.append(
                iam.PolicyStatement(actions=list(access.kms_actions), resources=[self.key.key_arn])
            )
        return statements
