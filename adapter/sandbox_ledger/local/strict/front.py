"""The strict profile's front: what DynamoDB refuses, throttles, cancels or replays, applied to
each request before moto serves it (see :mod:`sandbox_ledger.local.strict`)."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import json
import re
import threading
import time
import zlib
from typing import TYPE_CHECKING, Any

from . import capacity, consumed, indexes, limits, streams
from .consumed import partition_text
from .sizes import item_size
from .ttl import TtlDeleter

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from . import StrictProfile

__all__ = ["StrictFront"]

_PREFIX = "com.amazonaws.dynamodb.v20120810#"
_THROTTLED = (
    "Throughput exceeds the current capacity of your table or index. DynamoDB is "
    "automatically scaling your table or index so please try again shortly. If exceptions "
    "persist, check if you have a hot key: "
    "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html"
)
_WRITES = {"PutItem", "UpdateItem", "DeleteItem"}
_CONFLICT = {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
_NONE = {"Code": "None"}
_READS = {"GetItem", "Query", "Scan"}
_PAGED = _READS - {"GetItem"}
_KEYED_READS = {"GetItem", "BatchGetItem", "TransactGetItems", "Query"}
_BATCHES = {"BatchWriteItem", "BatchGetItem", "TransactWriteItems", "TransactGetItems"}
_METERED = _READS | _WRITES | _BATCHES
"""The requests whose ConsumedCapacity the front answers (PartiQL's: moto's still)."""
_PAGE = 1024 * 1024
"""A Query or Scan page's data, at most (and the item that reaches it)."""
_STREAM_WRITES = {*_WRITES, "BatchWriteItem", "TransactWriteItems"}
_NO_STREAM_RECORDS = {
    *_READS,
    "BatchGetItem",
    "TransactGetItems",
    "DescribeTable",
    "ListTables",
    "CreateTable",
    "DescribeTimeToLive",
    "DescribeContinuousBackups",
    "ListTagsOfResource",
    "DescribeLimits",
    "DescribeEndpoints",
}

App = Any
Run = Any


def _error(code: str, message: str, status: int = 400, **fields: Any) -> tuple[int, bytes]:
    body = {"__type": _PREFIX + code, "message": message, **fields}
    return status, json.dumps(body).encode()


class _Reply(Exception):
    """A response the front gives instead of moto's; ``codes``: the error codes it is
    counted under (:meth:`StrictFront.refused`)."""

    def __init__(self, status: int, body: bytes, codes: tuple[str, ...] = ()) -> None:
        super().__init__(status)
        self.status, self.body, self.codes = status, body, codes


def _refuse(code: str, message: str, **fields: Any) -> _Reply:
    return _Reply(*_error(code, message, **fields), (code,))


def _cancelled(reasons: list[dict[str, str]]) -> _Reply:
    codes = ", ".join(r["Code"] for r in reasons)
    counted = ("TransactionCanceledException", *sorted({r["Code"] for r in reasons} - {"None"}))
    return _Reply(
        *_error(
            "TransactionCanceledException",
            "Transaction cancelled, please refer cancellation reasons for specific reasons "
            f"[{codes}]",
            CancellationReasons=reasons,
        ),
        counted,
    )


def _conflicting(clash: list[bool]) -> _Reply:
    """A transaction cancelled for the items (``clash``) another one holds in flight."""
    return _cancelled([_CONFLICT if hit else _NONE for hit in clash])


class _Tables:
    """The key schema and stored items of moto's tables (called under the server's lock)."""

    def table(self, name: str, region: str | None = None) -> Any:
        """moto's table of that name (in any account; in ``region`` if given, else in any
        region), or None."""
        from moto.dynamodb.models import dynamodb_backends

        for account in list(dynamodb_backends.keys()):
            regions = dynamodb_backends[account]
            for where in list(regions.keys()):
                if region is not None and where != region:
                    continue
                table = regions[where].tables.get(name)
                if table is not None:
                    return table
        return None

    def partition(self, name: str, key: dict[str, Any]) -> str:
        """The partition key value of ``key`` (an item or a key), as text."""
        table = self.table(name)
        attribute = table.hash_key_attr if table is not None else next(iter(key), "")
        return partition_text(key.get(attribute, {}))

    def item_key(self, name: str, key: dict[str, Any]) -> tuple[str, str]:
        """The whole primary key of ``key`` (an item or a key), as text."""
        table = self.table(name)
        if table is None:
            return name, json.dumps(key, sort_keys=True)
        names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
        return name, json.dumps({n: key.get(n) for n in names}, sort_keys=True)

    def stored_size(self, name: str, key: dict[str, Any]) -> int:
        from moto.dynamodb.models.dynamo_type import DynamoType

        table = self.table(name)
        if table is None or table.hash_key_attr not in key:
            return 0
        hash_key = DynamoType(key[table.hash_key_attr])
        range_key = (
            DynamoType(key[table.range_key_attr])
            if table.range_key_attr and table.range_key_attr in key
            else None
        )
        try:
            found = table.get_item(hash_key, range_key)
        except Exception:  # a key moto refuses: moto answers the request itself
            return 0
        return 0 if found is None else item_size(found.to_json()["Attributes"])

    def updated_size(self, name: str, update: dict[str, Any]) -> int | None:
        """The size of the item the update ``update`` (an UpdateItem's fields, or a
        transaction's Update) would leave: its expression applied to a copy of the stored
        item (or of its key alone), as moto applies it. None where it cannot be more than
        400 KB (bounded without applying it: the stored item and the update's values, each
        taken once per word of its expression), or where moto answers the update itself (no
        such table, a key or an expression it refuses)."""
        import copy

        from moto.dynamodb.models.dynamo_type import DynamoType, Item
        from moto.dynamodb.parsing import expressions
        from moto.dynamodb.parsing.executors import UpdateExpressionExecutor
        from moto.dynamodb.parsing.validators import UpdateExpressionValidator

        parsing: Any = expressions  # its parser is not in its stubs' names
        expression = update.get("UpdateExpression")
        key = update.get("Key") or {}
        table = self.table(name)
        if not isinstance(expression, str) or table is None or table.hash_key_attr not in key:
            return None
        names = update.get("ExpressionAttributeNames") or {}
        values = update.get("ExpressionAttributeValues") or {}
        stored = self.stored_size(name, key)
        actions = expression.count(",") + expression.count(" ") + 1
        given = item_size({**key, **values}) + len(expression) + sum(map(len, names.values()))
        if (stored + given) * (actions + 1) <= limits.ITEM_BYTES:
            return None  # the common update: far from the limit, not applied twice
        try:
            hash_key = DynamoType(key[table.hash_key_attr])
            ranged = table.range_key_attr and table.range_key_attr in key
            range_key = DynamoType(key[table.range_key_attr]) if ranged else None
            found = table.get_item(hash_key, range_key)
            if found is None:
                attrs = {table.hash_key_attr: key[table.hash_key_attr]}
                if ranged:
                    attrs[table.range_key_attr] = key[table.range_key_attr]
                item = Item(hash_key, range_key, attrs)
            else:
                item = copy.deepcopy(found)
            tree = UpdateExpressionValidator(
                parsing.UpdateExpressionParser.make(expression),
                expression_attribute_names=names,
                expression_attribute_values=values,
                item=item,
                table=table,
            ).validate()
            tree.normalize()
            UpdateExpressionExecutor(tree, item, names).execute()
        except Exception:  # moto answers the update itself, as it does without the profile
            return None
        return item_size(item.to_json()["Attributes"])


def _written(operation: str, request: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(table, key or item) of each item a write names."""
    if operation == "PutItem":
        return [(request.get("TableName", ""), request.get("Item", {}))]
    if operation in ("UpdateItem", "DeleteItem"):
        return [(request.get("TableName", ""), request.get("Key", {}))]
    if operation == "BatchWriteItem":
        out = []
        for table, requests in (request.get("RequestItems") or {}).items():
            for one in requests:
                if "PutRequest" in one:
                    out.append((table, one["PutRequest"].get("Item", {})))
                elif "DeleteRequest" in one:
                    out.append((table, one["DeleteRequest"].get("Key", {})))
        return out
    if operation in ("TransactWriteItems", "TransactGetItems"):
        out = []
        for action in request.get("TransactItems") or []:
            (_, body), *_ = action.items()
            out.append((body.get("TableName", ""), body.get("Item") or body.get("Key") or {}))
        return out
    return []


class StrictFront:
    """One per strict server: its buckets, the transactions in flight, the tokens seen."""

    def __init__(
        self,
        profile: StrictProfile,
        stream_records: int | None = None,
        meter: consumed.Meter | None = None,
        removed: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.profile = profile
        self._removed = removed
        self.buckets = capacity.Buckets(profile.rate_scale)
        self.tables = _Tables()
        self.indexes = indexes.IndexLag(profile.index_delay)
        self.ttl = (
            None
            if profile.ttl_delay is None
            else TtlDeleter(profile.ttl_delay, profile.ttl_every, around=self._ttl_deleting)
        )
        self.streams = streams.StreamViews(profile, stream_records, self.tables.table)
        self.meter = meter if meter is not None else consumed.Meter()
        self._flight_lock = threading.Lock()
        self._refusals: collections.Counter[str] = collections.Counter()
        self._in_flight: dict[tuple[str, str], int] = {}
        self._tokens: dict[str, tuple[float, str, int, list[tuple[str, str]], bytes]] = {}

    # -- the outer phase: a transaction in flight -----------------------------------------

    def serve(
        self,
        environ: dict[str, Any],
        start_response: Callable[..., Any],
        run: Callable[[App, dict[str, Any], Callable[..., Any]], Iterable[bytes]],
        app: App,
    ) -> Iterable[bytes]:
        """Serve one request: ``run(inner_app, environ, start_response)`` serves it under the
        server's lock; a TransactWriteItems is first held in flight for the profile's
        ``conflict_hold`` seconds, outside the lock, so others can collide with it."""
        source = environ.get("wsgi.input")
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = source.read(length) if source is not None and length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        operation = str(environ.get("HTTP_X_AMZ_TARGET", "")).rpartition(".")[2]
        try:
            request = json.loads(body) if body else {}
        except ValueError:
            request = None
        if not isinstance(request, dict):
            return run(app, environ, start_response)
        held: list[tuple[str, str]] = []
        if operation == "TransactWriteItems" and self.profile.conflict_hold > 0:
            try:
                held = self._enter_flight(request)
            except _Reply as reply:
                return self._refused(start_response, reply)
            time.sleep(self.profile.conflict_hold)
        try:
            return run(self._inner(operation, request, app), environ, start_response)
        finally:
            self._leave_flight(held)

    def _enter_flight(self, request: dict[str, Any]) -> list[tuple[str, str]]:
        # Under the flight lock only: the key schema is read without the server's lock, as
        # moto's tables dict is only read here (a table created meanwhile is not in flight).
        keys = [self.tables.item_key(t, k) for t, k in _written("TransactWriteItems", request)]
        with self._flight_lock:
            clash = [key in self._in_flight for key in keys]
            if any(clash):
                raise _conflicting(clash)
            for key in keys:
                self._in_flight[key] = self._in_flight.get(key, 0) + 1
        return keys

    def _leave_flight(self, keys: list[tuple[str, str]]) -> None:
        if not keys:
            return
        with self._flight_lock:
            for key in keys:
                left = self._in_flight.get(key, 0) - 1
                if left > 0:
                    self._in_flight[key] = left
                else:
                    self._in_flight.pop(key, None)

    # -- the inner phase, under the server's lock -----------------------------------------

    def _inner(self, operation: str, request: dict[str, Any], app: App) -> App:
        def inner(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            try:
                return self._checked(operation, request, app, environ, start_response)
            except _Reply as reply:
                return self._refused(start_response, reply)

        return inner

    def _checked(
        self,
        operation: str,
        request: dict[str, Any],
        app: App,
        environ: dict[str, Any],
        start_response: Callable[..., Any],
    ) -> Iterable[bytes]:
        if self.ttl is not None and self.ttl.tick():
            # The TTL service's REMOVE records reach the stream views at once, as a write's.
            self.streams.written(list(indexes._tables()))
        if str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith(streams.TARGET_PREFIX):
            return self._stream_call(operation, request, app, environ, start_response)
        try:
            limits.check(operation, request, self.tables.stored_size, self.tables.updated_size)
        except limits.Refused as refused:
            raise _refuse(refused.code, refused.message) from None
        region = _region(environ)

        def table_of(name: str) -> Any:
            return self.tables.table(name, region)

        if indexes.consistent_read_refused(operation, request, table_of):
            raise _refuse("ValidationException", indexes.CONSISTENT_READ_REFUSED)
        token = request.get("ClientRequestToken") if operation == "TransactWriteItems" else None
        if isinstance(token, str):
            replay = self._replay(token, request)
            if replay is not None:
                status, headers, payload = replay
                start_response(f"{status} {'OK' if status == 200 else 'Error'}", headers)
                return [payload]
        self._conflicts(operation, request)
        costs = self._costs(operation, request)
        self._throttle(operation, request, costs)
        actions = _write_actions(operation, request)
        before = [_image(table_of(name), attrs) for _, name, attrs in actions]
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            captured["status"], captured["headers"] = status, headers
            # An answer the front rewrites starts once rewritten; any other (S3's through this
            # server too) as moto starts it.
            return None if operation in _METERED else start_response(status, headers, *rest)

        named = _written(operation, request) if operation in indexes.ITEM_WRITES else []
        read: list[dict[str, Any]] = []
        with self.indexes.around(operation, request, named, table_of):
            if operation in _PAGED:
                status_line, headers, response, read = self._page(
                    operation, request, app, environ, table_of
                )
            else:
                response = b"".join(app(environ, capture))
                status_line = str(captured.get("status", "500 Error"))
                headers = list(captured.get("headers", []))
        status = int(status_line.split()[0])
        self._stream_records(operation, request, table_of)
        charges = self._consumed(
            operation, request, table_of, actions, before, status, response, read
        )
        self._charge(operation, charges)
        self.meter.add(charges)
        if operation in _METERED:
            if status == 200:
                response = _with_capacity(operation, request, response, charges)
                headers = _sized(headers, response)
            start_response(status_line, headers)
        if status == 200 and isinstance(token, str):
            self._remember(token, request, status, headers, response)
        return [response]

    def _page(
        self,
        operation: str,
        request: dict[str, Any],
        app: App,
        environ: dict[str, Any],
        table_of: Callable[[str], Any],
    ) -> tuple[str, list[tuple[str, str]], bytes, list[dict[str, Any]]]:
        """A Query or Scan served as DynamoDB pages it: (status, headers, body, the items it
        read before any filter).

        API Reference, Query: "A single Query operation will read up to the maximum number of
        items set (if using the Limit parameter) or a maximum of 1 MB of data and then apply
        any filtering to the results using FilterExpression. If LastEvaluatedKey is present in
        the response, you will need to paginate the result set." ("Filter expressions for the
        Query operation": "This limit applies before the filter expression is evaluated.")
        moto ends a page at 1,000,000 bytes of its own measure (no list or map overhead),
        before the item that would pass it. Here the items are read unfiltered (moto's pages
        chained) until their sizes by DynamoDB's formula (:mod:`.sizes`; an index's entries
        for an index) reach 1 MB (1,048,576 bytes), the item that reaches it the page's last,
        as DynamoDB's reads of slightly more than 1 MB show; then the request itself is served
        with ``Limit`` of that many items (moto's Limit counts items read before the filter),
        and the page's ``LastEvaluatedKey`` is that item's table key and index key."""
        raw = _unfiltered(operation, request)
        limit = request.get("Limit")
        table = table_of(str(request.get("TableName", "")))
        read: list[dict[str, Any]] = []
        size, full, start = 0, False, request.get("ExclusiveStartKey")
        while True:
            ask = _starting(raw, start)
            if isinstance(limit, int):
                ask["Limit"] = limit - len(read)
            status, headers, body = _serve(app, environ, ask)
            if not status.startswith("200") or table is None:
                # moto refuses the request itself: its answer to the request as sent
                status, headers, body = _serve(app, environ, request)
                return status, headers, body, []
            answer = _moto_answer(body) or {}
            for item in answer.get("Items", []):
                read.append(item)
                size += item_size(item)
                if size >= _PAGE:
                    full = True
                    break
            start = answer.get("LastEvaluatedKey")
            if full or start is None or (isinstance(limit, int) and len(read) >= limit):
                break
        last = _last_key(table, request.get("IndexName"), read[-1]) if full else start
        if raw == request:
            page: dict[str, Any] = {"Items": read, "Count": len(read), "ScannedCount": len(read)}
        else:
            refused, page = self._filtered_page(request, app, environ, len(read))
            if refused is not None:  # moto refuses the filter or projection: its answer
                return (*refused, [])
        page.pop("LastEvaluatedKey", None)
        page.pop("ConsumedCapacity", None)
        if last is not None:
            page["LastEvaluatedKey"] = last
        page["ScannedCount"] = len(read)
        return "200 OK", headers, json.dumps(page).encode(), read

    @staticmethod
    def _filtered_page(
        request: dict[str, Any], app: App, environ: dict[str, Any], count: int
    ) -> tuple[tuple[str, list[tuple[str, str]], bytes] | None, dict[str, Any]]:
        """The request as sent, over its first ``count`` items read (moto's pages chained; no
        item read: the request as sent, once): (moto's answer when it refuses it, the page)."""
        page: dict[str, Any] = {"Count": 0}
        start, left = request.get("ExclusiveStartKey"), count
        while True:
            ask = _starting(request, start)
            if count:
                ask["Limit"] = left
            status, headers, body = _serve(app, environ, ask)
            if not status.startswith("200"):
                return (status, headers, body), page
            answer = _moto_answer(body) or {}
            if "Items" in answer:
                page.setdefault("Items", []).extend(answer["Items"])
            page["Count"] += int(answer.get("Count", 0))
            left -= int(answer.get("ScannedCount", 0)) or left
            start = answer.get("LastEvaluatedKey")
            if start is None or left <= 0:
                return None, page

    def _consumed(
        self,
        operation: str,
        request: dict[str, Any],
        table_of: Callable[[str], Any],
        actions: list[tuple[str, str, dict[str, Any]]],
        before: list[dict[str, Any] | None],
        status: int,
        response: bytes,
        read: list[dict[str, Any]],
    ) -> list[consumed.Charge]:
        """What the request consumed, as DynamoDB computes it (:mod:`.consumed`)."""
        if actions:
            failed = status != 200 and operation in _WRITES and _failed_condition(response)
            if status != 200 and not failed:
                return []
            return _write_charges(operation, table_of, actions, before, failed)
        if status != 200:
            return []
        if operation in _PAGED:
            return _page_charges(request, table_of, read)
        if operation in ("GetItem", "BatchGetItem", "TransactGetItems"):
            return _get_charges(operation, request, table_of)
        return []

    @contextlib.contextmanager
    def _ttl_deleting(self, table: Any, key: dict[str, Any]) -> Iterator[None]:
        """A TTL deletion, as the lagging indexes see a DeleteItem of ``key``; once done,
        told to ``removed`` (table name, key) as a served write is told to the server's
        observers (``local --data`` saves what they are told of)."""
        with self.indexes.around("DeleteItem", {}, [(table.name, key)], lambda _: table):
            yield
        if self._removed is not None:
            self._removed(table.name, key)

    def _stream_records(
        self, operation: str, request: dict[str, Any], table_of: Callable[[str], Any]
    ) -> None:
        """The stream views take what the request wrote (a refused write may have written
        part of a batch; a cancelled transaction's records are gone already)."""
        if operation in _NO_STREAM_RECORDS:
            return
        if operation in _STREAM_WRITES:
            names = dict.fromkeys(table for table, _ in _written(operation, request))
            tables = [t for t in (table_of(name) for name in names) if t is not None]
        else:  # PartiQL, table changes: any table may have changed
            tables = list(indexes._tables())
            if operation == "DeleteTable":
                self.streams.forget({id(t) for t in tables})
        self.streams.written(tables)

    def _stream_call(
        self,
        operation: str,
        request: dict[str, Any],
        app: App,
        environ: dict[str, Any],
        start_response: Callable[..., Any],
    ) -> Iterable[bytes]:
        """A DynamoDB Streams request: DescribeStream answered by moto with the view's shards,
        GetShardIterator and GetRecords by the view (:mod:`.streams`), the others by moto."""
        try:
            if operation == "GetShardIterator":
                return self._stream_answer(start_response, self.streams.iterator(request))
            if operation == "GetRecords":
                return self._stream_answer(start_response, self.streams.records(request))
            if operation != "DescribeStream":
                return app(environ, start_response)  # type: ignore[no-any-return]
            shards = self.streams.describe(request)
        except streams.StreamRefused as refused:
            raise _refuse(refused.code, refused.message) from None
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            captured["status"], captured["headers"] = status, headers

        response = b"".join(app(environ, capture))
        status, headers = str(captured.get("status", "500")), captured.get("headers", [])
        if status.startswith("200"):
            body = json.loads(response)
            body["StreamDescription"].pop("LastEvaluatedShardId", None)
            body["StreamDescription"].update(shards)
            response = streams.dumps(body)
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(response))))
        start_response(status, headers)
        return [response]

    @staticmethod
    def _stream_answer(start_response: Callable[..., Any], body: dict[str, Any]) -> list[bytes]:
        payload = streams.dumps(body)
        start_response(
            "200 OK",
            [
                ("Content-Type", "application/x-amz-json-1.0"),
                ("Content-Length", str(len(payload))),
                ("x-amzn-RequestId", "strict-profile"),
            ],
        )
        return [payload]

    # ClientRequestToken (API Reference, TransactWriteItems): "A client token is valid for 10
    # minutes after the first request that uses it is completed. After 10 minutes, any
    # request with the same client token is treated as a new request. [...] If you submit a
    # request with the same client token but a change in other parameters within the
    # 10-minute idempotency window, DynamoDB returns an IdempotentParameterMismatch
    # exception."
    def _digest(self, request: dict[str, Any]) -> str:
        rest = {k: v for k, v in request.items() if k != "ClientRequestToken"}
        return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()

    def _replay(
        self, token: str, request: dict[str, Any]
    ) -> tuple[int, list[tuple[str, str]], bytes] | None:
        now = time.monotonic()
        for old in [t for t, v in self._tokens.items() if now - v[0] > self.profile.token_seconds]:
            del self._tokens[old]
        seen = self._tokens.get(token)
        if seen is None:
            return None
        if seen[1] != self._digest(request):
            raise _refuse(
                "IdempotentParameterMismatchException",
                "DynamoDB rejected the request because you retried a request with a different "
                "payload but with an idempotent token that was already used.",
            )
        return seen[2], seen[3], seen[4]

    def _remember(
        self,
        token: str,
        request: dict[str, Any],
        status: int,
        headers: list[tuple[str, str]],
        body: bytes,
    ) -> None:
        self._tokens[token] = (time.monotonic(), self._digest(request), status, headers, body)

    def _conflicts(self, operation: str, request: dict[str, Any]) -> None:
        """A single write (or a TransactGetItems) on an item a transaction holds in flight."""
        if operation not in (*_WRITES, "TransactGetItems") or not self._in_flight:
            return
        keys = [self.tables.item_key(t, k) for t, k in _written(operation, request)]
        with self._flight_lock:
            clash = [key in self._in_flight for key in keys]
        if not any(clash):
            return
        if operation == "TransactGetItems":
            raise _conflicting(clash)
        raise _refuse(
            "TransactionConflictException",
            "Transaction is ongoing for the item",
        )

    def _costs(self, operation: str, request: dict[str, Any]) -> dict[str, dict[str, float]]:
        """The write units each (table, partition) of a write takes, as known before it runs:
        the larger of the item it sends (a put's, a transaction's put's) and the stored one
        (what it consumes is taken once it is served: :meth:`_charge`)."""
        costs: dict[str, dict[str, float]] = {}
        transactional = operation == "TransactWriteItems"
        if operation not in (*_WRITES, "BatchWriteItem", "TransactWriteItems"):
            return costs
        for table, key in _written(operation, request):
            size = max(item_size(key) if key else 0, self.tables.stored_size(table, key))
            part = self.tables.partition(table, key)
            per = costs.setdefault(table, {})
            per[part] = per.get(part, 0.0) + capacity.write_units(size, transactional=transactional)
        return costs

    def _throttle(
        self, operation: str, request: dict[str, Any], costs: dict[str, dict[str, float]]
    ) -> None:
        if operation in _READS:
            table = request.get("TableName", "")
            key = request.get("Key") or {}
            parts = [self.tables.partition(table, key)] if key else []
            if operation == "Query":
                value = _query_partition(request)
                parts = [value] if value is not None else []
            if self.buckets.short("read", table, dict.fromkeys(parts, 0.0)):
                raise _refuse("ProvisionedThroughputExceededException", _THROTTLED)
            return
        for table, per in costs.items():
            empty = self.buckets.short("write", table, per)
            if empty:
                if operation == "TransactWriteItems":
                    parts = [self.tables.partition(t, k) for t, k in _written(operation, request)]
                    raise _cancelled(
                        [
                            {"Code": "ThrottlingError", "Message": _THROTTLED}
                            if part in empty or empty == [""]
                            else {"Code": "None"}
                            for part in parts
                        ]
                    )
                raise _refuse("ProvisionedThroughputExceededException", _THROTTLED)

    def _charge(self, operation: str, charges: list[consumed.Charge]) -> None:
        """Take what a request consumed from its buckets: a write's on the larger of its
        before and after images (known once served); a read's on what it read. A global
        secondary index's writes have no bucket here; an index's reads and a Scan's take the
        table's bucket only."""
        writes: dict[str, dict[str, float]] = {}
        for c in charges:
            if c.write and not c.index:
                per = writes.setdefault(c.table, {})
                per[c.partition] = per.get(c.partition, 0.0) + c.write
        for table, per in writes.items():
            self.buckets.take("write", table, per)
        for c in charges:
            if not c.read:
                continue
            if operation in _KEYED_READS and not c.index:
                self.buckets.take("read", c.table, {c.partition: c.read})
            else:
                self.buckets.take("read", c.table, {}, extra=c.read)

    def refused(self) -> dict[str, int]:
        """What the profile refused so far, by error code (a transaction cancelled: under
        each of its reasons' codes too, once, ``ThrottlingError``, ``TransactionConflict``)."""
        with self._flight_lock:
            return dict(self._refusals)

    def _refused(self, start_response: Callable[..., Any], reply: _Reply) -> list[bytes]:
        """Answer a refusal, counted in :attr:`refusals`."""
        with self._flight_lock:
            self._refusals.update(reply.codes)
        return self._answer(start_response, reply.status, reply.body)

    @staticmethod
    def _answer(start_response: Callable[..., Any], status: int, body: bytes) -> list[bytes]:
        start_response(
            f"{status} Bad Request",
            [
                ("Content-Type", "application/x-amz-json-1.0"),
                ("Content-Length", str(len(body))),
                ("x-amzn-RequestId", "strict-profile"),
            ],
        )
        return [body]


_CREDENTIAL = re.compile(r"Credential=[^/,\s]+/\d{8}/([^/,\s]+)/")


def _region(environ: dict[str, Any]) -> str | None:
    """The region a request is signed for (its table of a name may have namesakes in other
    regions), or None when it is not signed as SigV4 signs."""
    match = _CREDENTIAL.search(str(environ.get("HTTP_AUTHORIZATION", "")))
    return match.group(1) if match else None


def _query_partition(request: dict[str, Any]) -> str | None:
    """The partition key value a Query names (``#pk = :pk`` in its key condition), as text,
    or None when the condition is not of that shape."""
    condition = str(request.get("KeyConditionExpression", ""))
    values = request.get("ExpressionAttributeValues") or {}
    first = condition.split(" AND ")[0].strip().strip("()")
    left, _, right = first.partition("=")
    right = right.strip()
    if right not in values or not left.strip():
        return None
    return partition_text(values[right])


def _write_actions(
    operation: str, request: dict[str, Any]
) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, table, item or key) of each item a write names: kind ``Put``, ``Update``,
    ``Delete`` or ``ConditionCheck``."""
    if operation in _WRITES:
        kind = operation.removesuffix("Item")
        attrs = request.get("Item" if kind == "Put" else "Key") or {}
        return [(kind, str(request.get("TableName", "")), attrs)]
    out: list[tuple[str, str, dict[str, Any]]] = []
    if operation == "BatchWriteItem":
        for table, requests in (request.get("RequestItems") or {}).items():
            for one in requests:
                if "PutRequest" in one:
                    out.append(("Put", table, one["PutRequest"].get("Item") or {}))
                elif "DeleteRequest" in one:
                    out.append(("Delete", table, one["DeleteRequest"].get("Key") or {}))
    elif operation == "TransactWriteItems":
        for action in request.get("TransactItems") or []:
            (kind, body), *_ = action.items()
            attrs = body.get("Item") if kind == "Put" else body.get("Key")
            out.append((kind, str(body.get("TableName", "")), attrs or {}))
    return out


def _image(table: Any, attrs: dict[str, Any]) -> dict[str, Any] | None:
    """The item stored under the key in ``attrs`` (an item or a key), in wire form, or None."""
    if table is None:
        return None
    key = indexes._key(table, attrs)
    found = indexes._stored(table, key) if key is not None else None
    return None if found is None else dict(found.to_json()["Attributes"])


def _size(item: dict[str, Any] | None) -> int:
    return 0 if item is None else item_size(item)


def _moto_answer(body: bytes) -> Any:
    """moto's JSON answer (moto wrote it), or None when it is not JSON."""
    try:
        return json.loads(body)
    except ValueError:
        return None


def _failed_condition(response: bytes) -> bool:
    answer = _moto_answer(response)
    kind = str(answer.get("__type", "")) if isinstance(answer, dict) else ""
    return kind.endswith("ConditionalCheckFailedException")


def _write_charges(
    operation: str,
    table_of: Callable[[str], Any],
    actions: list[tuple[str, str, dict[str, Any]]],
    before: list[dict[str, Any] | None],
    failed: bool,
) -> list[consumed.Charge]:
    """Each written item's units, on the larger of its before and after images (a failed
    condition: of the stored item and a PutItem's item), and its global secondary indexes'."""
    transactional = operation == "TransactWriteItems"
    charges = []
    for (kind, name, attrs), old in zip(actions, before, strict=True):
        table = table_of(name)
        if table is None:
            continue
        new = old if failed or kind == "ConditionCheck" else _image(table, attrs)
        size = max(_size(old), _size(new), _size(attrs) if failed and kind == "Put" else 0)
        part = partition_text(attrs.get(table.hash_key_attr, {}))
        units = capacity.write_units(size, transactional=transactional)
        charges.append(consumed.Charge(name, "", part, write=units))
        if not failed and kind != "ConditionCheck":
            charges += consumed.index_writes(table, old, new, name)
    return charges


def _get_charges(
    operation: str, request: dict[str, Any], table_of: Callable[[str], Any]
) -> list[consumed.Charge]:
    """A GetItem's, BatchGetItem's or TransactGetItems' units: each item on its own, on the
    whole stored item (a missing one: the least)."""
    wanted: list[tuple[str, dict[str, Any], bool]] = []
    if operation == "GetItem":
        consistent = bool(request.get("ConsistentRead"))
        wanted.append((str(request.get("TableName", "")), request.get("Key") or {}, consistent))
    elif operation == "BatchGetItem":
        for name, spec in (request.get("RequestItems") or {}).items():
            consistent = bool(spec.get("ConsistentRead"))
            wanted += [(name, key, consistent) for key in spec.get("Keys") or []]
    else:
        for action in request.get("TransactItems") or []:
            body = action.get("Get") or {}
            wanted.append((str(body.get("TableName", "")), body.get("Key") or {}, True))
    transactional = operation == "TransactGetItems"
    charges = []
    for name, key, consistent in wanted:
        table = table_of(name)
        if table is None:
            continue
        units = capacity.read_units(
            _size(_image(table, key)), consistent=consistent, transactional=transactional
        )
        part = partition_text(key.get(table.hash_key_attr, {}))
        charges.append(consumed.Charge(name, "", part, read=units))
    return charges


def _page_charges(
    request: dict[str, Any], table_of: Callable[[str], Any], read: list[dict[str, Any]]
) -> list[consumed.Charge]:
    """A Query's or Scan's units: the items it read summed before rounding, shared among the
    partition keys read in proportion to their bytes."""
    name = str(request.get("TableName", ""))
    table = table_of(name)
    if table is None:
        return []
    index_name = str(request.get("IndexName") or "")
    index = next((i for i in _indexes(table) if i.name == index_name), None)
    local = index is not None and index in table.indexes
    hash_attr = index.schema[0]["AttributeName"] if index is not None else table.hash_key_attr
    sizes: dict[str, int] = {}
    for item in read:
        part = partition_text(item.get(hash_attr, {}))
        sizes[part] = sizes.get(part, 0) + item_size(item)
    total = sum(sizes.values())
    units = capacity.read_units(total, consistent=bool(request.get("ConsistentRead")))
    if not total:
        sizes = {_query_partition(request) or "": 1}  # nothing read: the least, on the key named
        total = 1
    return [
        consumed.Charge(name, index_name, part, read=units * bytes_ / total, local=local)
        for part, bytes_ in sizes.items()
    ]


def _indexes(table: Any) -> list[Any]:
    return [*(table.global_indexes or []), *(table.indexes or [])]


def _last_key(table: Any, index_name: Any, item: dict[str, Any]) -> dict[str, Any]:
    """The ``LastEvaluatedKey`` of a page ending at ``item``: its table key and, for an
    index, its index key."""
    names = [table.hash_key_attr, *([table.range_key_attr] if table.range_key_attr else [])]
    for index in _indexes(table):
        if index_name and index.name == index_name:
            names += [k["AttributeName"] for k in index.schema]
    return {name: item[name] for name in dict.fromkeys(names) if name in item}


_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")
_NOT_READ = ("FilterExpression", "ProjectionExpression", "Select", "AttributesToGet")
_NOT_READ_LEGACY = ("QueryFilter", "ScanFilter", "ConditionalOperator")


def _unfiltered(operation: str, request: dict[str, Any]) -> dict[str, Any]:
    """``request`` reading what it reads, without what it does after reading (its filter,
    projection or count), with only the expression names and values its key condition
    uses."""
    if not any(k in request for k in (*_NOT_READ, *_NOT_READ_LEGACY)):
        return request
    raw = {k: v for k, v in request.items() if k not in (*_NOT_READ, *_NOT_READ_LEGACY)}
    used = set(_PLACEHOLDER.findall(str(request.get("KeyConditionExpression", ""))))
    for field in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
        kept = {k: v for k, v in (request.get(field) or {}).items() if k in used}
        raw.pop(field, None)
        if kept:
            raw[field] = kept
    return raw


def _starting(request: dict[str, Any], start: Any) -> dict[str, Any]:
    ask = {k: v for k, v in request.items() if k != "ExclusiveStartKey"}
    if start is not None:
        ask["ExclusiveStartKey"] = start
    return ask


def _serve(
    app: App, environ: dict[str, Any], request: dict[str, Any]
) -> tuple[str, list[tuple[str, str]], bytes]:
    """moto's answer to ``request`` (the same operation as ``environ``'s)."""
    body = json.dumps(request).encode()
    sub = {**environ, "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body))}
    got: dict[str, Any] = {}

    def capture(status: str, headers: list[tuple[str, str]], *rest: Any) -> None:
        got["status"], got["headers"] = status, headers

    out = b"".join(app(sub, capture))
    return str(got.get("status", "500 Error")), list(got.get("headers", [])), out


def _with_capacity(
    operation: str, request: dict[str, Any], response: bytes, charges: list[consumed.Charge]
) -> bytes:
    """moto's answer with DynamoDB's ``ConsumedCapacity`` in place of moto's (none for
    ``NONE``)."""
    body = _moto_answer(response)
    if not isinstance(body, dict):
        return response
    body.pop("ConsumedCapacity", None)
    tables = list(dict.fromkeys([c.table for c in charges] + _named_tables(operation, request)))
    answer = consumed.consumed_capacity(
        operation, charges, str(request.get("ReturnConsumedCapacity", "NONE")), tables
    )
    if answer is not None:
        body["ConsumedCapacity"] = answer
    return streams.dumps(body)  # as moto writes its answers


def _named_tables(operation: str, request: dict[str, Any]) -> list[str]:
    if operation in ("BatchWriteItem", "BatchGetItem"):
        return list(request.get("RequestItems") or {})
    if operation in ("TransactWriteItems", "TransactGetItems"):
        return [
            str(b.get("TableName", ""))
            for a in request.get("TransactItems") or []
            for b in a.values()
        ]
    return [str(request.get("TableName", ""))]


def _sized(headers: list[tuple[str, str]], body: bytes) -> list[tuple[str, str]]:
    """``headers`` for ``body`` in place of moto's: its length and its CRC32 (botocore checks
    DynamoDB's ``x-amz-crc32`` and retries on a mismatch)."""
    kept = [(k, v) for k, v in headers if k.lower() not in ("content-length", "x-amz-crc32")]
    return [
        *kept,
        ("Content-Length", str(len(body))),
        ("x-amz-crc32", str(zlib.crc32(body) & 0xFFFFFFFF)),
    ]
