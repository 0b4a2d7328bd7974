"""The fleet's changes on SQL (``SQLAdapter.changes``): an indexed read of the changes table.

Schema version 6 adds ``ledger_changes``, written by triggers in the transaction of the write
that makes each change (see the dialects' ``schema/0006_changes.sql``), and its pruning rule:
a change is kept 24 hours, and each change written deletes those older, remembering the last
one deleted. A position is ``{"x": transaction, "q": seq}`` (SQLite: ``x`` is 0, ``seq`` is in
commit order; PostgreSQL orders by the writing transaction's id, then ``seq``); one before
the last change pruned raises :class:`~sandbox_ledger.changes.ChangesTrimmedError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandbox_ledger.changes import Change, ChangeBatch, ChangeKind, bad_after, trimmed
from sandbox_ledger.follow import check_counters

if TYPE_CHECKING:
    from sandbox_ledger.sql.connection import Connection
    from sandbox_ledger.sql.statements import Statements

__all__ = ["BATCH", "check_state", "poll"]

BATCH = 500
"""Changes read by one poll at most (a reader far behind catches up in batches)."""


def check_state(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` if it is one :func:`poll` makes: ``{"x": transaction, "q": seq}``."""
    return check_counters(state, {"x", "q"}, bad_after)


async def poll(
    conn: Connection, q: Statements, store: str, state: dict[str, Any] | None
) -> ChangeBatch:
    """The changes after ``state`` (None: from the oldest kept), with their states; a
    change's id is ``store`` and its seq.

    Raises:
        ChangesTrimmedError: changes after ``state`` were pruned.
    """
    at = (0, 0) if state is None else (state["x"], state["q"])
    if state is not None:
        [pruned] = await conn.rows(q.changes_pruned)
        if at < (int(pruned[0]), int(pruned[1])):
            raise trimmed("changes after it were pruned (a change is kept 24 hours)")
    found = await conn.rows(q.changes_after, {"x": at[0], "q": at[1], "limit": BATCH})
    return ChangeBatch(
        [
            (
                {"x": int(x), "q": int(seq)},
                Change(ChangeKind(kind), f"{store}:{seq}", int(ms), name=name, sandbox_id=sid),
            )
            for x, seq, kind, name, sid, ms in found
        ]
    )
