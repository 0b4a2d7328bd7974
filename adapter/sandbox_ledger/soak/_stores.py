"""What every process of a run does with its store."""

from __future__ import annotations

from typing import Any


async def close_store(store: Any) -> None:
    """Release a store ``open_store`` made (DynamoDB's client, a SQL pool; memory has none)."""
    close = getattr(store, "close", None)
    if close is not None:
        await close()
