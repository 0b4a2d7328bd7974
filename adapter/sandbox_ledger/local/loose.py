"""A session's loose items: what its entries do not rebuild, kept by ``local --data`` as
they are stored.

A save keeps a session as its entries (export lines) with their sequence and order ids
(``localSequences``); a load rebuilds from them every item the library derives: heads,
parts, markers, claims, marks, the summary. A delete of the session makes items no entry
rebuilds (:mod:`sandbox_ledger.dynamodb.loose_items`), and a restart that lost them changed
the table under its clients:

- **the summary while a delete marks it** (its lease, ``deleting`` and ``deletingToken``): a
  delete cut by a restart went on without its lease; its last step, conditioned on the
  lease, removed nothing, so the session stayed though the delete answered, and no
  ``session.deleted`` came;
- **the summary of a session whose entries the delete has taken** and whose summary it has
  not yet: gone at the restart, without the stream record of its removal;
- **a mark with no entry**: the delete's seal while it runs, and the spent seal and mark 0 it
  leaves so that no key of a deleted session is put again (a session begun again numbers
  its marks after them).

So each save also keeps, for each session it reads whose summary a delete marked, that has
no entry, or whose first mark is not 0, those items as stored: one line ``{"kind":
"localItems", "name": ..., "sandboxId": ..., "items": [item, ...]}`` (items in DynamoDB's
JSON, binary values in base64, as resource record lines keep theirs; ``[]``: none any more,
replacing an earlier line). A load puts them back after the entries, over the summary it
rebuilt. ``import`` skips the line, as it skips ``localSequences``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sandbox_ledger import keys as k
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.transfer import LOCAL_ITEMS_KIND

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping, Sequence

    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.models import LedgerEntry
    from sandbox_ledger.sdk.attributes import Item

__all__ = ["KIND", "loose_items", "loose_line", "read_loose_line", "restore", "sessions_with_marks"]

KIND = LOCAL_ITEMS_KIND

Key = tuple[str, str]
Marked = list[tuple["LedgerEntry", "tuple[int, str] | None", str]]


def loose_items(
    ledger: SyncDynamoDBAdapter, sessions: Mapping[Key, Marked]
) -> dict[Key, list[Item]]:
    """Each session's loose items (an empty list: none), given its entries as the save read
    them (``read_sessions_marked``)."""
    from sandbox_ledger.dynamodb.loose_items import read_loose

    marks = {
        key: [mark for _, mark, _ in marked if mark is not None] for key, marked in sessions.items()
    }
    return ledger.run(read_loose(ledger.table_name, marks))


def sessions_with_marks(ledger: SyncDynamoDBAdapter) -> list[Key]:
    """Every session whose partition holds a summary or a mark (a Scan of the table)."""
    from sandbox_ledger.dynamodb import loose_items as ops

    return ledger.run(ops.sessions_with_marks(ledger.table_name))


def restore(
    ledger: SyncDynamoDBAdapter,
    loose: Mapping[Key, Sequence[Item]],
    loaded: Collection[Key],
    *,
    renumbered: bool = False,
) -> None:
    """Put each session's loose items back as they were stored (after the entries' load,
    ``loaded`` the sessions it stored: over the summary it rebuilt, never over an entry's
    mark it put; ``renumbered``, the import stored them, numbering their marks anew: none of
    their loose marks), past their TTL or not (TTL deletes them)."""
    from sandbox_ledger.dynamodb.loose_items import restore_loose

    ledger.run(restore_loose(ledger.table_name, loose, loaded, renumbered=renumbered))


def loose_line(key: Key, items: Sequence[Item]) -> str:
    """The line that keeps a session's loose items (with its newline); ``[]``: none."""
    from sandbox_ledger.local.persist import _json_item

    value = {
        "kind": KIND,
        "name": key[0],
        "sandboxId": key[1],
        "items": [_json_item(item) for item in items],
    }
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


def read_loose_line(value: dict[str, Any], where: str) -> tuple[Key, list[Item]]:
    """A ``localItems`` line read back: its session and items, each a summary or a mark of
    that session's partition.

    Raises:
        InvalidInputError: anything else, naming ``where``.
    """
    from sandbox_ledger.local.persist import _item_value

    name, sandbox_id, items = value.get("name"), value.get("sandboxId"), value.get("items")
    if (
        set(value) != {"kind", "name", "sandboxId", "items"}
        or not isinstance(name, str)
        or not isinstance(sandbox_id, str)
        or not isinstance(items, list)
    ):
        raise InvalidInputError(where, f"{KIND}: not a session's name, sandboxId and items")
    try:
        pk = k.session_pk(name, sandbox_id)
    except ValueError as exc:
        raise InvalidInputError(where, f"{KIND}: {exc}") from exc
    read: list[Item] = []
    keys: set[str] = set()
    for item in items:
        try:
            if not isinstance(item, dict):
                raise ValueError("not an item")
            typed = {str(attr): _item_value(v) for attr, v in item.items()}
        except (ValueError, TypeError) as exc:
            raise InvalidInputError(where, f"{KIND}: {exc}") from exc
        sk = typed.get(k.SORT_KEY, {}).get("S")
        if typed.get(k.PARTITION_KEY) != {"S": pk} or not isinstance(sk, str):
            raise InvalidInputError(
                where, f"{KIND}: an item outside the session {name}/{sandbox_id}"
            )
        if sk != k.SUMMARY_SK and k.sequence_number(sk) is None:
            raise InvalidInputError(where, f"{KIND}: {sk!r} is no summary or mark")
        if sk in keys:
            raise InvalidInputError(where, f"{KIND}: {sk!r} twice")
        keys.add(sk)
        read.append(typed)
    return (name, sandbox_id), read
