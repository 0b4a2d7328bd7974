"""The deployment's settings: typed props validated when built, or parsed from CDK context,
with errors that name the key (and, for an unknown one, the nearest known key)."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sandbox_ledger import keys as k

_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_KMS_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")

APP_CONTEXT_KEYS = ("stack_name", "region", "account", "local", "tags")
"""Context keys the repository's app reads itself (not settings of the deployment)."""

_F = TypeVar("_F", bound=Callable[..., Any])
_C = TypeVar("_C", bound=type)


class ConfigError(ValueError):
    """A setting the deployment cannot use; the message names the key."""


def refuse_unknown(given: Iterable[str], known: Iterable[str], what: str) -> None:
    """Raise :class:`ConfigError` for the first of ``given`` not in ``known``, naming it and
    the nearest known key."""
    known = sorted(known)
    for key in given:
        if key not in known:
            near = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {near[0]}?" if near else f"known: {', '.join(known)}"
            raise ConfigError(f"{key}: not a known {what} ({hint})")


def named_keywords(what: str) -> Callable[[_F], _F]:
    """A decorator: the function refuses an unknown keyword argument with a
    :class:`ConfigError` naming the nearest known one (Python's TypeError names none)."""

    def decorate(function: _F) -> _F:
        accepted = [
            p.name
            for p in inspect.signature(function).parameters.values()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"
        ]

        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            refuse_unknown(kwargs, accepted, what)
            return function(*args, **kwargs)

        return checked  # type: ignore[return-value]

    return decorate


def _with_named_fields(cls: _C) -> _C:
    cls.__init__ = named_keywords("prop")(cls.__init__)  # type: ignore[misc]
    return cls


@_with_named_fields
@dataclass(frozen=True, kw_only=True)
class LedgerConfig:
    """Every setting of the deployment: the props of ``SandboxLedger`` and ``LedgerTable``,
    and the repository app's context keys (``cdk.json`` or ``cdk deploy -c key=value``).

    Raises:
        ConfigError: a value out of range, of the wrong type, or an unknown key, named.
    """

    table_name: str | None = None
    """Physical table name; None lets CloudFormation name it."""
    stale_after_seconds: int = 900
    """A live-phase resource record without a heartbeat for this long expires."""
    retain_failed_seconds: int = 7 * 86400
    """Failed-phase records are kept this long (0: forever)."""
    sweep_rate_minutes: int = 5
    """The sweeper's schedule."""
    shard_count: int = k.DEFAULT_SHARD_COUNT
    """List index shards, written to the descriptor; fixed once deployed."""
    replica_regions: tuple[str, ...] = ()
    """Replica Regions: a global table (the stack needs a region)."""
    multi_region_consistency: str = "eventual"
    """Only ``eventual``: MRSC tables have no transactions and no TTL."""
    kms: str = "aws-owned"
    """``aws-owned`` (default), ``create`` (a new customer-managed key) or a key ARN."""
    billing: str = "on-demand"
    """``on-demand`` or ``provisioned`` (with auto scaling)."""
    min_capacity: int = 5
    max_capacity: int = 500
    event_bus: str = "create"
    """``create`` a dedicated bus, or ``default`` for the account's default bus."""
    dry_run: bool = False
    """The sweeper reports and changes nothing."""
    tracing: bool = False
    """Powertools Tracer on both functions: X-Ray active tracing, its grant and the SDK."""
    log_retention_days: int = 30
    ledger_retention_days: int | None = None
    """How long ledger entries and session summaries are kept (the adapters' ``retention``,
    recorded in the table's descriptor); None (absent): forever."""
    alarm_topic_arn: str | None = None
    """An SNS topic the alarms notify; without it (and without an ``alarm_topic`` prop)
    the deployment creates one."""

    def __post_init__(self) -> None:
        _integer("stale_after_seconds", self.stale_after_seconds, 60, 30 * 86400)
        _integer("retain_failed_seconds", self.retain_failed_seconds, 0, 365 * 86400)
        _integer("sweep_rate_minutes", self.sweep_rate_minutes, 1, 1440)
        _integer("shard_count", self.shard_count, 1, k.MAX_SHARD_COUNT)
        _integer("min_capacity", self.min_capacity, 1, 40_000)
        _integer("max_capacity", self.max_capacity, 1, 40_000)
        _integer("log_retention_days", self.log_retention_days, 1, 3653)
        if self.ledger_retention_days is not None:
            _integer("ledger_retention_days", self.ledger_retention_days, 1, 36500)
        for name in ("dry_run", "tracing"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: must be true or false, got {getattr(self, name)!r}")
        if self.table_name is not None and not _TABLE_NAME.match(str(self.table_name)):
            raise ConfigError(f"table_name: not a valid DynamoDB table name: {self.table_name!r}")
        if isinstance(self.replica_regions, str):
            raise ConfigError("replica_regions: must be a sequence of region names")
        for region in self.replica_regions:
            if not isinstance(region, str) or not _REGION.match(region):
                raise ConfigError(f"replica_regions: not a region name: {region!r}")
        if self.multi_region_consistency == "strong":
            raise ConfigError(
                "multi_region_consistency: strong (MRSC) cannot serve this design: MRSC global "
                "tables support neither transactions (the ledger's appends) nor TTL (the "
                "resource records' backstop); see docs/resource-expiry.md, Global tables"
            )
        _choice("multi_region_consistency", self.multi_region_consistency, ("eventual",))
        if self.kms not in ("aws-owned", "create") and not _KMS_ARN.match(str(self.kms)):
            raise ConfigError(f"kms: must be aws-owned, create or a KMS key ARN, got {self.kms!r}")
        _choice("billing", self.billing, ("on-demand", "provisioned"))
        _choice("event_bus", self.event_bus, ("create", "default"))
        if self.min_capacity > self.max_capacity:
            raise ConfigError("min_capacity: must not exceed max_capacity")
        if self.replica_regions and self.kms != "aws-owned":
            raise ConfigError("kms: replica regions need a key per region; use aws-owned")
        if self.replica_regions and self.billing == "provisioned":
            raise ConfigError("billing: replica regions need on-demand billing here")

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """Every setting's name (the props, and the context keys that set them)."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_context(
        cls, context: Mapping[str, Any], *, also_known: Iterable[str] = ()
    ) -> LedgerConfig:
        """Build from CDK context (strings as ``-c key=value`` gives them, or JSON values);
        absent keys default. CDK's own keys (``aws:cdk:…``, ``@aws-cdk/…`` feature flags,
        lookups) are left alone; any other key that is neither a setting nor in
        ``also_known`` is refused, naming the nearest known key."""
        ours = [key for key in context if ":" not in key and not key.startswith("@")]
        refuse_unknown(ours, (*cls.keys(), *also_known), "context key")
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            raw = context.get(field.name)
            if raw is None:
                continue
            values[field.name] = _parse(field.name, field.default, raw)
        return cls(**values)


def _parse(name: str, default: Any, raw: Any) -> Any:
    """A context value as the setting's type (context from ``-c`` is always a string)."""
    if name == "replica_regions":
        parts = raw.split(",") if isinstance(raw, str) else raw
        return tuple(str(r).strip() for r in parts if str(r).strip())
    if isinstance(default, bool):
        text = str(raw).lower()
        if text not in ("true", "false"):
            raise ConfigError(f"{name}: must be true or false, got {raw!r}")
        return text == "true"
    if isinstance(default, int) or name == "ledger_retention_days":
        try:
            return int(str(raw))
        except ValueError as exc:
            raise ConfigError(f"{name}: must be an integer, got {raw!r}") from exc
    return str(raw)


def _integer(name: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name}: must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{name}: must be between {low} and {high}, got {value}")


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}: must be one of {', '.join(allowed)}, got {value!r}")
