"""Handler settings from environment variables, validated once at cold start."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from sandbox_ledger import keys as k
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.resources.policy import DEFAULT_RETAIN_FAILED, DEFAULT_STALE_AFTER, ExpiryPolicy

if TYPE_CHECKING:
    from collections.abc import Mapping

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _table_name(env: Mapping[str, str]) -> str:
    table = env.get("TABLE_NAME", "").strip()
    if not table:
        raise InvalidInputError("TABLE_NAME", "environment variable is required")
    try:
        return k.check_table_name(table)
    except InvalidInputError as exc:
        raise InvalidInputError("TABLE_NAME", str(exc).split(": ", 1)[1]) from exc


def _bus(env: Mapping[str, str]) -> str:
    return env.get("EVENT_BUS_NAME", "default").strip() or "default"


@dataclass(frozen=True)
class StreamSettings:
    """The TTL stream handler's settings: ``TABLE_NAME`` (required: stream records of any
    other table are ignored) and ``EVENT_BUS_NAME`` (default ``default``)."""

    table_name: str
    event_bus_name: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StreamSettings:
        """Parse and validate; raises InvalidInputError naming the variable."""
        return cls(table_name=_table_name(env), event_bus_name=_bus(env))


@dataclass(frozen=True)
class SweeperSettings:
    """The sweeper's settings: ``TABLE_NAME`` (required), ``EVENT_BUS_NAME`` (default ``default``),
    ``STALE_AFTER_SECONDS`` (900), ``RETAIN_FAILED_SECONDS`` (604800; 0 keeps failed records
    forever), ``DRY_RUN`` (false), ``SHARD_COUNT`` (4). ``AWS_ENDPOINT_URL`` is read by the SDK
    itself."""

    table_name: str
    event_bus_name: str
    policy: ExpiryPolicy
    dry_run: bool
    shard_count: int

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SweeperSettings:
        """Parse and validate; raises InvalidInputError naming the variable."""
        table = _table_name(env)
        bus = _bus(env)
        stale = _seconds(env, "STALE_AFTER_SECONDS", DEFAULT_STALE_AFTER, allow_zero=False)
        retain = _seconds(env, "RETAIN_FAILED_SECONDS", DEFAULT_RETAIN_FAILED, allow_zero=True)
        raw_dry = env.get("DRY_RUN", "false").strip().lower()
        if raw_dry not in _TRUE | _FALSE:
            raise InvalidInputError("DRY_RUN", f"must be true or false, got {raw_dry!r}")
        shards = _integer(env, "SHARD_COUNT", k.DEFAULT_SHARD_COUNT)
        try:
            k.check_shard_count(shards)
        except InvalidInputError as exc:
            raise InvalidInputError("SHARD_COUNT", str(exc).split(": ", 1)[1]) from exc
        return cls(
            table_name=table,
            event_bus_name=bus,
            policy=ExpiryPolicy(stale_after=stale, retain_failed=retain),
            dry_run=raw_dry in _TRUE,
            shard_count=shards,
        )


def _integer(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw.strip())
    except ValueError as exc:
        raise InvalidInputError(name, f"must be an integer, got {raw!r}") from exc


def _seconds(
    env: Mapping[str, str], name: str, default: timedelta, *, allow_zero: bool
) -> timedelta:
    value = _integer(env, name, int(default.total_seconds()))
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidInputError(
            name,
            "must be zero or a positive number of seconds"
            if allow_zero
            else "must be a positive number of seconds",
        )
    return timedelta(seconds=value)
