"""sandbox_ledger: the sandbox ledger storage contract, in memory, on SQLite, PostgreSQL and
DynamoDB (:func:`open_store` opens any of them from a URL).

The public names are imported on first use, so that importing one part of the package (a
Lambda handler's, the CLI's ``--help``) does not pay for the others (pydantic models, the
in-memory adapter, the SQL stores).
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox_ledger.errors import (
        AccessDeniedError,
        ConfigurationError,
        ConflictError,
        InvalidInputError,
        KeyTooLongError,
        LedgerError,
        SchemaVersionError,
        StorageError,
        StoreNotFoundError,
        TableNotFoundError,
        ThrottledError,
    )
    from sandbox_ledger.memory import MemoryAdapter
    from sandbox_ledger.models import (
        CheckpointInfo,
        EnvironmentRecord,
        LedgerEntry,
        LedgerEvent,
        ListSandboxOptions,
        SandboxDetails,
        SandboxPage,
        SandboxStatus,
    )
    from sandbox_ledger.protocol import StorageAdapter
    from sandbox_ledger.stores import open_store

__version__ = "0.1.0"

# The library logs retries, conflicts, partial batches and give-ups on the "sandbox_ledger"
# logger; silent unless the application configures logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

_WHERE = {
    "AccessDeniedError": "errors",
    "CheckpointInfo": "models",
    "ConfigurationError": "errors",
    "ConflictError": "errors",
    "EnvironmentRecord": "models",
    "InvalidInputError": "errors",
    "KeyTooLongError": "errors",
    "LedgerEntry": "models",
    "LedgerError": "errors",
    "LedgerEvent": "_enums",
    "ListSandboxOptions": "models",
    "MemoryAdapter": "memory",
    "SandboxDetails": "models",
    "SandboxPage": "models",
    "SandboxStatus": "_enums",
    "SchemaVersionError": "errors",
    "StorageAdapter": "protocol",
    "StorageError": "errors",
    "StoreNotFoundError": "errors",
    "TableNotFoundError": "errors",
    "ThrottledError": "errors",
    "open_store": "stores",
}

__all__ = [
    "AccessDeniedError",
    "CheckpointInfo",
    "ConfigurationError",
    "ConflictError",
    "EnvironmentRecord",
    "InvalidInputError",
    "KeyTooLongError",
    "LedgerEntry",
    "LedgerError",
    "LedgerEvent",
    "ListSandboxOptions",
    "MemoryAdapter",
    "SandboxDetails",
    "SandboxPage",
    "SandboxStatus",
    "SchemaVersionError",
    "StorageAdapter",
    "StorageError",
    "StoreNotFoundError",
    "TableNotFoundError",
    "ThrottledError",
    "__version__",
    "open_store",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sandbox_ledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"sandbox_ledger.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The public names, whether imported yet or not, and none of this module's helpers.
    hidden = ["Any", "TYPE_CHECKING", "annotations", "importlib", "logging"]
    return sorted((set(globals()) - set(hidden)) | set(__all__))
