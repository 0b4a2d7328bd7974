"""Fault injection through botocore event hooks, for the sync and async clients alike."""

from __future__ import annotations

import json
import random
import threading
from typing import Any

from botocore.awsrequest import AWSResponse


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body

    async def read(self) -> bytes:
        return self._body


def error_response(code: str, *, status: int = 400, aio: bool, **fields: Any) -> AWSResponse:
    body = json.dumps(
        {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "injected", **fields}
    ).encode()
    headers = {"x-amzn-RequestId": "injected", "Content-Type": "application/x-amz-json-1.0"}
    if aio:
        from aiobotocore.awsrequest import AioAWSResponse

        return AioAWSResponse("https://injected", status, headers, _Raw(body))
    return AWSResponse("https://injected", status, headers, _Raw(body))


class FailShare:
    """``before-send`` hook answering a share of calls to some operations with an error."""

    def __init__(
        self,
        share: float,
        code: str,
        *,
        operations: set[str] | None = None,
        status: int = 400,
        aio: bool,
        seed: int = 7,
        **fields: Any,
    ) -> None:
        self.share, self.code, self.status, self.aio = share, code, status, aio
        self.operations, self.fields = operations, fields
        self.rng = random.Random(seed)
        self.injected = 0
        self._lock = threading.Lock()

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        target = request.headers.get("X-Amz-Target", b"")
        operation = (target.decode() if isinstance(target, bytes) else target).rsplit(".", 1)[-1]
        if self.operations is not None and operation not in self.operations:
            return None
        with self._lock:
            if self.rng.random() >= self.share:
                return None
            self.injected += 1
        return error_response(self.code, status=self.status, aio=self.aio, **self.fields)

    def attach(self, client: Any) -> FailShare:
        client.meta.events.register_first("before-send.dynamodb", self)
        return self


class ResendAfterSuccess:
    """``needs-retry`` hook that makes the SDK resend a share of writes that already landed,
    as it would after losing the first response."""

    def __init__(self, share: float, operations: set[str], seed: int = 11) -> None:
        self.share, self.operations = share, operations
        self.rng = random.Random(seed)
        self.resent = 0
        self._lock = threading.Lock()

    def __call__(self, response: Any, attempts: int, operation: Any, **_: Any) -> float | None:
        if operation.name not in self.operations or response is None or attempts > 1:
            return None
        if response[0].status_code != 200:
            return None
        with self._lock:
            if self.rng.random() >= self.share:
                return None
            self.resent += 1
        return 0.0

    def attach(self, client: Any) -> ResendAfterSuccess:
        client.meta.events.register("needs-retry.dynamodb", self)
        return self


class PartialBatches:
    """Makes BatchWriteItem / BatchGetItem leave a share of each batch unprocessed, as DynamoDB
    does under load: the held-back requests are removed before sending and returned in
    ``UnprocessedItems`` / ``UnprocessedKeys``."""

    def __init__(self, share: float, seed: int = 5) -> None:
        self.share = share
        self.rng = random.Random(seed)
        self.held_back = 0
        self._lock = threading.Lock()

    def _before(
        self, params: dict[str, Any], context: dict[str, Any], model: Any, **_: Any
    ) -> None:
        held: dict[str, Any] = {}
        for table, value in params["RequestItems"].items():
            requests = value if model.name == "BatchWriteItem" else value["Keys"]
            if len(requests) < 2:
                continue
            with self._lock:
                n = min(int(len(requests) * self.share * self.rng.random()) + 1, len(requests) - 1)
                self.held_back += n
            kept, back = requests[:-n], requests[-n:]
            if model.name == "BatchWriteItem":
                params["RequestItems"][table] = kept
                held[table] = back
            else:
                params["RequestItems"][table] = {**value, "Keys": kept}
                held[table] = {**value, "Keys": back}
        context["held_back"] = held

    def _after(self, parsed: dict[str, Any], context: dict[str, Any], model: Any, **_: Any) -> None:
        held = context.get("held_back")
        if held:
            key = "UnprocessedItems" if model.name == "BatchWriteItem" else "UnprocessedKeys"
            parsed[key] = {**parsed.get(key, {}), **held}

    def attach(self, client: Any) -> PartialBatches:
        for op in ("BatchWriteItem", "BatchGetItem"):
            client.meta.events.register(f"before-parameter-build.dynamodb.{op}", self._before)
            client.meta.events.register(f"after-call.dynamodb.{op}", self._after)
        return self


class CancelTransactions:
    """``before-send`` hook answering the first ``times`` TransactWriteItems with a
    TransactionCanceledException whose every action has the reason ``code`` (as DynamoDB
    reports a throttled or conflicting transaction: one reason per action)."""

    def __init__(self, code: str, *, times: int, aio: bool, only: str | None = None) -> None:
        self.code, self.times, self.aio, self.only = code, times, aio, only
        self.injected = 0
        self._lock = threading.Lock()

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        target = request.headers.get("X-Amz-Target", b"")
        target = target.decode() if isinstance(target, bytes) else target
        if not target.endswith(".TransactWriteItems"):
            return None
        body = request.body
        text = body if isinstance(body, (bytes, str)) else body.read()
        text = text.decode() if isinstance(text, bytes) else text
        if self.only is not None and self.only not in text:  # only requests naming it
            return None
        with self._lock:
            if self.injected >= self.times:
                return None
            self.injected += 1
        actions = len(json.loads(text)["TransactItems"])
        reasons = [{"Code": self.code, "Message": "injected"}] * actions
        return error_response(
            "TransactionCanceledException", aio=self.aio, CancellationReasons=reasons
        )

    def attach(self, client: Any) -> CancelTransactions:
        client.meta.events.register_first("before-send.dynamodb", self)
        return self
