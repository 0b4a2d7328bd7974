"""A session's loose items, as operations: the items of its partition that its entries do
not rebuild (its summary while a delete marks it or once its entries are gone, and its marks
without an entry: a delete's seal, the spent seal and mark 0 a delete leaves). What the
embedded server's saves keep as stored so that a restart changes nothing a client relies on
(:mod:`sandbox_ledger.local.loose`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb import _ops
from sandbox_ledger.errors import StorageError
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.sdk.attributes import S
from sandbox_ledger.sdk.batching import batch_get, batch_write
from sandbox_ledger.sdk.paging import query_all, scan_round
from sandbox_ledger.sdk.steps import Call

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from sandbox_ledger.sdk.attributes import Item
    from sandbox_ledger.sdk.paging import ScanStarts
    from sandbox_ledger.sdk.steps import Op

__all__ = ["ChangedBehindRead", "read_loose", "restore_loose", "sessions_with_marks"]

Key = tuple[str, str]


class ChangedBehindRead(StorageError):
    """A session's entries, as a save read them, are no longer stored when it reads the
    session's loose items (a delete took them meanwhile): the two reads do not hold the
    session at one moment, and the save reads it again."""


def read_loose(
    table: str, sessions: Mapping[Key, Sequence[tuple[int, str]]]
) -> Op[dict[Key, list[Item]]]:
    """Each session's loose items (an empty list: none), given the marks (number and
    incarnation) of the entries a save read of it (none: it has no entry). One BatchGetItem
    of the summaries per 100 sessions with entries; for a session with loose items (no
    entry, a summary a delete marked or none, or a first mark other than 0), a Query of its
    marks and a read of its summary.

    Raises:
        ChangedBehindRead: an entry read has its mark no longer stored (a delete moved on
            between the save's read of the entries and this one), or an entry not read has
            its mark and head stored (an append behind the read): read both again.
    """
    with_entries = [key for key, marks in sessions.items() if marks]
    summaries = yield from batch_get(
        table, [it.summary_key(k.session_pk(*key)) for key in with_entries]
    )
    summed = {k.parse_session_pk(item[k.PARTITION_KEY]["S"]) for item in summaries}
    marked = {
        k.parse_session_pk(item[k.PARTITION_KEY]["S"]) for item in summaries if A.DELETING in item
    }
    now = it.now_s()
    found: dict[Key, list[Item]] = {}
    for key, entry_marks in sessions.items():
        numbers = {number for number, _ in entry_marks}
        if numbers and key in summed and key not in marked and min(numbers) == 0:
            found[key] = []
            continue
        pk = k.session_pk(*key)
        marks = yield from query_all(_ops._prefix_query(table, pk, k.SEQUENCE_PREFIX))
        stored = {
            (n, item.get(A.INCARNATION, {}).get("S", ""))
            for item in marks
            if A.REF in item and (n := k.sequence_number(item[k.SORT_KEY]["S"])) is not None
        }
        read = set(entry_marks)
        # A live mark of an entry not read whose head is stored: an append behind the read
        # (its mark, and the summary that counts it, are not loose: the entry's, to be saved
        # with it). A mark whose head is gone is a delete's to take: loose, as stored.
        unread = [
            {k.PARTITION_KEY: S(pk), k.SORT_KEY: item[A.REF]}
            for item in marks
            if A.REF in item
            and it.live(item, now)
            and (k.sequence_number(item[k.SORT_KEY]["S"]), item.get(A.INCARNATION, {}).get("S", ""))
            not in read
        ]
        heads = (yield from batch_get(table, unread)) if unread else []
        behind = {head[k.SORT_KEY]["S"] for head in heads if it.live(head, now)}
        # The summary kept (no entry read, or a delete's lease) counts what was appended
        # behind the read: read again. Else the marks behind are left to the next save.
        if not read <= stored or (behind and (not numbers or key in marked)):
            name, sandbox_id = key
            raise ChangedBehindRead(f"save's read of {name}/{sandbox_id}: changed behind it")
        # As stored, past their TTL or not (TTL deletes them, in the stream).
        loose = [
            item
            for item in marks
            if k.sequence_number(item[k.SORT_KEY]["S"]) not in numbers
            and item.get(A.REF, {}).get("S") not in behind
        ]
        if not numbers or key in marked:
            response = yield Call(
                "get_item", {"TableName": table, "Key": it.summary_key(pk), "ConsistentRead": True}
            )
            summary = response.get("Item")
            if summary is not None:
                loose.insert(0, summary)
        found[key] = loose
    return found


def sessions_with_marks(table: str) -> Op[list[Key]]:
    """Every session whose partition holds a summary or a mark: a Scan of the whole table, for
    the embedded server's save that reads everything again (never a hot path); those without
    an entry among them may hold loose items."""
    base = {
        "TableName": table,
        "ConsistentRead": True,
        "ProjectionExpression": "#pk",
        "FilterExpression": "begins_with(#pk, :s) AND (#sk = :summary OR begins_with(#sk, :q))",
        "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY},
        "ExpressionAttributeValues": {
            ":s": S(k.SESSION_PREFIX),
            ":summary": S(k.SUMMARY_SK),
            ":q": S(k.SEQUENCE_PREFIX),
        },
        "TotalSegments": 1,
    }
    starts: ScanStarts = {0: None}
    keys: set[Key] = set()
    while starts:
        items, starts = yield from scan_round(base, starts)
        keys.update(k.parse_session_pk(item[k.PARTITION_KEY]["S"]) for item in items)
    return sorted(keys)


def restore_loose(
    table: str,
    loose: Mapping[Key, Sequence[Item]],
    loaded: Collection[Key] = (),
    *,
    renumbered: bool = False,
) -> Op[None]:
    """Put each session's loose items as they were stored (over a summary a load rebuilt;
    past their TTL or not: TTL deletes them), except, in the sessions ``loaded`` (their
    entries just loaded), over an entry's mark the load put itself: a mark numbered for an
    entry wins (a file that names no sequence for a session loads its marks from 0).
    ``renumbered``: the load numbered the marks of the sessions ``loaded`` itself, from 0 in
    an incarnation of each one's own (the import, not the sequence FILE names): their loose
    marks, numbered in that sequence, are not put (a spent seal among the new marks ended
    a follower there, and the next appends numbered past it in the seal's incarnation)."""
    puts = []
    for key in sorted(loose):
        taken: set[str] = set()
        if key in loaded and renumbered:
            puts += [
                {"PutRequest": {"Item": dict(item)}}
                for item in loose[key]
                if item[k.SORT_KEY]["S"] == k.SUMMARY_SK
            ]
            continue
        below: int | None = None
        if key in loaded:
            keys = {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY, "#ref": A.REF}
            marks = yield from query_all(
                _ops._prefix_query(
                    table,
                    k.session_pk(*key),
                    k.SEQUENCE_PREFIX,
                    ProjectionExpression="#sk, #ref",
                    ExpressionAttributeNames=keys,
                )
            )
            # An entry's mark the load put wins; a mark it put for no entry (the spent mark 0
            # it puts below a sequence that starts past it, in an incarnation drawn anew) is
            # the one stored before the restart.
            taken = {item[k.SORT_KEY]["S"] for item in marks if A.REF in item}
            held = any(
                item[k.SORT_KEY]["S"] == k.SUMMARY_SK and A.DELETING in item for item in loose[key]
            )
            if not held and taken:
                # Unless a delete holds the session (it takes every mark), a loose mark is
                # put below the loaded entries' only: a save cut short (kill -9) between the
                # loose items of a session begun again and its entries (or their sequence)
                # loads other entries (or numbers them anew), and a spent seal among their
                # marks ended a follower there.
                below = min(n for sk in taken if (n := k.sequence_number(sk)) is not None)
        puts += [
            {"PutRequest": {"Item": dict(item)}}
            for item in loose[key]
            if item[k.SORT_KEY]["S"] not in taken
            and (
                below is None
                or item[k.SORT_KEY]["S"] == k.SUMMARY_SK
                or (k.sequence_number(item[k.SORT_KEY]["S"]) or 0) < below
            )
        ]
    if puts:
        yield from batch_write(table, puts)
