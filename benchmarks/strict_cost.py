"""What the demo's fleet consumes on DynamoDB, measured on the strict embedded DynamoDB: units
per call and per session (table and each index) beside docs/table-design.md's figures, the
hottest partition keys as a share of DynamoDB's limits, the session rate at which the first
throttle appears, and dollars per thousand sessions at on-demand prices.

    python benchmarks/strict_cost.py    # docs/benchmarks.md, "Consumed capacity ..."
    python benchmarks/strict_cost.py --rates 2 --seconds 1 --execs 3 --exec-seconds 0 --calibrate 2

Method. An in-process ``LocalDynamoDB(strict=StrictProfile(...))`` (:func:`profile`): the
strict profile's defaults (global secondary indexes lagging up to 0.1 s, transactions in
flight 20 ms), TTL deletion off (``ttl_delay=None``), and ``rate_scale`` (``--rate-scale``,
default 0.05): DynamoDB's 1,000 write and 3,000 read units a second per partition key, and
4,000 and 12,000 per new on-demand table, times 0.05 (50 and 150 a key, 200 and 600 the
table), so that this 2-core machine, whose one embedded server answers a few hundred requests
a second, reaches them. Every session rate is reported twice: as run here, and divided by
``rate_scale`` ("at DynamoDB"); a share of a limit here is the same share of DynamoDB's limit
for a fleet 1/``rate_scale`` times as fast, each exec then as many times shorter.

The fleet is the demo's own code (``sandbox_ledger.cli.demo._sandbox``): each sandbox gets
(or builds) its environment, puts its resource record, appends ``sandbox.created``,
``--execs`` execs on two branches (``exec.started``, then ``exec.complete``, or
``exec.failed`` one step in seven; a live owner's record gets an operation start, finish and
heartbeat around each), a checkpoint every third step, a crash and resume in one sandbox in
five (``read_all``, ``last_checkpoint``), reads its summary and its checkpoints, appends
``sandbox.closed`` (five sandboxes in six) and lists its name's sessions; through one
``DynamoDBAdapter`` and one ``ResourceRecordStore``, wrapped to count each call. Two changes,
both in the wrapper: each exec runs ``--exec-seconds`` (default 1 s) between its
``exec.started`` and its outcome (the demo's execs take no time, and a session's own
partition key would take its units as fast as one client sends requests, whatever the
fleet's rate), and the listing is one page of 20 (``ListSandboxOptions(limit=20)``, as a
console reads it; the demo lists every session of its name, a read that grows with the table).

First ``--calibrate`` sandboxes run one at a time, the meter (``LocalDynamoDB.meter()``) read
around each call: each operation's units, table and each index, beside the write units
docs/table-design.md's "Capacity per operation" table gives it (read from the file:
:func:`documented_writes`). Then the
meter is reset and the fleet runs: sandboxes started at each of ``--rates`` sessions a second
for ``--seconds`` seconds, each step waiting for its sandboxes to finish, so the meter counts
whole sessions. Per step the meter is read every second: the table's write and read units in
its busiest second, and the hottest partition key of the table and of each index (the most
units one key took in one of those seconds; a bucket holds one second of its rate, so a
busiest second may pass 100% unthrottled). "Steady" is the step's rate times the table's
write units a session: the table's rate once sessions overlap fully. Throttles are counted
by a botocore ``needs-retry`` hook on both clients (``ProvisionedThroughputExceededException``,
``ThrottlingException``, a transaction cancelled with ``ThrottlingError``): every attempt
once, retried or not. The strict profile gives a global secondary index no throughput bucket
(docs/fidelity.md, "Open"): an index partition's share comes from the meter, and throttles
nothing here. A session whose sandbox ends in an error (past the adapter's retries) is
counted as failed, its units kept. Units per session are the meter's totals over every step
divided by the sessions (a throttled or cancelled request consumes nothing).

Prices: DynamoDB on-demand, Standard table class, US East (N. Virginia), since the price cut
of 2024-11-01: $0.625 per million write request units and $0.125 per million read request
units (https://aws.amazon.com/dynamodb/pricing/on-demand/, whose stored text did not show
the figures here; the figures as quoted on 2025-07-21 by
https://airbyte.com/data-engineering-resources/dynamodb-pricing, "after the 50% reduction
implemented in late 2024"; both read 2026-12-06). An index's writes are billed as the
table's. Storage, streams and data transfer are left out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import os
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox_ledger import ListSandboxOptions
from sandbox_ledger.cli.demo import DemoConfig, Report, _sandbox, _Stats
from sandbox_ledger.dynamodb import DynamoDBAdapter
from sandbox_ledger.local import LocalDynamoDB, StrictProfile
from sandbox_ledger.local.strict import MeterKey, Usage
from sandbox_ledger.local.strict.capacity import (
    PARTITION_READ,
    PARTITION_WRITE,
    TABLE_READ,
    TABLE_WRITE,
)
from sandbox_ledger.resources import ResourceRecordStore

WRITE_PRICE = 0.625
"""US dollars per million write request units (on-demand, us-east-1, Standard)."""
READ_PRICE = 0.125
"""US dollars per million read request units."""
TABLE = "strict-cost"
INDEXES = ("", "byName", "byNameStatus", "all", "allStatus")
THROTTLES = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
}
LISTING = ListSandboxOptions(limit=20)
OUTCOMES = {"exec.complete", "exec.failed"}

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "table-design.md"
# The rows of DESIGN's "Capacity per operation" table that give an operation's write units
# (the row's first figure, bold or not), and the operations (as the calibration names them)
# each gives them to.
ROWS = {
    "append exec.started": ("append exec.started", "append exec.failed"),
    "append exec.complete": ("append exec.complete",),
    "append checkpoint_created": ("append sandbox.checkpoint_created",),
    "append sandbox.created": ("append sandbox.created",),
    "append sandbox.closed": ("append sandbox.closed",),
    "resource put": ("resource put",),
    "resource record_operation_start": (
        "resource record_operation_start",
        "resource record_operation_finish",
    ),
    "resource touch": ("resource touch",),
}


def documented_writes(design: Path = DESIGN) -> dict[str, float]:
    """The write units ``design`` (docs/table-design.md, "Capacity per operation") gives
    each operation of :data:`ROWS`.

    Raises:
        ValueError: naming the file and the rows it lacks.
    """
    text = design.read_text(encoding="utf-8")
    section = text.split("## Capacity per operation", 1)[1].split("\n## ", 1)[0]
    units = {}
    for row in section.splitlines():
        for prefix, ops in ROWS.items():
            found = re.match(r"\| [^|]+ \| (?:\*\*)?(\d+)(?:\*\*)? \|", row)
            if row.startswith(f"| {prefix}") and found:
                units.update(dict.fromkeys(ops, float(found.group(1))))
    missing = [prefix for prefix, ops in ROWS.items() if ops[0] not in units]
    if missing:
        raise ValueError(f"{design}: no write units for {missing}")
    return units


def kind(partition: str) -> str:
    """What a partition key value (the meter's compact JSON) belongs to."""
    value = str(next(iter(json.loads(partition).values())))
    for prefix, name in (
        ("S#", "session"),
        ("N#", "session"),
        ("NS#", "session"),
        ("A#", "session"),
        ("AS#", "session"),
        ("R#", "resource"),
        ("RP#", "resource"),
        ("RV#", "resource"),
        ("ENV", "environment"),
        ("DEPLOYMENT", "descriptor"),
    ):
        if value.startswith(prefix):
            return name
    return "other"


def label(partition: str) -> str:
    """A partition key value for people: its text, a session's or record's id shortened."""
    value = str(next(iter(json.loads(partition).values())))
    return value if len(value) <= 28 else value[:25] + "..."


@dataclass
class Totals:
    """Units per (index or "" for the table) and per kind of partition key."""

    index: dict[str, Usage] = field(default_factory=dict)
    kinds: dict[str, Usage] = field(default_factory=dict)

    @classmethod
    def between(cls, before: dict[MeterKey, Usage], after: dict[MeterKey, Usage]) -> Totals:
        out = cls()
        for key, usage in after.items():
            was = before.get(key, Usage())
            read, write = usage.read - was.read, usage.write - was.write
            if not (read or write):
                continue
            _, index, partition = key
            for bag, name in ((out.index, index), (out.kinds, kind(partition))):
                had = bag.get(name, Usage())
                bag[name] = Usage(had.read + read, had.write + write)
        return out

    @property
    def read(self) -> float:
        return sum(u.read for u in self.index.values())

    @property
    def write(self) -> float:
        return sum(u.write for u in self.index.values())


@dataclass
class Hot:
    """The most units one partition key took in one second."""

    index: str = ""
    partition: str = ""
    units: float = 0.0


@dataclass
class Step:
    """One rate's figures."""

    rate: float
    """Sessions a second asked for."""
    achieved: float
    """Sessions a second started."""
    sessions: int
    seconds: float
    """From the first sandbox's start to the last one's end."""
    totals: Totals
    throttles: Counter[str]
    """Throttled attempts by operation."""
    failed: Counter[str]
    """Sessions that ended in an error, by the error's type (their units still counted)."""
    errors: dict[str, str]
    """The first error of each type, its message."""
    hot_write: dict[str, Hot]
    """Per index ("" the table): the hottest key's write units in one second."""
    hot_read: dict[str, Hot]
    table_write: float
    """The table's (all its keys') most write units in one second."""
    table_read: float


@dataclass
class Calibration:
    """Units per call of each operation, one sandbox running alone."""

    calls: Counter[str] = field(default_factory=Counter)
    units: dict[str, Totals] = field(default_factory=dict)

    def per_call(self, op: str, index: str = "") -> Usage:
        found = self.units.get(op, Totals()).index.get(index, Usage())
        n = self.calls[op] or 1
        return Usage(found.read / n, found.write / n)


class _Metered:
    """The demo's adapter or store as the demo calls it, each exec taking ``exec_seconds``
    (before its outcome's append) and the listing one page; with ``calibration``, the meter
    read around each call and its units added to the call's operation (named ``prefix`` and
    the method, an append by its event; right only while one call runs at a time)."""

    def __init__(
        self,
        inner: Any,
        server: LocalDynamoDB,
        calibration: Calibration | None = None,
        exec_seconds: float = 0.0,
        prefix: str = "",
    ) -> None:
        self._inner, self._server, self._calibration = inner, server, calibration
        self._exec_seconds, self._prefix = exec_seconds, prefix

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            op = self._prefix + name
            if name == "append":
                op = f"append {args[0].event}"
                if args[0].event in OUTCOMES:  # the exec runs between started and its outcome
                    await asyncio.sleep(self._exec_seconds)
            if name == "list_sandbox_details" and len(args) == 1 and not kwargs:
                args = (args[0], LISTING)
            if self._calibration is None:
                return await attr(*args, **kwargs)
            before = self._server.meter()
            try:
                return await attr(*args, **kwargs)
            finally:
                used = Totals.between(before, self._server.meter())
                self._calibration.calls[op] += 1
                had = self._calibration.units.setdefault(op, Totals())
                for index, usage in used.index.items():
                    was = had.index.get(index, Usage())
                    had.index[index] = Usage(was.read + usage.read, was.write + usage.write)

        return call


def _throttled(counter: Counter[str]) -> Any:
    def on_attempt(response: Any = None, operation: Any = None, **_: Any) -> None:
        if not response:
            return
        error = response[1].get("Error", {}) if isinstance(response[1], dict) else {}
        code = error.get("Code", "")
        reasons = response[1].get("CancellationReasons") or []
        if code in THROTTLES or any(r.get("Code") == "ThrottlingError" for r in reasons):
            counter[getattr(operation, "name", "?")] += 1

    return on_attempt


class Fleet:
    """The demo's sandboxes against one strict embedded DynamoDB."""

    def __init__(self, server: LocalDynamoDB, execs: int, exec_seconds: float = 0.0) -> None:
        self.server, self.exec_seconds = server, exec_seconds
        self.config = DemoConfig(
            sandboxes=1, execs=execs, branches=2, concurrency=1, dead_owner_share=0.25
        )
        self.report = Report()
        self.stats = _Stats(self.report)
        self.throttles: Counter[str] = Counter()
        self.next = 0
        self.base = int(time.time() * 1000) - 10**9

    async def __aenter__(self) -> Fleet:
        endpoint = self.server.endpoint_url
        self.ledger = DynamoDBAdapter(TABLE, endpoint_url=endpoint, region_name="us-east-1")
        await self.ledger.__aenter__()
        await self.ledger.create_table()
        self.store = ResourceRecordStore(TABLE, endpoint_url=endpoint, region_name="us-east-1")
        hook = _throttled(self.throttles)
        for client in (await self.ledger.client(), await self.store.client()):
            client.meta.events.register("needs-retry.dynamodb", hook)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.store.close()
        await self.ledger.__aexit__(*exc)

    async def sandbox(self, calibration: Calibration | None = None) -> None:
        i, self.next = self.next, self.next + 1
        pace = 0.0 if calibration is not None else self.exec_seconds
        ledger = _Metered(self.ledger, self.server, calibration, pace)
        store = _Metered(self.store, self.server, calibration, prefix="resource ")
        # The wrappers stand in for the demo's DynamoDBAdapter and ResourceRecordStore.
        await _sandbox(i, self.base, self.config, ledger, store, self.stats, self.report)

    async def calibrate(self, sandboxes: int) -> Calibration:
        """Run ``sandboxes`` sandboxes one after another, each call's units metered."""
        calibration = Calibration()
        for _ in range(sandboxes):
            await self.sandbox(calibration)
        return calibration

    async def step(self, rate: float, seconds: float) -> Step:
        """Start sandboxes at ``rate`` a second for ``seconds`` seconds; wait for them all."""
        self.throttles.clear()
        snapshots = [self.server.meter()]
        times = [time.monotonic()]
        done = asyncio.Event()

        async def sample() -> None:
            while not done.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), 1.0)
                snapshots.append(self.server.meter())
                times.append(time.monotonic())

        sampler = asyncio.create_task(sample())
        count = max(1, round(rate * seconds))
        start = time.monotonic()
        tasks = []
        for k in range(count):
            await asyncio.sleep(max(0.0, start + k / rate - time.monotonic()))
            tasks.append(asyncio.create_task(self.sandbox()))
        launched = time.monotonic() - start + 1 / rate
        ended = await asyncio.gather(*tasks, return_exceptions=True)
        errors = [e for e in ended if isinstance(e, BaseException)]
        failed = Counter(type(e).__name__ for e in errors)
        first = {type(e).__name__: str(e) for e in reversed(errors)}
        elapsed = time.monotonic() - start
        done.set()
        await sampler
        hot_write: dict[str, Hot] = defaultdict(Hot)
        hot_read: dict[str, Hot] = defaultdict(Hot)
        table_write = table_read = 0.0
        for k in range(1, len(snapshots)):
            # A last sample shorter than a second is counted over a second (a bucket's).
            span = max(times[k] - times[k - 1], 1.0)
            before, after = snapshots[k - 1], snapshots[k]
            sums = [0.0, 0.0]
            for key, usage in after.items():
                was = before.get(key, Usage())
                _, index, partition = key
                read, write = (usage.read - was.read) / span, (usage.write - was.write) / span
                if index == "":
                    sums[0] += write
                    sums[1] += read
                if write > hot_write[index].units:
                    hot_write[index] = Hot(index, partition, write)
                if read > hot_read[index].units:
                    hot_read[index] = Hot(index, partition, read)
            table_write, table_read = max(table_write, sums[0]), max(table_read, sums[1])
        return Step(
            rate=rate,
            achieved=count / launched,
            sessions=count,
            seconds=elapsed,
            totals=Totals.between(snapshots[0], snapshots[-1]),
            throttles=Counter(self.throttles),
            failed=failed,
            errors=first,
            hot_write=dict(hot_write),
            hot_read=dict(hot_read),
            table_write=table_write,
            table_read=table_read,
        )


@dataclass
class Result:
    rate_scale: float
    execs: int
    exec_seconds: float
    calibration: Calibration
    steps: list[Step]

    @property
    def sessions(self) -> int:
        return sum(s.sessions for s in self.steps)

    @property
    def per_session(self) -> Totals:
        """Units per session over every step."""
        out = Totals()
        for step in self.steps:
            for bag, mine in ((out.index, step.totals.index), (out.kinds, step.totals.kinds)):
                for name, usage in mine.items():
                    had = bag.get(name, Usage())
                    bag[name] = Usage(had.read + usage.read, had.write + usage.write)
        n = self.sessions or 1
        for bag in (out.index, out.kinds):
            for name, usage in bag.items():
                bag[name] = Usage(usage.read / n, usage.write / n)
        return out

    def first_throttle(self) -> Step | None:
        """The first step whose requests were throttled, if any."""
        return next((s for s in self.steps if sum(s.throttles.values())), None)


def profile(rate_scale: float) -> StrictProfile:
    """The strict profile the benchmark runs: the defaults, TTL deletion off, ``rate_scale``."""
    return StrictProfile(rate_scale=rate_scale, ttl_delay=None)


async def measure(
    *,
    rates: list[float],
    seconds: float,
    execs: int,
    exec_seconds: float,
    rate_scale: float,
    calibrate: int,
    server: LocalDynamoDB | None = None,
) -> Result:
    """The benchmark's core: calibrate, then run each step of the fleet (on ``server``, a
    started strict ``LocalDynamoDB``, if given, else on one of :func:`profile`). The meter
    is reset after the calibration: it then holds the steps' units only."""
    own = server is None
    if server is None:
        server = LocalDynamoDB(strict=profile(rate_scale))
        server.start()
    try:
        async with Fleet(server, execs, exec_seconds) as fleet:
            calibration = await fleet.calibrate(calibrate)
            server.wait_for_indexes()
            server.reset_meter()  # from here, the steps' whole sessions only
            steps = []
            for rate in rates:
                steps.append(await fleet.step(rate, seconds))
                server.wait_for_indexes()
        return Result(rate_scale, execs, exec_seconds, calibration, steps)
    finally:
        if own:
            server.stop()


def dollars_per_thousand(read: float, write: float) -> float:
    """US dollars for a thousand sessions of ``read`` and ``write`` units each."""
    return 1000 * (read * READ_PRICE + write * WRITE_PRICE) / 1e6


def canonical(calibration: Calibration, execs: int) -> tuple[Usage, float]:
    """A session of ``execs`` execs (started and complete), one checkpoint, created and
    closed, from the calibrated units per call (the table and every index), and the write
    units docs/table-design.md gives it."""
    documented = documented_writes()
    ops = {
        "sandbox.created": 1,
        "exec.started": execs,
        "exec.complete": execs,
        "sandbox.checkpoint_created": 1,
        "sandbox.closed": 1,
    }
    read = write = estimate = 0.0
    for event, n in ops.items():
        for index in INDEXES:
            used = calibration.per_call(f"append {event}", index)
            read, write = read + n * used.read, write + n * used.write
        estimate += n * documented[f"append {event}"]
    return Usage(read, write), estimate


def _share(units: float, limit: float) -> str:
    return f"{units:.0f} ({units / limit:.0%})"


def _where(hot: Hot) -> str:
    return f"`{label(hot.partition)}`" if hot.partition else "-"


def show(result: Result) -> None:
    scale = result.rate_scale
    cal = result.calibration
    documented = documented_writes()
    print(
        f"load average {os.getloadavg()[0]:.1f}; rate_scale {scale:g}; {result.execs} execs "
        f"of {result.exec_seconds:g} s a sandbox"
    )
    print()
    print("Units per call, one sandbox at a time (mean of the calls)")
    print()
    names = " | ".join(f"{i} WCU" for i in INDEXES[1:])
    print(f"| operation | calls | table RCU | table WCU | {names} | total WCU | docs WCU |")
    print("|---|---:|---:|---:|" + "---:|" * (len(INDEXES) + 1))
    for op in sorted(cal.calls):
        table = cal.per_call(op)
        cells = " | ".join(f"{cal.per_call(op, i).write:g}" for i in INDEXES[1:])
        estimate = f"{documented[op]:g}" if op in documented else "-"
        total = sum(cal.per_call(op, i).write for i in INDEXES)
        print(
            f"| {op} | {cal.calls[op]} | {table.read:.3g} | {table.write:.3g} | {cells} "
            f"| {total:.3g} | {estimate} |"
        )
    used, estimate = canonical(cal, result.execs)
    print()
    print(
        f"A session of {result.execs} execs (started and complete), a checkpoint, created and "
        f"closed, its appends only: {used.write:g} WCU and {used.read:g} RCU measured; "
        f"docs/table-design.md says {estimate:g} WCU."
    )
    print()
    print(
        "Per step: sessions started a second (here and at DynamoDB's scale), the table's "
        "write units a second once sessions overlap fully (the rate times the table's units "
        "per session) and in its busiest second (share of a new on-demand table's 4,000 WCU "
        "and 12,000 RCU), the hottest key's busiest second (share of 1,000 WCU or 3,000 RCU "
        "a key), throttled attempts"
    )
    print()
    print(
        "| sessions/s | at DynamoDB | sessions | s | table WCU/s steady | table WCU/s "
        "| table RCU/s | hottest table key WCU/s | hottest key RCU/s | throttled | failed |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|")
    steady = result.per_session.index.get("", Usage()).write
    for s in result.steps:
        key_w = s.hot_write.get("", Hot())
        key_r = max(s.hot_read.values(), key=lambda h: h.units, default=Hot())
        detail = ", ".join(f"{op} {n}" for op, n in s.throttles.most_common())
        print(
            f"| {s.achieved:.2f} | {s.achieved / scale:,.0f} | {s.sessions} | {s.seconds:.0f} "
            f"| {_share(s.achieved * steady, TABLE_WRITE * scale)} "
            f"| {_share(s.table_write, TABLE_WRITE * scale)} "
            f"| {_share(s.table_read, TABLE_READ * scale)} "
            f"| {_share(key_w.units, PARTITION_WRITE * scale)} {_where(key_w)} "
            f"| {_share(key_r.units, PARTITION_READ * scale)} {key_r.index or 'table'} "
            f"{_where(key_r)} | {sum(s.throttles.values())}{f' ({detail})' if detail else ''} "
            f"| {', '.join(f'{n} {e}' for e, n in s.failed.items()) or 0} |"
        )
    for s in result.steps:
        for name, message in s.errors.items():
            print(f"\nat {s.achieved:.2f} sessions/s, {name}: {message[:600]}")
    first = result.first_throttle()
    print()
    if first is None:
        print("No throttle at any step.")
    else:
        print(
            f"First throttle at {first.achieved:.2f} sessions/s: {first.achieved / scale:,.0f} "
            f"sessions/s at DynamoDB's limits."
        )
    print()
    print("Per step, each index's hottest partition (WCU/s in its busiest second, share of 1,000)")
    print()
    print("| sessions/s | " + " | ".join(INDEXES[1:]) + " |")
    print("|---:|" + "---|" * (len(INDEXES) - 1))
    for s in result.steps:
        cells = [
            f"{_share(s.hot_write.get(i, Hot()).units, PARTITION_WRITE * scale)} "
            f"{_where(s.hot_write.get(i, Hot()))}"
            for i in INDEXES[1:]
        ]
        print(f"| {s.achieved:.2f} | " + " | ".join(cells) + " |")
    per = result.per_session
    print()
    print(f"Units per session, the fleet ({result.sessions} sessions, every step)")
    print()
    print("| where | RCU | WCU |")
    print("|---|---:|---:|")
    for name in INDEXES:
        usage = per.index.get(name, Usage())
        print(f"| {name or 'table'} | {usage.read:.2f} | {usage.write:.2f} |")
    for name, usage in sorted(per.kinds.items()):
        print(f"| {name} keys (table and indexes) | {usage.read:.2f} | {usage.write:.2f} |")
    print(f"| **total** | **{per.read:.2f}** | **{per.write:.2f}** |")
    print()
    print(
        f"${dollars_per_thousand(per.read, per.write):.4f} per 1,000 sessions (on-demand, "
        f"us-east-1: ${WRITE_PRICE} per million write, ${READ_PRICE} per million read units)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[1, 1.5, 2, 3])
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds per step")
    parser.add_argument("--execs", type=int, default=6, help="execs per sandbox (the demo's)")
    parser.add_argument(
        "--exec-seconds", type=float, default=1.0, help="seconds each exec runs (the fleet's)"
    )
    parser.add_argument("--rate-scale", type=float, default=0.05)
    parser.add_argument("--calibrate", type=int, default=12, help="sandboxes run alone")
    args = parser.parse_args()
    result = asyncio.run(
        measure(
            rates=args.rates,
            seconds=args.seconds,
            execs=args.execs,
            exec_seconds=args.exec_seconds,
            rate_scale=args.rate_scale,
            calibrate=args.calibrate,
        )
    )
    show(result)


if __name__ == "__main__":
    main()
