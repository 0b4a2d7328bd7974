"""Ledger retention on the SQL adapters: the SQL fragments and checks both dialects share.

The retention is recorded in the database (table ``ledger_settings``, one row): NULL keeps
forever. Appends compute every expiry in the statement itself from that row, so all writers
of one database use its retention whatever they were given; an adapter given a retention
records it on ``connect()`` when the database has none yet, and is refused with
:class:`~sandbox_ledger.deployment.DeploymentMismatchError` when the database has another.
Expiries are Unix seconds: the entry's own ``ts`` rounded down to seconds plus the retention.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sandbox_ledger.deployment import TableDescriptor, check_ledger_retention
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.models import LedgerEvent

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from sandbox_ledger.sql.connection import Connection
    from sandbox_ledger.sql.statements import Statements

__all__ = [
    "SUMMARY_EVENTS",
    "agree",
    "check_batch_size",
    "later_summary_expiry",
    "latest_expiry",
    "live",
    "log_recorded",
    "purge_in_batches",
    "retention_of",
    "settle",
]

log = logging.getLogger("sandbox_ledger.schema")

SUMMARY_EVENTS = frozenset(
    {
        LedgerEvent.SandboxCreated.value,
        LedgerEvent.SandboxClosed.value,
        LedgerEvent.ExecComplete.value,
    }
)
"""The events that change a session's summary, and so set the summary's expiry."""


def retention_of(settings: str) -> str:
    """The database's retention in seconds (NULL: keep forever), as a scalar subquery."""
    return f"(SELECT retention_seconds FROM {settings} WHERE id = 1)"


EVERYTHING = -(2**62)
"""A time (Unix s) before every expiry: reading "as of" it shows every stored row."""


def live(column: str, param: str) -> str:
    """The condition that ``column`` (an expiry, NULL: never) is still in the future at the
    time ``param`` (Unix s): what every read adds, so expired rows are hidden until purged."""
    return f"({column} IS NULL OR {column} > {param})"


def latest_expiry(current: str, new: str) -> str:
    """The later of two expiries, NULL (never) winning over any time."""
    return (
        f"CASE WHEN {current} IS NULL OR {new} IS NULL THEN NULL "
        f"WHEN {current} > {new} THEN {current} ELSE {new} END"
    )


def later_summary_expiry(current: str, new: str) -> str:
    """The later of a summary's stored expiry and a new one, a stored NULL (none set yet)
    taking the new one: an append out of ts order never moves the summary's expiry back."""
    return f"CASE WHEN {current} IS NULL OR {new} > {current} THEN {new} ELSE {current} END"


def agree(stored: int | None, explicit: int | None, where: str) -> None:
    """An adapter's explicit retention (seconds) must be the database's; None follows it.

    Raises:
        DeploymentMismatchError: both are set and differ (the message names both).
    """
    if explicit is None or stored is None:
        return
    check_ledger_retention(TableDescriptor(ledger_retention_seconds=stored), explicit, where)


async def settle(
    conn: Connection, statements: Statements, explicit: int | None, where: str
) -> None:
    """Agree on the retention on ``connect()``: a database without one records ``explicit``.

    Raises:
        DeploymentMismatchError: the database records another retention than ``explicit``.
    """
    stored = await _stored(conn, statements)
    if stored is None and explicit is not None:
        # Only a database without a retention takes one (one statement: atomic; a
        # concurrent connect may record another first, which agree() then reports).
        if await conn.count(statements.record_retention, {"seconds": explicit}):
            log_recorded(where, explicit)
        stored = await _stored(conn, statements)
    agree(stored, explicit, where)


async def check(conn: Connection, statements: Statements, explicit: int | None, where: str) -> None:
    """What a read-only ``connect()`` does instead of :func:`settle`: agree, record nothing.

    Raises:
        DeploymentMismatchError: the database records another retention than ``explicit``.
    """
    agree(await _stored(conn, statements), explicit, where)


async def _stored(conn: Connection, statements: Statements) -> int | None:
    found = await conn.rows(statements.retention)
    return None if not found or found[0][0] is None else int(found[0][0])


def log_recorded(where: str, seconds: int) -> None:
    """Say that ``connect()`` recorded a retention in a database that had none."""
    log.warning(
        "recorded ledger retention of %d s at %s: entries appended from now on expire "
        "(those appended before keep forever)",
        seconds,
        where,
    )


MAX_BATCH_SIZE = 1_000_000


def check_batch_size(batch_size: object) -> int:
    """A purge's batch size: a positive integer, at most :data:`MAX_BATCH_SIZE` (a batch is
    one short transaction: a bigger one would hold the lock as long as an unbatched purge).

    Raises:
        InvalidInputError: naming ``batch_size``.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError("batch_size", f"must be a positive integer, got {batch_size!r}")
    if batch_size > MAX_BATCH_SIZE:
        raise InvalidInputError(
            "batch_size", f"must be at most {MAX_BATCH_SIZE:,}, got {batch_size:,}"
        )
    return batch_size


async def purge_in_batches(
    batch: Callable[[str], Awaitable[int]], statements: tuple[str, ...], size: int
) -> int:
    """Run each purge statement (one batch of at most ``size`` rows: ``batch`` runs it in
    its own transaction and returns the rows it deleted) until a batch comes back short;
    the rows deleted in all."""
    purged = 0
    for sql in statements:
        while True:
            deleted = await batch(sql)
            purged += deleted
            if deleted < size:
                break
    return purged
