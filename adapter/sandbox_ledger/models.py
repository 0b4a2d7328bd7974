"""The ledger contract's data types, ported from the TypeScript client.

Attributes are snake_case; every model also accepts and emits the client's camelCase names,
so ``LedgerEntry.model_validate(json_from_the_ts_client)`` works and
``entry.model_dump(by_alias=True, exclude_none=True)`` gives back the wire shape exactly.
Timestamps are integer Unix milliseconds.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, StrictInt, field_validator, model_validator

from sandbox_ledger._enums import LedgerEvent, SandboxStatus
from sandbox_ledger._json import MAX_SAFE_INTEGER, check_json_value, find_unstorable
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.wire import WireModel

__all__ = [
    "CheckpointInfo",
    "EnvironmentRecord",
    "LedgerEntry",
    "LedgerEvent",
    "ListSandboxOptions",
    "SandboxDetails",
    "SandboxPage",
    "SandboxStatus",
]

Millis = Annotated[StrictInt, Field(ge=0, le=MAX_SAFE_INTEGER)]
"""A Unix timestamp in milliseconds: a non-negative integer the TypeScript client can represent."""


class LedgerEntry(WireModel):
    """One step of a sandbox session, as the client appends it.

    Fields this version does not know (a newer client's ``traceId``) are kept and returned
    unchanged, null values included, as the TypeScript adapters keep them: refusing them would
    stop ingestion from a newer writer. Their values must be JSON.
    """

    model_config = ConfigDict(extra="allow")

    ts: Millis
    name: Annotated[str, Field(min_length=1)]
    sandbox_id: Annotated[str, Field(min_length=1)]
    step_index: Annotated[StrictInt, Field(ge=-1)]
    """-1 for sandbox-level events."""
    branch: StrictInt | None = None
    """Parallel branch index."""
    event: Annotated[str, Field(min_length=1)]
    """A :class:`LedgerEvent` value, or any other string a newer client sends (kept verbatim)."""
    payload: Any = None
    """Any JSON value; refused at construction if JSON cannot carry it."""
    error: str | None = None

    @field_validator("event", mode="before")
    @classmethod
    def _event_as_str(cls, value: Any) -> Any:
        return value.value if isinstance(value, LedgerEvent) else value

    @field_validator("payload")
    @classmethod
    def _payload_is_json(cls, value: Any) -> Any:
        return check_json_value(value, "payload")

    @model_validator(mode="after")
    def _extras_are_json(self) -> LedgerEntry:
        extra = self.__pydantic_extra__  # not model_extra: this runs for every entry parsed
        if extra:
            for key, value in extra.items():
                check_json_value(value, key)
        return self

    def wire(self) -> dict[str, Any]:
        """The TypeScript wire shape: absent optionals left out, unknown fields kept as given."""
        extra = self.model_extra or {}
        out = self.model_dump(by_alias=True, exclude_none=True)
        for key in extra:
            out.pop(key, None)  # dumped without the null ones: all of them in their order
        out.update(extra)
        return out

    def unstorable(self) -> tuple[str, str] | None:
        """The first field that no store can hold, and why, or None."""
        wire = self.wire()
        return _nul_in_text(wire, "entry", _ENTRY_TEXT) or find_unstorable(wire, "entry")


def require_storable(value: LedgerEntry | EnvironmentRecord) -> None:
    """Refuse what no UTF-8 store can hold, before any write; every adapter calls it.

    Raises:
        InvalidInputError: a string or object key holds a lone UTF-16 surrogate, or an
            integer has more digits than any store can carry (a payload changed in place
            after it was validated), naming its path.
    """
    found = value.unstorable()
    if found is not None:
        raise InvalidInputError(*found)


class SandboxDetails(WireModel):
    """A session's summary, derived from its events."""

    name: str
    sandbox_id: str
    status: SandboxStatus
    started_at: Millis
    completed_at: Millis | None = None
    exec_count: Annotated[StrictInt, Field(ge=0)] = 0


class ListSandboxOptions(WireModel):
    """Filters for listing sessions, applied as the reference adapter applies them.

    As in the TypeScript reference, a falsy value means "no filter": ``limit=0`` returns every
    match and ``before=0`` filters nothing.
    """

    status: SandboxStatus | None = None
    before: Millis | None = None
    """Only sessions whose startedAt is strictly less."""
    limit: Annotated[StrictInt, Field(ge=0)] | None = None
    cursor: str | None = None
    """Resume after the previous page (its :attr:`SandboxPage.cursor`); an extension of the
    TypeScript contract. Use it with the same method, name and ``status``/``before``."""


class SandboxPage(WireModel):
    """One page of a session listing and where the next one starts (an extension of the
    TypeScript contract: see :meth:`StorageAdapter.list_sandbox_page`)."""

    sessions: list[SandboxDetails]
    cursor: str | None = None
    """Pass back as ``ListSandboxOptions.cursor`` for the next page; None when no session is
    left. Opaque: its content is the adapter's own."""


class CheckpointInfo(WireModel):
    """A checkpoint of a session: ``snapshotId`` and ``name`` come from the entry's payload."""

    snapshot_id: str | None = None
    tag: str | None = None
    created_at: Millis


class EnvironmentRecord(WireModel):
    """A built environment. ``name`` and ``builtAt`` are required; every other field the client
    sends is kept and returned unchanged."""

    model_config = ConfigDict(extra="allow")

    name: Annotated[str, Field(min_length=1)]
    built_at: Millis

    @model_validator(mode="after")
    def _extras_are_json(self) -> EnvironmentRecord:
        extra = self.__pydantic_extra__  # not model_extra: this runs for every entry parsed
        if extra:
            for key, value in extra.items():
                check_json_value(value, key)
        return self

    def wire(self) -> dict[str, Any]:
        """The record as the client sent it: every field kept, null values included."""
        return self.model_dump(by_alias=True)

    def unstorable(self) -> tuple[str, str] | None:
        """The first field that no store can hold, and why, or None."""
        wire = self.wire()
        return _nul_in_text(wire, "record", ("name",)) or find_unstorable(wire, "record")


_ENTRY_TEXT = ("name", "sandboxId", "event", "error")
"""The entry's fields stored as text columns (keys and indexed values) on the SQL stores."""


def _nul_in_text(
    wire: dict[str, Any], path: str, fields: tuple[str, ...]
) -> tuple[str, str] | None:
    """NUL in a field a store keeps as text: PostgreSQL text cannot hold it, so no store
    takes it (a ledger one store took could not move to PostgreSQL). In a payload or an
    unknown field it is JSON, escaped, and stored everywhere."""
    for field in fields:
        value = wire.get(field)
        if isinstance(value, str) and "\x00" in value:
            return f"{path}.{field}", "contains NUL (\\x00), which PostgreSQL text cannot hold"
    return None
