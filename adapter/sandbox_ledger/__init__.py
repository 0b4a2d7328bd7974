"""sandbox_ledger: the sandbox ledger storage contract, in memory, on SQLite, PostgreSQL and
DynamoDB (:func:`open_store` opens any of them from a URL).

The public names are imported on first use, so that importing one part of the package (a
Lambda handler's, the CLI's ``--help``) does not pay for the others (pydantic models, the
in-memory adapter, the SQL stores).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sandbox_ledger._lazy import exports

if TYPE_CHECKING:
    from sandbox_ledger._enums import LedgerEvent as LedgerEvent
    from sandbox_ledger._enums import SandboxStatus as SandboxStatus
    from sandbox_ledger._json import loads_unique as loads_unique
    from sandbox_ledger.changes import Change as Change
    from sandbox_ledger.changes import ChangeKind as ChangeKind
    from sandbox_ledger.changes import ChangesTrimmedError as ChangesTrimmedError
    from sandbox_ledger.errors import AccessDeniedError as AccessDeniedError
    from sandbox_ledger.errors import ConfigurationError as ConfigurationError
    from sandbox_ledger.errors import ConflictError as ConflictError
    from sandbox_ledger.errors import InvalidInputError as InvalidInputError
    from sandbox_ledger.errors import KeyTooLongError as KeyTooLongError
    from sandbox_ledger.errors import LedgerError as LedgerError
    from sandbox_ledger.errors import SchemaVersionError as SchemaVersionError
    from sandbox_ledger.errors import StorageError as StorageError
    from sandbox_ledger.errors import StoreNotFoundError as StoreNotFoundError
    from sandbox_ledger.errors import TableNotFoundError as TableNotFoundError
    from sandbox_ledger.errors import ThrottledError as ThrottledError
    from sandbox_ledger.follow import FollowedEntry as FollowedEntry
    from sandbox_ledger.memory import MemoryAdapter as MemoryAdapter
    from sandbox_ledger.models import CheckpointInfo as CheckpointInfo
    from sandbox_ledger.models import EnvironmentRecord as EnvironmentRecord
    from sandbox_ledger.models import LedgerEntry as LedgerEntry
    from sandbox_ledger.models import ListSandboxOptions as ListSandboxOptions
    from sandbox_ledger.models import SandboxDetails as SandboxDetails
    from sandbox_ledger.models import SandboxPage as SandboxPage
    from sandbox_ledger.protocol import StorageAdapter as StorageAdapter
    from sandbox_ledger.stores import open_store as open_store

__version__ = "0.1.0"
"""The package's version, read by the build (pyproject.toml's ``[tool.hatch.version]``)."""

__all__, __getattr__, __dir__ = exports(__name__, __file__, "__version__")

# The library logs retries, conflicts, partial batches and give-ups on the "sandbox_ledger"
# logger; silent unless the application configures logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())
