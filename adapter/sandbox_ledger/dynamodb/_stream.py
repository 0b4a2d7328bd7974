"""Reading the table's DynamoDB stream for ``changes()``, as operations of DynamoDB Streams
calls (:mod:`sandbox_ledger.sdk.steps`), shared by both twins.

**Lineage.** A stream is a set of shards; each lives about four hours, then closes (its
last ``GetRecords`` answers no ``NextShardIterator``), and a partition split closes one shard
and opens two children (their ``ParentShardId`` names it). Records of one item are in order
within its shard's line, so a child is read only once its parent is read to its end (or the
parent is gone from the stream: older than its 24 hours). Shards with no line between them
are read one after another in each poll.

**Position.** ``{"arn": stream, "at": {shard: last sequence number read}, "done": [shards
read to their end]}``: a reader resumes each open shard ``AFTER_SEQUENCE_NUMBER`` and skips
what is done. A record of many changes (a summary write that folded in a created and a
closed) read part way is ``<sequence number>/<changes handed out>``: resumed
``AT_SEQUENCE_NUMBER``, the changes handed out skipped. A shard it never met starts at
``TRIM_HORIZON`` when the position is empty (a new reader takes what the stream still
holds), else ``AT_SEQUENCE_NUMBER`` its
``StartingSequenceNumber``: every record of it follows the position, and one trimmed is a
change lost (a split's second child, met after the parent is gone, would otherwise lose its
first records without a word). A done shard the stream no longer lists is forgotten. A shard
of ``at`` the stream no longer lists, a sequence number DynamoDB answers
``TrimmedDataAccessException`` for, or a position of an earlier stream of the table, raise
:class:`~sandbox_ledger.changes.ChangesTrimmedError`: changes were lost.

**Cost.** A poll is one ``GetRecords`` per open shard (an iterator is kept between polls and
fetched again only when it expires after 15 minutes); ``DescribeStream`` is read on the first
poll, after a shard closes and every :data:`DESCRIBE_EVERY` polls.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from sandbox_ledger.changes import ChangeBatch, bad_after, trimmed
from sandbox_ledger.dynamodb._changes import changes_of
from sandbox_ledger.errors import StorageError
from sandbox_ledger.sdk.steps import Call, Op, error_code

if TYPE_CHECKING:
    from sandbox_ledger.changes import Change
    from sandbox_ledger.follow import Poll

__all__ = ["DESCRIBE_EVERY", "StreamReader", "check_state", "latest_stream"]

DESCRIBE_EVERY = 20
"""Polls between two ``DescribeStream`` reads while no shard closes (a new shard appears
only when one closes; the periodic read is a safety net)."""

PAGES_PER_POLL = 10
"""``GetRecords`` pages read from one shard in one poll at most (1,000 records each)."""

_GONE = frozenset({"TrimmedDataAccessException", "ResourceNotFoundException"})


def latest_stream(table: str) -> Op[str]:
    """The table's stream ARN (``DescribeTable``, on the DynamoDB client: a grant on the table
    itself, where ``ListStreams`` would need one on every resource)."""
    described = (yield Call("describe_table", {"TableName": table}))["Table"]
    arn = described.get("LatestStreamArn")
    if not arn or not (described.get("StreamSpecification") or {}).get("StreamEnabled"):
        raise StorageError(
            f"table {table} has no stream: changes() reads it (create_table() and the CDK "
            "construct turn it on, NEW_AND_OLD_IMAGES)"
        )
    return str(arn)


def check_state(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` if it has the shape :class:`StreamReader` makes."""
    arn, at, done = state.get("arn"), state.get("at"), state.get("done")
    ok = (
        set(state) == {"arn", "at", "done"}
        and isinstance(arn, str)
        and arn.startswith("arn:")
        and isinstance(at, dict)
        and all(
            isinstance(s, str) and isinstance(q, str) and _is_position(q) for s, q in at.items()
        )
        and isinstance(done, list)
        and all(isinstance(s, str) for s in done)
    )
    if not ok:
        raise bad_after()
    return state


_POSITION = re.compile(r"[0-9]+(?:/[1-9][0-9]*)?")
"""A shard's position, in ASCII digits (``str.isdigit`` takes "²", which ``int`` refuses, and
"١٢", which no sequence number is)."""


def _is_position(text: str) -> bool:
    """A shard's position: the last sequence number read (``<number>``), or a record of many
    changes read part way (``<number>/<changes handed out>``, at least one)."""
    return _POSITION.fullmatch(text) is not None


class StreamReader:
    """The polls of one ``changes()`` reader of the stream ``arn``: its shards as last
    described, and an iterator per open shard kept between polls."""

    def __init__(self, arn: str) -> None:
        self.arn = arn
        self.shards: dict[str, str | None] = {}  # shard id -> parent shard id
        self.starts: dict[str, str] = {}  # shard id -> its StartingSequenceNumber
        self._iterators: dict[str, tuple[str | None, str]] = {}  # shard -> (after seq, it)
        self._polls = 0

    def poll(self, request: Poll) -> Op[ChangeBatch]:
        """Read every shard that is ready, parents first; the changes with their positions."""
        arn = self.arn
        state = request.state or {"arn": arn, "at": {}, "done": []}
        if state["arn"] != arn:
            raise trimmed(
                "the table's stream is not the one the position was read from (was the "
                "stream turned off and on?)"
            )
        if self._polls % DESCRIBE_EVERY == 0 or not self.shards:
            yield from self._describe(arn)
        self._polls += 1
        at: dict[str, str] = dict(state["at"])
        missing = sorted(set(at) - set(self.shards))
        if missing:
            raise trimmed(f"shard {missing[0]} is no longer in the stream (24 hours kept)")
        done = set(state["done"]) & set(self.shards)
        # A position that met anything expects every record of the shards it never met.
        whole = bool(at or state["done"])
        found: list[tuple[dict[str, Any], Change]] = []
        progress = True
        while progress:
            progress = False
            for shard in sorted(self.shards):
                parent = self.shards[shard]
                if shard in done or (parent in self.shards and parent not in done):
                    continue
                closed = yield from self._read(arn, shard, at, done, found, whole)
                if closed:
                    done.add(shard)
                    at.pop(shard, None)
                    yield from self._describe(arn)  # its children, if not listed yet
                    progress = True
        return ChangeBatch(found, end=_state(arn, at, done))

    def _describe(self, arn: str) -> Op[None]:
        shards: dict[str, str | None] = {}
        starts: dict[str, str] = {}
        params: dict[str, Any] = {"StreamArn": arn}
        while True:
            page = (yield Call("describe_stream", params))["StreamDescription"]
            for shard in page.get("Shards", []):
                shards[shard["ShardId"]] = shard.get("ParentShardId")
                start = (shard.get("SequenceNumberRange") or {}).get("StartingSequenceNumber")
                if isinstance(start, str) and start.isdigit():
                    starts[shard["ShardId"]] = start
            last = page.get("LastEvaluatedShardId")
            if not last:
                break
            params = {"StreamArn": arn, "ExclusiveStartShardId": last}
        self.shards, self.starts = shards, starts

    def _iterator(self, arn: str, shard: str, after: str | None, whole: bool) -> Op[str]:
        """An iterator of ``shard`` after ``after``; from its start when never read (all of
        it when ``whole``: its StartingSequenceNumber, trimmed if any of it is)."""
        kept = self._iterators.get(shard)
        if kept is not None and kept[0] == after:
            return kept[1]
        params: dict[str, Any] = {"StreamArn": arn, "ShardId": shard}
        start = self.starts.get(shard) if whole and after is None else None
        if after is not None and "/" in after:  # inside a record: read it again, in part
            number = after.partition("/")[0]
            params.update(ShardIteratorType="AT_SEQUENCE_NUMBER", SequenceNumber=number)
        elif after is not None:
            params.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=after)
        elif start is not None:
            params.update(ShardIteratorType="AT_SEQUENCE_NUMBER", SequenceNumber=start)
        else:
            params["ShardIteratorType"] = "TRIM_HORIZON"
        try:
            response = yield Call("get_shard_iterator", params)
        except ClientError as exc:
            if error_code(exc) in _GONE:
                where = after or start
                raise trimmed(f"shard {shard} no longer holds sequence number {where}") from exc
            if start is None or error_code(exc) != "ValidationException":
                raise
            # A service that takes no position short of a record: from what it holds.
            params = {"StreamArn": arn, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON"}
            response = yield Call("get_shard_iterator", params)
        return str(response["ShardIterator"])

    def _read(
        self,
        arn: str,
        shard: str,
        at: dict[str, str],
        done: set[str],
        found: list[tuple[dict[str, Any], Change]],
        whole: bool,
    ) -> Op[bool]:
        """Read ``shard`` from ``at`` on, adding its changes to ``found``; True once it is
        read to its end (closed)."""
        for _ in range(PAGES_PER_POLL):
            iterator = yield from self._iterator(arn, shard, at.get(shard), whole)
            try:
                page = yield Call("get_records", {"ShardIterator": iterator, "Limit": 1000})
            except ClientError as exc:
                self._iterators.pop(shard, None)
                if error_code(exc) == "ExpiredIteratorException":
                    continue  # fetched again from the last sequence number read
                if error_code(exc) in _GONE:
                    raise trimmed(
                        f"shard {shard} no longer holds what follows the position"
                    ) from exc
                raise
            records = page.get("Records", [])
            for record in records:
                number = str(record["dynamodb"]["SequenceNumber"])
                # A record begun before (a position inside it): the changes it handed out.
                handed = _inside(at.get(shard), number)
                changes = changes_of(record)
                for index, change in enumerate(changes):
                    if index < handed:
                        continue
                    last = index == len(changes) - 1
                    at[shard] = number if last else f"{number}/{index + 1}"
                    found.append((_state(arn, at, done), change))
                at[shard] = number
            following = page.get("NextShardIterator")
            if not following:
                self._iterators.pop(shard, None)
                return True
            self._iterators[shard] = (at.get(shard), str(following))
            if not records:
                return False
        return False


def _inside(position: str | None, number: str) -> int:
    """How many changes of the record ``number`` the shard's position ``position`` has
    handed out already (``<number>/<n>``: a position inside a record of many changes)."""
    if position is None or "/" not in position:
        return 0
    at, _, handed = position.partition("/")
    return int(handed) if at == number else 0


def _state(arn: str, at: dict[str, str], done: set[str]) -> dict[str, Any]:
    return {"arn": arn, "at": dict(at), "done": sorted(done)}
