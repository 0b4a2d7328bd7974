"""sandbox_ledger: the sandbox ledger storage contract, in memory, on SQLite, PostgreSQL and
DynamoDB (:func:`open_store` opens any of them from a URL)."""

import logging

from sandbox_ledger.errors import (
    AccessDeniedError,
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    KeyTooLongError,
    LedgerError,
    SchemaVersionError,
    StorageError,
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
    SandboxStatus,
)
from sandbox_ledger.protocol import StorageAdapter
from sandbox_ledger.stores import open_store

__version__ = "0.1.0"

# The library logs retries, conflicts, partial batches and give-ups on the "sandbox_ledger"
# logger; silent unless the application configures logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

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
    "SandboxStatus",
    "SchemaVersionError",
    "StorageAdapter",
    "StorageError",
    "TableNotFoundError",
    "ThrottledError",
    "__version__",
    "open_store",
]
