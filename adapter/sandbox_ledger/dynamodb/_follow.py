"""Following a session on DynamoDB (``DynamoDBAdapter.follow``), as operations for
:mod:`sandbox_ledger.sdk.steps`, shared by both twins.

Each poll is one strongly consistent Query on the session's own partition for the entry
items after the last head handed out (``SK BETWEEN <last head>$ AND E$``): it reads only what
is newer by sort key, paged to the end. Entries are handed out in the table's sort-key order,
which is ``read_all``'s (ascending ts, ties in append order), and only once whole: a large
entry's parts are written before its head, so a head that is visible has its parts.

**Settling.** Concurrent appenders commit in any order, so an entry can become visible after
one that sorts later. A follower therefore holds back every entry whose ``ts`` is within
the adapter's ``settle_ms`` (500 ms) of its clock, and stops at the first one held back: an
append that commits within that time after its ``ts`` (the client stamps ``ts`` when it
appends) is never passed by. An append that commits later, or an entry appended with a
``ts`` older than one already handed out (an import, a replay), is not seen by a follower
that has passed its place; see docs/live.md, Limits.

**Liveness.** The first poll of a resumed follower reads the head of its position (absent:
the session was deleted, the follower ends); afterwards every n-th empty poll reads the
session's summary (gone after it was seen, or marked by a running ``delete_sandbox``: the
follower ends; gone before it was ever seen, the head of the last entry handed out is read:
absent, the follower ends).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.follow import Batch, Poll, PollSettings, bad_after
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.sdk.attributes import S
from sandbox_ledger.sdk.paging import query_all
from sandbox_ledger.sdk.steps import Call, Op

if TYPE_CHECKING:
    from sandbox_ledger.models import LedgerEntry

__all__ = ["SessionPoller", "check_state"]

_AFTER_EVERY_ENTRY = k.EVENT_PREFIX[:-1] + "$"  # "E$": sorts after every "E#..." key


def check_state(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` if it is one a poll makes: ``{"sk": the sort key of an entry's head}``."""
    sk = state.get("sk") if set(state) == {"sk"} else None
    if not isinstance(sk, str) or not sk.startswith(k.EVENT_PREFIX) or k.part_head(sk):
        raise bad_after()
    if len(sk.encode()) > k.MAX_SORT_KEY_BYTES or sk.count("#") != 2:
        raise bad_after()
    return state


class SessionPoller:
    """The polls of one follower of one session (it remembers whether the summary was seen)."""

    def __init__(
        self, table: str, name: str, sandbox_id: str, settings: PollSettings, settle_ms: int
    ) -> None:
        self.table, self.name, self.sandbox_id = table, name, sandbox_id
        self.pk = k.session_pk(name, sandbox_id)
        self.settings, self.settle_ms = settings, settle_ms
        self.summary_seen = False
        self.resumed_checked = False

    def poll(self, request: Poll) -> Op[Batch]:
        """One poll: the Query, and the liveness reads when they are due."""
        state = request.state
        if state is not None and not self.resumed_checked:
            self.resumed_checked = True
            if not (yield from self._exists(state["sk"])):
                return Batch([], gone=True)
        lower = k.EVENT_PREFIX if state is None else state["sk"] + "$"
        items = yield from query_all(
            {
                "TableName": self.table,
                "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :lo AND :hi",
                "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY},
                "ExpressionAttributeValues": {
                    ":pk": S(self.pk),
                    ":lo": S(lower),
                    ":hi": S(_AFTER_EVERY_ENTRY),
                },
                "ConsistentRead": True,
            }
        )
        found, due = self._settled(items)
        if found:
            return Batch(found, due=due)
        if request.idle % self.settings.liveness_every == 0:
            return Batch([], gone=(yield from self._deleted(state)), due=due)
        return Batch([], due=due)

    def _settled(
        self, items: list[Any]
    ) -> tuple[list[tuple[dict[str, Any], LedgerEntry]], float | None]:
        """The whole, settled entries among ``items``, in sort-key order, up to the first that
        is not (held back, or a head read without a part: a delete is taking it), and the
        seconds until the first one held back is due."""
        now_s = it.now_s()
        keyed, broken = it.assemble_entries(
            self.name, self.sandbox_id, [i for i in items if it.live(i, now_s)]
        )
        stop = min((b.head_sk for b in broken), default=None)
        horizon = time.time_ns() // 1_000_000 - self.settle_ms if self.settle_ms else None
        out: list[tuple[dict[str, Any], LedgerEntry]] = []
        for head_sk, entry in keyed:
            if stop is not None and head_sk >= stop:
                break
            if horizon is not None and entry.ts > horizon:
                return out, (entry.ts - horizon) / 1000
            out.append(({"sk": head_sk}, entry))
        return out, None

    def _exists(self, head_sk: str) -> Op[bool]:
        found = yield Call(
            "get_item",
            {
                "TableName": self.table,
                "Key": {k.PARTITION_KEY: S(self.pk), k.SORT_KEY: S(head_sk)},
                "ConsistentRead": True,
                "ProjectionExpression": "#pk",
                "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY},
            },
        )
        return "Item" in found

    def _deleted(self, state: dict[str, Any] | None) -> Op[bool]:
        """Whether the summary, once seen, is gone or marked by a running delete; or, the
        summary never seen (deleted before this follower's first look at it), whether the
        last entry it handed out (``state``) is gone."""
        found = yield Call(
            "get_item",
            {
                "TableName": self.table,
                "Key": it.summary_key(self.pk),
                "ConsistentRead": True,
                "ProjectionExpression": "#pk, #dl",
                "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#dl": A.DELETING},
            },
        )
        item = found.get("Item")
        if item is None:
            if self.summary_seen or state is None:
                return self.summary_seen
            return not (yield from self._exists(state["sk"]))
        self.summary_seen = True
        return A.DELETING in item
