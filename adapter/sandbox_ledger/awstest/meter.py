"""What a ``make test-aws`` run consumed, measured in its test process: every DynamoDB request
asks for its consumed capacity (``ReturnConsumedCapacity=TOTAL``, unless the caller asked for
it already) and the answers are summed as read and write request units; every GetRecords of
the table's stream is counted (one stream read request unit each). Then a price for them.

Loaded into pytest as a plugin (``-p sandbox_ledger.awstest.meter``) when
``SANDBOX_LEDGER_AWS_METER`` names the file the totals are written to at the session's end.
Every botocore and aiobotocore client the process makes is watched (the clients are made
in many places: adapters, handlers, fixtures), so the hook is on the client class itself.
Not metered: requests of child processes (the CLI tests' commands), and the units of a
request that failed (DynamoDB charges a failed conditional write; its answer carries no
figure): those are counted as failed requests.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

ENV = "SANDBOX_LEDGER_AWS_METER"

READS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})

# On-demand, Standard table class, us-east-1, since the price cut of 2024-11-01 (as
# benchmarks/strict_cost.py and docs/table-design.md price them); other regions cost more.
WRITE_PRICE = 0.625
"""US dollars per million write request units."""
READ_PRICE = 0.125
"""US dollars per million read request units."""
STREAM_READ_PRICE = 0.2
"""US dollars per million stream read request units ($0.02 per 100,000)."""


class Meter:
    """Sums the consumed capacity of the requests of the clients it watches."""

    def __init__(self) -> None:
        self.read_units = 0.0
        self.write_units = 0.0
        self.stream_reads = 0
        self.calls: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self._lock = threading.Lock()

    def watch(self, client: Any) -> None:
        """Register on ``client``'s events if it is a DynamoDB or DynamoDB Streams client."""
        service = client.meta.service_model.service_id.hyphenize()
        events = client.meta.events
        if service == "dynamodb":
            events.register("provide-client-params.dynamodb", self._ask)
            events.register("after-call.dynamodb", self._count)
        elif service == "dynamodb-streams":
            events.register("after-call.dynamodb-streams.GetRecords", self._stream_read)

    def _ask(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name in READS | WRITES:
            params.setdefault("ReturnConsumedCapacity", "TOTAL")

    def _count(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        name = model.name
        consumed = parsed.get("ConsumedCapacity")
        parts = consumed if isinstance(consumed, list) else [consumed] if consumed else []
        units = sum(float(part.get("CapacityUnits", 0)) for part in parts)
        with self._lock:
            self.calls[name] += 1
            if "Error" in parsed:
                self.failed[name] += 1
            if name in READS:
                self.read_units += units
            elif name in WRITES:
                self.write_units += units

    def _stream_read(self, **_: Any) -> None:
        with self._lock:
            self.stream_reads += 1

    def totals(self) -> dict[str, Any]:
        """The figures so far, as JSON-ready values."""
        with self._lock:
            return {
                "readUnits": self.read_units,
                "writeUnits": self.write_units,
                "streamReads": self.stream_reads,
                "calls": dict(self.calls),
                "failed": dict(self.failed),
            }


def dollars(read_units: float, write_units: float, stream_reads: float) -> float:
    """Their price at :data:`READ_PRICE`, :data:`WRITE_PRICE` and :data:`STREAM_READ_PRICE`."""
    return (
        read_units * READ_PRICE + write_units * WRITE_PRICE + stream_reads * STREAM_READ_PRICE
    ) / 1e6


_INSTALLED: list[Meter] = []


def install(meter: Meter) -> None:
    """Watch every botocore (and aiobotocore) client made from now on in this process."""
    from botocore.client import BaseClient

    if _INSTALLED:
        raise RuntimeError("a meter is installed already")
    made = BaseClient.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        meter.watch(self)

    BaseClient.__init__ = init
    _INSTALLED.append(meter)


def pytest_configure(config: Any) -> None:
    """With :data:`ENV` set: install a meter for the session."""
    if os.environ.get(ENV):
        install(Meter())


def pytest_unconfigure(config: Any) -> None:
    """Write the session's totals to the file :data:`ENV` names."""
    path = os.environ.get(ENV)
    if path and _INSTALLED:
        Path(path).write_text(json.dumps(_INSTALLED[0].totals()) + "\n")
