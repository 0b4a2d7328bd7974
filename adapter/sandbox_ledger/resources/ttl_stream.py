"""Reading a table's stream as a Lambda event source mapping hands it to the TTL reporter
(``on_ttl_expiry``): from a saved position, shard lineage in order (a child only once its
parent is read to its end), each record in the Lambda event's spelling (``eventSourceARN``,
times in Unix seconds, binary values in base64). The fleet's soak and ``sandbox-ledger local
--deployment`` read the stream with it."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["TtlStream"]

_GONE = frozenset({"TrimmedDataAccessException"})


class TtlStream:
    """Reads a table's stream from a saved position, shard lineage in order (a child only
    once its parent is read to its end), and hands out the records as a Lambda event
    source mapping does (with ``eventSourceARN``, the creation time in Unix seconds)."""

    def __init__(
        self,
        streams: Any,
        arn: str,
        position: dict[str, Any] | None,
        latest: Callable[[], str] | None = None,
    ) -> None:
        self.streams, self.arn, self._latest = streams, arn, latest
        self.lost: list[str] = []
        """Positions the stream trimmed before they were read on from (records lost)."""
        if position and position.get("arn") != arn:
            # The table's stream is another one (a restarted local server serves a new one):
            # what the old one held after the position is lost.
            self.lost.append(f"stream {position.get('arn')} replaced by {arn}")
            position = None
        self.at: dict[str, str] = dict((position or {}).get("at", {}))
        self.done: set[str] = set((position or {}).get("done", []))

    def position(self) -> dict[str, Any]:
        return {"arn": self.arn, "at": dict(self.at), "done": sorted(self.done)}

    def _shards(self) -> dict[str, str | None]:
        shards: dict[str, str | None] = {}
        params: dict[str, Any] = {"StreamArn": self.arn}
        while True:
            page = self.streams.describe_stream(**params)["StreamDescription"]
            for shard in page.get("Shards", []):
                shards[shard["ShardId"]] = shard.get("ParentShardId")
            last = page.get("LastEvaluatedShardId")
            if not last:
                return shards
            params = {"StreamArn": self.arn, "ExclusiveStartShardId": last}

    def read(self) -> list[dict[str, Any]]:
        """The records after the position (which moves past them: save it once they are
        reported)."""
        found: list[dict[str, Any]] = []
        progress = True
        while progress:
            progress = False
            try:
                shards = self._shards()
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code != "ResourceNotFoundException" or self._latest is None:
                    raise
                arn = self._latest()  # the stream is gone: the table's is another one now
                if arn == self.arn:
                    raise
                self.lost.append(f"stream {self.arn} replaced by {arn}")
                self.arn, self.at, self.done = arn, {}, set()
                shards = self._shards()
            for shard, parent in sorted(shards.items()):
                if shard in self.done or (parent in shards and parent not in self.done):
                    continue
                if self._read(shard, found):
                    self.done.add(shard)
                    self.at.pop(shard, None)
                    progress = True
        return found

    def _read(self, shard: str, found: list[dict[str, Any]]) -> bool:
        after = self.at.get(shard)
        params: dict[str, Any] = {"StreamArn": self.arn, "ShardId": shard}
        if after is None:
            params["ShardIteratorType"] = "TRIM_HORIZON"
        else:
            params |= {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": after}
        try:
            iterator = self.streams.get_shard_iterator(**params)["ShardIterator"]
        except ClientError as exc:
            if after is None or exc.response.get("Error", {}).get("Code") not in _GONE:
                raise
            # Trimmed past the position: what followed it is lost. Said, then read on from
            # what the shard still holds (the checker names each removal never reported).
            self.lost.append(f"{shard} after {after}")
            params = {"StreamArn": self.arn, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON"}
            iterator = self.streams.get_shard_iterator(**params)["ShardIterator"]
        while iterator:
            page = self.streams.get_records(ShardIterator=iterator, Limit=1000)
            for record in page.get("Records", []):
                found.append(self._as_lambda(record))
                self.at[shard] = str(record["dynamodb"]["SequenceNumber"])
            iterator = page.get("NextShardIterator")
            if not page.get("Records"):
                break
        return not iterator

    def _as_lambda(self, record: dict[str, Any]) -> dict[str, Any]:
        shaped: dict[str, Any] = _as_event(record)
        shaped["eventSourceARN"] = self.arn
        return shaped


def _as_event(value: Any) -> Any:
    """A Lambda event's spelling of what boto3 decodes: a time in Unix seconds, a binary
    value in base64."""
    if isinstance(value, dict):
        return {key: _as_event(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_event(item) for item in value]
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value
