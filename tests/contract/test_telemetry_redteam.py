"""Red team of the OpenTelemetry work (issue 47): what the library's telemetry must not
change, found changed, and its spans where they were missing."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sandbox_ledger import InvalidInputError, LedgerEntry, MemoryAdapter

from .test_telemetry import entry, spans

__all__ = ["spans"]  # the fixture: the one SDK of the process, as test_telemetry.py installs it


async def _refusal(adapter: Any, given: Any) -> BaseException:
    with pytest.raises(BaseException) as caught:
        await adapter.append(given)
    return caught.value


@pytest.mark.parametrize("record", [False, True], ids=["plain", "stamping"])
async def test_stamping_trace_ids_leaves_the_stores_refusals_as_they_are(
    record: bool, spans: InMemorySpanExporter
) -> None:
    """With an SDK and record_trace_ids, an append the store refuses is refused as without
    them: not a LedgerEntry (a dict) and an entry that never was validated (built by
    model_construct) are the store's InvalidInputError, not an AttributeError or pydantic's
    ValidationError out of the re-validation of the stamped copy; a valid entry is stamped
    and otherwise unchanged."""
    adapter = MemoryAdapter()
    adapter.record_trace_ids = record  # type: ignore[attr-defined]
    wire = entry("as-dict").wire()
    refused = await _refusal(adapter, wire)
    assert isinstance(refused, InvalidInputError), repr(refused)
    assert "expected a LedgerEntry, got dict" in str(refused)
    built = LedgerEntry.model_construct(
        ts=1, name="", sandbox_id="built", step_index=-1, event="sandbox.created"
    )
    refused = await _refusal(adapter, built)
    assert isinstance(refused, InvalidInputError), repr(refused)
    assert "name: must be a non-empty string" in str(refused)
    given = LedgerEntry.model_validate({**entry("ok").wire(), "payload": {"a": None}, "x": 1})
    await adapter.append(given)
    [stored] = await adapter.read_all("build", "ok")
    extra = dict(stored.model_extra or {})
    assert bool(extra.pop("traceId", None)) is record and bool(extra.pop("spanId", None)) is record
    assert extra == {"x": 1} and stored.payload == {"a": None}
    assert "traceId" not in (given.model_extra or {})  # the caller's entry is not touched
