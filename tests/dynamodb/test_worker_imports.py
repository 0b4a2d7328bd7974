"""What a sync worker's cold start loads and builds: importing the package and the sync
adapter, and the first append, load only the append path and build only ``LedgerEntry``'s
validator (checked in a fresh interpreter; the times are in benchmarks/worker_cold_start.py,
never in a test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WORKER = r"""
import json, sys
endpoint, table = sys.argv[1], sys.argv[2]
from sandbox_ledger import LedgerEntry
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

ledger = SyncDynamoDBAdapter(table, endpoint_url=endpoint)
ledger.append(LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=-1, event="sandbox.created"))
from sandbox_ledger.wire import WireModel
models = WireModel.__subclasses__()
built = sorted(f"{m.__module__}.{m.__qualname__}" for m in models if m.__pydantic_complete__)
print(json.dumps({"modules": sorted(sys.modules), "built": built}))
"""

# The append path does not need these: the import/export module, the follow loop, the other
# stores, the CLI, the resource records, the async stack.
NOT_LOADED = (
    "sandbox_ledger.transfer",
    "sandbox_ledger._import_stream",
    "sandbox_ledger.follow",
    "sandbox_ledger.dynamodb._follow",
    "sandbox_ledger.memory",
    "sandbox_ledger.stores",
    "sandbox_ledger.protocol",
    "sandbox_ledger.sql",
    "sandbox_ledger.sqlite",
    "sandbox_ledger.postgres",
    "sandbox_ledger.cli",
    "sandbox_ledger.local",
    "sandbox_ledger.resources.models",
    "sandbox_ledger.resources.store",
    "asyncio",
    "aioboto3",
    "aiobotocore",
    "aiohttp",
)


def test_a_workers_first_append_loads_the_append_path_only(
    moto_endpoint: str, sync_table: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, moto_endpoint, sync_table],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    loaded = set(seen["modules"])
    assert sorted(m for m in NOT_LOADED if m in loaded) == []
    # Every model of the package defers its validator to its first use (WireModel's
    # defer_build): the worker built LedgerEntry's, no other.
    assert seen["built"] == ["sandbox_ledger.models.LedgerEntry"]
