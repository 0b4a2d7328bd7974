"""A worker Lambda that records sandbox steps in the ledger (an example to copy).

Deploy it with ``sandbox-ledger-dynamodb`` in its requirements (``requirements.txt`` here),
the stack's ``WorkerPolicyArn`` managed policy attached to its role (or, in your own CDK app,
``LedgerTable.grant_ledger(fn)``, all this worker needs) and ``TABLE_NAME`` in its environment;
the base install (pydantic and boto3, no async stack) is all it imports.

The event is one ledger entry in the wire shape, e.g.::

    {"ts": 1764504000000, "name": "build", "sandboxId": "sb-1", "stepIndex": 0,
     "event": "exec.complete", "payload": {"exitCode": 0}}

Retries write once. Lambda retries an asynchronous invocation that failed (up to twice, with
the same event), and a client may resend an event after a timeout; either way the entry is
stored once: ``append_once`` claims the entry's content (every field: ts, step, branch,
event, payload, error) in the same transaction that appends it, so a retry finds the claim
and writes nothing (``execCount`` is not counted twice). The price: two entries of one
session with identical content, to the millisecond, are stored once.
"""

from __future__ import annotations

import os
from typing import Any

from sandbox_ledger import InvalidInputError, LedgerEntry
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

# Built once per cold start and reused by warm invocations (one client, one connection pool).
LEDGER = SyncDynamoDBAdapter(os.environ["TABLE_NAME"])


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Append the entry once however often the event is delivered; a bad event is answered,
    not retried (retrying cannot fix it)."""
    try:
        entry = LedgerEntry.model_validate(event)
        # The first copy of this content in its session, unless a delivery stored it already.
        stored = LEDGER.append_once(entry, 1)
    except (InvalidInputError, ValueError) as exc:  # a key too long is refused before writing
        return {"ok": False, "error": str(exc)}
    details = LEDGER.get_sandbox_details(entry.name, entry.sandbox_id)
    return {"ok": True, "stored": stored, "session": details.wire() if details else None}
