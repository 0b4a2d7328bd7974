"""The phases of a resource activity record, without pydantic.

Apart from :mod:`sandbox_ledger.resources.models` so that the expiry policy and the stream
handler can classify records without building the models (the TTL stream handler imports
pydantic only when it decodes a resource record).
"""

from __future__ import annotations

from typing import Literal

__all__ = ["FAILED_PHASES", "LIVE_PHASES", "Phase", "Placement"]

Phase = Literal["allocating", "ready", "closing", "cleanup-failed", "allocation-uncertain"]
Placement = Literal["mounted", "remote", "host"]
LIVE_PHASES: tuple[Phase, ...] = ("allocating", "ready", "closing")
FAILED_PHASES: tuple[Phase, ...] = ("cleanup-failed", "allocation-uncertain")
