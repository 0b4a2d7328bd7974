"""A worker Lambda that records sandbox steps in the ledger (an example to copy).

Deploy it with ``sandbox-ledger-dynamodb`` in its requirements (``requirements.txt`` here),
the stack's ``WorkerPolicyArn`` managed policy attached to its role (or, in your own CDK app,
``LedgerTable.grant_worker(fn)``) and ``TABLE_NAME`` in its environment.

The event is one ledger entry in the wire shape, e.g.::

    {"ts": 1764504000000, "name": "build", "sandboxId": "sb-1", "stepIndex": 0,
     "event": "exec.complete", "payload": {"exitCode": 0}}
"""

from __future__ import annotations

import os
from typing import Any

from sandbox_ledger import InvalidInputError, LedgerEntry
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

# Built once per cold start and reused by warm invocations (one client, one connection pool).
LEDGER = SyncDynamoDBAdapter(os.environ["TABLE_NAME"])


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Append the entry; a bad event is answered, not retried (retrying cannot fix it)."""
    try:
        entry = LedgerEntry.model_validate(event)
        LEDGER.append(entry)  # exactly once, even if the SDK resends after a lost response
    except (InvalidInputError, ValueError) as exc:  # a key too long is refused before writing
        return {"ok": False, "error": str(exc)}
    details = LEDGER.get_sandbox_details(entry.name, entry.sandbox_id)
    return {"ok": True, "session": details.wire() if details else None}
