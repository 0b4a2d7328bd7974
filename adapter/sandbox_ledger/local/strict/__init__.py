"""The strict profile of the embedded DynamoDB: DynamoDB's limits, throughput and
transaction rules where moto is lenient (``LocalDynamoDB(strict=StrictProfile())``,
``sandbox-ledger local --strict``).

What it does, each rule quoted from DynamoDB's documentation beside its code:

- **Limits** (:mod:`.limits`, :mod:`.sizes`): 400 KB items by DynamoDB's size formula,
  25 requests and 16 MB per BatchWriteItem, 100 keys per BatchGetItem, 100 actions and 4 MB
  per transaction, numbers of at most 38 significant digits within DynamoDB's range:
  refused with ``ValidationException`` before moto sees the request.
- **Throughput** (:mod:`.capacity`): 1,000 write and 3,000 read units per second per partition
  key, 4,000 and 12,000 per table (a new on-demand table), times
  :attr:`StrictProfile.rate_scale`; past them ``ProvisionedThroughputExceededException``
  (a transaction: cancelled with ``ThrottlingError`` on the items throttled).
- **Transaction conflicts** (:mod:`.front`): a TransactWriteItems stays in flight for
  :attr:`StrictProfile.conflict_hold` seconds before it applies, outside the server's lock:
  another transaction naming one of its items is cancelled with ``TransactionConflict``, a
  PutItem, UpdateItem or DeleteItem on one gets ``TransactionConflictException``.
- **Idempotent transactions**: the same ``ClientRequestToken`` and request within
  :attr:`StrictProfile.token_seconds` returns the first answer without writing again; the
  token with another request is ``IdempotentParameterMismatchException``.
- **Eventually consistent global secondary indexes** (:mod:`.indexes`): each write reaches
  each index after a delay drawn from :attr:`StrictProfile.index_delay`; until then a Query
  or Scan of the index sees the item's entry as it was (or no entry), each item's writes
  arriving in order. Reads of the table (and of local secondary indexes) are as fresh as
  they were. A Query or Scan of a global secondary index with ``ConsistentRead`` is
  ``ValidationException``.
- **TTL deletion** (:mod:`.ttl`): an expired item is served until the TTL service deletes it,
  :attr:`StrictProfile.ttl_delay` seconds after its TTL at the earliest, each deletion a
  ``REMOVE`` stream record with the service's ``userIdentity`` (the indexes lag it as they
  lag a DeleteItem).
- **Streams** (:mod:`.streams`): each stream's shards close after
  :attr:`StrictProfile.shard_records` records or :attr:`StrictProfile.shard_seconds`
  seconds and open a successor (every :attr:`StrictProfile.shard_split`-th closing, two: a
  split), an item's records in order down one line of shards; a shard iterator expires
  :attr:`StrictProfile.iterator_seconds` after it is handed out (``ExpiredIteratorException``);
  records are trimmed after :attr:`StrictProfile.stream_retention` seconds
  (``TrimmedDataAccessException``; a closed shard all trimmed leaves ``DescribeStream``);
  ``GetRecords`` returns at most 1,000 records or 1 MB.
- **Consumed capacity** (:mod:`.consumed`): ``ReturnConsumedCapacity`` (``TOTAL``,
  ``INDEXES``) answered with DynamoDB's numbers in place of moto's, on every single-item,
  batch, transaction, Query and Scan request: items rounded per unit (1 KB written, 4 KB
  read, an eventually consistent read half), a write on the larger of its before and after
  images, a Query's or Scan's items summed before rounding and counted as read (before its
  filter), transactions twice, a write failing its condition charged all the same, and each
  global secondary index's writes (an index key changed: a delete and a put) charged to that
  index. The buckets of the throughput rules take the same numbers, a write's once it is
  served (its after image known).
- **1 MB pages** (:mod:`.front`): a Query or Scan page ends where the data it read reaches
  1 MB by DynamoDB's item size (:mod:`.sizes`), its ``LastEvaluatedKey`` that item's table
  key and index key (moto ends a page at 1,000,000 bytes of its own measure).
- **A meter** (:meth:`LocalDynamoDB.meter() <sandbox_ledger.local.LocalDynamoDB.meter>`,
  :meth:`~sandbox_ledger.local.LocalDynamoDB.reset_meter`): the read and write units consumed
  per (table, index name or ``""`` for the table, partition key value as compact JSON of its
  wire form, e.g. ``'{"S":"a"}'``) as :class:`Usage`, whether or not a request asked for
  ``ReturnConsumedCapacity``; in process only (a :class:`~sandbox_ledger.local.
  LocalDynamoDBProcess` keeps its meter in its child).
"""

from __future__ import annotations

from dataclasses import dataclass

from .consumed import MeterKey, Usage

__all__ = ["MeterKey", "StrictProfile", "Usage"]


@dataclass(frozen=True)
class StrictProfile:
    """How strict the embedded DynamoDB is.

    Args:
        rate_scale: DynamoDB's per-partition and per-table rates multiplied by this (a test
            sets it low to reach them with few requests), above 0.
        conflict_hold: seconds a TransactWriteItems stays in flight before it applies (0:
            transactions never overlap, and nothing conflicts).
        token_seconds: how long a ``ClientRequestToken`` is remembered (DynamoDB: 10 minutes).
        index_delay: the seconds (lowest, highest) after which a write reaches a global
            secondary index, drawn per write and index, from 0 to 60; ``(0, 0)``: at once.
            The default, up to 0.1 s, is "a fraction of a second" as DynamoDB puts it, and
            longer than a client's round trip here (about a millisecond): a read of an index
            right after a write misses it about every time, as a read against DynamoDB can.
        ttl_delay: seconds after its TTL an expired item is deleted by the TTL service, at
            the earliest (:mod:`.ttl`; DynamoDB: typically within two days); None: never, as
            moto. The default, a minute, keeps an expired item readable for a while, as
            DynamoDB does, and lets a developer see the deletions come.
        ttl_every: seconds between two looks for expired items (each reads every item of
            the tables whose TTL is enabled), above 0; longer after a look that took more
            than a twentieth of it (:data:`.ttl.BUSY_SHARE`).
        shard_records: records after which a stream's open shard closes and a successor
            opens (:mod:`.streams`), at least 1. DynamoDB says neither when nor after how
            many; the default, 1,000, makes every test that writes a thousand records read
            across a closed shard and its child, as a reader of a busy table does.
        shard_seconds: seconds after which an open shard closes, records or not, above 0
            (default: four hours, the lifetime of a shard seen on DynamoDB).
        shard_split: every this-many-th closing of a stream's shard opens two children
            instead of one (a split), while fewer than :data:`.streams.MAX_OPEN` shards are
            open; 0: never. Default 4.
        iterator_seconds: seconds after which a shard iterator expires (DynamoDB: 15
            minutes), above 0.
        stream_retention: seconds after which a stream record is trimmed (DynamoDB: 24
            hours), above 0.
        shard_key: what keeps records in one line of shards: ``"item"`` (the default: the
            item's whole key, the only order DynamoDB documents, so two items of one
            partition key may be read out of order) or ``"partition"`` (its partition key, as
            shards follow a table's partitions, which hold whole partition keys but when
            DynamoDB splits one for heat).
    """

    rate_scale: float = 1.0
    conflict_hold: float = 0.02
    token_seconds: float = 600.0
    index_delay: tuple[float, float] = (0.0, 0.1)
    ttl_delay: float | None = 60.0
    ttl_every: float = 1.0
    shard_records: int = 1000
    shard_seconds: float = 4 * 3600.0
    shard_split: int = 4
    iterator_seconds: float = 900.0
    stream_retention: float = 86_400.0
    shard_key: str = "item"

    @classmethod
    def parse(cls, text: str) -> StrictProfile:
        """The profile ``text`` describes, ``name=value[,name=value...]`` (e.g.
        ``rate_scale=0.01,index_delay=0:0,ttl_delay=none``; :mod:`.parse`), every field not
        named at its default.

        Raises:
            InvalidInputError: naming the field and quoting ``text``, for a name that is no
                field or a value not of its type or out of its range.
        """
        from .parse import parse_profile

        return parse_profile(text)

    def __post_init__(self) -> None:
        from ...errors import InvalidInputError

        if not self.rate_scale > 0:
            raise InvalidInputError("rate_scale", "must be above 0")
        if not 0 <= self.conflict_hold <= 10:
            raise InvalidInputError("conflict_hold", "must be from 0 to 10 seconds")
        if not self.token_seconds > 0:
            raise InvalidInputError("token_seconds", "must be above 0")
        if self.ttl_delay is not None and not 0 <= self.ttl_delay <= 30 * 86_400:
            raise InvalidInputError("ttl_delay", "must be None or from 0 to 30 days in seconds")
        if not 0 < self.ttl_every <= 86_400:
            raise InvalidInputError("ttl_every", "must be above 0 and at most a day in seconds")
        for name in ("shard_records", "shard_split"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidInputError(name, "must be a count >= 0")
        if self.shard_records < 1:
            raise InvalidInputError("shard_records", "must be at least 1")
        for name in ("shard_seconds", "iterator_seconds", "stream_retention"):
            if not getattr(self, name) > 0:
                raise InvalidInputError(name, "must be above 0 seconds")
        if self.shard_key not in ("item", "partition"):
            raise InvalidInputError("shard_key", "must be 'item' or 'partition'")
        delay = self.index_delay
        if (
            not isinstance(delay, tuple)
            or len(delay) != 2
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in delay)
            or not 0 <= delay[0] <= delay[1] <= 60
        ):
            raise InvalidInputError(
                "index_delay", "must be (lowest, highest) seconds, 0 <= lowest <= highest <= 60"
            )
