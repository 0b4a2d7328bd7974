"""The package's one error hierarchy.

::

    LedgerError
    ├── ConfigurationError                      no region or credentials: the message says the fix
    ├── InvalidInputError (a ValueError)        bad input, refused before any request is sent
    │   └── KeyTooLongError                     a name/sandboxId/id too long for a DynamoDB key
    └── StorageError                            the backend failed; the botocore error is chained
        ├── TableNotFoundError                  the table does not exist (or is not ACTIVE yet)
        │   └── StoreNotFoundError              a SQL store opened read-only has no ledger schema
        ├── ThrottledError                      throughput exceeded after every retry
        ├── AccessDeniedError                   IAM refused the call
        ├── ConflictError                       a conditional write lost a race
        └── SchemaVersionError                  a SQL database's schema is newer than this library

Both adapter twins map botocore errors through :func:`translate_client_error`, so callers
catch the same types whichever twin they use.
"""

from __future__ import annotations

from typing import Any


class LedgerError(Exception):
    """Base class of every error raised by sandbox_ledger."""


class ConfigurationError(LedgerError):
    """The client cannot be set up (no AWS region, no credentials); the message says the fix."""


NO_REGION_FIX = (
    "no AWS region configured: pass region_name=..., or set AWS_REGION "
    "(or AWS_DEFAULT_REGION), or give your AWS profile a region"
)
NO_CREDENTIALS_FIX = (
    "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE "
    "(run `aws configure` or `aws sso login`), or run with an IAM role"
)


class InvalidInputError(LedgerError, ValueError):
    """Input that the contract refuses; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class KeyTooLongError(InvalidInputError):
    """A key component is too long for DynamoDB's key size limits."""


class StorageError(LedgerError):
    """The storage backend failed; ``code`` is the backend's error code when there is one."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.outcomes: list[bool | InvalidInputError | None] | None = None
        """Set when ``append_once_many`` stopped part way (DynamoDB writes a batch in
        several transactions): each item's outcome as far as known, as the call would have
        returned it (True written, False stored already, the error of an item refused),
        None for an item not written. None when the failure wrote nothing."""


class TableNotFoundError(StorageError):
    """The table does not exist in this account and region (or is still being created)."""


class StoreNotFoundError(TableNotFoundError):
    """A SQL store opened with ``read_only=True`` has no ledger there: the SQLite file or the
    PostgreSQL schema does not exist (a read never creates one)."""


class ThrottledError(StorageError):
    """DynamoDB kept throttling after the configured retries."""


class AccessDeniedError(StorageError):
    """The caller's credentials are not allowed to make this call."""


class ConflictError(StorageError):
    """A conditional write failed because another writer changed the item first."""


class SchemaVersionError(StorageError):
    """The database's ledger schema is not this library's: newer than it understands
    (upgrade the library), or, for a read-only adapter, older (a writer migrates it).

    ``found`` is the database's schema version, ``supported`` the newest this library knows.
    """

    def __init__(self, message: str, *, found: int, supported: int) -> None:
        super().__init__(message, code="SchemaVersion")
        self.found = found
        self.supported = supported


THROTTLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "Throttling",
    }
)
"""The error codes with which DynamoDB (and the AWS front door) says a request was throttled:
not applied, to be sent again after a backoff."""

THROTTLE_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded"})
"""The cancellation reasons with which DynamoDB says a transaction's action found its
partition's (or table's) throughput spent."""


def cancelled_for_throughput(reasons: Any) -> bool:
    """Whether a ``TransactionCanceledException``'s ``CancellationReasons`` (dicts with a
    ``Code``, or the codes themselves) say only that throughput was spent: some action
    throttled, every other one ``None`` (not the cause)."""
    codes = [r.get("Code") if isinstance(r, dict) else r for r in reasons or ()]
    return bool(THROTTLE_REASONS.intersection(codes)) and {
        None,
        "None",
        *THROTTLE_REASONS,
    }.issuperset(codes)


def gave_up(message: str, reasons: Any, *, code: str | None) -> StorageError:
    """The error of a write that gave up after its transactions were cancelled with
    ``reasons`` (as :func:`cancelled_for_throughput` reads them) every time it was sent:
    :class:`ThrottledError` when they say only that throughput was spent, else
    :class:`StorageError`."""
    kind = ThrottledError if cancelled_for_throughput(reasons) else StorageError
    return kind(message, code=code)


def translate_client_error(exc: BaseException, *, operation: str = "") -> LedgerError:
    """Map a botocore error (or connection failure) to the package's own type.

    Use as ``raise translate_client_error(exc) from exc`` so the original stays chained.
    """
    if isinstance(exc, LedgerError):
        return exc
    from botocore.exceptions import (
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ProfileNotFound,
    )

    if isinstance(exc, NoRegionError):
        return ConfigurationError(NO_REGION_FIX)
    if isinstance(exc, ProfileNotFound):
        return ConfigurationError(
            f"{exc}: check AWS_PROFILE (or --profile) against your AWS config file, "
            "or unset it to use the default credentials"
        )
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return ConfigurationError(f"{NO_CREDENTIALS_FIX} ({exc})")
    response: dict[str, Any] = getattr(exc, "response", None) or {}
    error = response.get("Error", {}) if isinstance(response, dict) else {}
    code = str(error.get("Code", "")) or None
    message = str(error.get("Message", "")) or str(exc)
    where = f"{operation}: " if operation else ""
    if code == "ResourceNotFoundException":
        return TableNotFoundError(f"{where}table not found ({message})", code=code)
    if code in THROTTLE_CODES or (
        code == "TransactionCanceledException"
        and cancelled_for_throughput(response.get("CancellationReasons"))
    ):
        return ThrottledError(f"{where}throttled after retries ({message})", code=code)
    if code in {"AccessDeniedException", "UnrecognizedClientException"}:
        return AccessDeniedError(f"{where}access denied ({message})", code=code)
    if code == "ConditionalCheckFailedException":
        return ConflictError(f"{where}conditional write failed ({message})", code=code)
    if code is None:
        return StorageError(f"{where}{type(exc).__name__}: {exc}")
    return StorageError(f"{where}{code}: {message}", code=code)
