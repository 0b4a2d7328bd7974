"""The demo: a simulated fleet on the ledger, resource records whose owners sometimes die,
and the expiry sweep run through the scheduled handler's code."""

from __future__ import annotations

import asyncio
import contextvars
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rich.progress import Progress

from sandbox_ledger.cli.span_tree import SANDBOX_SPAN
from sandbox_ledger.deployment import SweepSettings
from sandbox_ledger.dynamodb import DynamoDBAdapter
from sandbox_ledger.models import EnvironmentRecord, LedgerEntry, LedgerEvent
from sandbox_ledger.resources import ResourceActivityRecord, ResourceRecordStore
from sandbox_ledger.resources.models import to_iso

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from rich.console import Console

    from sandbox_ledger.cli.context import Target

_current_op: contextvars.ContextVar[str] = contextvars.ContextVar("op", default="other")


@dataclass(frozen=True)
class DemoConfig:
    sandboxes: int
    execs: int
    branches: int
    concurrency: int
    dead_owner_share: float


@dataclass
class Report:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    calls: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    resumed: int = 0
    environments_built: int = 0
    environments_reused: int = 0
    sweep: dict[str, Any] = field(default_factory=dict)
    sweep_via: str = ""
    sweep_clock: timedelta = timedelta(0)
    """How far the demo moved the sweeper's clock on (one window: see :func:`_sweep`)."""
    records: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Each resource record the demo wrote: id -> (provider, phase)."""
    elapsed: float = 0.0
    concurrency: int = 0
    entries: int = 0
    build_locks: defaultdict[str, asyncio.Lock] = field(
        default_factory=lambda: defaultdict(asyncio.Lock)
    )


class _Stats:
    def __init__(self, report: Report) -> None:
        self.report = report

    def on_call(self, **_: Any) -> None:
        self.report.calls[_current_op.get()] += 1

    async def run(self, op: str, awaitable: Awaitable[Any]) -> Any:
        token = _current_op.set(op)
        start = time.perf_counter()
        try:
            return await awaitable
        finally:
            self.report.latencies[op].append(time.perf_counter() - start)
            _current_op.reset(token)


def run_demo(target: Target, config: DemoConfig, console: Console) -> Report:
    """Run the whole demo against ``target`` (its table is created if needed)."""
    return asyncio.run(_run(target, config, console))


async def _run(target: Target, config: DemoConfig, console: Console) -> Report:
    report = Report(concurrency=config.concurrency)
    stats = _Stats(report)
    started = time.perf_counter()
    table = target.table or ""
    async with DynamoDBAdapter(
        table, session=target.aioboto3_session(), **target.kwargs()
    ) as ledger:
        await ledger.create_table(sweep=SweepSettings(event_bus_name=_bus(target)))
        store = ResourceRecordStore(table, session=target.aioboto3_session(), **target.kwargs())
        for client in (await ledger.client(), await store.client()):
            client.meta.events.register("before-call.dynamodb", stats.on_call)
        semaphore = asyncio.Semaphore(config.concurrency)
        base = int(time.time() * 1000) - config.sandboxes * 10_000
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("fleet", total=config.sandboxes)

            async def one(i: int) -> None:
                async with semaphore:
                    await _sandbox(i, base, config, ledger, store, stats, report)
                progress.advance(task)

            await asyncio.gather(*(one(i) for i in range(config.sandboxes)))
        everything = await stats.run("list_all_sandbox_details", ledger.list_all_sandbox_details())
        report.statuses.update(str(d.status) for d in everything)
        await store.close()
    report.sweep, report.sweep_via, report.sweep_clock = _sweep(target)
    report.elapsed = time.perf_counter() - started
    return report


async def _sandbox(
    i: int,
    base: int,
    config: DemoConfig,
    ledger: DynamoDBAdapter,
    store: ResourceRecordStore,
    stats: _Stats,
    report: Report,
) -> None:
    """One sandbox's life: its environment, its resource record, its execs, its close (one
    span, ``sandbox``: the stores' spans of its life are its children; ``demo --trace``)."""
    from opentelemetry import trace

    run = _SandboxRun(i, base + i * 10_000, config, ledger, store, stats, report)
    tracer = trace.get_tracer("sandbox_ledger.demo")
    with tracer.start_as_current_span(SANDBOX_SPAN, attributes={"sandbox.path": run.path}):
        await _life(run, i, config, ledger, stats)


async def _life(
    run: _SandboxRun, i: int, config: DemoConfig, ledger: DynamoDBAdapter, stats: _Stats
) -> None:
    env_name = await run.environment()
    record_id = await run.resource_record()
    await run.append(LedgerEvent.SandboxCreated, -1, 0, {"environment": env_name})
    await run.execs(record_id)
    await stats.run("get_sandbox_details", ledger.get_sandbox_details(run.name, run.sid))
    await stats.run("list_checkpoints", ledger.list_checkpoints(run.name, run.sid))
    if i % 6 != 0:
        await run.append(LedgerEvent.SandboxClosed, -1, 10 * config.execs + 9)
    await stats.run("list_sandbox_details", ledger.list_sandbox_details(run.name))


@dataclass
class _SandboxRun:
    i: int
    ts: int
    config: DemoConfig
    ledger: DynamoDBAdapter
    store: ResourceRecordStore
    stats: _Stats
    report: Report

    @property
    def name(self) -> str:
        return f"job-{self.i % 4}"

    @property
    def sid(self) -> str:
        return f"sb-{self.i:05d}"

    @property
    def path(self) -> str:
        return f"{self.name}/{self.sid}"

    @property
    def dead(self) -> bool:
        """This sandbox's owner dies: its resource record stops heartbeating."""
        return (self.i * 7919 % 100) < self.config.dead_owner_share * 100

    @property
    def failed_cleanup(self) -> bool:
        return self.i % 11 == 5

    async def append(
        self,
        event: str,
        step: int,
        offset: int,
        payload: Any = None,
        branch: int | None = None,
        error: str | None = None,
    ) -> None:
        entry = LedgerEntry(
            ts=self.ts + offset,
            name=self.name,
            sandbox_id=self.sid,
            step_index=step,
            branch=branch,
            event=event,
            payload=payload,
            error=error,
        )
        await self.stats.run("append", self.ledger.append(entry))
        self.report.entries += 1

    async def environment(self) -> str:
        """The environment is built once per image and reused by later sandboxes (a sandbox
        waits while another one builds the image it needs)."""
        env_name = f"python-3.{10 + self.i % 3}"
        async with self.report.build_locks[env_name]:
            env = await self.stats.run("get_environment", self.ledger.get_environment(env_name))
            if env is None:
                env = EnvironmentRecord.model_validate(
                    {
                        "name": env_name,
                        "builtAt": self.ts,
                        "snapshotId": f"snap-env-{env_name}",
                        "packages": ["pytest", "ruff"],
                    }
                )
                await self.stats.run("save_environment", self.ledger.save_environment(env))
                self.report.environments_built += 1
            else:
                self.report.environments_reused += 1
        return env_name

    async def resource_record(self) -> str:
        """The resource record of the provisioned sandbox; some owners will die."""
        now = datetime.now(UTC)
        age = timedelta(minutes=25) if self.dead else timedelta(0)
        if self.failed_cleanup:
            age = timedelta(days=8 if self.i % 2 else 1)
        record = ResourceActivityRecord.model_validate(
            {
                "version": 1,
                "id": str(uuid.uuid4()),
                "pid": 10_000 + self.i,
                "sandboxProvider": ["docker", "vercel", "firecracker"][self.i % 3],
                "placement": "mounted",
                "workspace": f"/work/worktrees/{self.sid}",
                "createdAt": to_iso(now - age - timedelta(seconds=5)),
                "updatedAt": to_iso(now - age),
                "phase": "cleanup-failed" if self.failed_cleanup else "ready",
                "operations": [],
            }
        )
        await self.stats.run("resource.put", self.store.put(record))
        self.stats.report.records[record.id] = (record.sandbox_provider, record.phase)
        return record.id

    async def execs(self, record_id: str) -> None:
        """The execs on parallel branches, with a checkpoint every third step; one sandbox in
        five crashes half-way and resumes from what it reads back from the ledger."""
        resume_at = self.config.execs // 2 if self.i % 5 == 2 else None
        step = 0
        while step < self.config.execs:
            if resume_at is not None and step == resume_at:
                history = await self.stats.run(
                    "read_all", self.ledger.read_all(self.name, self.sid)
                )
                await self.stats.run(
                    "last_checkpoint", self.ledger.last_checkpoint(self.name, self.sid)
                )
                step = max(e.step_index for e in history) + 1
                self.report.resumed += 1
                resume_at = None
                continue
            await self.one_exec(step, record_id)
            if step % 3 == 2:
                await self.append(
                    LedgerEvent.CheckpointCreated,
                    -1,
                    10 * step + 7,
                    {"snapshotId": f"snap-{self.sid}-{step}", "name": f"after-{step}"},
                )
            step += 1

    async def one_exec(self, step: int, record_id: str) -> None:
        branch = step % self.config.branches
        failed = step % 7 == 6
        alive = not self.dead and not self.failed_cleanup
        if alive:
            await self.stats.run(
                "resource.record_operation",
                self.store.record_operation_start(record_id, "exec"),
            )
        await self.append(
            LedgerEvent.ExecStarted, step, 10 * step + 1, {"cmd": f"pytest -k part{step}"}, branch
        )
        if failed:
            await self.append(
                LedgerEvent.ExecFailed,
                step,
                10 * step + 4,
                {"exitCode": 1},
                branch,
                error="exit status 1",
            )
        else:
            await self.append(
                LedgerEvent.ExecComplete,
                step,
                10 * step + 5,
                {"exitCode": 0, "stdout": "ok"},
                branch,
            )
        if alive:
            await self.stats.run(
                "resource.record_operation",
                self.store.record_operation_finish(
                    record_id, "exec", "failed" if failed else "completed"
                ),
            )
            await self.stats.run("resource.touch", self.store.touch(record_id))


def _bus(target: Target) -> str:
    """The demo's event bus: its own on the embedded server, else the account's default."""
    return "sandbox-ledger-demo" if target.embedded else "default"


def _sweep(target: Target) -> tuple[dict[str, Any], str, timedelta]:
    """Run the scheduled sweeper's handler code, built with the demo's environment."""
    from sandbox_ledger.handlers import expire_stale_resources as sweeper_handler

    session = target.boto3_session()
    env = {
        "TABLE_NAME": target.table or "",
        "EVENT_BUS_NAME": _bus(target),
    }
    if target.shard_count is not None:
        env["SHARD_COUNT"] = str(target.shard_count)
    if target.endpoint_url:
        env["AWS_ENDPOINT_URL"] = target.endpoint_url
    if target.region:
        env["AWS_REGION"] = target.region
    sweeper = sweeper_handler.build(env, session=session)
    if target.embedded:
        sweeper.events.create_event_bus(Name=sweeper.settings.event_bus_name)
    level = sweeper_handler.logger.log_level
    sweeper_handler.logger.setLevel("WARNING")  # the summary table reports the run
    try:
        # Staleness is judged on the sweeper's clock: a run observes the candidates and the
        # scheduled run one window later expires those still unchanged. The demo runs that
        # later run at once, its clock moved on by the window.
        sweeper_handler.run(sweeper, remaining_ms=None)
        window = sweeper.plan().policy.stale_after
        summary = sweeper_handler.run(sweeper, remaining_ms=None, now=datetime.now(UTC) + window)
    finally:
        # Powertools shares metric state across the process; leave none behind.
        sweeper_handler.metrics.clear_metrics()
        sweeper_handler.logger.setLevel(level)
    return summary, sweeper_handler.__name__, window
