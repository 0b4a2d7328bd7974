"""The ledger table as a reusable construct, built from the library's key schema."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from sandbox_ledger import keys as k

if TYPE_CHECKING:
    from collections.abc import Sequence

_TYPES = {"S": ddb.AttributeType.STRING, "N": ddb.AttributeType.NUMBER}
_PROJECTIONS = {"KEYS_ONLY": ddb.ProjectionType.KEYS_ONLY, "ALL": ddb.ProjectionType.ALL}

# The item actions the adapter and the resource stores send on the table (appends go through
# TransactWriteItems, which IAM authorizes as the PutItem/UpdateItem it contains). Queries of
# the table and of its indexes are granted apart, each on its own key families.
WORKER_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Query",
    "dynamodb:BatchGetItem",
    "dynamodb:BatchWriteItem",
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


# The partition key families a worker's calls carry: on the table, its sessions, environment
# records and resource records (never the descriptor, which it only reads); on each index,
# the index's own partition key values (IAM checks a GSI Query's leading key against the
# index's partition key, not the table's).
WORKER_TABLE_KEYS = (family(k.SESSION_PREFIX), k.ENVIRONMENT_PK, family(k.RESOURCE_PREFIX))
_INDEX_FAMILIES = (
    (k.BY_NAME, k.BY_NAME_PREFIX),
    (k.RESOURCES_BY_PHASE, k.RESOURCE_PHASE_PREFIX),
    (k.BY_NAME_STATUS, k.BY_NAME_STATUS_PREFIX),
    (k.RESOURCES_BY_PROVIDER, k.RESOURCE_PROVIDER_PREFIX),
    (k.ALL, k.ALL_PREFIX),
    (k.ALL_STATUS, k.ALL_STATUS_PREFIX),
)
WORKER_INDEX_KEYS: dict[str, tuple[str, ...]] = {
    index.name: tuple(family(p) for use, p in _INDEX_FAMILIES if use.name == index.name)
    for index in k.INDEXES
}


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


# A customer-managed table key, named action by action (no wildcards).
KMS_ACTIONS = (
    "kms:Decrypt",
    "kms:Encrypt",
    "kms:GenerateDataKey",
    "kms:ReEncryptFrom",
    "kms:ReEncryptTo",
    "kms:DescribeKey",
)


def _attribute(name: str) -> ddb.Attribute:
    return ddb.Attribute(name=name, type=_TYPES[k.KEY_ATTRIBUTE_TYPES[name]])


class LedgerTable(Construct):
    """The single table: keys, the four indexes and the TTL attribute from
    ``sandbox_ledger.keys``; on-demand (or provisioned with auto scaling), point-in-time
    recovery, deletion protection, RETAIN, encryption, a NEW_AND_OLD_IMAGES stream, and
    optional replica regions (a global table)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table_name: str | None = None,
        billing: str = "on-demand",
        min_capacity: int = 5,
        max_capacity: int = 500,
        kms_key: str = "aws-owned",
        replica_regions: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self.key: kms.IKey | None = None
        if kms_key == "create":
            self.key = kms.Key(
                self,
                "Key",
                enable_key_rotation=True,
                description="sandbox-ledger table encryption",
                removal_policy=RemovalPolicy.RETAIN,
            )
        elif kms_key != "aws-owned":
            self.key = kms.Key.from_key_arn(self, "Key", kms_key)
        pitr = ddb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True)
        self.table: ddb.ITable
        if replica_regions:
            self.table = self._global_table(table_name, pitr, replica_regions)
        else:
            self.table = self._regional_table(table_name, pitr, billing, min_capacity, max_capacity)

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

    def grant_worker(self, grantee: iam.IGrantable) -> iam.Grant:
        """What a worker using the adapter and the resource stores needs (the statements of
        :meth:`worker_policy_statements`): item actions on its sessions, environments and
        resource records, queries on the indexes' families, a read of the descriptor (and
        the key, if customer-managed); no table management, no Scan."""
        grants = []
        for statement in self.worker_policy_statements():
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
        """A worker's permissions as statements, for a managed policy: item actions on the
        worker's key families of the table, a read of the descriptor, a Query of each index
        on that index's families, the key if customer-managed, and an explicit deny of any
        write of the descriptor (which also holds against broader grants the role has)."""
        statements = [
            iam.PolicyStatement(
                actions=list(WORKER_ACTIONS),
                resources=[self.table.table_arn],
                conditions=leading_keys(*WORKER_TABLE_KEYS),
            ),
            self.descriptor_read(),
            *(
                iam.PolicyStatement(
                    actions=["dynamodb:Query"],
                    resources=[self.index_arn(index)],
                    conditions=leading_keys(*WORKER_INDEX_KEYS[index.name]),
                )
                for index in k.INDEXES
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
                iam.PolicyStatement(actions=list(KMS_ACTIONS), resources=[self.key.key_arn])
            )
        return statements
