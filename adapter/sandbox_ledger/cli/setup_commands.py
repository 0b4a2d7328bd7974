"""``table create`` and ``demo``: setting up a ledger table, and trying one end to end."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import typer

from sandbox_ledger.cli import connect, render
from sandbox_ledger.cli.failures import handled
from sandbox_ledger.cli.output import err, out
from sandbox_ledger.cli.render import OUTPUT, QUERY, Format, View
from sandbox_ledger.cli.root import app, from_command_line, table_app
from sandbox_ledger.errors import InvalidInputError

_JSON = typer.Option(False, "--json", help="Print JSON (the wire shape, camelCase).")


@app.command()
@handled
def demo(
    ctx: typer.Context,
    sandboxes: int = typer.Option(24, min=1, max=100_000, help="Sandboxes in the fleet."),
    execs: int = typer.Option(6, min=1, max=10_000, help="Execs per sandbox."),
    branches: int = typer.Option(2, min=1, max=16, help="Parallel branches per sandbox."),
    concurrency: int = typer.Option(
        2,
        min=1,
        max=1000,
        help="Sandboxes running at once (the embedded server answers one request at a time: "
        "more only queue).",
    ),
    dead_owners: float = typer.Option(
        0.25, min=0.0, max=1.0, help="Share of resource owners that die."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the summary as JSON instead of tables."
    ),
    output: Format | None = typer.Option(
        None, "--output", help="json, text or table (default: table, piped or not)."
    ),
    query: str | None = QUERY,
    trace: bool = typer.Option(
        False, "--trace", help="Also print the spans of the first sandbox's life as a tree."
    ),
) -> None:
    """Simulate a fleet end to end, then sweep expired resource records through the
    handler; prints a summary of operations, requests, latency and outcomes."""
    from sandbox_ledger.cli.demo import DemoConfig, run_demo
    from sandbox_ledger.cli.demo_report import render as render_tables
    from sandbox_ledger.cli.demo_report import report_json

    target = connect.target(ctx, embedded=True)
    target.require_dynamodb("the demo")
    config = DemoConfig(
        sandboxes=sandboxes,
        execs=execs,
        branches=branches,
        concurrency=concurrency,
        dead_owner_share=dead_owners,
    )
    # A summary for people: tables unless asked otherwise, piped or not.
    fmt = render.choose(as_json, output) if as_json or output else Format.table
    recorder = None
    if trace:
        from sandbox_ledger.cli.span_tree import Recorder

        recorder = Recorder()
    report = run_demo(target, config, err() if fmt is not Format.table else out())
    if fmt is Format.table and query is None:
        render_tables(report, out())
    else:
        render.show(View(report_json(report)), fmt, query)
    if recorder is not None:
        from sandbox_ledger.cli.span_tree import show

        # After the tables on stdout; beside JSON, on stderr (stdout stays one document).
        show(
            out() if fmt is Format.table and query is None else err(),
            recorder.spans(),
            "job-0/sb-00000",
        )


# The flag of each sweep setting, to name it in errors (read-only: no module state).
SWEEP_FLAGS = MappingProxyType(
    {
        "event_bus_name": "--event-bus",
        "stale_after_seconds": "--stale-after",
        "retain_failed_seconds": "--retain-failed",
    }
)


@table_app.command("create")
@handled
def table_create(
    ctx: typer.Context,
    event_bus: str = typer.Option(
        "default",
        "--event-bus",
        help="EventBridge bus the resource sweep publishes ResourceExpired events to.",
    ),
    stale_after: int = typer.Option(
        900, "--stale-after", min=1, help="Seconds without heartbeat before a live record expires."
    ),
    retain_failed: int = typer.Option(
        604_800, "--retain-failed", min=0, help="Seconds failed records are kept; 0: forever."
    ),
    as_json: bool = _JSON,
    output: Format | None = OUTPUT,
    query: str | None = QUERY,
) -> None:
    """Create the table (as the CDK stack does) if it does not exist; wait until ACTIVE. Its
    descriptor records the resource sweep's bus and windows, so `resources sweep` needs no
    flags (a table that records them already keeps its own). On a SQLite or PostgreSQL
    store: create its schema, or migrate it to this version's (the sweep flags are
    DynamoDB's)."""
    from sandbox_ledger.deployment import DeploymentMismatchError, SweepSettings, read_descriptor
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    target = connect.target(ctx, writes="table create")
    if target.store and not target.table:
        for flag in SWEEP_FLAGS.values():
            if from_command_line(ctx, flag.lstrip("-").replace("-", "_"), True):
                raise InvalidInputError(flag, "is for a DynamoDB table's resource sweep")
        doc, notes = _prepare_sql_store(target)
        render.show(View(doc, notes=notes), render.choose(as_json, output), query)
        return
    settings = SweepSettings(event_bus, stale_after, retain_failed)
    ledger = SyncDynamoDBAdapter(
        target.table or "",
        session=target.boto3_session(),
        retention=target.retention,
        **target.kwargs(),
    )
    created = ledger.create_table(sweep=settings)
    described = read_descriptor(ledger.client(), ledger.table_name)
    for name, flag in SWEEP_FLAGS.items():
        given = from_command_line(ctx, flag.lstrip("-").replace("-", "_"), getattr(settings, name))
        recorded = getattr(described, name) if described is not None else None
        if given is not None and recorded is not None and given != recorded:
            raise DeploymentMismatchError(flag, given, recorded, target.table or "")
    notes = [f"table {target.table}: {'created' if created else 'already exists'}"]
    if described is not None and described.describes_sweep:
        notes.append(
            f"resource sweep: bus {described.event_bus_name}, live records expire "
            f"{described.stale_after_seconds} s without heartbeat, failed ones "
            + (
                f"after {described.retain_failed_seconds} s"
                if described.retain_failed_seconds
                else "never"
            )
        )
    doc = {"table": target.table, "created": created, "sweep": _sweep_json(described)}
    render.show(View(doc, notes=notes), render.choose(as_json, output), query)


def _prepare_sql_store(target: Any) -> tuple[dict[str, Any], list[str]]:
    """Create or migrate a SQL store's schema (opening it for writing does): what it was."""
    from sandbox_ledger.errors import SchemaVersionError, StoreNotFoundError

    before: int | None = None
    try:
        probe = target.sql_or_memory_store(read_only=True)
        probe.list_environments()  # opening checks the schema
        state = "already current"
    except StoreNotFoundError:
        state = "created"
    except SchemaVersionError as older:
        if older.found > older.supported:
            raise  # newer than this library: upgrade it, nothing to do here
        before, state = older.found, "migrated"
    connect.ledger(target, writes=True).list_environments()  # opened for writing
    from sandbox_ledger._redact import redact_url

    said = f"migrated from schema version {before}" if before is not None else state
    notes = [f"{target.describe()}: {said}"]
    return {"store": redact_url(target.store), "state": state, "migratedFrom": before}, notes


def _sweep_json(described: Any) -> dict[str, Any] | None:
    if described is None or not described.describes_sweep:
        return None
    return {
        "eventBus": described.event_bus_name,
        "staleAfterSeconds": described.stale_after_seconds,
        "retainFailedSeconds": described.retain_failed_seconds,
    }
