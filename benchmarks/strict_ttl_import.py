"""An import into the strict embedded DynamoDB as its table grows: what TTL's looks cost.

The strict profile's TTL service (``sandbox_ledger/local/strict/ttl.py``) reads every item of
the tables whose TTL is enabled at each look, under the server's lock. Looking every
``ttl_every`` seconds whatever a look costs made an import into a large table crawl (the
soak's final round trip into the embedded DynamoDB went at tens of entries a second); a look
now puts the next one off so that looks take at most ``BUSY_SHARE`` of the server's time.

Method: an in-process ``LocalDynamoDB(strict=StrictProfile(conflict_hold=0, index_delay=(0,
0), ttl_every=1))`` (the round trip's profile, DynamoDB's rates), the ledger's table (TTL
enabled), and ``import_lines`` of ``--entries`` entries (sessions of 10) over HTTP, timed per
``--step`` entries. Twice in the same run: with the looks' share bounded (the code as it is),
and with the bound lifted (``BUSY_SHARE`` so large that the next look is due ``ttl_every``
on, whatever the last one took: the code before, the baseline).

    .venv/bin/python benchmarks/strict_ttl_import.py                  # 40,000 entries
    .venv/bin/python benchmarks/strict_ttl_import.py --entries 4000 --step 1000
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from sandbox_ledger import LedgerEntry
from sandbox_ledger.deployment import SweepSettings
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.local import LocalDynamoDB, StrictProfile
from sandbox_ledger.local.strict import ttl
from sandbox_ledger.transfer import entry_line, import_lines

REGION = "us-east-1"


def _lines(start: int, count: int) -> list[bytes]:
    """``count`` entry lines, sessions of 10, numbered from ``start``."""
    lines: list[bytes] = []
    for n in range(start, start + count):
        session, step = divmod(n, 10)
        event = "sandbox.created" if step == 0 else "exec.complete"
        entry = LedgerEntry(
            ts=1_700_000_000_000 + n,
            name="bench",
            sandbox_id=f"sb-{session:07d}",
            step_index=step - 1,
            event=event,
            payload={"exitCode": 0, "stdout": "x" * 200},
        )
        lines.append((entry_line(entry) + "\n").encode())
    return lines


def run(entries: int, step: int, bounded: bool) -> dict[str, Any]:
    """Import ``entries`` entries ``step`` at a time into a table of its own (moto's
    tables outlive a server in this process); the rate of each step."""
    share = ttl.BUSY_SHARE
    if not bounded:
        ttl.BUSY_SHARE = 1e18  # the next look ttl_every on, however long the last took
    server = LocalDynamoDB(strict=StrictProfile(conflict_hold=0, index_delay=(0, 0), ttl_every=1.0))
    server.start()
    try:
        with SyncDynamoDBAdapter(
            f"bench-ttl-{bounded}", endpoint_url=server.endpoint_url, region_name=REGION
        ) as ledger:
            ledger.create_table(sweep=SweepSettings())
            rates: list[float] = []
            for start in range(0, entries, step):
                began = time.perf_counter()
                report = import_lines(ledger, _lines(start, step))
                assert not report.failed and report.new == step, report
                rates.append(round(step / (time.perf_counter() - began), 1))
    finally:
        server.stop()
        ttl.BUSY_SHARE = share
    return {"ttlLooksBounded": bounded, "entriesPerSecondEachStep": rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=40_000)
    parser.add_argument("--step", type=int, default=10_000)
    args = parser.parse_args()
    for bounded in (True, False):
        print(json.dumps({"entries": args.entries, **run(args.entries, args.step, bounded)}))


if __name__ == "__main__":
    main()
