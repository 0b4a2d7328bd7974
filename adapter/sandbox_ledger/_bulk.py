"""The batched import methods of :class:`~sandbox_ledger.protocol.TransferAdapter` for a
store that writes one identity at a time (memory; DynamoDB runs the same loop as an
operation): each item through ``append_once``, its refusal kept as its outcome."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox_ledger.deployment import DeploymentMismatchError
from sandbox_ledger.errors import InvalidInputError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from sandbox_ledger.models import LedgerEntry

__all__ = ["append_each_once", "read_each_stored"]


async def append_each_once(
    append_once: Callable[[LedgerEntry, int], Awaitable[bool]],
    items: Sequence[tuple[LedgerEntry, int]],
) -> list[bool | InvalidInputError]:
    """``append_once`` of each item in order; an item it refuses has the error as outcome
    (a client that disagrees with the store stops the batch)."""
    outcomes: list[bool | InvalidInputError] = []
    for entry, occurrence in items:
        try:
            outcomes.append(await append_once(entry, occurrence))
        except DeploymentMismatchError:
            raise
        except InvalidInputError as exc:
            outcomes.append(exc)
    return outcomes


async def read_each_stored(
    read_stored: Callable[[str, str], Awaitable[list[LedgerEntry]]],
    sessions: Sequence[tuple[str, str]],
) -> list[list[LedgerEntry]]:
    """``read_stored`` of each session in order."""
    return [await read_stored(name, sandbox_id) for name, sandbox_id in sessions]
