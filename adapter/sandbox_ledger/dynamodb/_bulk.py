"""The batched import operations of the DynamoDB twins (shared, as every operation is):
each item through the single ``append_once`` transaction, each session through
``read_stored``. A refused item's error is its outcome; a client that disagrees with the
table stops the batch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox_ledger.deployment import DeploymentMismatchError
from sandbox_ledger.dynamodb import _ops
from sandbox_ledger.errors import InvalidInputError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sandbox_ledger.models import LedgerEntry
    from sandbox_ledger.sdk.steps import Op

__all__ = ["append_each_once", "read_each_stored"]


def append_each_once(
    append_once: Callable[[LedgerEntry, int], Op[bool]],
    items: Sequence[tuple[LedgerEntry, int]],
) -> Op[list[bool | InvalidInputError]]:
    """``append_once`` of each item in order."""
    outcomes: list[bool | InvalidInputError] = []
    for entry, occurrence in items:
        try:
            outcomes.append((yield from append_once(entry, occurrence)))
        except DeploymentMismatchError:
            raise
        except InvalidInputError as exc:
            outcomes.append(exc)
    return outcomes


def read_each_stored(
    table: str, sessions: Sequence[tuple[str, str]]
) -> Op[list[list[LedgerEntry]]]:
    """``read_stored`` of each session in order."""
    found = []
    for name, sandbox_id in sessions:
        found.append((yield from _ops.read_stored(table, name, sandbox_id)))
    return found
