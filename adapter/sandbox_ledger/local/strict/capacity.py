"""Throughput per partition key and per table, as DynamoDB limits an on-demand table.

DynamoDB's rules, quoted:

- Developer Guide, "Partitions and data distribution" / "Quotas": "each partition can
  support a maximum of 3,000 read capacity units (RCUs) or 1,000 write capacity units
  (WCUs)"; "Per table [on-demand]: 40,000 read request units and 40,000 write request
  units" as a quota, while a *new* on-demand table "can sustain up to 4,000 writes per
  second and 12,000 reads per second" until it scales ("On-demand capacity mode", initial
  throughput).
- Developer Guide, "Read/write capacity mode": "One write request unit represents one write
  for an item up to 1 KB in size"; "One read request unit represents one strongly consistent
  read request, or two eventually consistent read requests, for an item up to 4 KB in size";
  "Transactional read/write requests require 2 read/write request units".

A :class:`Buckets` holds one bucket per (table, partition key value) and one per table, for
reads and for writes, each refilled at its rate times ``scale`` per second and holding at most
one second of it (a request costing more than that runs when the bucket is full, into debt).
A write is refused when a bucket it needs holds less than its cost as known before it runs
(the larger of the item sent and the one stored); a read, whose cost is known once it is
served (a Query's from what it read), when its bucket is in debt. What a request consumed is
taken after it is served, as DynamoDB computes it (:mod:`.consumed`: a write's on the larger
of its before and after images).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "PARTITION_READ",
    "PARTITION_WRITE",
    "TABLE_READ",
    "TABLE_WRITE",
    "Buckets",
    "read_units",
    "write_units",
]

PARTITION_WRITE = 1_000.0
PARTITION_READ = 3_000.0
TABLE_WRITE = 4_000.0
TABLE_READ = 12_000.0


def write_units(size: int, *, transactional: bool = False) -> float:
    """Write units of one item of ``size`` bytes: one per KB started, twice in a transaction."""
    units = max(1, math.ceil(size / 1024))
    return float(units * (2 if transactional else 1))


def read_units(size: int, *, consistent: bool, transactional: bool = False) -> float:
    """Read units of ``size`` bytes read (a Query's items summed before rounding): one per
    4 KB started, half for an eventually consistent read, twice in a transaction."""
    units = max(1, math.ceil(size / 4096))
    if transactional:
        return float(units * 2)
    return float(units) if consistent else units / 2


@dataclass
class _Bucket:
    rate: float
    level: float
    at: float

    def holds(self, cost: float) -> bool:
        """Whether a request of ``cost`` units may run now: the bucket holds its cost, or is
        full when the cost is more than it ever holds (it then runs into debt)."""
        return self.level >= max(min(cost, self.rate), 1e-9)

    def refill(self, now: float) -> None:
        self.level = min(self.rate, self.level + (now - self.at) * self.rate)
        self.at = now


class Buckets:
    """The read and write buckets of every partition key and table this server serves."""

    def __init__(self, scale: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        if not scale > 0:
            raise ValueError("scale: must be above 0")
        self.scale, self._clock = scale, clock
        self._buckets: dict[tuple[str, str, str], _Bucket] = {}
        self._lock = threading.Lock()

    def _bucket(self, kind: str, table: str, key: str, now: float) -> _Bucket:
        found = self._buckets.get((kind, table, key))
        if found is None:
            base = {
                ("write", True): PARTITION_WRITE,
                ("read", True): PARTITION_READ,
                ("write", False): TABLE_WRITE,
                ("read", False): TABLE_READ,
            }[(kind, bool(key))]
            rate = base * self.scale
            found = self._buckets[(kind, table, key)] = _Bucket(rate, rate, now)
        found.refill(now)
        return found

    def short(self, kind: str, table: str, costs: dict[str, float]) -> list[str]:
        """Those partition keys of ``costs`` whose bucket holds less than their cost (a read,
        whose cost is known only once served, needs its bucket out of debt: cost 0); else
        ``[""]`` when the table's bucket holds less than their sum."""
        with self._lock:
            now = self._clock()
            hot = [
                key
                for key, cost in costs.items()
                if not self._bucket(kind, table, key, now).holds(cost)
            ]
            if hot or self._bucket(kind, table, "", now).holds(sum(costs.values())):
                return hot
            return [""]

    def take(self, kind: str, table: str, costs: dict[str, float], extra: float = 0.0) -> None:
        """Take each partition key's units, and their sum and ``extra`` (units no partition
        key bears: a Scan's, an index's) from the table's bucket."""
        with self._lock:
            now = self._clock()
            for key, units in costs.items():
                self._bucket(kind, table, key, now).level -= units
            self._bucket(kind, table, "", now).level -= sum(costs.values()) + extra
