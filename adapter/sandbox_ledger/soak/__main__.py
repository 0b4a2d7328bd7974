"""A run of the fleet under faults, then its check (``make soak``, ``make soak-short``).

``python -m sandbox_ledger.soak --store dynamodb|sqlite|postgresql [--seconds S] [--seed N]
[--workers W] [--kill-every K] [--out DIR]``: starts the store (the embedded DynamoDB in a
child process, on the strict profile with its rates scaled down so that throttling comes,
behind a :class:`~.proxy.FaultProxy`; a throwaway PostgreSQL server behind one too; or a
SQLite file), ``W`` worker processes, and kills
one with SIGKILL about every ``K`` seconds (drawn from the seed), starting another in its
place (the change reader, the follower, the importer and the exporter are killed by the
same draws; on DynamoDB, owners of resource records and the sweeper too, :mod:`.owner`,
:mod:`.sweeper`, and after the fleet a last sweeper until the records are gone), while the
store itself is restarted or its disk filled (:mod:`.servers`). At the end it checks the
history and the store (:mod:`.checker`, :mod:`.check_resources`), then round trips the
store's export through a fresh store of each kind (:mod:`.transfers`), prints the
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
import threading
import time
from pathlib import Path
from typing import Any

from sandbox_ledger.soak._stores import close_store
from sandbox_ledger.soak.check_resources import check_stored
from sandbox_ledger.soak.checker import check
from sandbox_ledger.soak.history import History, operations, read_history
from sandbox_ledger.soak.importer import DEFECTS as IMPORT_DEFECTS
from sandbox_ledger.soak.proxy import FaultProxy
from sandbox_ledger.soak.servers import (
    STRICT,
    LocalServer,
    PostgresServer,
    SqliteDisk,
    fault_loop,
)
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
        self.think = 0.0
        """The workers' mean pause between rounds (``--think``)."""

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
        think = ["--think", str(self.think)] if self.think else []
        self.workers[name] = self._start(
            "worker", name, self._left(), "--seed", seed, *think, *defect
        )

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

    def spawn_porter(self, module: str) -> None:
        """The importer (``i.``, :mod:`.importer`) or the exporter (``x.``, :mod:`.exporter`)."""
        importer = module == "importer"
        name = f"{'i' if importer else 'x'}.{self.started}"
        seed = str(self._rng.randrange(2**32))
        defect = (
            ["--defect", str(self.defect)] if importer and self.defect in IMPORT_DEFECTS else []
        )
        think = ["--think", str(self.think)] if importer and self.think else []
        self.readers[name] = self._start(
            module, name, self._left(), "--seed", seed, *defect, *think
        )

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
        elif name[:2] in ("i.", "x."):
            self.spawn_porter("importer" if name.startswith("i.") else "exporter")
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
    parser.add_argument(
        "--think",
        type=float,
        default=0.0,
        help="mean seconds a worker pauses between rounds of a session's execs (0: none, "
        "the most pressure; a long run paces its workers so the store it checks stays the "
        "size of a day's work, not of a benchmark's)",
    )
    parser.add_argument(
        "--fault-every",
        type=float,
        default=20.0,
        help="seconds between the store's faults, on average: a restart of the local "
        "DynamoDB or of PostgreSQL, a full disk under the SQLite file",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--defect",
        choices=sorted([*DEFECTS, "skip", *IMPORT_DEFECTS, "drop-field", *SWEEPER_DEFECTS]),
        default=None,
        help="run the workers (resend), the change reader (skip), the importer (replay), "
        "the final round trip (drop-field) or the sweeper (early, republish; dynamodb) with a "
        "known defect, to see the checker fail the run",
    )
    args = parser.parse_args(argv)
    if args.think < 0:
        parser.error("--think must be 0 or more")
    if args.seconds <= 0 or args.workers < 1 or args.kill_every <= 0 or args.fault_every <= 0:
        parser.error(
            "--seconds, --kill-every and --fault-every must be above 0, --workers at least 1"
        )
    return args


def run(args: argparse.Namespace) -> int:
    out = args.out or Path(tempfile.mkdtemp(prefix="soak-"))
    out.mkdir(parents=True, exist_ok=True)
    history = out / "history.jsonl"
    history.unlink(missing_ok=True)
    rng = random.Random(args.seed)
    figures: dict[str, Any] = {"store": args.store, "seed": args.seed, "seconds": args.seconds}
    with Faults(args.store, out, rng) as faults:
        deadline = time.monotonic() + args.seconds
        fleet = Fleet(faults.through, history, rng.randrange(2**32), deadline, args.defect)
        fleet.think = args.think
        supervisor = History(history, "s")
        stop = threading.Event()
        failed: list[str] = []
        dealer = threading.Thread(
            target=fault_loop,
            args=(supervisor, random.Random(rng.randrange(2**32)), args.fault_every, deadline),
            kwargs={"fault": faults.deal, "stop": stop, "failed": failed},
        )
        for slot in range(args.workers):
            fleet.spawn(slot)
        fleet.spawn_reader()
        fleet.spawn_follower()
        if args.store == "dynamodb":
            for slot in range(OWNERS):
                fleet.spawn_owner(slot)
            fleet.spawn_sweeper()
        fleet.spawn_porter("importer")
        fleet.spawn_porter("exporter")
        dealer.start()
        try:
            while (left := deadline - time.monotonic()) > 0 and not failed:
                stop.wait(min(left, rng.expovariate(1 / args.kill_every)))
                if deadline - time.monotonic() > 0 and not failed:
                    fleet.kill_one()
        finally:
            stop.set()
            dealer.join()
        if failed:
            fleet.wait(0)
            raise SystemExit(
                f"the run could not deal the store's faults ({failed[0]}); nothing was "
                f"checked (seed {args.seed})"
            )
        fleet.wait(GRACE_SECONDS)
        # The sweeper and TTL reporter until the records are gone (DynamoDB), and the feed
        # to its end: a last reader, resumed where the killed ones left off.
        enders = [fleet.spawn_sweeper(idle=SWEEP_IDLE_SECONDS)] if args.store == "dynamodb" else []
        enders.append(fleet.spawn_reader(idle=READ_IDLE_SECONDS))
        for last in enders:
            last.wait(GRACE_SECONDS + 600)
        end = time.time()
        supervisor.close()
        figures |= {"workers": fleet.started, "killed": fleet.killed, "overran": fleet.overran}
        ops = operations(read_history(history))
        report = asyncio.run(_checked(faults.direct, ops))
        if args.store == "dynamodb":
            resources = check_stored(faults.direct, ops, end=end)
            report.violations += resources.violations
            figures |= resources.figures() | {"sweeperKills": fleet.sweeper_kills}
        if not report.violations:  # the final round trip (.transfers)
            started = time.monotonic()
            figures["roundTripStores"] = _round_trip(
                args.store, faults.direct, out, args.defect, report
            )
            figures["roundTripSeconds"] = round(time.monotonic() - started, 1)
    figures |= faults.figures()
    figures |= report.figures()
    figures["opsPerSecond"] = round(report.appends / args.seconds, 1)
    print(json.dumps(figures))
    for violation in report.violations:
        print(violation.text(), file=sys.stderr)
    if report.violations:
        print(
            f"{len(report.violations)} violations (seed {args.seed}; the same faults: "
            f"python -m sandbox_ledger.soak --store {args.store} --seconds {args.seconds} "
            f"--seed {args.seed} --workers {args.workers} --kill-every {args.kill_every} "
            f"--fault-every {args.fault_every} --think {args.think}"
            + (f" --defect {args.defect}" if args.defect else "")
            + "); "
            f"history: {history}",
            file=sys.stderr,
        )
        return 1
    return 0


def _round_trip(store: str, direct: str, out: Path, defect: str | None, report: Any) -> int:
    """The whole store exported, imported into a fresh store of each kind and exported again
    (:func:`~.transfers.round_trip`); its violations go into ``report``. How many stores."""
    from sandbox_ledger.blocking import open_blocking_store
    from sandbox_ledger.soak.transfers import DROPS_A_FIELD, fresh_stores, round_trip

    source = open_blocking_store(direct)
    try:
        with fresh_stores(store, direct, out) as targets:
            wrap = DROPS_A_FIELD if defect == "drop-field" else None
            report.violations += round_trip(source, targets, wrap)
            return len(targets)
    finally:
        source.close()


class Faults:
    """The run's store, behind the fault proxy where it is a server, and the faults dealt to
    it (:mod:`.servers`): the local DynamoDB and PostgreSQL restarted, the SQLite file's disk
    filled. :attr:`through` is the URL the fleet uses, :attr:`direct` the checker's."""

    def __init__(self, store: str, out: Path, rng: random.Random) -> None:
        self.store, self.out, self._rng = store, out, rng
        self.proxy: FaultProxy | None = None
        self.server: Any = None
        self.disk: SqliteDisk | None = None
        self.unavailable: str | None = None
        self.through = self.direct = ""

    def __enter__(self) -> Faults:
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        rng = self._rng
        if self.store == "dynamodb":
            _local_credentials()
            # The TTL service deletes an expired item half a second to a second late (a day
            # or two in AWS), so the backstop acts within a run; the stream keeps minutes of
            # the fleet's writes (the default, 1,000 records, is seconds of them): a TTL
            # reporter out for a while finds its position still held, as in AWS's 24 hours;
            # the descriptor names the run's expiry windows, as a deployment's does.
            window = int(WINDOW.total_seconds())
            self.server = LocalServer(
                self.out / "local.jsonl",
                TABLE,
                strict=f"{STRICT},ttl_delay=0.5,ttl_every=0.5",
                options=[
                    *("--stream-records", str(STREAM_RECORDS)),
                    *("--stale-after", str(window), "--retain-failed", str(2 * window)),
                ],
            )
            self.server.clear()
            self.server.start()
            self.proxy = FaultProxy(("127.0.0.1", self.server.port), rng.randrange(2**32))
            self.proxy.start()
            query = "region=us-east-1&endpoint_url="
            self.direct = f"dynamodb://{TABLE}?{query}{self.server.endpoint}"
            self.through = f"dynamodb://{TABLE}?{query}http://127.0.0.1:{self.proxy.port}"
        elif self.store == "postgresql":
            self.server = PostgresServer()
            self.server.start()
            self.direct = self.server.dsn
            address = self.direct.removeprefix("postgresql://postgres@").split("/")[0]
            host, port = address.split(":")
            self.proxy = FaultProxy((host, int(port)), rng.randrange(2**32))
            self.proxy.start()
            self.through = self.direct.replace(f":{port}/", f":{self.proxy.port}/")
            asyncio.run(_create_schema(self.direct))
        else:
            self.disk = SqliteDisk(self.out)
            self.unavailable = self.disk.start()
            folder = self.disk.mount if self.disk.mounted else self.out
            self.direct = self.through = f"sqlite:///{(folder / 'ledger.db').resolve()}"
            asyncio.run(_create_schema(self.direct))

    def deal(self) -> str:
        """Deal this store's fault once; what it was."""
        if isinstance(self.server, LocalServer):
            self.server.restart()
            return "local-restart"
        if isinstance(self.server, PostgresServer):
            crash = self._rng.random() < 0.5
            self.server.restart(crash)
            return "crash-restart" if crash else "restart"
        if self.disk is not None and self.disk.mounted:
            self.disk.fill()
            time.sleep(self._rng.uniform(0.5, 3.0))
            self.disk.free()
            return "disk-full"
        return "none"

    def figures(self) -> dict[str, Any]:
        figures: dict[str, Any] = {}
        if self.proxy is not None:
            figures["proxy"] = dict(self.proxy.counts)
        if isinstance(self.server, LocalServer):
            figures |= {"restarts": self.server.restarts, "refused": self.server.refused}
        if isinstance(self.server, PostgresServer):
            figures |= {"restarts": self.server.restarts, "crashes": self.server.crashes}
        if self.disk is not None:
            figures["diskFull"] = self.unavailable or self.disk.fills
        return figures

    def __exit__(self, *exc: object) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        if self.server is not None:
            self.server.stop()
        if self.disk is not None:
            self.disk.stop()


def _local_credentials() -> None:
    """The local server's credentials, for every process of the run."""
    for key, value in (("AWS_ACCESS_KEY_ID", "local"), ("AWS_SECRET_ACCESS_KEY", "local")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


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
