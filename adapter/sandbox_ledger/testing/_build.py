"""Building blocks of the conformance suite's tests: entries, sessions, listed ids."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandbox_ledger.models import LedgerEntry, LedgerEvent

if TYPE_CHECKING:
    from sandbox_ledger.protocol import StorageAdapter


def entry(
    name: str,
    sandbox_id: str,
    event: str | LedgerEvent,
    ts: int,
    *,
    step: int = -1,
    payload: Any = None,
    **extra: Any,
) -> LedgerEntry:
    return LedgerEntry(
        ts=ts,
        name=name,
        sandbox_id=sandbox_id,
        step_index=step,
        event=event,
        payload=payload,
        **extra,
    )


async def session(
    adapter: StorageAdapter,
    name: str,
    sandbox_id: str,
    started: int,
    *,
    closed: int | None = None,
    execs: int = 0,
) -> None:
    await adapter.append(entry(name, sandbox_id, LedgerEvent.SandboxCreated, started))
    for i in range(execs):
        await adapter.append(entry(name, sandbox_id, LedgerEvent.ExecStarted, started + i, step=i))
        await adapter.append(entry(name, sandbox_id, LedgerEvent.ExecComplete, started + i, step=i))
    if closed is not None:
        await adapter.append(entry(name, sandbox_id, LedgerEvent.SandboxClosed, closed))


def ids(details: list[Any]) -> list[str]:
    return [d.sandbox_id for d in details]
