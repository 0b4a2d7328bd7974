"""Why a PostgreSQL connection failed, in words: the pool's own error only says it timed out
("pool initialization incomplete after 3.0 sec") whatever the cause."""

from __future__ import annotations

import asyncio
import re

from sandbox_ledger._redact import redact_url, scrub
from sandbox_ledger.errors import StorageError

# Why a connection failed, by libpq's message (psycopg gives a connection failure no
# SQLSTATE until the server answers): the cause first, libpq's own words after it.
_CAUSES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Connection refused", re.I), "connection refused"),
    (
        re.compile(
            r"failed to resolve host|could not translate host name|"
            r"Name or service not known|nodename nor servname",
            re.I,
        ),
        "unknown host",
    ),
    (
        re.compile(r"authentication failed|password|pg_hba\.conf|role \S+ does not exist", re.I),
        "authentication failed",
    ),
    (re.compile(r"database \S+ does not exist", re.I), "database missing"),
)
_CAUSE_BY_SQLSTATE = {
    "28P01": "authentication failed",
    "28000": "authentication failed",
    "3D000": "database missing",
}


def describe_connect_error(exc: BaseException) -> str:
    """One line naming why a connection failed (connection refused, unknown host,
    authentication failed, database missing) followed by libpq's own words (not scrubbed)."""
    detail = " ".join(str(exc).split())
    detail = re.sub(r"^connection failed: ", "", detail)
    cause = _CAUSE_BY_SQLSTATE.get(getattr(exc, "sqlstate", None) or "")
    if cause is None:
        cause = next((name for pattern, name in _CAUSES if pattern.search(detail)), None)
    return f"{cause} ({detail})" if cause else detail


async def connect_failure(dsn: str, timeout: float) -> tuple[str | None, str | None]:
    """Why ``dsn`` cannot be connected to, by one direct attempt, and its SQLSTATE; ``(None,
    None)`` if the attempt succeeds (the failure was transient)."""
    import psycopg

    try:
        conn = await asyncio.wait_for(
            psycopg.AsyncConnection.connect(dsn, autocommit=True), max(timeout, 0.1)
        )
    except TimeoutError:
        return f"no answer from the server within {timeout:g} sec", None
    except psycopg.Error as exc:
        return describe_connect_error(exc), exc.sqlstate
    except (OSError, ValueError) as exc:
        return describe_connect_error(exc), None
    await conn.close()
    return None, None


async def connection_error(dsn: str, timeout: float, pool_error: BaseException) -> StorageError:
    """The error of a pool that could not open on ``dsn``: its cause, by one direct attempt
    (the pool's own error when that attempt succeeds), passwords masked."""
    cause, code = await connect_failure(dsn, timeout)
    why = scrub(cause or str(pool_error), dsn)
    return StorageError(f"postgres: cannot connect to {redact_url(dsn)}: {why}", code=code)
