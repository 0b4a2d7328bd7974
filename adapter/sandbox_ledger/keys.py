"""The table's key schema: the one place attribute names, key formats, indexes and TTL live.

The DynamoDB adapter builds every key with these functions, ``create_table()`` builds the table
from :data:`TABLE_SCHEMA`, and the CDK construct imports the same constants. Nothing else in
the project spells a key attribute or an index name.

Item collections (partition key ``PK``, sort key ``SK``)::

    S#<len>#<name>#<sid>   #SUMMARY                     session summary (listing, details)
                           E#<ts:16>#<order>            one ledger entry (head)
                           E#<ts:16>#<order>#<part:5>   the rest of an entry too large for one item
                           K#<ts:16>#<order>            checkpoint marker, points at its entry
                           I#<digest>#<occurrence:6>    import claim: this content's n-th copy
                           Q#<seq:12>                   sequence mark: the n-th entry stored
    ENV                    <environment name>           environment record
    DEPLOYMENT             DESCRIPTOR                   what every client of the table agrees on
    R#<uuid>               RECORD                       resource activity record

A session key carries the name's length (in characters) before the name, so the boundary
between name and sandboxId is never ambiguous: no two distinct (name, sandboxId) pairs can
produce the same key whatever separators they contain, and the key costs only a few bytes
more than the pair itself (two 1,000-character ASCII components fit DynamoDB's 2,048 bytes).

Four global secondary indexes share the numeric sort key ``gsk`` (startedAt for sessions,
updatedAt in ms for resource records) and project keys only, so frequently changing attributes
(execCount, operation counts) never cost an index write::

    byName        g1pk  N#<name>                         RP#<phase>#<shard>
    byNameStatus  g2pk  NS#<status>#<name>               RV#<shard>#<provider>
    all           g3pk  A#<shard>                        (resources: not indexed)
    allStatus     g4pk  AS#<status>#<shard>              (resources: not indexed)
"""

from __future__ import annotations

import hashlib
import math
import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Final

from sandbox_ledger._json import find_surrogate
from sandbox_ledger.errors import InvalidInputError, KeyTooLongError

PARTITION_KEY: Final = "PK"
SORT_KEY: Final = "SK"
INDEX_SORT_KEY: Final = "gsk"
TTL_ATTRIBUTE: Final = "expiresAt"

# DynamoDB's limits, in UTF-8 bytes.
MAX_PARTITION_KEY_BYTES: Final = 2048
MAX_SORT_KEY_BYTES: Final = 1024

DEFAULT_SHARD_COUNT: Final = 4
MAX_SHARD_COUNT: Final = 64

SUMMARY_SK: Final = "#SUMMARY"
EVENT_PREFIX: Final = "E#"
CHECKPOINT_PREFIX: Final = "K#"
CLAIM_PREFIX: Final = "I#"
SEQUENCE_PREFIX: Final = "Q#"
ENVIRONMENT_PK: Final = "ENV"
RESOURCE_PREFIX: Final = "R#"
RESOURCE_SK: Final = "RECORD"
SESSION_PREFIX: Final = "S#"

# The partition key prefixes of the indexes' item families (the CDK's IAM conditions on
# ``dynamodb:LeadingKeys`` name them; see the table in the module docstring).
BY_NAME_PREFIX: Final = "N#"
BY_NAME_STATUS_PREFIX: Final = "NS#"
ALL_PREFIX: Final = "A#"
ALL_STATUS_PREFIX: Final = "AS#"
RESOURCE_PHASE_PREFIX: Final = "RP#"
RESOURCE_PROVIDER_PREFIX: Final = "RV#"

# The deployment descriptor: one item per table (see sandbox_ledger.deployment).
DESCRIPTOR_PK: Final = "DEPLOYMENT"
DESCRIPTOR_SK: Final = "DESCRIPTOR"
DESCRIPTOR_ITEM_TYPE: Final = "deployment"
DESCRIPTOR_FORMAT: Final = "format"
DESCRIPTOR_SHARD_COUNT: Final = "shardCount"
DESCRIPTOR_EVENT_BUS: Final = "eventBusName"
DESCRIPTOR_STALE_AFTER: Final = "staleAfterSeconds"
DESCRIPTOR_RETAIN_FAILED: Final = "retainFailedSeconds"
DESCRIPTOR_LEDGER_RETENTION: Final = "ledgerRetentionSeconds"
DESCRIPTOR_STORE_ID: Final = "storeId"

# Attribute names of resource record items (besides the keys, index keys and TTL above).
ITEM_TYPE: Final = "itemType"
"""Which kind of item this is (resource records: :data:`RESOURCE_ITEM_TYPE`)."""
RESOURCE_ITEM_TYPE: Final = "resource"
RECORD_BODY: Final = "rec"
"""The record's JSON, without updatedAt."""
RECORD_PHASE: Final = "phase"
RECORD_UPDATED_AT: Final = "updatedAt"
"""The owner's ISO timestamp (the seed's field), kept apart so a heartbeat is one UpdateItem."""
REVISION: Final = "rev"
"""Optimistic-concurrency counter: +1 on every write by an owner or a sweeper claim."""
CLAIM: Final = "expiring"
"""Set when a sweeper claims the record for expiry: the reason."""
CLAIM_OWNER: Final = "claimedBy"
"""The run id of the sweeper holding the claim."""
CLAIM_UNTIL: Final = "claimUntil"
"""When the claim's lease ends (Unix ms, the claiming sweeper's clock); a later sweeper may
take over an expired claim."""
CLAIM_REV: Final = "claimRev"
"""The revision the first claim of an expiry was made at (set once; a takeover keeps it): the
revision that expired, in the ``ResourceExpired`` idempotency key, so every publication of one
expiry carries the same key."""
INCARNATION: Final = "inc"
"""A random token set when a record is created (a ``put`` on an id that holds none) and never
changed after: a record deleted and allocated again under its id is another incarnation, whose
``rev`` starts again at 1. A sweeper's observation, claim, release and delete are conditional
on the incarnation (and revision) it read, so none of them ever lands on a record it did not
judge. Absent on records written before it existed."""
OBSERVED_REV: Final = "observedRev"
"""The revision a sweeper last saw unchanged (its observation; written without bumping
``rev``, so owners never conflict with it)."""
OBSERVED_AT: Final = "observedAt"
"""When that sweeper made the observation (Unix ms, on the sweeper's clock): the record expires
once its ``rev`` is still ``observedRev`` a whole window later by the sweeper's clock."""


class LedgerAttr:
    """Attribute names of ledger items besides their keys (short where every entry repeats them)."""

    TS: Final = "ts"  # entry head and checkpoint marker: the entry's ts
    EVENT: Final = "ev"  # entry head: the event name
    DATA: Final = "d"  # entry head and parts: the serialized entry, maybe compressed, in chunks
    COMPRESSION: Final = "z"  # entry head: "zlib" when DATA is compressed
    PARTS: Final = "np"  # entry head: how many part items follow it
    REF: Final = "ref"  # checkpoint marker: the sort key of its entry's head
    SNAPSHOT_ID: Final = "snap"  # checkpoint marker
    TAG: Final = "tag"  # checkpoint marker
    ITEM_TYPE: Final = "itemType"  # summary: "session"
    NAME: Final = "name"  # summary
    SANDBOX_ID: Final = "sandboxId"  # summary
    STARTED_AT: Final = "startedAt"  # summary
    COMPLETED_AT: Final = "completedAt"  # summary
    EXEC_COUNT: Final = "execCount"  # summary
    BUILT_AT: Final = "builtAt"  # environment
    RECORD: Final = "record"  # environment: the record's wire JSON
    FIRST_SAVED: Final = "firstSaved"  # environment: order id of its first save (tie order)
    CLAIM_ORDER: Final = "ord"  # import claim: the order id of the entry it stored
    DELETING: Final = "deleting"  # summary: a running delete_sandbox's lease end (ms)
    DELETING_TOKEN: Final = "deletingToken"  # summary: which delete_sandbox holds the lease
    INCARNATION: Final = "inc"  # sequence mark: the session's incarnation (new after a delete)
    # sequence mark: its entry's TTL, where the mark's is later; summary: the TTL of the latest
    # entry that changed it (the summary's own expiresAt is raised past it, see SUMMARY_SLACK_S)
    ENTRY_EXPIRES: Final = "eex"
    SEQUENCE: Final = "q"  # entry head: the number of its sequence mark (its commit order)
    SPENT: Final = "spent"  # seal: its delete finished; mark 0: its entry was deleted
    SUMMARY_SEQUENCE: Final = "sq"  # summary: the mark number of the last write that changed it
    # summary: the sandbox.created and sandbox.closed entries the last write that changed it
    # folded in, in order ([{ev, ts}]): what changes() reads a session's lifecycle off
    LIFECYCLE: Final = "lc"
    # summary: the mark (``<incarnation>#<number>``) of the write that set ``lc``: a write
    # that leaves it (a lease, a TTL raise, a writer of an earlier version) is no change
    LIFECYCLE_SEQUENCE: Final = "lq"
    # summary: built again by a delete that stalled past its lease (the delete's token), from
    # the next session's entries, where the deleted session had one: changes() reads its
    # record as that session's deletion, then the next one's created and closed (``lc``)
    REBUILT: Final = "rb"
    # entry head of sandbox.created / sandbox.closed: its change is read off the summary's
    # stream record (absent: a head of an earlier version, whose change is its own record)
    ON_SUMMARY: Final = "cs"


@dataclass(frozen=True)
class IndexSpec:
    """One global secondary index: its name, partition key attribute and sort key attribute."""

    name: str
    partition_key: str
    sort_key: str = INDEX_SORT_KEY
    projection: str = "KEYS_ONLY"


BY_NAME: Final = IndexSpec("byName", "g1pk")
BY_NAME_STATUS: Final = IndexSpec("byNameStatus", "g2pk")
ALL: Final = IndexSpec("all", "g3pk")
ALL_STATUS: Final = IndexSpec("allStatus", "g4pk")
# The first two physical indexes are overloaded: resource records live in them under their own
# partition prefixes (``RP#``, ``RV#``), which never collide with a session's. Each use has its
# own spec, named for what it serves; the physical names stay those of the first use, since
# renaming a GSI of a deployed table means dropping and rebuilding it.
RESOURCES_BY_PHASE: Final = IndexSpec(BY_NAME.name, BY_NAME.partition_key)
"""Resource records by phase and shard (``RP#<phase>#<shard>``), on the byName index."""
RESOURCES_BY_PROVIDER: Final = IndexSpec(BY_NAME_STATUS.name, BY_NAME_STATUS.partition_key)
"""Resource records by shard and provider (``RV#<shard>#<provider>``), on byNameStatus."""

INDEXES: Final[tuple[IndexSpec, ...]] = (BY_NAME, BY_NAME_STATUS, ALL, ALL_STATUS)

# Attribute name -> DynamoDB scalar type, for every key attribute of the table and its indexes.
KEY_ATTRIBUTE_TYPES: Final[dict[str, str]] = {
    PARTITION_KEY: "S",
    SORT_KEY: "S",
    INDEX_SORT_KEY: "N",
    **{index.partition_key: "S" for index in INDEXES},
}


def _nonempty(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(field, "must be a non-empty string")
    if find_surrogate(value, field):
        raise InvalidInputError(field, "contains a lone UTF-16 surrogate (not storable as UTF-8)")
    return value


def check_component(value: object, field: str) -> str:
    """A key component (name, sandboxId, environment name): a non-empty string that UTF-8 can
    encode (no lone surrogate). Every adapter checks its key arguments with it.

    Raises:
        InvalidInputError: empty, not a string, or holding a lone UTF-16 surrogate.
    """
    return _nonempty(value, field)


def _fits(key: str, limit: int, field: str) -> str:
    size = len(key.encode("utf-8"))
    if size > limit:
        raise KeyTooLongError(
            field,
            f"too long for a DynamoDB key ({size} bytes encoded, the limit is {limit})",
        )
    return key


def session_pk(name: str, sandbox_id: str) -> str:
    """The partition key of a session: its summary, entries and checkpoint markers.

    Applies :func:`check_session_key` first, so a pair that any event of the session could not
    store is refused by every operation on the session, reads included.

    Raises:
        InvalidInputError: a component is empty.
        KeyTooLongError: some key of the session would exceed DynamoDB's limits.
    """
    check_session_key(name, sandbox_id)
    return f"{SESSION_PREFIX}{len(name)}#{name}#{sandbox_id}"


def session_prefix(name: str) -> str:
    """The start of every session key of ``name`` (a ``begins_with`` for a filtered Scan)."""
    return f"{SESSION_PREFIX}{len(_nonempty(name, 'name'))}#{name}#"


# The longest status word that can appear in a session's index keys ("completed").
_LONGEST_STATUS: Final = max(("running", "completed"), key=lambda s: len(s.encode()))


def check_session_key(name: str, sandbox_id: str) -> tuple[str, str]:
    """The one key-length rule: accept (name, sandboxId) for every event of a session or none.

    Checked against the longest key any event can produce: the session's partition key and
    its index keys in the longest status (``completed``), so a session that could be created
    can always be closed. Every adapter applies it before any write, so the rule is the same
    on every backend: the encoded pair ``S#<len>#<name>#<sandboxId>`` must fit 2,048 bytes and
    ``NS#completed#<name>`` too (a name of at most 2,035 UTF-8 bytes).

    Raises:
        InvalidInputError: a component is empty or not a string.
        KeyTooLongError: the pair is too long for some key of the session.
    """
    _nonempty(name, "name")
    _nonempty(sandbox_id, "sandboxId")
    _fits(
        f"{SESSION_PREFIX}{len(name)}#{name}#{sandbox_id}",
        MAX_PARTITION_KEY_BYTES,
        "name/sandboxId",
    )
    _fits(f"{BY_NAME_STATUS_PREFIX}{_LONGEST_STATUS}#{name}", MAX_PARTITION_KEY_BYTES, "name")
    return name, sandbox_id


def parse_session_pk(pk: str) -> tuple[str, str]:
    """The (name, sandboxId) a session partition key was built from."""
    prefix, length, rest = pk.split("#", 2)
    size = int(length)
    if prefix != "S" or rest[size : size + 1] != "#":
        raise ValueError(f"not a session key: {pk!r}")
    return rest[:size], rest[size + 1 :]


class ItemFamily(StrEnum):
    """Which family of the table's items a key belongs to (the table in the module
    docstring): what a stream record of the item means (:mod:`sandbox_ledger.changes`)."""

    SUMMARY = "summary"
    ENTRY = "entry"
    ENTRY_PART = "entry-part"
    CHECKPOINT = "checkpoint"
    CLAIM = "claim"
    SEQUENCE = "sequence"
    ENVIRONMENT = "environment"
    DESCRIPTOR = "descriptor"
    RESOURCE = "resource"
    UNKNOWN = "unknown"


def item_family(pk: str, sk: str) -> ItemFamily:
    """The family of the item keyed (``pk``, ``sk``); UNKNOWN for a key this schema never
    writes."""
    if pk.startswith(SESSION_PREFIX):
        if sk == SUMMARY_SK:
            return ItemFamily.SUMMARY
        if sk.startswith(EVENT_PREFIX):
            return ItemFamily.ENTRY_PART if part_head(sk) else ItemFamily.ENTRY
        if sk.startswith(CHECKPOINT_PREFIX):
            return ItemFamily.CHECKPOINT
        if sequence_number(sk) is not None:
            return ItemFamily.SEQUENCE
        return ItemFamily.CLAIM if sk.startswith(CLAIM_PREFIX) else ItemFamily.UNKNOWN
    if pk == ENVIRONMENT_PK:
        return ItemFamily.ENVIRONMENT
    if (pk, sk) == (DESCRIPTOR_PK, DESCRIPTOR_SK):
        return ItemFamily.DESCRIPTOR
    if pk.startswith(RESOURCE_PREFIX) and sk == RESOURCE_SK:
        return ItemFamily.RESOURCE
    return ItemFamily.UNKNOWN


def _ts(ts: int) -> str:
    return f"{ts:016d}"


def event_sk(ts: int, order: str) -> str:
    """The sort key of an entry's head item: ascending ts, then append order."""
    return f"{EVENT_PREFIX}{_ts(ts)}#{order}"


def event_order(sk: str) -> str:
    """The order id in an entry head's sort key (:func:`event_sk`)."""
    return sk[len(EVENT_PREFIX) + 17 :]


def sequence_sk(number: int) -> str:
    """The sort key of a session's ``number``-th sequence mark (0-based; see
    :mod:`sandbox_ledger.dynamodb._sequence`): sorts in number order."""
    return f"{SEQUENCE_PREFIX}{number:012d}"


def sequence_number(sk: str) -> int | None:
    """The number in a sequence mark's sort key, or None if ``sk`` is not one."""
    digits = sk[len(SEQUENCE_PREFIX) :]
    if not sk.startswith(SEQUENCE_PREFIX) or len(digits) != 12 or not digits.isdigit():
        return None
    return int(digits)


def part_sk(head_sk: str, part: int) -> str:
    """The sort key of part ``part`` (1-based) of a split entry; sorts right after its head."""
    return f"{head_sk}#{part:05d}"


def part_head(sk: str) -> str | None:
    """The head's sort key if ``sk`` is one of :func:`part_sk`'s, else None."""
    if not sk.startswith(EVENT_PREFIX):
        return None
    head, _, part = sk.rpartition("#")
    return head if head.count("#") == 2 and len(part) == 5 and part.isdigit() else None


def checkpoint_sk(ts: int, order: str) -> str:
    """The sort key of a checkpoint marker."""
    return f"{CHECKPOINT_PREFIX}{_ts(ts)}#{order}"


def claim_sk(digest: str, occurrence: int) -> str:
    """The sort key of an import claim: occurrence ``occurrence`` of the content ``digest``."""
    return f"{CLAIM_PREFIX}{digest}#{occurrence:06d}"


def check_environment_name(name: object) -> str:
    """The one rule for environment names, applied by every store to every environment
    operation (reads included), so a record one store holds moves to every other: a non-empty
    string of at most 1,024 UTF-8 bytes (DynamoDB's sort-key limit).

    Raises:
        InvalidInputError: empty, not a string, or holding a lone UTF-16 surrogate.
        KeyTooLongError: longer than 1,024 bytes as UTF-8.
    """
    return _fits(_nonempty(name, "name"), MAX_SORT_KEY_BYTES, "name")


def environment_sk(name: str) -> str:
    """The sort key of an environment record (all of them share :data:`ENVIRONMENT_PK`)."""
    return check_environment_name(name)


_CANONICAL_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def check_record_id(value: object) -> str:
    """A resource record id: exactly a UUID's canonical form (lowercase, hyphenated).

    One UUID has many spellings that :class:`uuid.UUID` accepts (upper case, braces, a URN,
    no hyphens, surrounding spaces or a newline, non-ASCII digits); taking them as given would
    store one sandbox as several records, each expired and reported on its own.

    Raises:
        InvalidInputError: naming ``id``; the message gives the canonical spelling when the
            value is another spelling of a UUID.
    """
    if isinstance(value, str) and _CANONICAL_UUID.fullmatch(value):
        return value
    hint = ""
    if isinstance(value, str):
        try:
            canonical = str(uuid.UUID(value))
        except ValueError:
            canonical = ""
        # Only a spelling that holds the same 32 hex digits: uuid.UUID also reads '+1...' as
        # '01...' and non-ASCII digits as hex, which a hint must not present as the same id.
        digits = re.sub(r"[^0-9a-f]", "", value.lower().removeprefix("urn:uuid:"))
        if canonical and digits == canonical.replace("-", ""):
            hint = f" (write it as {canonical!r})"
    raise InvalidInputError(
        "id", f"{value!r} is not a UUID in canonical form (lowercase, hyphenated){hint}"
    )


def resource_pk(record_id: str) -> str:
    """The partition key of a resource activity record (``record_id`` in canonical form).

    Raises:
        InvalidInputError: naming ``id``, when it is not a canonical UUID.
    """
    return f"{RESOURCE_PREFIX}{check_record_id(record_id)}"


def resource_id(pk: str) -> str:
    """The record id a resource partition key was built from."""
    if not pk.startswith(RESOURCE_PREFIX):
        raise ValueError(f"not a resource record key: {pk!r}")
    return pk[len(RESOURCE_PREFIX) :]


def shard_of(key: str, shard_count: int) -> int:
    """A stable shard in ``range(shard_count)`` for an item's partition key."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shard_count


def check_shard_count(shard_count: int) -> int:
    """Validate a shard count (readers and writers of one table must use the same one)."""
    if not isinstance(shard_count, int) or isinstance(shard_count, bool):
        raise InvalidInputError("shard_count", "must be an integer")
    if not 1 <= shard_count <= MAX_SHARD_COUNT:
        raise InvalidInputError("shard_count", f"must be between 1 and {MAX_SHARD_COUNT}")
    return shard_count


def check_retention(retention: object) -> int | None:
    """A ledger retention (a positive ``timedelta``, or None: keep forever) in whole seconds,
    rounded up."""
    if retention is None:
        return None
    if not isinstance(retention, timedelta):
        raise InvalidInputError(
            "retention", f"must be a datetime.timedelta or None, got {type(retention).__name__}"
        )
    if retention <= timedelta(0):
        raise InvalidInputError("retention", f"must be positive, got {retention}")
    return math.ceil(retention.total_seconds())


MAX_OCCURRENCE = 999_999
"""The most copies of one content in one session an import identifies (six digits of
:func:`claim_sk`)."""


def check_occurrence(occurrence: object) -> int:
    """An import occurrence (``append_once``): an integer from 1 to :data:`MAX_OCCURRENCE`."""
    if isinstance(occurrence, bool) or not isinstance(occurrence, int):
        raise InvalidInputError("occurrence", f"must be an integer from 1 to {MAX_OCCURRENCE}")
    if not 1 <= occurrence <= MAX_OCCURRENCE:
        raise InvalidInputError("occurrence", f"must be an integer from 1 to {MAX_OCCURRENCE}")
    return occurrence


def check_segments(segments: object) -> int | None:
    """A ``scan_sessions`` parallelism hint, checked by every store whether it scans in
    parallel or not: None (the store's default) or an integer from 1 to 64."""
    if segments is None:
        return None
    if isinstance(segments, bool) or not isinstance(segments, int) or not 1 <= segments <= 64:
        raise InvalidInputError("segments", "must be an integer from 1 to 64")
    return segments


def ledger_expires_at(ts: int, retention: int | None) -> int | None:
    """The TTL (Unix seconds) of an item whose entry has time ``ts`` (ms), or None."""
    return None if retention is None else ts // 1000 + retention


def check_table_name(table_name: object) -> str:
    """Validate a table name as DynamoDB bounds it (3 to 255 characters)."""
    if not isinstance(table_name, str) or not 3 <= len(table_name) <= 255:
        raise InvalidInputError("table_name", "must be a string of 3 to 255 characters")
    return table_name


def by_name_pk(name: str) -> str:
    """``byName`` partition of one name's sessions."""
    return _fits(f"{BY_NAME_PREFIX}{_nonempty(name, 'name')}", MAX_PARTITION_KEY_BYTES, "name")


def by_name_status_pk(status: str, name: str) -> str:
    """``byNameStatus`` partition of one name's sessions in one status."""
    return _fits(f"{BY_NAME_STATUS_PREFIX}{status}#{name}", MAX_PARTITION_KEY_BYTES, "name")


def all_pk(shard: int) -> str:
    """``all`` partition of one shard of every session."""
    return f"{ALL_PREFIX}{shard:03d}"


def all_status_pk(status: str, shard: int) -> str:
    """``allStatus`` partition of one shard of every session in one status."""
    return f"{ALL_STATUS_PREFIX}{status}#{shard:03d}"


def resource_phase_pk(phase: str, shard: int) -> str:
    """Resource records in one phase, one shard (on the ``byName`` index)."""
    return f"{RESOURCE_PHASE_PREFIX}{phase}#{shard:03d}"


def resource_provider_pk(provider: str, shard: int) -> str:
    """Resource records of one sandbox provider, one shard (on the ``byNameStatus`` index)."""
    return _fits(
        f"{RESOURCE_PROVIDER_PREFIX}{shard:03d}#{provider}",
        MAX_PARTITION_KEY_BYTES,
        "sandboxProvider",
    )


def table_definition(table_name: str) -> dict[str, object]:
    """The CreateTable request for the ledger table (on-demand, streams on).

    The CDK construct provisions the same key schema from the same constants.
    """
    return {
        "TableName": table_name,
        "AttributeDefinitions": [
            {"AttributeName": name, "AttributeType": kind}
            for name, kind in KEY_ATTRIBUTE_TYPES.items()
        ],
        "KeySchema": [
            {"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
            {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
        ],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": index.name,
                "KeySchema": [
                    {"AttributeName": index.partition_key, "KeyType": "HASH"},
                    {"AttributeName": index.sort_key, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": index.projection},
            }
            for index in INDEXES
        ],
        "BillingMode": "PAY_PER_REQUEST",
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    }
