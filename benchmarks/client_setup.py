"""The CPU an async adapter spends creating its client and sending its first request, next to
the raw aioboto3 client doing the same, with the server in another process (not counted).

Sides, interleaved run after run, each a fresh client and one ``ListTables``:

- ``raw aioboto3``: ``aioboto3.Session().client("dynamodb")``, as an application would;
- ``raw aioboto3, one session``: a new client from one long-lived session;
- ``adapter, stock TLS``: ``DynamoDBAdapter`` with aiobotocore's own HTTP session (a new TLS
  context per client, the CA bundle loaded into each), i.e. the adapter before
  ``sandbox_ledger.sdk.tls``;
- ``adapter``: ``DynamoDBAdapter`` as shipped (one TLS context per CA bundle and process).

    python benchmarks/client_setup.py             # 200 runs per side
    python benchmarks/client_setup.py --runs 50   # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aioboto3
from aiobotocore.config import AioConfig
from aiobotocore.httpsession import AIOHTTPSession

from sandbox_ledger.dynamodb import DynamoDBAdapter
from sandbox_ledger.local import LocalDynamoDBProcess


class StockTLS(AIOHTTPSession):  # type: ignore[misc]
    """aiobotocore's own HTTP session, named so that the adapter keeps it (a caller's choice)."""


def sides(endpoint: str) -> dict[str, Callable[[], Awaitable[None]]]:
    shared = aioboto3.Session()

    async def raw(session: Any) -> None:
        async with session.client("dynamodb", endpoint_url=endpoint) as client:
            await client.list_tables()

    async def adapter(config: Any) -> None:
        ledger = DynamoDBAdapter("bench", endpoint_url=endpoint, config=config)
        try:
            await (await ledger.client()).list_tables()
        finally:
            await ledger.close()

    return {
        "raw aioboto3": lambda: raw(aioboto3.Session()),
        "raw aioboto3, one session": lambda: raw(shared),
        "adapter, stock TLS": lambda: adapter(AioConfig(http_session_cls=StockTLS)),
        "adapter": lambda: adapter(None),
    }


async def measure(endpoint: str, runs: int) -> dict[str, list[float]]:
    cases = sides(endpoint)
    for case in cases.values():  # warm: imports, the shared model loader, the TLS cache
        await case()
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, case in cases.items():
            start = time.process_time()
            await case()
            cpu[name].append((time.process_time() - start) * 1000)
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    server = LocalDynamoDBProcess()
    endpoint = server.start()
    try:
        cpu = asyncio.run(measure(endpoint, args.runs))
    finally:
        server.stop()
    bundle = os.environ.get("AWS_CA_BUNDLE") or "certifi's (botocore's default)"
    print(f"CA bundle: {bundle}; {args.runs} runs per side, load {os.getloadavg()[0]:.1f}")
    base = statistics.median(cpu["raw aioboto3"])
    print("| side | median CPU ms | p90 CPU ms | vs raw aioboto3 |")
    print("|---|---:|---:|---:|")
    for name, values in cpu.items():
        median = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"| {name} | {median:.1f} | {p90:.1f} | {median / base:.2f}x |")


if __name__ == "__main__":
    main()
