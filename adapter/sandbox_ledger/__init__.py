"""sandbox_ledger: the sandbox ledger storage contract, in memory and on DynamoDB."""

from sandbox_ledger.errors import (
    AccessDeniedError,
    ConflictError,
    InvalidInputError,
    KeyTooLongError,
    LedgerError,
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

__version__ = "0.1.0"

__all__ = [
    "AccessDeniedError",
    "CheckpointInfo",
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
    "StorageAdapter",
    "StorageError",
    "TableNotFoundError",
    "ThrottledError",
    "__version__",
]
