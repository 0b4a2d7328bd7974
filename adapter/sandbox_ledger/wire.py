"""The base of every model in the package: snake_case attributes, camelCase wire names.

Apart from :mod:`sandbox_ledger.models` so that the resource records' models (used by the
Lambda handlers) do not build the ledger's models on import.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """Base of the package's models: snake_case attributes, camelCase wire names, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        frozen=True,
        extra="forbid",
        # Each model builds its validator on first use, not on import: a worker that only
        # appends builds LedgerEntry's alone (benchmarks/worker_cold_start.py). Threads may
        # meet a first use at once: pydantic serializes model rebuilds from 2.14 on.
        defer_build=True,
    )

    def wire(self) -> dict[str, Any]:
        """The TypeScript wire shape: camelCase keys, absent optionals left out."""
        return self.model_dump(by_alias=True, exclude_none=True)
