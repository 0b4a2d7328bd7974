"""The contract's enumerations, apart from the models so that light importers (the CLI's
option parsing) need not load pydantic. :mod:`sandbox_ledger.models` re-exports them."""

from __future__ import annotations

from enum import StrEnum


class LedgerEvent(StrEnum):
    """Events the client records. Entries may carry other event strings too (newer clients)."""

    SandboxCreated = "sandbox.created"
    SandboxClosed = "sandbox.closed"
    ExecStarted = "exec.started"
    ExecComplete = "exec.complete"
    ExecFailed = "exec.failed"
    CheckpointCreated = "sandbox.checkpoint_created"


class SandboxStatus(StrEnum):
    """A session is completed once a ``sandbox.closed`` event exists, running before."""

    Running = "running"
    Completed = "completed"
