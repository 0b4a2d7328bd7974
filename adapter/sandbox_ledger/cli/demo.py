"""The demo: a simulated fleet writing ledgers through the DynamoDB adapter."""

from __future__ import annotations

import asyncio
import time

import typer

from sandbox_ledger.dynamodb import DynamoDBAdapter
from sandbox_ledger.models import LedgerEntry, LedgerEvent, ListSandboxOptions, SandboxStatus


async def run_demo(endpoint: str, *, sandboxes: int, execs: int) -> None:
    async with DynamoDBAdapter("sandbox-ledger-demo", endpoint_url=endpoint) as ledger:
        await ledger.create_table()
        base = int(time.time() * 1000)

        async def fleet_member(i: int) -> None:
            name, sid = f"job-{i % 3}", f"sb-{i:04d}"
            ts = base + i * 1000

            def at(
                event: LedgerEvent, step: int, offset: int, payload: object = None
            ) -> LedgerEntry:
                return LedgerEntry(
                    ts=ts + offset,
                    name=name,
                    sandbox_id=sid,
                    step_index=step,
                    event=event,
                    payload=payload,
                )

            await ledger.append(at(LedgerEvent.SandboxCreated, -1, 0, {"image": "python:3.12"}))
            for step in range(execs):
                await ledger.append(
                    at(LedgerEvent.ExecStarted, step, 10 * step + 1, {"cmd": f"step {step}"})
                )
                await ledger.append(
                    at(LedgerEvent.ExecComplete, step, 10 * step + 5, {"exitCode": 0})
                )
            if i % 4 != 0:
                await ledger.append(at(LedgerEvent.SandboxClosed, -1, 10 * execs + 9))

        await asyncio.gather(*(fleet_member(i) for i in range(sandboxes)))
        listed = await ledger.list_all_sandbox_details()
        running = await ledger.list_all_sandbox_details(
            ListSandboxOptions(status=SandboxStatus.Running)
        )
        completed = len(listed) - len(running)
        typer.echo(f"sessions: {len(listed)}, running: {len(running)}, completed: {completed}")
        for details in listed[:5]:
            typer.echo(
                f"  {details.name}/{details.sandbox_id} {details.status} execs={details.exec_count}"
            )
