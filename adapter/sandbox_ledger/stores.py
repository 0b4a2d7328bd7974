"""One way to name a store: a URL, opened by :func:`open_store`.

=================================  ==========================================================
``memory://``                      :class:`~sandbox_ledger.MemoryAdapter` (this process only)
``sqlite:///ledger.db``            :class:`~sandbox_ledger.sqlite.SQLiteAdapter`, path relative
                                   to the working folder (three slashes)
``sqlite:////var/data/ledger.db``  the same with an absolute path (four slashes)
``sqlite:///:memory:``             a private in-memory SQLite database
``postgresql://user@host/db``      :class:`~sandbox_ledger.postgres.PostgresAdapter`; also
                                   ``postgres://``; ``?schema=NAME`` picks the schema (default
                                   ``sandbox_ledger``), other parameters go to libpq
``...?retention_days=N``           on a SQLite or PostgreSQL URL: the ledger retention,
                                   recorded in a database without one, else it must agree
``dynamodb://TABLE``               :class:`~sandbox_ledger.dynamodb.DynamoDBAdapter`; region,
                                   endpoint and credentials from the usual AWS settings, or
                                   ``?region=...&endpoint_url=...``; ``&shard_count=N``,
                                   ``&retention_days=N`` (the ledger retention; absent:
                                   keep forever) must agree with the table's descriptor
=================================  ==========================================================
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from sandbox_ledger._redact import redact_url, scrub, split_userinfo
from sandbox_ledger.errors import InvalidInputError

if TYPE_CHECKING:
    from sandbox_ledger.protocol import TransferAdapter

__all__ = ["SCHEMES", "is_ephemeral", "open_store", "parse_store_url"]

SCHEMES = ("memory", "sqlite", "postgresql", "postgres", "dynamodb")


def _bad(url: str, why: str) -> InvalidInputError:
    return InvalidInputError("store", f"{why} in {redact_url(url)!r}")


def parse_store_url(url: str) -> tuple[str, dict[str, Any]]:
    """The store kind (``memory``, ``sqlite``, ``postgresql``, ``dynamodb``) and the
    constructor arguments of its adapter.

    Raises:
        InvalidInputError: (field ``store``) not a store URL, or an unknown scheme or option.
    """
    if not isinstance(url, str) or "://" not in url:
        shown = redact_url(url) if isinstance(url, str) else url  # a libpq DSN, given here
        raise InvalidInputError(
            "store",
            f"{shown!r} is not a store URL (expected one of: memory://, sqlite:///PATH, "
            "postgresql://..., dynamodb://TABLE)",
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme not in SCHEMES:
        raise _bad(url, f"unknown scheme {scheme!r} (expected one of {', '.join(SCHEMES)})")
    if scheme in ("postgresql", "postgres"):
        return _postgres(url)
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    options = _options(url, pairs)
    if scheme == "memory":
        if parts.netloc or parts.path or parts.query:
            raise _bad(url, "memory:// takes no name, path or options")
        return "memory", {}
    if scheme == "sqlite":
        if parts.netloc:
            raise _bad(url, "a SQLite URL has no host (sqlite:///relative.db, sqlite:////abs.db)")
        path = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
        if not path:
            raise _bad(url, "no database path (sqlite:///relative.db, sqlite:////abs.db)")
        unknown = set(options) - {"busy_timeout", "retention_days"}
        if unknown:
            raise _bad(url, f"unknown option(s) {', '.join(sorted(unknown))}")
        kwargs: dict[str, Any] = {"path": path}
        if "busy_timeout" in options:
            kwargs["busy_timeout"] = _number(url, options, "busy_timeout")
        _retention(url, options, kwargs)
        return "sqlite", kwargs
    table = unquote(parts.netloc)
    if not table:
        raise _bad(url, "no table name (dynamodb://TABLE)")
    if parts.path not in ("", "/"):
        raise _bad(url, "a DynamoDB store is a table name only (dynamodb://TABLE)")
    unknown = set(options) - {"region", "endpoint_url", "shard_count", "retention_days"}
    if unknown:
        raise _bad(url, f"unknown option(s) {', '.join(sorted(unknown))}")
    kwargs = {"table_name": table}
    if "region" in options:
        kwargs["region_name"] = options["region"]
    if "endpoint_url" in options:
        kwargs["endpoint_url"] = options["endpoint_url"]
    if "shard_count" in options:
        kwargs["shard_count"] = _whole(url, options, "shard_count")
    _retention(url, options, kwargs)
    return "dynamodb", kwargs


def _options(url: str, pairs: list[tuple[str, str]]) -> dict[str, str]:
    repeated = sorted(key for key, n in Counter(key for key, _ in pairs).items() if n > 1)
    if repeated:
        raise _bad(url, f"option(s) {', '.join(repeated)} given more than once")
    return dict(pairs)


def _postgres(url: str) -> tuple[str, dict[str, Any]]:
    """A PostgreSQL URL split as libpq splits it, not as :func:`urllib.parse.urlsplit` does:
    the userinfo ends at the first '@' before a '/' (a password may hold '#' or '?'
    unencoded; libpq has no fragment), and the query starts at the first '?' after it. The
    DSN handed to the driver is the URL less the options this package takes."""
    userinfo, rest = split_userinfo(url.split("://", 1)[1])
    if userinfo is not None:
        rest = rest[1:]  # the '@'
    location, _, query = rest.partition("?")
    # As libpq reads a URI's query: %XX decoded, '+' is a plus (a password may hold one).
    pairs = [
        (unquote(key), unquote(value))
        for key, _, value in (p.partition("=") for p in query.split("&") if p)
    ]
    options = _options(url, pairs)
    kwargs: dict[str, Any] = {}
    _retention(url, options, kwargs)
    options.pop("retention_days", None)
    schema = options.pop("schema", None)
    # postgresql:// alone is allowed: libpq's defaults (PGHOST, PGDATABASE, ...). libpq
    # decodes %XX but not '+', so a space is written %20.
    query = urlencode(options, quote_via=quote)
    credentials = f"{userinfo}@" if userinfo is not None else ""
    kwargs["dsn"] = f"postgresql://{credentials}{location}" + (f"?{query}" if query else "")
    if schema is not None:
        kwargs["schema"] = schema
    return "postgresql", kwargs


def is_ephemeral(url: str) -> bool:
    """True if the store ``url`` names lives only as long as the process that opens it
    (``memory://``, ``sqlite:///:memory:``): what a command writes there is gone when it ends.

    Raises:
        InvalidInputError: a malformed URL (field ``store``).
    """
    kind, kwargs = parse_store_url(url)
    return kind == "memory" or (kind == "sqlite" and kwargs["path"] == ":memory:")


def _retention(url: str, options: dict[str, str], kwargs: dict[str, Any]) -> None:
    """``retention_days=N``: the ledger retention (absent: the store's, keep forever unless
    the store records one)."""
    if "retention_days" in options:
        days = _whole(url, options, "retention_days")
        if days > timedelta.max.days:
            raise _bad(url, f"option retention_days must be at most {timedelta.max.days}")
        kwargs["retention"] = timedelta(days=days)


def _number(url: str, options: dict[str, str], key: str) -> float:
    """A finite, non-negative number (``inf``, ``nan`` and ``-5`` are refused)."""
    try:
        value = float(options[key])
    except ValueError:
        raise _bad(url, f"option {key} must be a number") from None
    if not math.isfinite(value) or value < 0:
        raise _bad(url, f"option {key} must be a finite number of at least 0")
    return value


def _whole(url: str, options: dict[str, str], key: str) -> int:
    """A positive whole number (``2.9`` is refused, not cut to 2)."""
    value = _number(url, options, key)
    if value != int(value) or value < 1:
        raise _bad(url, f"option {key} must be a whole number of at least 1")
    return int(value)


def open_store(
    url: str, *, read_only: bool = False, connect_timeout: float | None = None
) -> TransferAdapter:
    """The async adapter a store URL names (not connected yet: it connects on first use).

    ``read_only``: a SQLite or PostgreSQL store is opened for reading only: one that does not
    exist raises ``StoreNotFoundError`` on first use instead of being created, and no schema
    migration or retention is applied (DynamoDB and memory reads never create anything).
    ``connect_timeout``: for PostgreSQL, the seconds to wait for a connection (the pool's
    ``timeout``, and libpq's ``connect_timeout`` unless the URL sets one); None: the
    adapter's defaults (30 s, suited to servers). The other stores ignore it.

    Raises:
        InvalidInputError: a malformed URL (field ``store``), naming what is wrong.
    """
    kind, kwargs = parse_store_url(url)
    if kind == "memory":
        from sandbox_ledger.memory import MemoryAdapter

        return MemoryAdapter()
    if kind == "sqlite":
        from sandbox_ledger.sqlite import SQLiteAdapter

        return SQLiteAdapter(**kwargs, read_only=read_only)
    if kind == "postgresql":
        from sandbox_ledger.postgres import PostgresAdapter

        if connect_timeout is not None:
            kwargs["timeout"] = connect_timeout
            if "connect_timeout" not in urlsplit(kwargs["dsn"]).query:
                joiner = "&" if "?" in kwargs["dsn"] else "?"
                kwargs["dsn"] += f"{joiner}connect_timeout={max(2, math.ceil(connect_timeout))}"
        try:
            return PostgresAdapter(**kwargs, read_only=read_only)
        except ValueError as exc:
            raise _bad(url, scrub(str(exc), url)) from exc
    from sandbox_ledger.dynamodb import DynamoDBAdapter

    return DynamoDBAdapter(**kwargs)
