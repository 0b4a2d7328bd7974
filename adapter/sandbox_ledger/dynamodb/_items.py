"""Pure conversions between the contract's models and DynamoDB items (low-level wire format).

No I/O here: both adapter twins and the tests use these functions directly.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox_ledger import _json
from sandbox_ledger import keys as k
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.models import (
    CheckpointInfo,
    EnvironmentRecord,
    LedgerEntry,
    LedgerEvent,
    SandboxDetails,
    SandboxStatus,
)
from sandbox_ledger.sdk.attributes import B, Item, N, S
from sandbox_ledger.summary import checkpoint_info

if TYPE_CHECKING:
    from collections.abc import Sequence

# A DynamoDB item stops at 400 KB (409,600 bytes) including attribute names and keys (up to
# 3 KB here). Chunks stay well below that, whatever an emulator would accept.
CHUNK_BYTES = 350_000
# Compress only when it pays: small entries stay readable JSON and cheap to decode.
COMPRESS_MIN_BYTES = 1024
COMPRESS_MAX_RATIO = 0.9


class _OrderIds:
    """Strictly increasing per process, unique across processes: the tie-break for equal ts.

    Generated once per append call and reused by every resend, so it doubles as the
    idempotency key of the write.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def continue_after(self, stamp: int) -> None:
        """Go on after ``stamp`` (an order id's clock), whatever this process's clock says."""
        with self._lock:
            self._last = max(self._last, stamp)

    def next(self) -> str:
        with self._lock:
            self._last = max(self._last + 1, time.time_ns())
            stamp = self._last
        return f"{stamp:020d}{secrets.token_hex(4)}"


order_ids = _OrderIds()


def order_time_ns(order: str) -> int | None:
    """The writer's clock (Unix ns) when it made the order id ``order`` (see
    :class:`_OrderIds`), or None if ``order`` is not one."""
    stamp = order[:20]
    return int(stamp) if stamp.isdigit() else None


@dataclass(frozen=True)
class EncodedEntry:
    """A ledger entry as items: the head (conditional, written last) and any extra parts."""

    head: Item
    parts: list[Item]


def live(item: Item, now_s: int) -> bool:
    """False once the item's own expiry has passed: its TTL, or a summary's ``eex`` (its TTL
    is put off past it, see :data:`SUMMARY_SLACK_S`). DynamoDB deletes expired items up to
    days late: every read hides them first.

    A sequence mark's ``eex`` (its entry's TTL, where the mark's was raised to the mark
    before's) is not its expiry: marks expire in order, by their TTL, which the readers of
    a sequence rely on (:func:`._ops._as_of_marks` reads a mark missing among live ones as
    one stored after its read, and leaves out every entry after it)."""
    ttl = item.get(A.ENTRY_EXPIRES) if item.get(k.SORT_KEY) == SUMMARY_SORT_KEY else None
    ttl = ttl or item.get(k.TTL_ATTRIBUTE)
    return ttl is None or int(ttl["N"]) > now_s


SUMMARY_SORT_KEY = {"S": k.SUMMARY_SK}


def now_s() -> int:
    return int(time.time())


def encode_entry(entry: LedgerEntry, order: str, ttl: int | None = None) -> EncodedEntry:
    """Serialize ``entry`` into a head item and, beyond :data:`CHUNK_BYTES`, extra part items,
    each with the TTL ``ttl`` (Unix seconds) if given."""
    pk = k.session_pk(entry.name, entry.sandbox_id)
    body = {key: v for key, v in entry.wire().items() if key not in ("name", "sandboxId")}
    raw = _json.dumps(body)
    blob, compressed = raw, False
    if len(raw) >= COMPRESS_MIN_BYTES:
        packed = zlib.compress(raw, 6)
        if len(packed) <= len(raw) * COMPRESS_MAX_RATIO:
            blob, compressed = packed, True
    chunks = [blob[i : i + CHUNK_BYTES] for i in range(0, len(blob), CHUNK_BYTES)] or [b""]
    head_sk = k.event_sk(entry.ts, order)
    head: Item = {
        k.PARTITION_KEY: S(pk),
        k.SORT_KEY: S(head_sk),
        A.TS: N(entry.ts),
        A.EVENT: S(entry.event),
        A.DATA: B(chunks[0]),
    }
    if compressed:
        head[A.COMPRESSION] = S("zlib")
    if entry.event in SHARDED_EVENTS:
        head[A.ON_SUMMARY] = N(1)  # its change comes off the summary's record (changes())
    if len(chunks) > 1:
        head[A.PARTS] = N(len(chunks) - 1)
    parts: list[Item] = [
        {k.PARTITION_KEY: S(pk), k.SORT_KEY: S(k.part_sk(head_sk, i)), A.DATA: B(chunk)}
        for i, chunk in enumerate(chunks[1:], start=1)
    ]
    if ttl is not None:
        for item in (head, *parts):
            item[k.TTL_ATTRIBUTE] = N(ttl)
    return EncodedEntry(head, parts)


def in_commit_order(
    keyed: list[tuple[str, LedgerEntry]], heads: list[Item]
) -> list[tuple[str, LedgerEntry]]:
    """``keyed`` (head sort keys with their entries) ascending by ts, equal ts in commit
    order: by the number of the sequence mark each head was stored with (``q``, among
    ``heads``), a head without one (stored before heads carried it) first, by its order id.
    Every read orders ties so, as a follower and an export do (by the marks): the order id
    in a head's key is when its append began, and appends that overlap (or an import whose
    transaction another import's claims cancelled) commit in another order."""
    rank = {i[k.SORT_KEY]["S"]: int(i[A.SEQUENCE]["N"]) for i in heads if A.SEQUENCE in i}
    return sorted(keyed, key=lambda p: (p[1].ts, rank.get(p[0], -1), append_order(p[0])))


def append_order(head_sk: str) -> str:
    """The order id inside an entry's sort key (``E#<ts:16>#<order>``): sorting by it gives
    the order the entries were appended in."""
    return k.event_order(head_sk)


@dataclass(frozen=True)
class BrokenEntry:
    """A head read without one of its parts: the sort key of the head and which part."""

    head_sk: str
    part: int
    parts: int

    def error(self) -> ValueError:
        return ValueError(f"entry {self.head_sk!r} is missing part {self.part} of {self.parts}")


def assemble_entries(
    name: str, sandbox_id: str, items: list[Item]
) -> tuple[list[tuple[str, LedgerEntry]], list[BrokenEntry]]:
    """The whole entries among ``items`` (sort-key order) with their heads' sort keys, and
    the heads read without all their parts. Parts without a head are skipped (a writer that
    died, or an append whose head is not stored yet)."""
    out: list[tuple[str, LedgerEntry]] = []
    broken: list[BrokenEntry] = []
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if A.TS not in item:  # an orphaned part
            continue
        n_parts = int(item[A.PARTS]["N"]) if A.PARTS in item else 0
        blob = bytes(item[A.DATA]["B"])
        head_sk = item[k.SORT_KEY]["S"]
        missing: BrokenEntry | None = None
        for p in range(1, n_parts + 1):
            part = items[i] if i < len(items) else None
            if part is None or part[k.SORT_KEY]["S"] != k.part_sk(head_sk, p):
                missing = BrokenEntry(head_sk, p, n_parts)
                break
            blob += bytes(part[A.DATA]["B"])
            i += 1
        if missing is not None:
            broken.append(missing)
        else:
            out.append((head_sk, decode_blob(name, sandbox_id, blob, A.COMPRESSION in item)))
    return out, broken


def decode_keyed_entries(
    name: str, sandbox_id: str, items: list[Item], *, complete_only: bool = False
) -> list[tuple[str, LedgerEntry]]:
    """The entries among ``items`` (sort-key order: heads followed by their parts), each with
    its head's sort key; parts without a head are skipped. A head missing a part raises
    ValueError, or is left out with ``complete_only`` (for expired items, which TTL
    deletes one by one)."""
    out, broken = assemble_entries(name, sandbox_id, items)
    if broken and not complete_only:
        raise broken[0].error()
    return out


def decode_blob(name: str, sandbox_id: str, blob: bytes, compressed: bool) -> LedgerEntry:
    """One entry from its stored bytes."""
    body = _json.loads(zlib.decompress(blob) if compressed else blob)
    return LedgerEntry.model_validate({**body, "name": name, "sandboxId": sandbox_id})


def summary_key(pk: str) -> Item:
    return {k.PARTITION_KEY: S(pk), k.SORT_KEY: S(k.SUMMARY_SK)}


def _set_if_absent(attribute: str, value: str) -> str:
    return f"{attribute} = if_not_exists({attribute}, {value})"


_ASSIGNMENT = re.compile(r"(\S+) = (?:if_not_exists\(\1, (:\w+)\)|(:\w+))")


def summary_item(update: dict[str, Any]) -> dict[str, Any]:
    """The item that the summary update ``update`` (of :func:`summary_fold`) creates where
    no summary is stored: its key and each attribute it sets or adds, at its value (an
    ``if_not_exists`` finds nothing; an ``ADD`` adds to nothing)."""
    names = update["ExpressionAttributeNames"]
    values = update["ExpressionAttributeValues"]
    sets, _, adds = update["UpdateExpression"].removeprefix("SET ").partition(" ADD ")
    found = list(_ASSIGNMENT.finditer(sets))
    if ", ".join(m[0] for m in found) != sets:  # only the forms summary_fold writes
        raise ValueError(f"not a summary update this version writes: {sets!r}")
    item = dict(update["Key"])
    for match in found:
        item[names.get(match[1], match[1])] = values[match[2] or match[3]]
    for clause in adds.split(", ") if adds else ():
        name, value = clause.split(" ")
        item[names.get(name, name)] = values[value]
    return item


def summary_sequenced(
    update: dict[str, Any], number: int, incarnation: str | None
) -> dict[str, Any]:
    """The summary update ``update`` also setting the summary's ``sq`` to ``number``: the
    mark number of the last entry of the write that changes the summary, in the same
    transaction.
    Summary writes are serialized on the item and marks are in commit order, so ``sq`` only
    grows within an incarnation (marks TTL removed begin again at 0, in a new one): what
    tells a ``delete_sandbox`` whether an entry stored after its seal (the next session's)
    changed the summary it is about to delete (see :mod:`._delete`).

    With the mark's ``incarnation``, ``lq`` becomes that mark (``<incarnation>#<number>``):
    it names this write, the one whose ``lc`` the summary holds. No two writes have one mark
    (``sq`` alone repeats: marks removed by TTL begin again at 0 in a new incarnation), and a
    write that leaves ``lc`` (a lease, a raise of its TTL, a writer of an earlier version)
    leaves ``lq`` too: what tells the changes feed which records are a write of entries."""
    sets, sep, adds = update["UpdateExpression"].partition(" ADD ")
    names = {**update["ExpressionAttributeNames"], "#sq": A.SUMMARY_SEQUENCE}
    values = {**update["ExpressionAttributeValues"], ":sq": N(number)}
    if incarnation is not None and ":lc" in values:
        sets += ", #lq = :lq"
        names["#lq"] = A.LIFECYCLE_SEQUENCE
        values[":lq"] = S(f"{incarnation}#{number}")
    return {
        **update,
        "UpdateExpression": f"{sets}, #sq = :sq{sep}{adds}",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


SUMMARY_EVENTS = frozenset(
    {LedgerEvent.SandboxCreated, LedgerEvent.SandboxClosed, LedgerEvent.ExecComplete}
)
"""The events that change their session's summary (:func:`summary_fold`)."""


def changes_summary(entry: LedgerEntry) -> bool:
    """Whether storing ``entry`` changes its session's summary."""
    return entry.event in SUMMARY_EVENTS


SHARDED_EVENTS = frozenset({LedgerEvent.SandboxCreated, LedgerEvent.SandboxClosed})
"""The events whose summary update writes a sharded index key (needs the shard count); the
session's lifecycle, which the changes feed reads off the summary (:data:`A.LIFECYCLE`)."""


def lifecycle_event(entry: LedgerEntry) -> dict[str, Any]:
    """One element of a summary's ``lc``: the entry's event and ts."""
    return {"M": {A.EVENT: S(entry.event), A.TS: N(entry.ts)}}


SUMMARY_SLACK_S = 86_400
"""How far past its session's last sequence mark a summary's TTL is set (seconds).

A summary shows while the latest entry that changed it lives (``eex``), and is kept as long
as any entry of its session lives: an ``exec.complete`` or ``sandbox.closed`` after a quiet
spell longer than the retention finds the session's ``startedAt`` and ``execCount`` there,
as the reference keeps them. So DynamoDB's TTL (``expiresAt``) must not delete it before the
session's last mark (whose TTL is the latest of its entries'), nor right after a write (one
of an old ``ts`` expires on arrival, and the next write of its session may be a moment
later). Every write that passes the summary's TTL raises it to the later of its mark's TTL
and its own time, plus this slack, so a session written steadily pays for one raise a day
(:func:`summary_raise`)."""


SUMMARY_RENEW_S = SUMMARY_SLACK_S // 2
"""A write that changes nothing in the summary raises its TTL also where what its writer
knows of it is less than this ahead (seconds): a write whose mark does not pass it (an
entry of an old ``ts``) late in the day the last raise gave leaves the summary at least
this long, not the moment TTL may take it. With a retention of half a day or more, a
session written steadily pays nothing for it (its marks' TTLs pass the summary's first);
under that, its raises come every retention plus half a day instead of every day."""


def summary_expiry(mark_ttl: int, now_s: int) -> int:
    """The summary TTL a write at ``now_s`` sets whose session's last mark (its own) has
    TTL ``mark_ttl``."""
    return max(mark_ttl, now_s) + SUMMARY_SLACK_S


def summary_raise(pk: str, expiry: int) -> dict[str, Any]:
    """The UpdateItem fields that raise a summary's TTL to ``expiry``, for a write that
    changes nothing else in it: only on a stored summary with a TTL (none is stored: the
    write that makes one sets its TTL; one without a TTL is kept for good). A summary of an
    earlier version (its TTL its expiry, no ``eex``) keeps that TTL as its expiry: it is
    kept while its session lives as any other (left as it was, TTL deleted it at its
    expiry under the session's later entries)."""
    return {
        "Key": summary_key(pk),
        "UpdateExpression": "SET #eex = if_not_exists(#eex, #ttl), #ttl = :kept",
        "ConditionExpression": "attribute_exists(#eex) OR attribute_exists(#ttl)",
        "ExpressionAttributeNames": {"#ttl": k.TTL_ATTRIBUTE, "#eex": A.ENTRY_EXPIRES},
        "ExpressionAttributeValues": {":kept": N(expiry)},
    }


def summary_update(
    entry: LedgerEntry, shard_count: int, ttl: int | None = None, kept: int | None = None
) -> dict[str, Any] | None:
    """The UpdateItem fields that fold ``entry`` into its session summary, or None (see
    :func:`summary_fold`)."""
    return summary_fold((entry,), shard_count, ttl, kept)


def summary_fold(
    entries: Sequence[LedgerEntry],
    shard_count: int,
    ttl: int | None = None,
    kept: int | None = None,
    *,
    legacy: bool = False,
) -> dict[str, Any] | None:
    """The one UpdateItem that folds ``entries`` (of one session, in append order) into
    their session summary, or None if none of them changes it.

    With ``ttl`` (the latest TTL among the entries that change the summary), the summary's
    expiry (``eex``) becomes it (the append's condition keeps a later one: a summary shows
    as long as the latest entry that changed it). With ``kept``, its TTL becomes that
    (:func:`summary_expiry`: it is kept as long as any entry of its session); with
    ``legacy`` too (a summary of an earlier version, whose TTL is its expiry), its expiry
    becomes the TTL it held.

    Mirrors :meth:`SessionSummary.apply` with ``if_not_exists`` so that the first created and
    the first closed win in any arrival order, and the status-keyed index partitions end up
    right whichever of the two came first: folded, the first created and the first closed
    of ``entries`` stand for all of them, a closed one sets the status keys (a created
    never replaces a completed status), and the complete execs add up.
    """
    first = entries[0]
    created = next((e for e in entries if e.event == LedgerEvent.SandboxCreated), None)
    closed = next((e for e in entries if e.event == LedgerEvent.SandboxClosed), None)
    execs = sum(1 for e in entries if e.event == LedgerEvent.ExecComplete)
    if created is None and closed is None and not execs:
        return None
    pk = k.session_pk(first.name, first.sandbox_id)
    # Only created and closed write a sharded key (SHARDED_EVENTS).
    shard = k.shard_of(pk, shard_count) if created or closed else 0
    names = {"#nm": A.NAME}
    values: dict[str, Any] = {
        ":nm": S(first.name),
        ":sid": S(first.sandbox_id),
        ":ty": S("session"),
    }
    sets = ["#nm = :nm", f"{A.SANDBOX_ID} = :sid", f"{A.ITEM_TYPE} = :ty"]
    adds: list[str] = []
    if created is not None:
        values |= {
            ":ts": N(created.ts),
            ":g1": S(k.by_name_pk(first.name)),
            ":g3": S(k.all_pk(shard)),
        }
        sets += [
            _set_if_absent(A.STARTED_AT, ":ts"),
            _set_if_absent(k.INDEX_SORT_KEY, ":ts"),
            f"{k.BY_NAME.partition_key} = :g1",
            f"{k.ALL.partition_key} = :g3",
        ]
        if closed is None:
            values |= {
                ":g2": S(k.by_name_status_pk(SandboxStatus.Running, first.name)),
                ":g4": S(k.all_status_pk(SandboxStatus.Running, shard)),
            }
            sets += [
                _set_if_absent(k.BY_NAME_STATUS.partition_key, ":g2"),
                _set_if_absent(k.ALL_STATUS.partition_key, ":g4"),
            ]
    if closed is not None:
        at = ":ts" if created is None else ":tc"
        values |= {
            at: N(closed.ts),
            ":g2": S(k.by_name_status_pk(SandboxStatus.Completed, first.name)),
            ":g4": S(k.all_status_pk(SandboxStatus.Completed, shard)),
        }
        sets += [
            _set_if_absent(A.COMPLETED_AT, at),
            f"{k.BY_NAME_STATUS.partition_key} = :g2",
            f"{k.ALL_STATUS.partition_key} = :g4",
        ]
    if execs:
        values[":execs"] = N(execs)
        adds.append(f"{A.EXEC_COUNT} :execs")
    # What this write changes of the session's lifecycle, in order: the changes feed reads
    # them off this summary's stream record, one item's records being in order on DynamoDB.
    values[":lc"] = {"L": [lifecycle_event(e) for e in entries if e.event in SHARDED_EVENTS]}
    sets.append(f"{A.LIFECYCLE} = :lc")
    if ttl is not None:
        values[":ttl"] = N(ttl)
        sets.append(f"{A.ENTRY_EXPIRES} = :ttl")
    if kept is not None:
        values[":kept"] = N(kept)
        if legacy:  # read before the update: the TTL it held
            sets.append(f"{A.ENTRY_EXPIRES} = {k.TTL_ATTRIBUTE}")
        sets.append(f"{k.TTL_ATTRIBUTE} = :kept")
    expression = "SET " + ", ".join(sets) + (" ADD " + ", ".join(adds) if adds else "")
    return {
        "Key": summary_key(pk),
        "UpdateExpression": expression,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


def decode_details(item: Item) -> SandboxDetails | None:
    """A summary item as SandboxDetails, or None before ``sandbox.created``."""
    if A.STARTED_AT not in item:
        return None
    completed = int(item[A.COMPLETED_AT]["N"]) if A.COMPLETED_AT in item else None
    return SandboxDetails(
        name=item[A.NAME]["S"],
        sandbox_id=item[A.SANDBOX_ID]["S"],
        status=SandboxStatus.Completed if completed is not None else SandboxStatus.Running,
        started_at=int(item[A.STARTED_AT]["N"]),
        completed_at=completed,
        exec_count=int(item[A.EXEC_COUNT]["N"]) if A.EXEC_COUNT in item else 0,
    )


MARKER_TEXT_BYTES = 400_000
"""The most UTF-8 bytes a checkpoint's ``snapshotId`` and ``name`` take together: the
marker copies both, and DynamoDB's 409,600-byte item limit must hold them with the keys
(at most 3,072 bytes) and the other attributes."""


def checkpoint_marker(entry: LedgerEntry, order: str, ttl: int | None = None) -> Item:
    """The small item that indexes a checkpoint entry by time within its session (with its
    entry's TTL, if any).

    Raises:
        InvalidInputError: its ``snapshotId`` and ``name`` together pass
            :data:`MARKER_TEXT_BYTES` (the marker would pass DynamoDB's item limit).
    """
    info = checkpoint_info(entry)
    size = sum(
        len(text.encode("utf-8", "surrogatepass"))
        for text in (info.snapshot_id, info.tag)
        if text is not None
    )
    if size > MARKER_TEXT_BYTES:
        raise InvalidInputError(
            "payload",
            f"a checkpoint's snapshotId and name take {size:,} bytes; DynamoDB keeps them in "
            f"the checkpoint's index item, which holds at most {MARKER_TEXT_BYTES:,}",
        )
    item: Item = {
        k.PARTITION_KEY: S(k.session_pk(entry.name, entry.sandbox_id)),
        k.SORT_KEY: S(k.checkpoint_sk(entry.ts, order)),
        A.TS: N(entry.ts),
        A.REF: S(k.event_sk(entry.ts, order)),
    }
    if info.snapshot_id is not None:
        item[A.SNAPSHOT_ID] = S(info.snapshot_id)
    if info.tag is not None:
        item[A.TAG] = S(info.tag)
    if ttl is not None:
        item[k.TTL_ATTRIBUTE] = N(ttl)
    return item


def decode_checkpoint(item: Item) -> CheckpointInfo:
    return CheckpointInfo(
        snapshot_id=item[A.SNAPSHOT_ID]["S"] if A.SNAPSHOT_ID in item else None,
        tag=item[A.TAG]["S"] if A.TAG in item else None,
        created_at=int(item[A.TS]["N"]),
    )


def environment_item(record: EnvironmentRecord) -> Item:
    return {
        k.PARTITION_KEY: S(k.ENVIRONMENT_PK),
        k.SORT_KEY: S(k.environment_sk(record.name)),
        A.BUILT_AT: N(record.built_at),
        A.RECORD: B(_json.dumps(record.wire())),
    }


def environment_key(name: str) -> Item:
    return {k.PARTITION_KEY: S(k.ENVIRONMENT_PK), k.SORT_KEY: S(k.environment_sk(name))}


def decode_environment(item: Item) -> EnvironmentRecord:
    return EnvironmentRecord.model_validate(_json.loads(bytes(item[A.RECORD]["B"])))
