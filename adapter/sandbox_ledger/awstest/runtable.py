"""The one table a ``make test-aws`` run creates, resets between tests and deletes, and the
leftovers of earlier runs found by tag.

The table is made by the ledger's own CreateTable request (:func:`keys.table_definition`:
on-demand, the stream with new and old images) and :func:`~sandbox_ledger.dynamodb._ops.
create_table`'s TTL setting and descriptor, as the construct provisions them, with tags that
name the run. A test gets it as a fresh table would be: every item deleted, a new descriptor
(a new store identity) and, for a test that reads the table's stream, a new stream (a new
reader starts at the oldest record its stream still holds: the last test's would be there).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sandbox_ledger import keys as k

TABLE_PREFIX = "sandbox-ledger-test-"
"""Every run's table name starts so (ListTables filters by it before any tag is read)."""
RUN_TAG = "sandbox-ledger:test-run"
"""The tag whose presence makes a table a test run's, its value the run's id."""
CREATED_TAG = "sandbox-ledger:created-at"
"""When the run made the table (ISO 8601, UTC): ``clean --min-age`` spares younger ones."""
PURPOSE_TAG = "sandbox-ledger:purpose"


def new_run_id(now: datetime | None = None) -> str:
    """A run's id: its start time to the second and 6 random hex digits."""
    when = now or datetime.now(UTC)
    return f"{when:%Y%m%d%H%M%S}-{uuid.uuid4().hex[:6]}"


def run_tags(run_id: str, now: datetime | None = None) -> list[dict[str, str]]:
    """The tags of a run's table, as CreateTable takes them."""
    when = now or datetime.now(UTC)
    return [
        {"Key": RUN_TAG, "Value": run_id},
        {"Key": CREATED_TAG, "Value": when.strftime("%Y-%m-%dT%H:%M:%SZ")},
        {"Key": PURPOSE_TAG, "Value": "make test-aws (deleted at the run's end)"},
    ]


class RunTable:
    """A run's table on ``client`` (a botocore DynamoDB client)."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name

    def create(self, run_id: str) -> None:
        """Create the table with the run's tags, then let
        :meth:`SyncDynamoDBAdapter.create_table` wait for it, set its TTL and write its
        descriptor."""
        self.client.create_table(**k.table_definition(self.name), Tags=run_tags(run_id))
        self._descriptor()

    def _descriptor(self) -> None:
        from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

        meta = self.client.meta
        with SyncDynamoDBAdapter(
            self.name, endpoint_url=meta.endpoint_url, region_name=meta.region_name
        ) as adapter:
            adapter.create_table()  # the table exists: its TTL, then a descriptor if none

    def reset(self, *, new_stream: bool, descriptor: bool = True) -> None:
        """Make the table as a fresh one: every item deleted, a new descriptor (none without
        ``descriptor``: the caller's ``create_table`` writes its own, with its settings), and
        with ``new_stream`` a new stream; then wait until its indexes show the empty table."""
        self.empty()
        if new_stream:
            self.renew_stream()
        if descriptor:
            self._descriptor()
        self.wait_for_indexes()

    def empty(self, *, keep: frozenset[str] = frozenset()) -> None:
        """Delete every item but those of the partitions ``keep`` names (a consistent Scan of
        the keys, batches of 25, unprocessed ones sent again)."""
        names = {"#p": k.PARTITION_KEY, "#s": k.SORT_KEY}
        pages = self.client.get_paginator("scan").paginate(
            TableName=self.name,
            ConsistentRead=True,
            ProjectionExpression="#p, #s",
            ExpressionAttributeNames=names,
        )
        keys = [
            item
            for page in pages
            for item in page.get("Items", [])
            if item[k.PARTITION_KEY]["S"] not in keep
        ]
        for i in range(0, len(keys), 25):
            pending: dict[str, Any] | None = {
                self.name: [{"DeleteRequest": {"Key": key}} for key in keys[i : i + 25]]
            }
            tries = 0
            while pending:
                if tries:
                    time.sleep(min(0.05 * 2**tries, 2.0))
                tries += 1
                pending = self.client.batch_write_item(RequestItems=pending).get("UnprocessedItems")

    def renew_stream(self, *, timeout: float = 300.0) -> str:
        """Turn the table's stream off (if on) and on: a new stream, holding no record.
        Returns the new stream's ARN."""
        info = self._active(timeout)
        before = info.get("LatestStreamArn")
        # DynamoDB refuses to turn off a stream that is off (ValidationException): one left off
        # by a test stopped between the two switches is only turned on.
        if info.get("StreamSpecification", {}).get("StreamEnabled"):
            self.client.update_table(
                TableName=self.name, StreamSpecification={"StreamEnabled": False}
            )
            self._active(timeout)
        self.client.update_table(
            TableName=self.name,
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )
        info = self._active(timeout)
        after = info.get("LatestStreamArn")
        if not after or after == before:
            raise RuntimeError(f"table {self.name}: the stream was not renewed")
        return str(after)

    def _active(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            info: dict[str, Any] = self.client.describe_table(TableName=self.name)["Table"]
            if info.get("TableStatus") == "ACTIVE":
                return info
            if time.monotonic() > deadline:
                raise TimeoutError(f"table {self.name} not ACTIVE after {timeout} s")
            time.sleep(0.5)

    def wait_for_indexes(self, *, timeout: float = 120.0) -> None:
        """Return once every global secondary index shows exactly the table's items that
        carry its keys, with their key values (DynamoDB has no call for it: this compares a
        consistent Scan of the table with Scans of each index until they agree).

        Raises:
            TimeoutError: they still differ after ``timeout`` seconds.
        """
        indexes = self.client.describe_table(TableName=self.name)["Table"].get(
            "GlobalSecondaryIndexes", []
        )
        schema = {
            index["IndexName"]: [part["AttributeName"] for part in index["KeySchema"]]
            for index in indexes
        }
        wanted = sorted({name for parts in schema.values() for name in parts})
        deadline = time.monotonic() + timeout
        while True:
            table = self._keys(None, wanted, consistent=True)
            behind = [
                index
                for index, parts in sorted(schema.items())
                if _project(table, wanted, parts) != self._keys(index, parts, consistent=False)
            ]
            if not behind:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"table {self.name}: indexes {behind} still differ from the table "
                    f"after {timeout} s"
                )
            time.sleep(0.2)

    def _keys(self, index: str | None, wanted: list[str], *, consistent: bool) -> set[_Keys]:
        """The base keys and ``wanted`` attributes of every item of the table or an index."""
        attributes = [k.PARTITION_KEY, k.SORT_KEY, *wanted]
        names = {f"#a{i}": name for i, name in enumerate(attributes)}
        params: dict[str, Any] = {
            "TableName": self.name,
            "ProjectionExpression": ", ".join(names),
            "ExpressionAttributeNames": names,
        }
        if index is None:
            params["ConsistentRead"] = consistent
        else:
            params["IndexName"] = index
        found: set[_Keys] = set()
        for page in self.client.get_paginator("scan").paginate(**params):
            for item in page.get("Items", []):
                found.add(tuple(_plain(item.get(name)) for name in attributes))
        return found

    def delete(self, *, timeout: float = 600.0) -> bool:
        """Delete the table and wait until it is gone; False if it was absent."""
        return delete_table(self.client, self.name, timeout=timeout)


_Keys = tuple[str | None, ...]


def _plain(value: dict[str, Any] | None) -> str | None:
    """An attribute value as comparable text (its type and value), or None if absent."""
    if value is None:
        return None
    ((kind, inner),) = value.items()
    return f"{kind}:{inner}"


def _project(table: set[_Keys], wanted: list[str], parts: list[str]) -> set[_Keys]:
    """What an index keyed by ``parts`` holds of the table's items (their base keys then
    ``wanted`` attributes): those carrying every part, as base keys then the parts."""
    places = [wanted.index(name) + 2 for name in parts]
    out: set[_Keys] = set()
    for key in table:
        values = [key[place] for place in places]
        if all(value is not None for value in values):
            out.add((key[0], key[1], *values))
    return out


def delete_table(client: Any, name: str, *, timeout: float = 600.0) -> bool:
    """Delete table ``name`` and wait until DescribeTable no longer finds it; False if it was
    already gone. A table still CREATING or UPDATING (a run stopped during its creation or a
    stream renewal) is refused by DynamoDB with ResourceInUseException: the deletion is asked
    again until it is taken or ``timeout`` has passed."""
    from botocore.exceptions import ClientError

    from sandbox_ledger.sdk.steps import error_code

    deadline = time.monotonic() + timeout
    while True:
        try:
            if not _found(client.delete_table, name):
                return False
            break
        except ClientError as exc:
            if error_code(exc) != "ResourceInUseException" or time.monotonic() > deadline:
                raise
        time.sleep(1.0)
    while _found(client.describe_table, name):
        if time.monotonic() > deadline:
            raise TimeoutError(f"table {name} still exists {timeout} s after its deletion")
        time.sleep(1.0)
    return True


def _found(call: Any, name: str) -> bool:
    """``call(TableName=name)``: False if DynamoDB found no such table."""
    from botocore.exceptions import ClientError

    from sandbox_ledger.sdk.steps import error_code

    try:
        call(TableName=name)
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return False
        raise
    return True


@dataclass(frozen=True)
class Leftover:
    """A table an earlier run left: its name, run id and creation time (None: not tagged)."""

    name: str
    run_id: str
    created: datetime | None


def leftovers(client: Any) -> list[Leftover]:
    """Every table of the account and region tagged as a test run's (named with
    :data:`TABLE_PREFIX` and carrying :data:`RUN_TAG`); one gone since ListTables is passed by."""
    from botocore.exceptions import ClientError

    from sandbox_ledger.sdk.steps import error_code

    found: list[Leftover] = []
    for page in client.get_paginator("list_tables").paginate():
        for name in page.get("TableNames", []):
            if not name.startswith(TABLE_PREFIX):
                continue
            try:
                arn = client.describe_table(TableName=name)["Table"]["TableArn"]
                listed = client.list_tags_of_resource(ResourceArn=arn).get("Tags", [])
            except ClientError as exc:  # deleted since ListTables (a run's end, a clean-up)
                if error_code(exc) == "ResourceNotFoundException":
                    continue
                raise
            tags = {tag["Key"]: tag["Value"] for tag in listed}
            if RUN_TAG in tags:
                found.append(Leftover(name, tags[RUN_TAG], _when(tags.get(CREATED_TAG))))
    return found


def _when(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
