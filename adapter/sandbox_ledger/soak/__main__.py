"""A run of the fleet under faults, then its check (``make soak``, ``make soak-short``).

``python -m sandbox_ledger.soak --store dynamodb|sqlite|postgresql [--seconds S] [--seed N]
[--workers W] [--kill-every K] [--out DIR]``: starts the store (the embedded DynamoDB in a
child process, on the strict profile with its rates scaled down so that throttling comes,
behind a :class:`~.proxy.FaultProxy`; a throwaway PostgreSQL server behind one too; or a
SQLite file), ``W`` worker processes, and kills
one with SIGKILL about every ``K`` seconds (drawn from the seed), starting another in its
place. On DynamoDB, owners of resource records and the sweeper run too (:mod:`.owner`,
:mod:`.sweeper`), and after the fleet a last sweeper until the records are gone. At the end
it checks the history and the store (:mod:`.checker`, :mod:`.check_resources`), prints the
figures as one JSON line, and exits 1 on any violation, each printed with its excerpt of the
history, the seed and the command that runs the same faults again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sandbox_ledger.soak._stores import close_store
from sandbox_ledger.soak.check_resources import check_stored
from sandbox_ledger.soak.checker import check
from sandbox_ledger.soak.history import operations, read_history
from sandbox_ledger.soak.proxy import FaultProxy
from sandbox_ledger.soak.sweeper import DEFECTS as SWEEPER_DEFECTS
from sandbox_ledger.soak.sweeper import WINDOW
from sandbox_ledger.soak.worker import DEFECTS, LEDGER_NAME
from sandbox_ledger.stores import open_store

TABLE = "soak-ledger"
READ_IDLE_SECONDS = 10.0
"""The last reader stops once the feed gave nothing for this long."""
STREAM_RECORDS = 50_000
"""Stream records the embedded DynamoDB keeps (the oldest beyond are trimmed)."""
OWNERS = 2
"""Owners of resource records in a run on DynamoDB."""
SWEEP_IDLE_SECONDS = 3.0
"""The last sweeper stops once the table held no resource record and nothing expired for
this long."""
LAST_SWEEP_SECONDS = 120.0
"""The longest the last sweeper runs (a dead record expires within about 30 s)."""
GRACE_SECONDS = 30.0
"""How long workers get after the run's time to finish their operation in flight."""


class Fleet:
    """The worker processes of a run, and the kills made."""

    def __init__(
        self, store: str, history: Path, seed: int, deadline: float, defect: str | None = None
    ) -> None:
        self.store, self.history, self.deadline, self.defect = store, history, deadline, defect
        self._rng = random.Random(seed)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.readers: dict[str, subprocess.Popen[bytes]] = {}
        self.resources: dict[str, subprocess.Popen[bytes]] = {}
        """Owners of resource records and the sweeper (DynamoDB only: :mod:`.owner`,
        :mod:`.sweeper`)."""
        self.started = self.killed = self.sweeper_kills = 0
        self.overran: list[str] = []

    def _start(
        self, module: str, name: str, seconds: float, *extra: str
    ) -> subprocess.Popen[bytes]:
        """Start ``python -m sandbox_ledger.soak.<module>`` as process ``name`` of the run."""
        self.started += 1
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                f"sandbox_ledger.soak.{module}",
                "--store",
                self.store,
                "--history",
                str(self.history),
                "--name",
                name,
                "--seconds",
                f"{seconds:.3f}",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def spawn(self, slot: int) -> None:
        name = f"w{slot}.{self.started}"
        defect = ["--defect", self.defect] if self.defect in DEFECTS else []
        seed = str(self._rng.randrange(2**32))
        self.workers[name] = self._start("worker", name, self._left(), "--seed", seed, *defect)

    def spawn_reader(self, *, idle: float | None = None) -> subprocess.Popen[bytes]:
        """The change-feed reader (:mod:`.reader`); with ``idle``, the last one, which reads
        the feed to its end."""
        name = f"r.{self.started}"
        extra = [*(["--idle", str(idle)] if idle is not None else [])]
        extra += ["--defect", "skip"] if self.defect == "skip" else []
        seconds = self._left() if idle is None else 600.0
        self.readers[name] = self._start("reader", name, seconds, *extra)
        return self.readers[name]

    def spawn_follower(self) -> None:
        """A follower of live sessions (:mod:`.follower`)."""
        name = f"f.{self.started}"
        seed = str(self._rng.randrange(2**32))
        self.readers[name] = self._start("follower", name, self._left(), "--seed", seed)

    def spawn_owner(self, slot: int) -> None:
        """An owner of resource records (:mod:`.owner`)."""
        name = f"o{slot}.{self.started}"
        seed = str(self._rng.randrange(2**32))
        self.resources[name] = self._start("owner", name, self._left(), "--seed", seed)

    def spawn_sweeper(self, *, pause: float = 0.0, idle: float | None = None) -> Any:
        """The sweeper (:mod:`.sweeper`), after ``pause`` seconds out; with ``idle``, the
        last one, which runs until the table holds no resource record."""
        name = f"z.{self.started}"
        extra = ["--pause", f"{pause:.3f}"]
        extra += [] if idle is None else ["--idle", str(idle)]
        extra += ["--defect", self.defect] if self.defect in SWEEPER_DEFECTS else []
        seconds = self._left() if idle is None else LAST_SWEEP_SECONDS
        self.resources[name] = self._start("sweeper", name, seconds, *extra)
        return self.resources[name]

    def kill_one(self) -> None:
        """SIGKILL a worker, the reader, the follower, an owner or the sweeper, drawn from the
        seed, and start another in its place (a sweeper, now and then, after an outage)."""
        processes = {**self.workers, **self.readers, **self.resources}
        alive = sorted(n for n, p in processes.items() if p.poll() is None)
        if not alive:
            return
        name = self._rng.choice(alive)
        processes[name].send_signal(signal.SIGKILL)
        processes[name].wait()
        self.killed += 1
        if name.startswith("r."):
            self.spawn_reader()
        elif name.startswith("f."):
            self.spawn_follower()
        elif name.startswith("o"):
            self.spawn_owner(int(name[1:].split(".")[0]))
        elif name.startswith("z."):
            self.sweeper_kills += 1
            out = self._rng.random() < 0.5  # out long enough for the TTL backstop to act
            self.spawn_sweeper(pause=self._rng.uniform(2, 3) * WINDOW.total_seconds() if out else 0)
        else:
            self.spawn(int(name[1:].split(".")[0]))

    def wait(self, grace: float) -> None:
        """Wait for every process to end; one still running ``grace`` seconds after its time
        was up is killed and named in :attr:`overran`."""
        end = time.monotonic() + grace
        for name, process in [
            *self.workers.items(),
            *self.readers.items(),
            *self.resources.items(),
        ]:
            try:
                process.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                self.overran.append(name)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sandbox_ledger.soak")
    parser.add_argument("--store", choices=["dynamodb", "sqlite", "postgresql"], default="dynamodb")
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 60)))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SOAK_SEED", 1)))
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--kill-every", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--defect",
        choices=sorted([*DEFECTS, "skip", *SWEEPER_DEFECTS]),
        default=None,
        help="run the workers (resend), the change reader (skip) or the sweeper (early, "
        "republish; dynamodb) with a known defect, to see the checker fail the run",
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.workers < 1 or args.kill_every <= 0:
        parser.error("--seconds and --kill-every must be above 0, --workers at least 1")
    return args


def run(args: argparse.Namespace) -> int:
    out = args.out or Path(tempfile.mkdtemp(prefix="soak-"))
    out.mkdir(parents=True, exist_ok=True)
    history = out / "history.jsonl"
    history.unlink(missing_ok=True)
    rng = random.Random(args.seed)
    server: Any = None
    proxy: FaultProxy | None = None
    figures: dict[str, Any] = {"store": args.store, "seed": args.seed, "seconds": args.seconds}
    if args.store == "dynamodb":
        from sandbox_ledger.local import LocalDynamoDBProcess, StrictProfile

        # The TTL service deletes an expired item half a second to a second late (a day or
        # two in AWS), so the backstop acts within a run. The stream keeps minutes of the
        # fleet's writes (the server's default, 1,000 records, is seconds of them): a TTL
        # reporter out for a while finds its position still held, as in AWS's 24 hours.
        profile = StrictProfile(rate_scale=0.05, ttl_delay=0.5, ttl_every=0.5)
        server = LocalDynamoDBProcess(strict=profile, stream_records=STREAM_RECORDS)
        endpoint = server.start()
        host, port = endpoint.removeprefix("http://").split(":")
        proxy = FaultProxy((host, int(port)), rng.randrange(2**32))
        proxy.start()
        query = "region=us-east-1&endpoint_url="
        direct = f"dynamodb://{TABLE}?{query}{endpoint}"
        through = f"dynamodb://{TABLE}?{query}http://127.0.0.1:{proxy.port}"
    elif args.store == "postgresql":
        from sandbox_ledger.local.postgres import LocalPostgres

        server = LocalPostgres()
        direct = server.start()
        address = direct.removeprefix("postgresql://postgres@").split("/")[0]
        host, port = address.split(":")
        proxy = FaultProxy((host, int(port)), rng.randrange(2**32))
        proxy.start()
        through = direct.replace(f":{port}/", f":{proxy.port}/")
        asyncio.run(_create_schema(direct))
    else:
        direct = through = f"sqlite:///{(out / 'ledger.db').resolve()}"
    try:
        if args.store == "dynamodb":
            asyncio.run(_create_table(endpoint))
        deadline = time.monotonic() + args.seconds
        fleet = Fleet(through, history, rng.randrange(2**32), deadline, args.defect)
        for slot in range(args.workers):
            fleet.spawn(slot)
        fleet.spawn_reader()
        fleet.spawn_follower()
        if args.store == "dynamodb":
            for slot in range(OWNERS):
                fleet.spawn_owner(slot)
            fleet.spawn_sweeper()
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, rng.expovariate(1 / args.kill_every)))
            if deadline - time.monotonic() > 0:
                fleet.kill_one()
        fleet.wait(GRACE_SECONDS)
        # The sweeper and TTL reporter until the records are gone (DynamoDB), and the feed
        # to its end: a last reader, resumed where the killed ones left off.
        enders = [fleet.spawn_sweeper(idle=SWEEP_IDLE_SECONDS)] if args.store == "dynamodb" else []
        enders.append(fleet.spawn_reader(idle=READ_IDLE_SECONDS))
        for last in enders:
            last.wait(GRACE_SECONDS + 600)
        end = time.time()
        if proxy is not None:
            proxy.stop()
            figures["proxy"] = dict(proxy.counts)
        figures |= {"workers": fleet.started, "killed": fleet.killed, "overran": fleet.overran}
        ops = operations(read_history(history))
        report = asyncio.run(_checked(direct, ops))
        if args.store == "dynamodb":
            resources = check_stored(direct, ops, end=end)
            report.violations += resources.violations
            figures |= resources.figures() | {"sweeperKills": fleet.sweeper_kills}
    finally:
        if proxy is not None:
            proxy.stop()
        if server is not None:
            server.stop()
    figures |= report.figures()
    figures["opsPerSecond"] = round(report.appends / args.seconds, 1)
    print(json.dumps(figures))
    for violation in report.violations:
        print(violation.text(), file=sys.stderr)
    if report.violations:
        print(
            f"{len(report.violations)} violations (seed {args.seed}; the same faults: "
            f"python -m sandbox_ledger.soak --store {args.store} --seconds {args.seconds} "
            f"--seed {args.seed} --workers {args.workers} --kill-every {args.kill_every}"
            + (f" --defect {args.defect}" if args.defect else "")
            + "); "
            f"history: {history}",
            file=sys.stderr,
        )
        return 1
    return 0


async def _create_table(endpoint: str) -> None:
    """The table, its descriptor naming the run's expiry windows as a deployment's does."""
    from sandbox_ledger.deployment import SweepSettings
    from sandbox_ledger.dynamodb import DynamoDBAdapter

    window = int(WINDOW.total_seconds())
    sweep = SweepSettings("soak", stale_after_seconds=window, retain_failed_seconds=2 * window)
    async with DynamoDBAdapter(TABLE, endpoint_url=endpoint) as ledger:
        await ledger.create_table(sweep=sweep)


async def _create_schema(url: str) -> None:
    """The schema, made once before the workers start (each would migrate it otherwise)."""
    store: Any = open_store(url)
    await store.connect()
    await store.close()


async def _checked(url: str, ops: list[Any]) -> Any:
    store = open_store(url)
    try:
        return await check(ops, store, LEDGER_NAME, changes=True)
    finally:
        await close_store(store)


def main(argv: list[str] | None = None) -> int:
    return run(_parse(argv))


if __name__ == "__main__":
    sys.exit(main())
