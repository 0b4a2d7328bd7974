"""Following a session on SQL (``SQLAdapter.follow``): an indexed read of what is newer.

A session's entries are followed by ``seq``, the events table's identity, through the index
``ledger_events_session_seq`` (schema version 4): each poll reads the session's row id and the
entries after the last ``seq`` handed out, at most :data:`BATCH` at a time. ``seq`` is taken
in commit order within a session (SQLite: one writer at a time; PostgreSQL: the append takes
it while holding the session row's lock, until it commits), so a follower that has handed
out ``seq`` n never meets a smaller one later: nothing is skipped however many write at once.

A position holds the session row's id and the last ``seq``: a session deleted (its row gone,
or a new row of the same name and sandboxId) ends the follower. Neither dialect hands a row id
out again (PostgreSQL's identity; SQLite's ``AUTOINCREMENT`` from schema version 9), so a
position never resumes inside another session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandbox_ledger.follow import Batch, bad_after, check_counters
from sandbox_ledger.sql import retention as ret
from sandbox_ledger.sql import rows

if TYPE_CHECKING:
    from sandbox_ledger.sql.connection import Connection
    from sandbox_ledger.sql.statements import Statements

__all__ = ["BATCH", "FollowStatements", "check_state", "poll"]

BATCH = 500
"""Entries read by one poll at most (a follower far behind catches up in batches)."""

_COLUMNS = f"e.seq, {rows.entry_columns('e')}"


class FollowStatements:
    """The two reads of a poll, in one dialect's spelling."""

    def __init__(self, q: Statements) -> None:
        p = q.param
        self.session = q.session_id
        self.after = f"""
SELECT {_COLUMNS}
FROM {q.table("ledger_events")} AS e
WHERE e.session_id = {p("session_id")} AND e.seq > {p("after")}
  AND {ret.live("e.expires_at", p("now"))}
ORDER BY e.seq
LIMIT {p("limit")}
"""


def check_state(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` if it is one :func:`poll` makes: ``{"s": session row id, "q": seq}``."""
    return check_counters(state, {"s", "q"}, bad_after)


async def poll(
    conn: Connection,
    statements: FollowStatements,
    key: dict[str, Any],
    state: dict[str, Any] | None,
) -> Batch:
    """What follows ``state`` in the session ``key`` (its name, sandbox_id and now)."""
    name, sandbox_id = key["name"], key["sandbox_id"]
    found = await conn.rows(statements.session, key)
    if not found or (state is not None and int(found[0][0]) != state["s"]):
        # Deleted (or begun again: another row); not begun yet when nothing was handed out.
        return Batch([], gone=state is not None)
    session = int(found[0][0])
    after = -1 if state is None else state["q"]
    params = {"session_id": session, "after": after, "now": key["now"], "limit": BATCH}
    out = [
        ({"s": session, "q": int(r[0])}, rows.decode_entry(name, sandbox_id, *r[1:]))
        for r in await conn.rows(statements.after, params)
    ]
    return Batch(out)
