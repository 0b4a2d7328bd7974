"""DynamoDB Streams as DynamoDB serves them: shards that close, open successors and split,
iterators that expire, records trimmed after a retention.

moto keeps one shard per stream forever, never expires an iterator and never trims. Under
the strict profile the front answers ``GetShardIterator`` and ``GetRecords`` itself, and
``DescribeStream`` as moto does with its shards replaced, from :class:`StreamViews`: a view of
many shards over moto's records (each table's ``stream_shard.items``), which it takes in after
every write, as they were written (a cancelled transaction's records, which moto takes
back, are never seen). DynamoDB's rules, quoted (Developer Guide, "Change data capture for
DynamoDB Streams"; Streams API Reference):

- "For each item that is modified in a DynamoDB table, the stream records appear in the same
  sequence as the actual modifications to the item." An item's records go to the open shard
  whose part of the key hash space holds the item's key (its partition key, with
  :attr:`StrictProfile.shard_key` ``"partition"``); a split gives each child half of its
  parent's part, so an item's later records follow its earlier ones down one line, and two
  items may be read in either order.
- "Shards are ephemeral: They are created and deleted automatically, as needed. Any shard
  can also split into multiple new shards; this also occurs automatically. (It's also
  possible for a parent shard to have just one child shard.)" and "Because shards have a
  lineage (parent and children), an application must always process a parent shard before
  it processes a child shard." An open shard closes once it holds
  :attr:`StrictProfile.shard_records` records or is :attr:`StrictProfile.shard_seconds` old;
  every :attr:`StrictProfile.shard_split`-th closing (while fewer than :data:`MAX_OPEN`
  shards are open) opens two children, the others one.
- DescribeStream: "If the SequenceNumberRange has a StartingSequenceNumber but no
  EndingSequenceNumber, then the shard is still open (able to receive more stream records).
  If both StartingSequenceNumber and EndingSequenceNumber are present, then that shard is
  closed and can no longer receive more data." Limit: "The upper limit is 100."; a
  ``ShardFilter`` of ``CHILD_SHARDS`` lists a shard's children.
- GetShardIterator: "A shard iterator expires 15 minutes after it is returned to the
  requester." (:attr:`StrictProfile.iterator_seconds`), then ``ExpiredIteratorException``.
- TrimmedDataAccessException: "In DynamoDB Streams, there is a 24 hour limit on data
  retention. Stream records whose age exceeds this limit are subject to removal (trimming)
  from the stream. You might receive a TrimmedDataAccessException if: You request a shard
  iterator with a sequence number older than the trim point (24 hours). You obtain a shard
  iterator, but before you use the iterator in a GetRecords request, a stream record in the
  shard exceeds the 24 hour period and is trimmed." (:attr:`StrictProfile.stream_retention`;
  the server's ``stream_records`` bound trims the oldest records too). A closed shard whose
  records are all trimmed is gone from ``DescribeStream`` (an empty one, once it closed a
  retention ago).
- GetRecords: "GetRecords can retrieve a maximum of 1 MB of data or 1000 stream records,
  whichever comes first." ``Limit``: "The upper limit is 1000." NextShardIterator: "If set
  to null, the shard has been closed and the requested iterator will not return any more
  data."

Sequence numbers are the view's own, numeric strings increasing along the whole stream (so
along each shard); a record keeps moto's body otherwise. An idle ``GetRecords`` is a bisection
of one shard's sequence numbers.
"""

from __future__ import annotations

import base64
import bisect
import collections
import hashlib
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from . import StrictProfile

__all__ = ["MAX_OPEN", "TARGET_PREFIX", "Kept", "StreamRefused", "StreamViews"]

TARGET_PREFIX = "DynamoDBStreams_20120810."
"""The ``X-Amz-Target`` of a DynamoDB Streams request."""

MAX_OPEN = 4
"""Open shards of one stream at most: a closing that would split past it opens one child (a
table's partitions, which its shards follow, do not multiply without end)."""

GET_RECORDS_BYTES = 1024 * 1024
GET_RECORDS_MOST = 1000
DESCRIBE_MOST = 100
_FIRST_SEQUENCE = 10**20
_SPACE = 2**64


class StreamRefused(Exception):
    """A Streams request answered with DynamoDB's error ``code``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class Kept:
    """A stream record as a restart keeps it: its sequence number, its shard, when the
    stream took it (wall-clock seconds: its retention runs on across the restart) and
    moto's ``StreamRecord`` (its body: ``record.record``)."""

    seq: int
    shard: str
    taken: float
    record: Any


def _key_hash(keys: dict[str, Any]) -> int:
    text = json.dumps(keys, sort_keys=True).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


@dataclass
class _Shard:
    id: str
    parent: str | None
    start: int  # StartingSequenceNumber
    low: int  # the key hashes it takes while open: low <= hash < high
    high: int
    opened: float
    end: int | None = None  # EndingSequenceNumber, once closed
    closed_at: float = 0.0
    taken: int = 0  # records ever taken (its closing counts them)
    last: int = 0  # sequence number of its newest record (0: none)
    trimmed_to: int = 0  # its records up to this sequence number are trimmed
    seqs: list[int] = field(default_factory=list)  # kept records' sequence numbers
    records: list[Any] = field(default_factory=list)  # moto's StreamRecords, the same order

    def describe(self) -> dict[str, Any]:
        span = {"StartingSequenceNumber": str(self.start)}
        if self.end is not None:
            span["EndingSequenceNumber"] = str(self.end)
        out: dict[str, Any] = {"ShardId": self.id, "SequenceNumberRange": span}
        if self.parent is not None:
            out["ParentShardId"] = self.parent
        return out


class _Stream:
    """The shards of one stream (a table's stream under one label), over moto's records."""

    def __init__(
        self,
        source: Any,
        label: str,
        profile: StrictProfile,
        keep: int | None,
        now: float,
        *,
        first: bool = True,
    ) -> None:
        self.source, self.label, self.profile, self.keep = source, label, profile, keep
        self.taken_to = source.starting_sequence_number  # moto's next sequence number to take
        self.seq = _FIRST_SEQUENCE
        self.shards: dict[str, _Shard] = {}  # by id; ids increase as shards open
        self.open: list[_Shard] = []
        self.kept: collections.deque[tuple[float, _Shard]] = collections.deque()
        self.closings = 0
        self._made = 0
        self._last_ms = 0
        self._next_sweep = 0.0
        if first:  # else restored (:meth:`StreamViews.restore`)
            self._open(None, 0, _SPACE, now)

    def _open(self, parent: _Shard | None, low: int, high: int, now: float) -> _Shard:
        self._made += 1
        self._last_ms = max(self._last_ms, int(time.time() * 1000))
        shard = _Shard(
            id=f"shardId-{self._last_ms:020d}-{self._made:08x}",
            parent=parent.id if parent else None,
            start=self.seq + 1,
            low=low,
            high=high,
            opened=now,
        )
        self.shards[shard.id] = shard
        self.open.append(shard)
        return shard

    def _close(self, shard: _Shard, now: float) -> None:
        if shard.last:
            shard.end = shard.last
        else:  # an empty shard's range still holds a number of its own
            self.seq += 1
            shard.end = self.seq
        shard.closed_at = now
        self.open.remove(shard)
        self.closings += 1
        every = self.profile.shard_split
        if every and self.closings % every == 0 and len(self.open) + 2 <= MAX_OPEN:
            middle = shard.low + (shard.high - shard.low) // 2
            self._open(shard, shard.low, middle, now)
            self._open(shard, middle, shard.high, now)
        else:
            self._open(shard, shard.low, shard.high, now)

    def take(self, now: float) -> None:
        """Take moto's records written since the last call."""
        items = self.source.items
        base = self.source.starting_sequence_number
        for record in items[max(0, self.taken_to - base) :]:
            self._add(record, now)
        self.taken_to = base + len(items)
        self._trim_count()

    def _add(self, record: Any, now: float) -> None:
        keys = record.record["dynamodb"].get("Keys") or {}
        if self.profile.shard_key == "partition":
            attribute = self.source.table.hash_key_attr
            keys = {attribute: keys.get(attribute)}
        where = _key_hash(keys)
        shard = next(s for s in self.open if s.low <= where < s.high)
        if shard.taken >= self.profile.shard_records or now - shard.opened >= (
            self.profile.shard_seconds
        ):
            self._close(shard, now)
            shard = next(s for s in self.open if s.low <= where < s.high)
        self.seq += 1
        shard.seqs.append(self.seq)
        shard.records.append(record)
        shard.taken += 1
        shard.last = self.seq
        self.kept.append((now, shard))

    def tick(self, now: float) -> None:
        """Close the shards open for too long, trim what is too old."""
        for shard in list(self.open):
            if now - shard.opened >= self.profile.shard_seconds:
                self._close(shard, now)
        horizon = now - self.profile.stream_retention
        dropped: dict[str, int] = collections.Counter()
        while self.kept and self.kept[0][0] <= horizon:
            _, shard = self.kept.popleft()
            dropped[shard.id] += 1
        self._drop(dropped)
        if not dropped and now < self._next_sweep:
            return  # a poll costs no walk over the shards; an empty one leaves a second late
        self._next_sweep = now + 1.0
        for shard in list(self.shards.values()):
            if shard.end is not None and not shard.seqs:
                had = shard.taken > 0
                if had or shard.closed_at <= horizon:
                    del self.shards[shard.id]

    def _trim_count(self) -> None:
        if self.keep is None or len(self.kept) <= self.keep:
            return
        dropped: dict[str, int] = collections.Counter()
        while len(self.kept) > self.keep:
            _, shard = self.kept.popleft()
            dropped[shard.id] += 1
        self._drop(dropped)

    def _drop(self, dropped: dict[str, int]) -> None:
        for shard_id, count in dropped.items():
            shard = self.shards[shard_id]
            shard.trimmed_to = shard.seqs[count - 1]
            del shard.seqs[:count], shard.records[:count]


class StreamViews:
    """The strict profile's streams (called under the server's lock).

    Args:
        profile: the shard, iterator and retention settings.
        keep: records kept per stream at most (the server's ``stream_records``; None: all).
        table: moto's table of a name in a region (None: there is none).
        clock: seconds, for ages (tests move it).
    """

    def __init__(
        self,
        profile: StrictProfile,
        keep: int | None,
        table: Callable[[str, str | None], Any],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.profile, self.keep, self.table, self.clock = profile, keep, table, clock
        self._streams: dict[int, _Stream] = {}

    # -- taking moto's records ----------------------------------------------------------

    def _stream(self, table: Any) -> _Stream | None:
        source = getattr(table, "stream_shard", None)
        label = getattr(table, "latest_stream_label", None)
        if source is None or not label:
            self._streams.pop(id(table), None)
            return None
        stream = self._streams.get(id(table))
        if stream is None or stream.source is not source or stream.label != label:
            stream = _Stream(source, label, self.profile, self.keep, self.clock())
            self._streams[id(table)] = stream
        return stream

    def written(self, tables: list[Any]) -> None:
        """Take the records the last request wrote to ``tables`` (moto's tables)."""
        now = self.clock()
        for table in tables:
            stream = self._stream(table)
            if stream is not None:
                stream.take(now)

    def forget(self, live: set[int]) -> None:
        """Drop the views of tables no longer in ``live`` (ids of moto's tables)."""
        for gone in set(self._streams) - live:
            del self._streams[gone]

    # -- kept across a restart (``local --data``: :mod:`sandbox_ledger.local.streamfile`) -

    def kept(self, table: Any, after: int) -> tuple[dict[str, Any], list[Kept], int] | None:
        """The view of ``table``'s stream as it stands (None: it has none): its state (shards
        without their records, counters; times as wall-clock seconds), its kept records
        numbered after ``after`` in their order, and how many it keeps in all."""
        stream = self._stream(table)
        if stream is None:
            return None
        now = self.clock()
        stream.take(now)
        stream.tick(now)
        # A clock reading plus this: wall-clock seconds (to the millisecond: the same at
        # every call, so an unchanged stream has the same state).
        wall = round(time.time() - now, 3)
        found = sorted(
            (seq, shard.id, record)
            for shard in stream.shards.values()
            for seq, record in zip(
                shard.seqs[bisect.bisect_right(shard.seqs, after) :],
                shard.records[bisect.bisect_right(shard.seqs, after) :],
                strict=True,
            )
        )
        times = list(itertools.islice(stream.kept, len(stream.kept) - len(found), None))
        records = [
            Kept(seq, shard_id, taken + wall, record)
            for (seq, shard_id, record), (taken, _) in zip(found, times, strict=True)
        ]
        state = {
            "seq": stream.seq,
            "closings": stream.closings,
            "made": stream._made,
            "last_ms": stream._last_ms,
            "shards": [
                [
                    s.id,
                    s.parent,
                    s.start,
                    s.low,
                    s.high,
                    s.opened + wall,
                    s.end,
                    s.closed_at + wall if s.end is not None else None,
                    s.taken,
                    s.last,
                    s.trimmed_to,
                ]
                for s in stream.shards.values()
            ],
        }
        return state, records, len(stream.kept)

    def restore(self, table: Any, state: dict[str, Any], records: list[Kept]) -> None:
        """Make ``table``'s stream (its moto ``stream_shard``, empty, and its label) the one
        :meth:`kept` described: the same shards and numbers, ``records`` (in their order)
        kept; then trimmed by this server's bound and retention.

        Raises:
            ValueError: ``state`` and ``records`` do not describe a stream (nothing changed).
        """
        now = self.clock()
        clock = now - time.time()  # a wall-clock time plus this: a clock reading
        stream = _Stream(
            table.stream_shard,
            table.latest_stream_label,
            self.profile,
            self.keep,
            now,
            first=False,
        )
        try:
            stream.seq, stream.closings = int(state["seq"]), int(state["closings"])
            stream._made, stream._last_ms = int(state["made"]), int(state["last_ms"])
            for row in state["shards"]:
                sid, parent, start, low, high, opened, end, closed, taken, last, trimmed = row
                shard = _Shard(
                    id=str(sid),
                    parent=None if parent is None else str(parent),
                    start=int(start),
                    low=int(low),
                    high=int(high),
                    opened=float(opened) + clock,
                    end=None if end is None else int(end),
                    closed_at=0.0 if closed is None else float(closed) + clock,
                    taken=int(taken),
                    last=int(last),
                    trimmed_to=int(trimmed),
                )
                stream.shards[shard.id] = shard
                if shard.end is None:
                    stream.open.append(shard)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a stream's state ({exc!r})") from None
        if list(stream.shards) != sorted(stream.shards):
            raise ValueError("its shards are not in the order they opened")
        spans = sorted((s.low, s.high) for s in stream.open)
        if [low for low, _ in spans] != [0, *(high for _, high in spans[:-1])] or (
            not spans or spans[-1][1] != _SPACE
        ):
            raise ValueError("its open shards do not cover the key hash space")
        last = 0
        for record in records:
            owner = stream.shards.get(record.shard)
            if (
                owner is None
                or record.seq <= last
                or not owner.trimmed_to < record.seq <= owner.last
                or record.seq > stream.seq
            ):
                raise ValueError(f"record {record.seq} is not one of its shards'")
            last = record.seq
            owner.seqs.append(record.seq)
            owner.records.append(record.record)
            stream.kept.append((record.taken + clock, owner))
        stream.tick(now)  # its retention, from the time each was taken
        stream._trim_count()  # this server's bound
        self._streams[id(table)] = stream

    def drop(self, table: Any) -> None:
        """Forget the view of ``table``'s stream (made again at its next use)."""
        self._streams.pop(id(table), None)

    # -- the Streams API ----------------------------------------------------------------

    def _of_arn(self, arn: Any) -> _Stream:
        parts = str(arn).split(":", 5)
        path = parts[5].split("/") if len(parts) == 6 else []
        if len(path) != 4 or path[0] != "table" or path[2] != "stream":
            raise StreamRefused("ValidationException", f"Invalid StreamArn: {arn}")
        table = self.table(path[1], parts[3])
        stream = self._stream(table) if table is not None else None
        if stream is None or stream.label != path[3]:
            raise StreamRefused(
                "ResourceNotFoundException",
                f"Requested resource not found: Stream: {arn} not found",
            )
        now = self.clock()
        stream.take(now)
        stream.tick(now)
        return stream

    def describe(self, request: dict[str, Any]) -> dict[str, Any]:
        """The ``Shards`` (and ``LastEvaluatedShardId``) of a DescribeStream answer."""
        stream = self._of_arn(request.get("StreamArn"))
        limit = request.get("Limit", DESCRIBE_MOST)
        if not isinstance(limit, int) or not 1 <= limit <= DESCRIBE_MOST:
            raise StreamRefused(
                "ValidationException",
                f"1 validation error detected: Value '{limit}' at 'limit' failed to satisfy "
                f"constraint: Member must have value between 1 and {DESCRIBE_MOST}",
            )
        ids = list(stream.shards)  # in the order they opened, which is their ids' order
        wanted = request.get("ShardFilter")
        if wanted is not None:
            # ShardFilter: "Contains the shardId of the parent shard for which you are
            # requesting child shards." Type: "the only value this parameter accepts is
            # CHILD_SHARDS."
            if not isinstance(wanted, dict) or wanted.get("Type") != "CHILD_SHARDS":
                raise StreamRefused("ValidationException", "ShardFilter Type must be CHILD_SHARDS")
            parent = wanted.get("ShardId")
            ids = [i for i in ids if stream.shards[i].parent == parent]
        after = request.get("ExclusiveStartShardId")
        first = bisect.bisect_right(ids, after) if isinstance(after, str) else 0
        chosen = ids[first : first + limit]
        out: dict[str, Any] = {"Shards": [stream.shards[i].describe() for i in chosen]}
        if first + limit < len(ids):
            out["LastEvaluatedShardId"] = chosen[-1]
        return out

    def iterator(self, request: dict[str, Any]) -> dict[str, Any]:
        """A GetShardIterator answer."""
        arn = request.get("StreamArn")
        stream = self._of_arn(arn)
        shard = stream.shards.get(str(request.get("ShardId")))
        if shard is None:
            raise StreamRefused(
                "ResourceNotFoundException",
                f"Requested resource not found: Shard does not exist: {request.get('ShardId')}",
            )
        kind = request.get("ShardIteratorType")
        if kind == "TRIM_HORIZON":
            at = max(shard.start, shard.trimmed_to + 1)
        elif kind == "LATEST":
            at = shard.end + 1 if shard.end is not None else stream.seq + 1
        elif kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
            text = request.get("SequenceNumber")
            if not isinstance(text, str) or not text.isdigit():
                raise StreamRefused(
                    "ValidationException", f"{kind} needs a SequenceNumber, not {text!r}"
                )
            number = int(text)
            # Up to the shard's last number (its start, for an open shard with none yet).
            top = shard.end if shard.end is not None else max(stream.seq, shard.start)
            if not shard.start <= number <= top:
                raise StreamRefused(
                    "ValidationException",
                    f"Invalid SequenceNumber {text} for shard {shard.id} (its range: "
                    f"{shard.start} to {top})",
                )
            if number <= shard.trimmed_to:
                raise StreamRefused(
                    "TrimmedDataAccessException",
                    f"sequence number {text} is older than the trim point of shard {shard.id}",
                )
            at = number if kind == "AT_SEQUENCE_NUMBER" else number + 1
        else:
            raise StreamRefused("ValidationException", f"Invalid ShardIteratorType: {kind!r}")
        return {"ShardIterator": self._token(str(arn), shard.id, at)}

    def records(self, request: dict[str, Any]) -> dict[str, Any]:
        """A GetRecords answer."""
        limit = request.get("Limit", GET_RECORDS_MOST)
        if not isinstance(limit, int) or not 1 <= limit <= GET_RECORDS_MOST:
            raise StreamRefused(
                "ValidationException",
                f"1 validation error detected: Value '{limit}' at 'limit' failed to satisfy "
                f"constraint: Member must have value less than or equal to {GET_RECORDS_MOST}",
            )
        arn, shard_id, at, issued = self._read_token(request.get("ShardIterator"))
        now = self.clock()
        if now - issued > self.profile.iterator_seconds:
            raise StreamRefused(
                "ExpiredIteratorException",
                f"Iterator expired. The iterator was created {now - issued:.3f} s ago, more "
                f"than {self.profile.iterator_seconds:g} s",
            )
        stream = self._of_arn(arn)
        shard = stream.shards.get(shard_id)
        if shard is None or at <= shard.trimmed_to:
            raise StreamRefused(
                "TrimmedDataAccessException",
                f"the records of shard {shard_id} from sequence number {at} are trimmed",
            )
        first = bisect.bisect_left(shard.seqs, at)
        found: list[dict[str, Any]] = []
        size = 0
        for seq, record in zip(
            shard.seqs[first : first + limit], shard.records[first : first + limit], strict=True
        ):
            body = record.to_json()
            part = body["dynamodb"]
            bytes_ = int(part.get("SizeBytes") or 0)
            if found and size + bytes_ > GET_RECORDS_BYTES:
                break
            found.append({**body, "dynamodb": {**part, "SequenceNumber": str(seq)}})
            size += bytes_
        out: dict[str, Any] = {"Records": found}
        following = int(found[-1]["dynamodb"]["SequenceNumber"]) + 1 if found else at
        if shard.end is None or first + len(found) < len(shard.seqs):
            out["NextShardIterator"] = self._token(arn, shard.id, following)
        return out

    def _token(self, arn: str, shard: str, at: int) -> str:
        text = json.dumps([arn, shard, at, self.clock()], separators=(",", ":"))
        return base64.urlsafe_b64encode(text.encode()).decode()

    @staticmethod
    def _read_token(token: Any) -> tuple[str, str, int, float]:
        try:
            arn, shard, at, issued = json.loads(base64.urlsafe_b64decode(str(token)))
            return str(arn), str(shard), int(at), float(issued)
        except (ValueError, TypeError):
            raise StreamRefused("ValidationException", "Invalid ShardIterator") from None


def dumps(body: dict[str, Any]) -> bytes:
    """A Streams answer as moto writes its JSON (times as epoch seconds, binary values as
    base64)."""
    from moto.dynamodb.models.utilities import dynamo_json_dump

    return dynamo_json_dump(body).encode()
