"""The table describes its deployment: one item that every client of the table agrees on.

The descriptor (key ``DEPLOYMENT`` / ``DESCRIPTOR``, attribute names in :mod:`sandbox_ledger.keys`)
holds the shard count of the list indexes, and, for a deployed stack, the event bus that
receives ``ResourceExpired`` and the expiry windows. ``create_table()`` writes it with the
shard count; the CDK stack writes all of it at deploy time. Adapters, stores, handlers and the
CLI read it; an explicit setting that disagrees with it is refused
(:class:`DeploymentMismatchError` names both values) instead of silently reading half the data.

Read it with :func:`read_descriptor` (boto3 client) or :func:`aread_descriptor` (aioboto3
client), or run :func:`get_descriptor` with an adapter's or store's ``run``::

    descriptor = read_descriptor(boto3.client("dynamodb"), "my-table")
    shards = resolve_shard_count(descriptor, explicit=None)
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sandbox_ledger import keys as k
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.resources.policy import DEFAULT_RETAIN_FAILED, DEFAULT_STALE_AFTER
from sandbox_ledger.sdk.attributes import N, S
from sandbox_ledger.sdk.steps import Call, Region, run_async, run_sync

if TYPE_CHECKING:
    from sandbox_ledger.sdk.attributes import Item
    from sandbox_ledger.sdk.steps import Op

__all__ = [
    "FORMAT",
    "DeploymentMismatchError",
    "ShardCount",
    "SweepSettings",
    "TableDescriptor",
    "aread_descriptor",
    "check_ledger_retention",
    "complete_descriptor",
    "descriptor_item",
    "descriptor_key",
    "get_descriptor",
    "new_store_id",
    "put_descriptor",
    "read_descriptor",
    "resolve_shard_count",
    "store_identity",
]

FORMAT = 1
"""The descriptor format this library writes and reads."""

log = logging.getLogger("sandbox_ledger.deployment")


class DeploymentMismatchError(InvalidInputError):
    """An explicit setting disagrees with the table's descriptor."""

    def __init__(
        self,
        field: str,
        explicit: object,
        described: object,
        table: str,
        hint: str = "omit the setting to use the table's",
    ) -> None:
        super().__init__(
            field,
            f"{explicit!r} was given but table {table} describes its deployment with "
            f"{described!r}; every client of one table must agree ({hint})",
        )
        self.explicit = explicit
        self.described = described


@dataclass(frozen=True)
class TableDescriptor:
    """What every client of one table must agree on.

    ``event_bus_name``, ``stale_after_seconds`` and ``retain_failed_seconds`` (0: failed
    records are kept forever) are None for a table that is not a deployed stack (one made by
    ``create_table()``). ``ledger_retention_seconds`` is the ledger retention every ledger
    writer uses (None: ledger items are kept forever; see docs/table-design.md, Ledger
    retention). ``store_id`` is the table's own identity, which paging cursors are bound to
    (None on tables described before it existed; see :func:`store_identity`).
    """

    shard_count: int = k.DEFAULT_SHARD_COUNT
    event_bus_name: str | None = None
    stale_after_seconds: int | None = None
    retain_failed_seconds: int | None = None
    ledger_retention_seconds: int | None = None
    store_id: str | None = None

    def __post_init__(self) -> None:
        k.check_shard_count(self.shard_count)
        if self.store_id is not None and (not isinstance(self.store_id, str) or not self.store_id):
            raise InvalidInputError("store_id", "must be a non-empty string or None")
        if self.event_bus_name is not None and not self.event_bus_name:
            raise InvalidInputError("event_bus_name", "must be a non-empty string or None")
        for name in ("stale_after_seconds", "retain_failed_seconds"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise InvalidInputError(name, "must be a non-negative integer or None")
        if self.stale_after_seconds == 0:
            raise InvalidInputError("stale_after_seconds", "must be positive")
        retention = self.ledger_retention_seconds
        if retention is not None and (
            isinstance(retention, bool) or not isinstance(retention, int) or retention <= 0
        ):
            raise InvalidInputError(
                "ledger_retention_seconds", "must be a positive integer or None"
            )

    @property
    def describes_sweep(self) -> bool:
        """True if it names the bus and the windows an operator's sweep must use."""
        return (
            self.event_bus_name is not None
            and self.stale_after_seconds is not None
            and self.retain_failed_seconds is not None
        )


@dataclass(frozen=True)
class SweepSettings:
    """The bus and windows the sweep of a table made by ``create_table(sweep=...)`` uses, as
    its descriptor records them (the CDK stack records its own): ResourceExpired events go to
    ``event_bus_name``; a live record expires unchanged for ``stale_after_seconds``, a failed
    one after ``retain_failed_seconds`` (0: kept forever). The defaults are the stack's."""

    event_bus_name: str = "default"
    stale_after_seconds: int = int(DEFAULT_STALE_AFTER.total_seconds())
    retain_failed_seconds: int = int(DEFAULT_RETAIN_FAILED.total_seconds())

    def __post_init__(self) -> None:
        TableDescriptor(**asdict(self))  # the descriptor's own checks, naming the setting


def descriptor_key() -> Item:
    """The descriptor item's key."""
    return {k.PARTITION_KEY: S(k.DESCRIPTOR_PK), k.SORT_KEY: S(k.DESCRIPTOR_SK)}


def descriptor_item(descriptor: TableDescriptor) -> Item:
    """The descriptor as a DynamoDB item (low-level format)."""
    item: Item = {
        **descriptor_key(),
        k.ITEM_TYPE: S(k.DESCRIPTOR_ITEM_TYPE),
        k.DESCRIPTOR_FORMAT: N(FORMAT),
        k.DESCRIPTOR_SHARD_COUNT: N(descriptor.shard_count),
    }
    if descriptor.event_bus_name is not None:
        item[k.DESCRIPTOR_EVENT_BUS] = S(descriptor.event_bus_name)
    if descriptor.stale_after_seconds is not None:
        item[k.DESCRIPTOR_STALE_AFTER] = N(descriptor.stale_after_seconds)
    if descriptor.retain_failed_seconds is not None:
        item[k.DESCRIPTOR_RETAIN_FAILED] = N(descriptor.retain_failed_seconds)
    if descriptor.ledger_retention_seconds is not None:
        item[k.DESCRIPTOR_LEDGER_RETENTION] = N(descriptor.ledger_retention_seconds)
    if descriptor.store_id is not None:
        item[k.DESCRIPTOR_STORE_ID] = S(descriptor.store_id)
    return item


def deploy_descriptor_request(table: str, descriptor: TableDescriptor) -> dict[str, Any]:
    """The PutItem a deployment (the CDK stack, at every deploy) makes to (re)describe the
    table: any setting may change, except the shard count of a table that already has one.

    The shard count is how the stored items' index keys were hashed: a redeploy with another
    count would hide the items of the shards it drops from every listing. The write is
    conditional on the stored count, so such a deploy fails (``ConditionalCheckFailedException``
    in the custom resource, and CloudFormation rolls the update back) instead."""
    return {
        "TableName": table,
        "Item": descriptor_item(descriptor),
        "ConditionExpression": "attribute_not_exists(#pk) OR #shards = :shards",
        "ExpressionAttributeNames": {
            "#pk": k.PARTITION_KEY,
            "#shards": k.DESCRIPTOR_SHARD_COUNT,
        },
        "ExpressionAttributeValues": {":shards": N(descriptor.shard_count)},
    }


def _decode(item: Item, table: str) -> TableDescriptor:
    def number(name: str) -> int | None:
        return int(item[name]["N"]) if name in item else None

    try:
        form = number(k.DESCRIPTOR_FORMAT)
        if form != FORMAT:
            raise InvalidInputError(
                "descriptor", f"format {form} is not {FORMAT}: upgrade sandbox-ledger"
            )
        return TableDescriptor(
            shard_count=int(item[k.DESCRIPTOR_SHARD_COUNT]["N"]),
            event_bus_name=item[k.DESCRIPTOR_EVENT_BUS]["S"]
            if k.DESCRIPTOR_EVENT_BUS in item
            else None,
            stale_after_seconds=number(k.DESCRIPTOR_STALE_AFTER),
            retain_failed_seconds=number(k.DESCRIPTOR_RETAIN_FAILED),
            ledger_retention_seconds=number(k.DESCRIPTOR_LEDGER_RETENTION),
            store_id=item[k.DESCRIPTOR_STORE_ID]["S"] if k.DESCRIPTOR_STORE_ID in item else None,
        )
    except (KeyError, ValueError) as exc:
        raise InvalidInputError(
            "descriptor", f"table {table} has an unreadable deployment descriptor: {exc}"
        ) from exc


def get_descriptor(table: str) -> Op[TableDescriptor | None]:
    """The table's descriptor (strongly consistent read), or None if it has none."""
    response = yield Call(
        "get_item", {"TableName": table, "Key": descriptor_key(), "ConsistentRead": True}
    )
    item = response.get("Item")
    return _decode(item, table) if item else None


def put_descriptor(table: str, descriptor: TableDescriptor) -> Op[TableDescriptor]:
    """Write the descriptor unless the table already has one, which is returned instead
    (an existing deployment is never redescribed by a client)."""
    from botocore.exceptions import ClientError

    from sandbox_ledger.sdk.steps import error_code

    try:
        yield Call(
            "put_item",
            {
                "TableName": table,
                "Item": descriptor_item(descriptor),
                "ConditionExpression": "attribute_not_exists(#pk)",
                "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY},
            },
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        existing = yield from get_descriptor(table)
        if existing is not None:
            return existing
        raise
    return descriptor


def complete_descriptor(table: str, sweep: SweepSettings) -> Op[TableDescriptor]:
    """Record ``sweep``'s settings in the table's descriptor where it has none (a table made
    before ``create_table`` recorded them); a setting it has is kept. Returns the result."""
    names = {
        "#bus": k.DESCRIPTOR_EVENT_BUS,
        "#stale": k.DESCRIPTOR_STALE_AFTER,
        "#retain": k.DESCRIPTOR_RETAIN_FAILED,
        "#pk": k.PARTITION_KEY,
    }
    response = yield Call(
        "update_item",
        {
            "TableName": table,
            "Key": descriptor_key(),
            "UpdateExpression": "SET #bus = if_not_exists(#bus, :bus), "
            "#stale = if_not_exists(#stale, :stale), #retain = if_not_exists(#retain, :retain)",
            "ConditionExpression": "attribute_exists(#pk)",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {
                ":bus": S(sweep.event_bus_name),
                ":stale": N(sweep.stale_after_seconds),
                ":retain": N(sweep.retain_failed_seconds),
            },
            "ReturnValues": "ALL_NEW",
        },
    )
    return _decode(response["Attributes"], table)


def read_descriptor(client: Any, table: str) -> TableDescriptor | None:
    """The descriptor of ``table`` through a boto3 DynamoDB client, or None."""
    return run_sync(client, get_descriptor(table))


async def aread_descriptor(client: Any, table: str) -> TableDescriptor | None:
    """The descriptor of ``table`` through an aioboto3 DynamoDB client, or None."""
    return await run_async(client, get_descriptor(table))


def new_store_id() -> str:
    """A fresh table identity, for a descriptor that records none yet."""
    return secrets.token_hex(16)


def store_identity(table: str, descriptor: TableDescriptor | None) -> Op[str]:
    """What the table's paging cursors are bound to, the same for every client of it: the
    descriptor's ``store_id``; on a table whose descriptor has none (described before it
    existed, or not at all), the table name and the client's region, never a write on a
    read (the same table name in another account and the same region is then not told
    apart)."""
    if descriptor is not None and descriptor.store_id is not None:
        return f"dynamodb:{descriptor.store_id}"
    region = yield Region()
    return f"dynamodb:{table}@{region}"


def resolve_shard_count(
    descriptor: TableDescriptor | None, explicit: int | None, table: str = "?"
) -> int:
    """The shard count a client must use: the descriptor's; an explicit value must agree
    with it (DeploymentMismatchError). Without a descriptor (a table made before descriptors
    existed): the explicit value, else 4, with a warning on the ``sandbox_ledger`` logger
    saying how to record it."""
    if explicit is not None:
        k.check_shard_count(explicit)
    if descriptor is None:
        shards = k.DEFAULT_SHARD_COUNT if explicit is None else explicit
        log.warning(
            "table %s has no deployment descriptor: using shard_count %d (%s); record the "
            "count its writers use with create_table() or `sandbox-ledger --shard-count N "
            "table create`",
            table,
            shards,
            "the default" if explicit is None else "as given",
        )
        return shards
    if explicit is not None and explicit != descriptor.shard_count:
        raise DeploymentMismatchError("shard_count", explicit, descriptor.shard_count, table)
    return descriptor.shard_count


class ShardCount:
    """One client's shard count: the table descriptor's, read once when first needed (one
    GetItem per client; concurrent first uses may each read it) and cached.

    An explicit value must agree with the descriptor (:class:`DeploymentMismatchError`
    names both); it is used as is on a table without a descriptor (default 4).
    """

    def __init__(
        self, table: str, explicit: int | None, retention_seconds: int | None = None
    ) -> None:
        self.table = table
        self.explicit = None if explicit is None else k.check_shard_count(explicit)
        self.retention_seconds = retention_seconds
        self.resolved: int | None = None
        self._described: TableDescriptor | None = None
        self._read = False
        self._retention_checked = False

    @property
    def known(self) -> int | None:
        """The resolved count once read, until then the explicit one, if any."""
        return self.resolved if self.resolved is not None else self.explicit

    def resolve(self, *, writing: bool = True) -> Op[int]:
        """The table's shard count (reads the descriptor on the first call only). A writer's
        ledger retention must be the table's (:func:`check_ledger_retention`); a reader's
        need not (reads hide expired items by their own TTL attribute, whoever wrote them)."""
        if self.resolved is None:
            described = yield from self.described()
            self._adopt(described)
        if writing:
            self._check_retention()
        assert self.resolved is not None
        return self.resolved

    def described(self) -> Op[TableDescriptor | None]:
        """The table's descriptor (read on the first call only), whatever it says."""
        if not self._read:
            self._described = yield from get_descriptor(self.table)
            self._read = True
        return self._described

    def agree(self, described: TableDescriptor | None) -> int:
        """Adopt the descriptor a client just wrote or found (``create_table``: a write, so
        its ledger retention must be this client's)."""
        shards = self._adopt(described)
        self._check_retention()
        return shards

    def _adopt(self, described: TableDescriptor | None) -> int:
        shards = resolve_shard_count(described, self.explicit, self.table)
        self._described, self._read, self.resolved = described, True, shards
        return shards

    def _check_retention(self) -> None:
        if not self._retention_checked:
            check_ledger_retention(self._described, self.retention_seconds, self.table)
            self._retention_checked = True


def _retention_text(seconds: int | None) -> str:
    if seconds is None:
        return "keep forever"
    days, rest = divmod(seconds, 86400)
    plural = "" if days == 1 else "s"
    return f"{days} day{plural} ({seconds} s)" if not rest else f"{seconds} s"


def check_ledger_retention(
    descriptor: TableDescriptor | None, retention_seconds: int | None, table: str = "?"
) -> None:
    """A ledger client's retention must be the descriptor's (absent: keep forever), or
    :class:`DeploymentMismatchError` names both. A table without descriptor checks nothing."""
    if descriptor is None or descriptor.ledger_retention_seconds == retention_seconds:
        return
    raise DeploymentMismatchError(
        "retention",
        _retention_text(retention_seconds),
        _retention_text(descriptor.ledger_retention_seconds),
        table,
        hint="give the adapter the table's retention",
    )
