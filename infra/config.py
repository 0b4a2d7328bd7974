"""The stack's settings from CDK context, validated with errors that name the key."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sandbox_ledger import keys as k

_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_KMS_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")


class ConfigError(ValueError):
    """A context value the stack cannot use; the message names the context key."""


@dataclass(frozen=True)
class LedgerConfig:
    """Every option of the stack (cdk.json ``context`` or ``cdk deploy -c key=value``)."""

    table_name: str | None = None
    """Physical table name; None lets CloudFormation name it."""
    stale_after_seconds: int = 900
    retain_failed_seconds: int = 7 * 86400
    sweep_rate_minutes: int = 5
    shard_count: int = k.DEFAULT_SHARD_COUNT
    replica_regions: tuple[str, ...] = ()
    kms: str = "aws-owned"
    """``aws-owned`` (default), ``create`` (a new customer-managed key) or a key ARN."""
    billing: str = "on-demand"
    """``on-demand`` or ``provisioned`` (with auto scaling)."""
    min_capacity: int = 5
    max_capacity: int = 500
    event_bus: str = "create"
    """``create`` a dedicated bus, or ``default`` for the account's default bus."""
    dry_run: bool = False
    tracing: bool = False
    """Powertools Tracer on both functions: X-Ray active tracing, its grant and the SDK."""
    log_retention_days: int = 30
    ledger_retention_days: int | None = None
    """How long ledger entries and session summaries are kept (the adapters' ``retention``,
    recorded in the table's descriptor); None (absent): forever."""
    alarm_topic_arn: str | None = None

    @classmethod
    def from_context(cls, get: Any) -> LedgerConfig:
        """Build from ``get(key)`` (e.g. ``app.node.try_get_context``); absent keys default."""
        defaults = cls()

        def integer(key: str, default: int, low: int, high: int) -> int:
            raw = get(key)
            if raw is None:
                return default
            try:
                value = int(str(raw))
            except ValueError as exc:
                raise ConfigError(f"{key}: must be an integer, got {raw!r}") from exc
            if not low <= value <= high:
                raise ConfigError(f"{key}: must be between {low} and {high}, got {value}")
            return value

        def choice(key: str, default: str, allowed: tuple[str, ...]) -> str:
            raw = get(key)
            value = default if raw is None else str(raw)
            if value not in allowed:
                raise ConfigError(f"{key}: must be one of {', '.join(allowed)}, got {value!r}")
            return value

        table_name = get("table_name")
        if table_name is not None and not _TABLE_NAME.match(str(table_name)):
            raise ConfigError(f"table_name: not a valid DynamoDB table name: {table_name!r}")
        raw_regions = get("replica_regions") or []
        if isinstance(raw_regions, str):
            raw_regions = [r for r in raw_regions.split(",") if r.strip()]
        regions = tuple(str(r).strip() for r in raw_regions)
        for region in regions:
            if not _REGION.match(region):
                raise ConfigError(f"replica_regions: not a region name: {region!r}")
        consistency = str(get("multi_region_consistency") or "eventual")
        if consistency == "strong":
            raise ConfigError(
                "multi_region_consistency: strong (MRSC) cannot serve this design: MRSC global "
                "tables support neither transactions (the ledger's appends) nor TTL (the "
                "resource records' backstop); see docs/resource-expiry.md, Global tables"
            )
        if consistency != "eventual":
            raise ConfigError(
                f"multi_region_consistency: must be eventual (the default), got {consistency!r}"
            )
        kms = str(get("kms") or defaults.kms)
        if kms not in ("aws-owned", "create") and not _KMS_ARN.match(kms):
            raise ConfigError(f"kms: must be aws-owned, create or a KMS key ARN, got {kms!r}")
        dry = str(get("dry_run") if get("dry_run") is not None else "false").lower()
        if dry not in ("true", "false"):
            raise ConfigError(f"dry_run: must be true or false, got {dry!r}")
        tracing = str(get("tracing") if get("tracing") is not None else "false").lower()
        if tracing not in ("true", "false"):
            raise ConfigError(f"tracing: must be true or false, got {tracing!r}")
        config = cls(
            table_name=None if table_name is None else str(table_name),
            stale_after_seconds=integer(
                "stale_after_seconds", defaults.stale_after_seconds, 60, 30 * 86400
            ),
            retain_failed_seconds=integer(
                "retain_failed_seconds", defaults.retain_failed_seconds, 0, 365 * 86400
            ),
            sweep_rate_minutes=integer("sweep_rate_minutes", defaults.sweep_rate_minutes, 1, 1440),
            shard_count=integer("shard_count", defaults.shard_count, 1, k.MAX_SHARD_COUNT),
            replica_regions=regions,
            kms=kms,
            billing=choice("billing", defaults.billing, ("on-demand", "provisioned")),
            min_capacity=integer("min_capacity", defaults.min_capacity, 1, 40_000),
            max_capacity=integer("max_capacity", defaults.max_capacity, 1, 40_000),
            event_bus=choice("event_bus", defaults.event_bus, ("create", "default")),
            dry_run=dry == "true",
            tracing=tracing == "true",
            log_retention_days=integer("log_retention_days", defaults.log_retention_days, 1, 3653),
            ledger_retention_days=None
            if get("ledger_retention_days") is None
            else integer("ledger_retention_days", 0, 1, 36500),
            alarm_topic_arn=get("alarm_topic_arn"),
        )
        if config.min_capacity > config.max_capacity:
            raise ConfigError("min_capacity: must not exceed max_capacity")
        if config.replica_regions and config.kms != "aws-owned":
            raise ConfigError("kms: replica regions need a key per region; use aws-owned")
        if config.replica_regions and config.billing == "provisioned":
            raise ConfigError("billing: replica regions need on-demand billing here")
        return config
