"""Resource activity records: one per provisioned sandbox, in the TypeScript tool's JSON shape."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import Field, StrictInt, ValidationInfo, field_validator, model_validator

from sandbox_ledger.keys import check_record_id
from sandbox_ledger.resources.phases import FAILED_PHASES, LIVE_PHASES, Phase, Placement
from sandbox_ledger.wire import WireModel

__all__ = [
    "FAILED_PHASES",
    "LIVE_PHASES",
    "LocalProcessIdentity",
    "Phase",
    "Placement",
    "ResourceActivityRecord",
    "ResourceOperation",
    "ResourceOperationResult",
    "parse_iso",
    "to_iso",
]


def parse_iso(value: str, field: str = "timestamp") -> datetime:
    """An ISO 8601 timestamp as an aware datetime (naive ones are taken as UTC)."""
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected an ISO 8601 string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"{field}: {value!r} is not an ISO 8601 timestamp") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def to_iso(moment: datetime) -> str:
    """The JavaScript ``toISOString()`` form: UTC, milliseconds, ``Z``."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LocalProcessIdentity(WireModel):
    """Host, boot, PID namespace and start time of the process that wrote a record."""

    host: str
    boot_id: str
    pid_namespace: StrictInt | str
    start_time: StrictInt | str


class ResourceOperation(WireModel):
    """Operations of one kind running on the sandbox, with their concurrent count."""

    kind: Annotated[str, Field(min_length=1)]
    count: Annotated[StrictInt, Field(ge=0)]


class ResourceOperationResult(WireModel):
    """A finished operation."""

    kind: Annotated[str, Field(min_length=1)]
    outcome: Literal["completed", "failed"]
    at: str
    error: str | None = None

    @field_validator("at")
    @classmethod
    def _iso(cls, value: str) -> str:
        parse_iso(value, "at")
        return value


class ResourceActivityRecord(WireModel):
    """One provisioned sandbox: who owns it, where its workspace is, what runs on it.

    Timestamps stay the ISO strings the writer produced, so a record file validates and dumps
    back unchanged; :attr:`updated_at_ms` gives the instant.
    """

    version: Literal[1]
    id: str
    pid: Annotated[StrictInt, Field(ge=0)]
    identity: LocalProcessIdentity | None = None
    sandbox_provider: Annotated[str, Field(min_length=1)]
    placement: Placement
    workspace: str
    created_at: str
    updated_at: str
    phase: Phase
    operations: list[ResourceOperation]
    last_operation: ResourceOperationResult | None = None
    last_failure: ResourceOperationResult | None = None

    @field_validator("id")
    @classmethod
    def _uuid(cls, value: str) -> str:
        return check_record_id(value)

    @field_validator("created_at", "updated_at")
    @classmethod
    def _timestamp(cls, value: str) -> str:
        parse_iso(value)
        return value

    @model_validator(mode="after")
    def _ordered(self, info: ValidationInfo) -> ResourceActivityRecord:
        # A stored record may carry a heartbeat from an owner whose clock runs behind the
        # creator's: readable as stored (heartbeats never fail because of an owner's clock).
        if info.context and info.context.get("stored"):
            return self
        if parse_iso(self.updated_at) < parse_iso(self.created_at):
            raise ValueError(f"updatedAt: {self.updated_at} is before createdAt {self.created_at}")
        return self

    @property
    def updated_at_ms(self) -> int:
        """updatedAt in Unix milliseconds."""
        return int(parse_iso(self.updated_at).timestamp() * 1000)
