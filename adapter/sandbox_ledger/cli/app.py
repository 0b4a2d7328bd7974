"""Commands of the ``sandbox-ledger`` console script."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as SDKConnectionError
from rich.console import Console
from rich.table import Table

from sandbox_ledger._enums import SandboxStatus  # noqa: TC001 - typer reads it at run time
from sandbox_ledger.cli.context import Target, from_environment
from sandbox_ledger.errors import LedgerError, translate_client_error

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.resources import SyncResourceRecordStore

F = TypeVar("F", bound="Callable[..., Any]")

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: rich help formatting imports markdown-it and more, tripling --help time.
    rich_markup_mode=None,
)
table_app = typer.Typer(
    no_args_is_help=True, help="Manage the ledger table.", rich_markup_mode=None
)
resources_app = typer.Typer(
    no_args_is_help=True, help="Resource activity records.", rich_markup_mode=None
)
app.add_typer(table_app, name="table")
app.add_typer(resources_app, name="resources")

# The target of the running command, set by the root callback.
_state: dict[str, Target] = {}
# Piped output (files, tests, other tools) gets wide tables, so ids are never cut.
_WIDTH = None if sys.stdout.isatty() else 200
out = Console(highlight=False, soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, highlight=False, width=_WIDTH)


@app.callback()
def _root(
    ctx: typer.Context,
    table: str | None = typer.Option(
        None, "--table", help="Table name [env SANDBOX_LEDGER_TABLE]."
    ),
    endpoint_url: str | None = typer.Option(None, "--endpoint-url", help="[env AWS_ENDPOINT_URL]"),
    region: str | None = typer.Option(None, "--region", help="[env AWS_REGION]"),
    profile: str | None = typer.Option(None, "--profile", help="[env AWS_PROFILE]"),
    shard_count: int | None = typer.Option(
        None,
        "--shard-count",
        help="Shards of the list indexes; default: the table's descriptor (must agree).",
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
    store: str | None = typer.Option(
        None,
        "--store",
        help="Store URL: dynamodb://TABLE, sqlite:///PATH, postgresql://..., memory:// "
        "[env SANDBOX_LEDGER_STORE].",
    ),
) -> None:
    """Operate sandbox ledgers on DynamoDB. With no table configured, an embedded local
    DynamoDB (moto) serves the command and is gone when it ends."""
    target = from_environment(table, endpoint_url, region, profile, shard_count, debug, store)
    _state["target"] = target
    ctx.call_on_close(target.close)


def handled(fn: F) -> F:
    """One clear line on stderr and exit code 1 for expected failures; --debug re-raises."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        target = _state.get("target")
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except (LedgerError, ValueError, ClientError, BotoCoreError, OSError, RuntimeError) as exc:
            if target is not None and target.debug:
                raise
            err.print(f"error: {_one_line(exc, target)}", markup=False)
            raise typer.Exit(1) from exc

    return wrapper  # type: ignore[return-value]


def _one_line(exc: BaseException, target: Target | None) -> str:
    """The error as one line; for a connection failure or an answer that is not DynamoDB's
    (an HTML page: a wrong endpoint, or a region it does not serve), name where we called."""
    sdk = exc if isinstance(exc, ClientError | BotoCoreError) else exc.__cause__
    error = translate_client_error(sdk) if isinstance(sdk, ClientError | BotoCoreError) else exc
    text = " ".join(str(error).split())
    if target is None or not isinstance(sdk, ClientError | BotoCoreError):
        return text
    response = getattr(sdk, "response", None) or {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    details = response.get("Error", {})
    message, code = str(details.get("Message", "")), str(details.get("Code", ""))
    # botocore uses the HTTP status as the code when the body holds no AWS error (a proxy's
    # 404, a server's 500 page): the endpoint is not DynamoDB, or not for this region.
    not_dynamodb = code.isdigit() or message.lstrip().startswith("<") or status >= 500
    if isinstance(sdk, ClientError) and not_dynamodb:
        return (
            f"DynamoDB at {target.where()} answered HTTP {status} with no DynamoDB error in it; "
            "check the endpoint and the region"
        )
    if isinstance(sdk, SDKConnectionError | HTTPClientError):
        return f"cannot reach DynamoDB at {target.where()}: {' '.join(str(sdk).split())}"
    return text


def _target(store: str | None = None, writes: str | None = None) -> Target:
    """The command's target; a ``--store`` given after the command wins over the root's; a
    command that ``writes`` refuses the embedded server."""
    target = _state["target"]
    if store:
        target.store = store
        if target.table_from_env:
            target.table = None
    if writes is not None and not target.table and not target.store:
        raise LedgerError(
            f"{writes} writes data: name a table with --table NAME or SANDBOX_LEDGER_TABLE, or a "
            "store with --store URL (the embedded DynamoDB would lose it when the command ends)"
        )
    target.resolve()
    return target


# Ledger commands accept --store after their name too (`sandbox-ledger export --store URL`).
_STORE = typer.Option(None, "--store", help="Store URL, as the root option --store.")


def _ledger(target: Target, *, interactive: bool = True) -> SyncDynamoDBAdapter:
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    other = target.sql_or_memory_store()
    if other is not None:
        # Same methods, driven synchronously.
        return other  # type: ignore[return-value]

    ledger = SyncDynamoDBAdapter(
        target.table or "", session=target.boto3_session(), **target.kwargs(interactive=interactive)
    )
    if target.embedded:
        ledger.create_table()
    return ledger


def _store(target: Target) -> SyncResourceRecordStore:
    from sandbox_ledger.resources import SyncResourceRecordStore

    target.require_dynamodb("resource records")
    if target.embedded:
        _ledger(target)
    return SyncResourceRecordStore(
        target.table or "", session=target.boto3_session(), **target.kwargs()
    )


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _clip(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


@app.command()
@handled
def demo(
    sandboxes: int = typer.Option(24, min=1, max=100_000, help="Sandboxes in the fleet."),
    execs: int = typer.Option(6, min=1, max=10_000, help="Execs per sandbox."),
    branches: int = typer.Option(2, min=1, max=16, help="Parallel branches per sandbox."),
    concurrency: int = typer.Option(16, min=1, max=1000, help="Sandboxes running at once."),
    dead_owners: float = typer.Option(
        0.25, min=0.0, max=1.0, help="Share of resource owners that die."
    ),
) -> None:
    """Simulate a fleet end to end, then sweep expired resource records through the
    handler; prints a summary of operations, requests, latency and outcomes."""
    from sandbox_ledger.cli.demo import DemoConfig, render, run_demo

    target = _target()
    target.require_dynamodb("the demo")
    config = DemoConfig(
        sandboxes=sandboxes,
        execs=execs,
        branches=branches,
        concurrency=concurrency,
        dead_owner_share=dead_owners,
    )
    report = run_demo(target, config, out)
    render(report, out)


@table_app.command("create")
@handled
def table_create() -> None:
    """Create the table (as the CDK stack does) if it does not exist; wait until ACTIVE."""
    target = _target(writes="table create")
    target.require_dynamodb("table create")
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    created = SyncDynamoDBAdapter(
        target.table or "", session=target.boto3_session(), **target.kwargs()
    ).create_table()
    out.print(f"table {target.table}: {'created' if created else 'already exists'}")


@app.command("ls")
@handled
def ls(
    name: str | None = typer.Option(None, "--name", help="Only this sandbox name."),
    status: SandboxStatus | None = typer.Option(None, "--status"),
    before: int | None = typer.Option(
        None, "--before", min=0, help="Only sessions started before (Unix ms)."
    ),
    limit: int = typer.Option(50, "--limit", min=0, help="0: no limit."),
    store: str | None = _STORE,
    cursor: str | None = typer.Option(
        None, "--cursor", help="Resume where the previous page ended (it prints the cursor)."
    ),
) -> None:
    """Sessions, newest first, one page; prints the cursor of the next page."""
    from sandbox_ledger.models import ListSandboxOptions

    ledger = _ledger(_target(store))
    opts = ListSandboxOptions(status=status, before=before, limit=limit, cursor=cursor)
    page = ledger.list_sandbox_page(name, opts) if name else ledger.list_all_sandbox_page(opts)
    rows = page.sessions
    table = Table("name", "sandboxId", "status", "started", "completed", "execs")
    for d in rows:
        table.add_row(
            d.name,
            d.sandbox_id,
            str(d.status),
            _when(d.started_at),
            _when(d.completed_at),
            str(d.exec_count),
        )
    out.print(table)
    out.print(f"{len(rows)} session(s)")
    if page.cursor:
        out.print(f"next page: --cursor {page.cursor}", markup=False)


@app.command()
@handled
def show(
    name: str,
    sandbox_id: str,
    as_json: bool = typer.Option(False, "--json", help="JSON lines in the wire shape."),
    store: str | None = _STORE,
) -> None:
    """A session's ledger as a timeline."""
    entries = _ledger(_target(store)).read_all(name, sandbox_id)
    if not entries:
        raise LedgerError(f"no session {name}/{sandbox_id}: it has no entries")
    if as_json:
        for e in entries:
            sys.stdout.write(json.dumps(e.wire(), ensure_ascii=False) + "\n")
        return
    table = Table("time", "step", "branch", "event", "payload", "error")
    for e in entries:
        table.add_row(
            _when(e.ts),
            str(e.step_index),
            "" if e.branch is None else str(e.branch),
            e.event,
            "" if e.payload is None else _clip(e.payload),
            e.error or "",
        )
    out.print(table)


@app.command()
@handled
def checkpoints(name: str, sandbox_id: str, store: str | None = _STORE) -> None:
    """A session's checkpoints in creation order."""
    rows = _ledger(_target(store)).list_checkpoints(name, sandbox_id)
    table = Table("created", "snapshotId", "tag")
    for c in rows:
        table.add_row(_when(c.created_at), c.snapshot_id or "-", c.tag or "-")
    out.print(table)
    out.print(f"{len(rows)} checkpoint(s)")


@app.command()
@handled
def envs(store: str | None = _STORE) -> None:
    """Environment records, newest builtAt first."""
    rows = _ledger(_target(store)).list_environments()
    table = Table("name", "built", "other fields")
    for r in rows:
        extra = {key: v for key, v in r.wire().items() if key not in ("name", "builtAt")}
        table.add_row(r.name, _when(r.built_at), _clip(extra) if extra else "")
    out.print(table)


@app.command()
@handled
def rm(
    name: str,
    sandbox_id: str,
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask."),
    store: str | None = _STORE,
) -> None:
    """Delete a session and every entry of it."""
    ledger = _ledger(_target(store, writes="rm"))
    if ledger.get_sandbox_details(name, sandbox_id) is None and not ledger.read_all(
        name, sandbox_id
    ):
        raise LedgerError(f"no session {name}/{sandbox_id}: nothing to delete")
    if not yes and not typer.confirm(f"Delete {name}/{sandbox_id} and all its entries?"):
        raise typer.Abort
    ledger.delete_sandbox(name, sandbox_id)
    out.print(f"deleted {name}/{sandbox_id}")


@app.command("export")
@handled
def export(
    name: str | None = typer.Option(None, "--name", help="Only sessions of this name."),
    sandbox_id: str | None = typer.Option(None, "--sandbox-id", help="Only this session."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Default: stdout."),
    store: str | None = _STORE,
) -> None:
    """Entries as JSON lines in the TypeScript wire shape, one entry per line: every session
    that has entries, listed or not (a parallel Scan of the table), each in append order;
    without --name, the environment records follow. A file is replaced only when the export
    succeeds."""
    from sandbox_ledger.cli.transfer import export_to

    if sandbox_id and not name:
        raise ValueError("--sandbox-id: needs --name")
    sessions, count, environments = export_to(
        _ledger(_target(store)), name=name, sandbox_id=sandbox_id, output=output, err=err
    )
    err.print(
        f"exported {count} entries of {sessions} session(s)"
        + (f" and {environments} environment record(s)" if environments else "")
    )


@app.command("import")
@handled
def import_(
    path: str = typer.Argument(..., metavar="PATH", help="JSON lines as exported; - for stdin."),
    store: str | None = _STORE,
) -> None:
    """Reconcile JSON lines (as exported) into the table: each entry of the file is stored
    exactly once however often, in whatever order or overlap it is imported; entries the
    table holds are not duplicated. Failed lines are reported with their numbers; the valid
    ones are kept; the exit code is 1 when any line failed."""
    from sandbox_ledger.cli.transfer import import_from

    if path != "-" and not Path(path).is_file():
        raise typer.BadParameter(f"{path}: no such file", param_hint="PATH")
    ledger = _ledger(_target(store, writes="import"), interactive=False)
    label = "<stdin>" if path == "-" else path
    with contextlib.ExitStack() as stack:
        source = sys.stdin.buffer if path == "-" else stack.enter_context(Path(path).open("rb"))
        report = import_from(ledger, source, label=label, err=err)
    err.print(f"imported {label}: {report.summary()}")
    if report.failed:
        raise typer.Exit(1)


@resources_app.command("ls")
@handled
def resources_ls(
    phase: str | None = typer.Option(None, "--phase"),
    provider: str | None = typer.Option(None, "--provider"),
    limit: int = typer.Option(50, "--limit", min=1, max=1000),
    cursor: str | None = typer.Option(
        None, "--cursor", help="Resume where the previous page ended (it prints the cursor)."
    ),
) -> None:
    """Resource activity records, newest updatedAt first, one page."""
    page = _store(_target()).list(phase=phase, provider=provider, limit=limit, cursor=cursor)
    table = Table("id", "phase", "provider", "pid", "updated", "operations", "workspace")
    for v in page.records:
        r = v.record
        ops = ", ".join(f"{o.kind} x{o.count}" for o in r.operations) or "-"
        table.add_row(
            r.id, r.phase, r.sandbox_provider, str(r.pid), r.updated_at, ops, _clip(r.workspace, 40)
        )
    for bad in page.unreadable:
        table.add_row(bad.record_id, "unreadable", "-", "-", "-", "-", _clip(bad.reason, 80))
    out.print(table)
    out.print(
        f"{len(page.records)} record(s)"
        + (f", {len(page.unreadable)} unreadable" if page.unreadable else "")
    )
    if page.cursor:
        out.print(f"next page: --cursor {page.cursor}", markup=False)


@resources_app.command("sweep")
@handled
def resources_sweep(
    dry_run: bool = typer.Option(False, "--dry-run", help="Report, change nothing."),
    stale_after: int | None = typer.Option(
        None, "--stale-after", min=1, help="Seconds [default: the deployment's]."
    ),
    retain_failed: int | None = typer.Option(
        None,
        "--retain-failed",
        min=0,
        help="Seconds; 0 keeps failed records forever [default: the deployment's].",
    ),
    event_bus: str | None = typer.Option(
        None, "--event-bus", help="[default: the deployment's bus]"
    ),
) -> None:
    """Expire stale records now, as the scheduled handler does: with the deployment's bus
    and windows (from the table's descriptor); a flag that disagrees is refused, and a table
    that describes none needs all three flags."""
    import boto3

    from sandbox_ledger.resources import EventPublisher, resolve_sweep, sweep

    target = _target(writes="resources sweep")
    store = _store(target)
    plan = resolve_sweep(
        store.descriptor(),
        store.table_name,
        event_bus_name=event_bus,
        stale_after_seconds=stale_after,
        retain_failed_seconds=retain_failed,
        require_deployment=True,
    )
    session = target.boto3_session() or boto3.session.Session()
    events = session.client("events", endpoint_url=target.endpoint_url, region_name=target.region)
    if target.embedded and plan.event_bus_name != "default":
        events.create_event_bus(Name=plan.event_bus_name)
    result = sweep(
        store,
        EventPublisher(events, plan.event_bus_name),
        now=datetime.now(UTC),
        policy=plan.policy,
        dry_run=dry_run,
    )
    verb = "would expire" if dry_run else "expired"
    for record_id in result.expired:
        out.print(f"{verb} {record_id}: {result.reasons[record_id]}")
    out.print(
        f"{len(result.expired)} {verb}, {len(result.skipped)} skipped, {len(result.failed)} failed"
        f" (bus {plan.event_bus_name})"
    )


def main() -> None:
    """Console-script entry point."""
    app()


# Commands defined in their own modules register on the apps above.
from sandbox_ledger.cli import resource_files  # noqa: E402, F401
