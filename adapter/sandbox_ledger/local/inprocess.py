"""The library on the embedded DynamoDB without HTTP: what the local server's saves and
loads run on (``sandbox-ledger local --data``).

- :class:`InProcessClient`: a low-level DynamoDB client whose calls go straight to moto's
  handler in this process, each one holding the server as a request does
  (:meth:`~sandbox_ledger.local.LocalDynamoDB.exclusive`): no HTTP, no botocore
  serialization, no signing. The ledger adapter's and the resource store's own operations
  run on it unchanged (:func:`ledger` and :func:`resource_store`), so a load writes every
  derived item (summaries, claims, markers) as an import does, and a save reads what the
  library reads.
- :class:`WriteLog`: the partitions each request the server serves has written (from the
  requests' keys), so that a save reads only those.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import ClientError

from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.resources import SyncResourceRecordStore
from sandbox_ledger.sdk.steps import run_sync

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox_ledger.local.dynamodb import LocalDynamoDB
    from sandbox_ledger.sdk.steps import Op

T = TypeVar("T")

__all__ = ["InProcessClient", "WriteLog", "Written", "ledger", "resource_store"]


class _Meta:
    def __init__(self, region_name: str) -> None:
        self.region_name = region_name


class InProcessClient:
    """A boto3-shaped low-level DynamoDB client over the embedded server's moto, in this
    process: ``client.query(TableName=..., ...)`` returns what boto3's would (binary values
    as bytes), and a refused call raises botocore's ``ClientError`` with moto's error code."""

    def __init__(self, server: LocalDynamoDB, region_name: str) -> None:
        from moto.core.models import DEFAULT_ACCOUNT_ID

        self._server = server
        self._account = DEFAULT_ACCOUNT_ID
        self.meta = _Meta(region_name)

    def __getattr__(self, operation: str) -> Callable[..., dict[str, Any]]:
        if operation.startswith("_"):
            raise AttributeError(operation)

        def call(**params: Any) -> dict[str, Any]:
            return self._call(operation, params)

        return call

    def _call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        from moto.core.exceptions import JsonRESTError, ServiceException
        from moto.dynamodb.responses import DynamoHandler

        handler = DynamoHandler()
        handler.current_account = self._account
        handler.region = self.meta.region_name
        handler.params = handler.body = params
        action = "".join(part.title() for part in operation.split("_"))
        try:
            with self._server.exclusive():
                result = getattr(handler, operation)()
        except (ServiceException, JsonRESTError) as exc:
            raise ClientError(_error_response(exc), action) from exc
        if isinstance(result, str):
            return dict(json.loads(result)) if result else {}
        value = getattr(result, "result", result)
        return dict(value) if isinstance(value, dict) else {}


def _error_response(exc: Exception) -> dict[str, Any]:
    code = getattr(exc, "code", None) or getattr(exc, "error_type", None) or type(exc).__name__
    code = str(code).split("#")[-1]
    message = str(getattr(exc, "message", "") or exc)
    response: dict[str, Any] = {"Error": {"Code": code, "Message": message}}
    reasons = getattr(exc, "cancellation_reasons", None)
    if reasons:
        response["CancellationReasons"] = reasons
    item = getattr(exc, "item", None)
    if item:
        response["Item"] = item
    return response


class _InProcessLedger(SyncDynamoDBAdapter):
    _in_process: InProcessClient

    def run(self, op: Op[T]) -> T:
        # One call at a time: the server serves one request at a time anyway, and threads
        # waiting for it only add switches.
        return run_sync(self._in_process, op, concurrent=False)


class _InProcessStore(SyncResourceRecordStore):
    _in_process: InProcessClient

    def run(self, op: Op[T]) -> T:
        # One call at a time: the server serves one request at a time anyway, and threads
        # waiting for it only add switches.
        return run_sync(self._in_process, op, concurrent=False)


def ledger(server: LocalDynamoDB, table: str, region_name: str) -> SyncDynamoDBAdapter:
    """The ledger adapter of ``table`` on ``server``, in process."""
    adapter = _InProcessLedger(table, region_name=region_name)
    adapter._in_process = InProcessClient(server, region_name)
    return adapter


def resource_store(server: LocalDynamoDB, table: str, region_name: str) -> SyncResourceRecordStore:
    """The resource record store of ``table`` on ``server``, in process."""
    store = _InProcessStore(table, region_name=region_name)
    store._in_process = InProcessClient(server, region_name)
    return store


_WRITES = {
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",
    "TransactWriteItems",
}
"""The item writes whose partitions a request names."""
_READS = {
    "GetItem",
    "BatchGetItem",
    "Query",
    "Scan",
    "DescribeTable",
    "DescribeTimeToLive",
    "DescribeContinuousBackups",
    "ListTables",
    "ListTagsOfResource",
    "DescribeEndpoints",
    "DescribeStream",
    "GetRecords",
    "GetShardIterator",
    "ListStreams",
    "DescribeLimits",
    "TransactGetItems",
    "ListBackups",
    "DescribeBackup",
    "DescribeKinesisStreamingDestination",
}
"""Requests that change nothing (every other one may change anything: read it all)."""


@dataclass
class Written:
    """What the requests since the last :meth:`WriteLog.take` may have changed."""

    partitions: dict[str, set[str]] = field(default_factory=dict)
    """Table name -> the partition keys written."""
    deletes: dict[str, set[str]] = field(default_factory=dict)
    """Table name -> the partition keys an item of which was deleted."""
    everything: bool = False
    """A request that may have changed any item (a table made or dropped, PartiQL, a body
    that could not be read): read every partition."""


class WriteLog:
    """The partitions written by the requests a server serves (register :meth:`note` with
    :meth:`~sandbox_ledger.local.LocalDynamoDB.observe`). A request refused still counts:
    reading a partition that did not change costs a read, never a change missed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written = Written()

    def note(self, target: str, body: bytes) -> None:
        """Take one request: its ``X-Amz-Target`` and body."""
        action = target.rpartition(".")[2]
        if action in _READS:
            return
        with self._lock:
            written = self._written
            if action not in _WRITES:
                written.everything = True
                return
            try:
                request = json.loads(body)
                for table, pk, deleted in _keys(action, request):
                    written.partitions.setdefault(table, set()).add(pk)
                    if deleted:
                        written.deletes.setdefault(table, set()).add(pk)
            except (ValueError, TypeError, KeyError, AttributeError):
                written.everything = True

    def take(self) -> Written:
        """What was written since the last call, and start afresh."""
        with self._lock:
            written, self._written = self._written, Written()
        return written

    def put_back(self, written: Written) -> None:
        """Merge ``written`` back in (a save that failed reads it again next time)."""
        with self._lock:
            mine = self._written
            mine.everything = mine.everything or written.everything
            for source, target in (
                (written.partitions, mine.partitions),
                (written.deletes, mine.deletes),
            ):
                for table, pks in source.items():
                    target.setdefault(table, set()).update(pks)


def _pk(item: dict[str, Any]) -> str:
    value = item[k.PARTITION_KEY]["S"]
    if not isinstance(value, str):
        raise TypeError("partition key")
    return value


def _keys(action: str, request: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(table, partition key, whether an item was deleted) of each item a write names."""
    if action == "PutItem":
        return [(request["TableName"], _pk(request["Item"]), False)]
    if action == "UpdateItem":
        # An update may REMOVE attributes, never the item: not a delete.
        return [(request["TableName"], _pk(request["Key"]), False)]
    if action == "DeleteItem":
        return [(request["TableName"], _pk(request["Key"]), True)]
    found: list[tuple[str, str, bool]] = []
    if action == "BatchWriteItem":
        for table, writes in request["RequestItems"].items():
            for write in writes:
                if "PutRequest" in write:
                    found.append((table, _pk(write["PutRequest"]["Item"]), False))
                else:
                    found.append((table, _pk(write["DeleteRequest"]["Key"]), True))
        return found
    for action_item in request["TransactItems"]:
        for kind, spec in action_item.items():
            if kind == "ConditionCheck":
                continue
            key = spec["Item"] if kind == "Put" else spec["Key"]
            found.append((spec["TableName"], _pk(key), kind == "Delete"))
    return found
