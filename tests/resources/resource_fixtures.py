"""Builders for resource records and Lambda contexts used by several test modules."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sandbox_ledger.resources import Expiry, ResourceActivityRecord
from sandbox_ledger.resources.models import to_iso

TS_RECORD = {
    "version": 1,
    "id": "0b8f5a8e-3c1e-4b8e-9f53-7b1c2d3e4f50",
    "pid": 41235,
    "identity": {
        "host": "builder-7",
        "bootId": "6f1c9a52-2b7e-4c1d-8a3f-0e9d8c7b6a54",
        "pidNamespace": 4026531836,
        "startTime": 123456789,
    },
    "sandboxProvider": "docker",
    "placement": "mounted",
    "workspace": "/home/dev/repo/.outpost/worktrees/feature-x",
    "createdAt": "2026-11-30T10:00:00.000Z",
    "updatedAt": "2026-11-30T10:05:12.345Z",
    "phase": "ready",
    "operations": [{"kind": "exec", "count": 2}],
    "lastOperation": {"kind": "sync", "outcome": "completed", "at": "2026-11-30T10:05:00.000Z"},
    "lastFailure": {
        "kind": "exec",
        "outcome": "failed",
        "at": "2026-11-30T10:04:00.000Z",
        "error": "exit status 1",
    },
}


def record(
    *,
    age: timedelta = timedelta(0),
    phase: str = "ready",
    provider: str = "docker",
    now: datetime | None = None,
    **overrides: Any,
) -> ResourceActivityRecord:
    now = now or datetime.now(UTC)
    updated = now - age
    wire = {
        **TS_RECORD,
        "id": str(uuid.uuid4()),
        "createdAt": to_iso(updated - timedelta(minutes=1)),
        "updatedAt": to_iso(updated),
        "phase": phase,
        "sandboxProvider": provider,
        **overrides,
    }
    return ResourceActivityRecord.model_validate(wire)


def record_in_shard_of(phase: str, like: str) -> ResourceActivityRecord:
    """A record in ``phase`` whose id falls in the shard (of four) of the record ``like``."""
    from sandbox_ledger import keys as k

    shard = k.shard_of(k.resource_pk(like), 4)
    while True:
        made = record(phase=phase)
        if k.shard_of(k.resource_pk(made.id), 4) == shard:
            return made


@dataclass
class FakeContext:
    """A Lambda context whose deadline is ``budget_ms`` from its creation.

    With ``ms_per_check``, time is not the wall clock's: each call of
    ``get_remaining_time_in_millis`` spends that many milliseconds, so that where a run stops
    for its deadline does not depend on how loaded the machine is.
    """

    budget_ms: int = 60_000
    function_name: str = "test-fn"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:test-fn"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started: float = field(default_factory=time.monotonic)
    ms_per_check: int | None = None
    checks: int = 0

    def get_remaining_time_in_millis(self) -> int:
        if self.ms_per_check is not None:
            self.checks += 1
            return self.budget_ms - self.checks * self.ms_per_check
        return int(self.budget_ms - (time.monotonic() - self.started) * 1000)


def observed_earlier(store: Any, stored: Any, ago: timedelta) -> None:
    """Record a sweeper's observation of ``stored``'s revision ``ago`` before now, as an
    earlier scheduled run would have (staleness is judged from observations on the
    sweeper's clock, never from updatedAt alone)."""
    at_ms = int((datetime.now(UTC) - ago).timestamp() * 1000)
    assert store.observe(stored, at_ms), "already observed or changed"


class Collector:
    """A publisher that keeps what it is given (thread-safe)."""

    def __init__(self) -> None:
        self.published: list[Expiry] = []
        self.lock = threading.Lock()

    def publish(self, expiries: Sequence[Expiry]) -> set[str]:
        with self.lock:
            self.published += list(expiries)
        return set()


def caught_up(server: Any, table: str | None = None) -> None:
    """Return once the session's strict server's indexes have every write made so far (of
    ``table`` only, if given): its lag waited out, never shortened. At once on a shared lenient
    server (``server`` None, the ``moto_server`` fixture's value there). For tests of settled
    behaviour only: what a sweep or a listing promises while the indexes lag is tested in
    test_resources_index_lag.py."""
    if server is not None:
        server.wait_for_indexes(table)
