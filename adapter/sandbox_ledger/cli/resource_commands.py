"""``resources ls`` and ``resources sweep`` (files: :mod:`sandbox_ledger.cli.resource_files`)."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

import typer

from sandbox_ledger.cli import connect, render
from sandbox_ledger.cli.context import cli_config
from sandbox_ledger.cli.failures import handled
from sandbox_ledger.cli.output import CommandError, ExitCode, err
from sandbox_ledger.cli.render import OUTPUT, QUERY, Format, View
from sandbox_ledger.cli.root import resources_app
from sandbox_ledger.cli.setup_commands import SWEEP_FLAGS

if TYPE_CHECKING:
    from sandbox_ledger.cli.context import Target
    from sandbox_ledger.resources import EventPublisher, SweepPlan, SyncResourceRecordStore


class PhaseChoice(StrEnum):
    """The seed's phases (``sandbox_ledger.resources.models.Phase``), for option parsing
    without loading the models."""

    allocating = "allocating"
    ready = "ready"
    closing = "closing"
    cleanup_failed = "cleanup-failed"
    allocation_uncertain = "allocation-uncertain"


# Left out first when a table is too wide for the terminal (the id and times never cut).
_LS_DROP = ("pid", "provider", "operations", "workspace")


@resources_app.command("ls")
@handled
def resources_ls(
    ctx: typer.Context,
    phase: PhaseChoice | None = typer.Option(None, "--phase", help="Only records in this phase."),
    provider: str | None = typer.Option(
        None, "--provider", help="Only records of this sandboxProvider (docker, vercel, ...)."
    ),
    limit: int = typer.Option(50, "--limit", min=1, max=1000, help="Records per page."),
    cursor: str | None = typer.Option(
        None, "--cursor", help="Resume where the previous page ended (it prints the cursor)."
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help='Print {"records": [...], "unreadable": [{"id", "reason"}], "cursor": ...}; '
        "records in the seed's file shape.",
    ),
    output: Format | None = OUTPUT,
    query: str | None = QUERY,
) -> None:
    """Resource activity records, newest updatedAt first, one page."""
    page = connect.resource_store(connect.target(ctx)).list(
        phase=None if phase is None else phase.value,
        provider=provider,
        limit=limit,
        cursor=connect.pasted(cursor),
    )
    doc = {
        "records": [v.record.wire() for v in page.records],
        "unreadable": [{"id": u.record_id, "reason": u.reason} for u in page.unreadable],
        "cursor": page.cursor,
    }
    rows = [
        [
            v.record.id,
            v.record.phase,
            v.record.sandbox_provider,
            str(v.record.pid),
            v.record.updated_at,
            ", ".join(f"{o.kind} x{o.count}" for o in v.record.operations) or "-",
            v.record.workspace,
        ]
        for v in page.records
    ]
    rows += [
        [bad.record_id, "unreadable", "-", "-", "-", "-", bad.reason] for bad in page.unreadable
    ]
    notes = [
        f"{len(page.records)} record(s)"
        + (f", {len(page.unreadable)} unreadable" if page.unreadable else ""),
        *([f"next page: --cursor {page.cursor}"] * bool(page.cursor)),
    ]
    columns = ("id", "phase", "provider", "pid", "updated", "operations", "workspace")
    render.show(
        View(doc, columns, rows, notes, clip_width=80, drop=_LS_DROP),
        render.choose(as_json, output),
        query,
    )


@resources_app.command("sweep")
@handled
def resources_sweep(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run", help="Report, change nothing."),
    stale_after: int | None = typer.Option(
        None,
        "--stale-after",
        min=1,
        help="Seconds without heartbeat before a live record expires; default: the deployment's.",
    ),
    retain_failed: int | None = typer.Option(
        None,
        "--retain-failed",
        min=0,
        help="Seconds failed records are kept; 0 keeps them forever; default: the deployment's.",
    ),
    event_bus: str | None = typer.Option(
        None,
        "--event-bus",
        help="EventBridge bus for ResourceExpired events; default: the deployment's.",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the sweep's result as JSON (as the scheduled handler's)."
    ),
    output: Format | None = OUTPUT,
    query: str | None = QUERY,
) -> None:
    """Expire stale records now, as the scheduled handler does: with the deployment's bus
    and windows (from the table's descriptor); a flag that disagrees is refused, and a table
    that describes none needs all three flags. Exit code 4 when any record failed."""
    from datetime import UTC, datetime

    from sandbox_ledger.cli.progress import sweeping
    from sandbox_ledger.resources import sweep

    target = connect.target(ctx, writes="resources sweep")
    store = connect.resource_store(target)
    plan, publisher = sweep_plan(
        target,
        store,
        event_bus=event_bus,
        stale_after=stale_after,
        retain_failed=retain_failed,
        check_bus=not dry_run,
    )
    with sweeping(store, err()) as counted:
        result = sweep(
            counted, publisher, now=datetime.now(UTC), policy=plan.policy, dry_run=dry_run
        )
    verb = "would expire" if dry_run else "expired"
    notes = [f"{verb} {record_id}: {result.reasons[record_id]}" for record_id in result.expired]
    notes.append(
        f"{len(result.expired)} {verb}, {len(result.skipped)} skipped (not stale, or "
        f"another sweep's), {len(result.failed)} failed (bus {plan.event_bus_name})"
    )
    if result.lost:
        notes.append(
            f"{len(result.lost)} claim(s) lost: this sweep outlasted its lease and another "
            f"took them over (not deleted, not counted as expired here): {', '.join(result.lost)}"
        )
    if result.due:
        notes.append(
            f"{len(result.due)} record(s) unchanged since a sweep observed them: if they "
            f"stay so, the first sweep from {min(result.due.values())} on expires the "
            "first of them (each one a whole window after its observation)"
        )
    doc = {**result.to_dict(), "eventBus": plan.event_bus_name}
    render.show(View(doc, notes=notes), render.choose(as_json, output), query)
    if result.failed:
        raise typer.Exit(ExitCode.PARTIAL)


def sweep_plan(
    target: Target,
    store: SyncResourceRecordStore,
    *,
    event_bus: str | None = None,
    stale_after: int | None = None,
    retain_failed: int | None = None,
    check_bus: bool = True,
) -> tuple[SweepPlan, EventPublisher]:
    """The deployment's sweep of the target's table (its descriptor's bus and windows; a
    flag that disagrees is refused) and its publisher; with ``check_bus``, a missing bus is
    refused before any claim."""
    from sandbox_ledger.resources import EventPublisher, resolve_sweep
    from sandbox_ledger.sdk.client import sync_session

    plan = resolve_sweep(
        store.descriptor(),
        store.table_name,
        event_bus_name=event_bus,
        stale_after_seconds=stale_after,
        retain_failed_seconds=retain_failed,
        require_deployment=True,
        names=SWEEP_FLAGS,
    )
    session = target.boto3_session() or sync_session()
    events = session.client(
        "events",
        endpoint_url=target.endpoint_url,
        region_name=target.region,
        config=cli_config(),
    )
    if check_bus:
        _require_bus(events, plan.event_bus_name, target)
    return plan, EventPublisher(events, plan.event_bus_name)


def _require_bus(events: Any, name: str, target: Target) -> None:
    """A missing event bus is named as such (not as a missing table), before any claim."""
    from botocore.exceptions import ClientError

    try:
        events.describe_event_bus(Name=name)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        endpoint = target.endpoint_url or f"https://events.{target.region}.amazonaws.com"
        raise CommandError(
            f"event bus {name} not found in region {target.region or '(no region set)'} at "
            f"endpoint {endpoint}: deploy the stack (it creates the bus), or name another bus "
            f"with `{target.command('resources sweep', '--event-bus', 'NAME')}`",
            ExitCode.NOT_FOUND,
        ) from exc
