"""Handler settings from environment variables, validated once at cold start."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sandbox_ledger import keys as k
from sandbox_ledger.deployment import DeploymentMismatchError
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.resources.policy import DEFAULT_RETAIN_FAILED, DEFAULT_STALE_AFTER, ExpiryPolicy

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sandbox_ledger.deployment import TableDescriptor

_T = TypeVar("_T")

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


_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class StreamSettings:
    """The TTL stream handler's settings: ``TABLE_NAME`` (required: stream records of any
    other table are ignored), ``EVENT_BUS_NAME`` (default ``default``) and
    ``UNREPORTED_BUCKET`` (the S3 bucket that keeps TTL removals the handler could not
    publish; unset, such a removal is a batch item failure, left to Lambda's retries)."""

    table_name: str
    event_bus_name: str
    unreported_bucket: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StreamSettings:
        """Parse and validate; raises InvalidInputError naming the variable."""
        bucket = env.get("UNREPORTED_BUCKET", "").strip() or None
        if bucket is not None and not _BUCKET.match(bucket):
            raise InvalidInputError("UNREPORTED_BUCKET", f"not an S3 bucket name: {bucket!r}")
        return cls(table_name=_table_name(env), event_bus_name=_bus(env), unreported_bucket=bucket)


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
    shard_count: int | None
    """None when ``SHARD_COUNT`` is unset: the table's descriptor says."""
    explicit: frozenset[str] = frozenset()
    """Which of ``EVENT_BUS_NAME``, ``STALE_AFTER_SECONDS``, ``RETAIN_FAILED_SECONDS`` were
    set: those must agree with the table's descriptor; the others default to it."""

    def plan(self, descriptor: TableDescriptor | None) -> SweepPlan:
        """The bus and windows to sweep with, given the table's descriptor (which wins; an
        explicit setting that disagrees raises DeploymentMismatchError)."""

        def given(name: str, value: _T) -> _T | None:
            return value if name in self.explicit else None

        return resolve_sweep(
            descriptor,
            self.table_name,
            event_bus_name=given("EVENT_BUS_NAME", self.event_bus_name),
            stale_after_seconds=given(
                "STALE_AFTER_SECONDS", int(self.policy.stale_after.total_seconds())
            ),
            retain_failed_seconds=given(
                "RETAIN_FAILED_SECONDS", int(self.policy.retain_failed.total_seconds())
            ),
        )

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
        shards: int | None = None
        if env.get("SHARD_COUNT", "").strip():
            shards = _integer(env, "SHARD_COUNT", k.DEFAULT_SHARD_COUNT)
            try:
                k.check_shard_count(shards)
            except InvalidInputError as exc:
                raise InvalidInputError("SHARD_COUNT", str(exc).split(": ", 1)[1]) from exc
        named = ("EVENT_BUS_NAME", "STALE_AFTER_SECONDS", "RETAIN_FAILED_SECONDS")
        return cls(
            table_name=table,
            event_bus_name=bus,
            policy=ExpiryPolicy(stale_after=stale, retain_failed=retain),
            dry_run=raw_dry in _TRUE,
            shard_count=shards,
            explicit=frozenset(n for n in named if env.get(n, "").strip()),
        )


@dataclass(frozen=True)
class SweepPlan:
    """Where a sweep publishes and which windows it applies."""

    event_bus_name: str
    policy: ExpiryPolicy


def resolve_sweep(
    descriptor: TableDescriptor | None,
    table: str,
    *,
    event_bus_name: str | None = None,
    stale_after_seconds: int | None = None,
    retain_failed_seconds: int | None = None,
    require_deployment: bool = False,
    names: Mapping[str, str] | None = None,
) -> SweepPlan:
    """The bus and windows of a sweep of ``table``: the descriptor's; an explicit value must
    agree with it (DeploymentMismatchError names both). What the descriptor does not say
    comes from the explicit value, else the default, unless ``require_deployment`` (the
    operator's CLI), which refuses to guess (InvalidInputError naming every missing setting
    at once). ``names`` gives the settings the caller's own names (the CLI's flags) in
    messages."""
    defaults: dict[str, Any] = {
        "event_bus_name": "default",
        "stale_after_seconds": int(DEFAULT_STALE_AFTER.total_seconds()),
        "retain_failed_seconds": int(DEFAULT_RETAIN_FAILED.total_seconds()),
    }
    explicit = {
        "event_bus_name": event_bus_name,
        "stale_after_seconds": stale_after_seconds,
        "retain_failed_seconds": retain_failed_seconds,
    }
    shown = {name: (names or {}).get(name, name) for name in defaults}
    chosen: dict[str, Any] = {}
    missing: list[str] = []
    for name, default in defaults.items():
        described = getattr(descriptor, name) if descriptor is not None else None
        given = explicit[name]
        if described is not None and given is not None and described != given:
            raise DeploymentMismatchError(shown[name], given, described, table)
        value = described if described is not None else given
        if value is None:
            missing.append(shown[name])
            value = default
        chosen[name] = value
    if missing and require_deployment:
        raise InvalidInputError(
            missing[0] if len(missing) == 1 else ", ".join(missing),
            f"table {table} does not record its resource sweep's settings (it was made "
            f"neither by the stack nor by `table create`): give {' and '.join(missing)}",
        )
    return SweepPlan(
        event_bus_name=chosen["event_bus_name"],
        policy=ExpiryPolicy(
            stale_after=timedelta(seconds=chosen["stale_after_seconds"]),
            retain_failed=timedelta(seconds=chosen["retain_failed_seconds"]),
        ),
    )


def resolve_policy(
    descriptor: TableDescriptor | None, explicit: ExpiryPolicy | None, table: str = "?"
) -> ExpiryPolicy:
    """The expiry policy a writer must follow (its TTLs honour it): the descriptor's windows;
    an explicit policy must agree with them (DeploymentMismatchError names both). What the
    descriptor does not say comes from ``explicit``, else the defaults."""
    base = explicit or ExpiryPolicy()
    chosen: dict[str, timedelta] = {}
    for name, field in (
        ("stale_after_seconds", "stale_after"),
        ("retain_failed_seconds", "retain_failed"),
    ):
        described = getattr(descriptor, name) if descriptor is not None else None
        given: timedelta = getattr(base, field)
        if described is None:
            chosen[field] = given
            continue
        if explicit is not None and given != timedelta(seconds=described):
            raise DeploymentMismatchError(name, given.total_seconds(), described, table)
        chosen[field] = timedelta(seconds=described)
    return ExpiryPolicy(**chosen)


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
