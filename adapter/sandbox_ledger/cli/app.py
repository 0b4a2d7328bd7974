"""Commands of the ``sandbox-ledger`` console script.

Imports are lazy: ``--help`` and ``--version`` load typer alone; each command loads what it
uses (boto3, rich, pydantic, moto) when it runs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from sandbox_ledger._enums import SandboxStatus  # noqa: TC001 - typer reads it at run time
from sandbox_ledger._redact import scrub
from sandbox_ledger.cli.context import Target, from_environment
from sandbox_ledger.cli.output import (
    CommandError,
    ExitCode,
    emit,
    err,
    out,
    parse_time,
    quiet_stdout,
    when,
)
from sandbox_ledger.errors import (
    AccessDeniedError,
    InvalidInputError,
    LedgerError,
    TableNotFoundError,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import timedelta

    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.protocol import SyncTransferAdapter
    from sandbox_ledger.resources import SyncResourceRecordStore

F = TypeVar("F", bound="Callable[..., Any]")

PACKAGE = "sandbox-ledger-dynamodb"

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: rich help formatting imports markdown-it and more, tripling --help time, and
    # would read "[env ...]" in help texts as markup.
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


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"sandbox-ledger {version(PACKAGE)}")
        raise typer.Exit


def _from_command_line(ctx: typer.Context, name: str, value: Any) -> Any:
    """The value if it was given on the command line (not read from its variable): the
    environment is applied by :func:`from_environment`, with its precedence rules."""
    source = ctx.get_parameter_source(name)
    return value if source is not None and source.name == "COMMANDLINE" else None


@app.callback()
def _root(
    ctx: typer.Context,
    table: str | None = typer.Option(
        None, "--table", envvar="SANDBOX_LEDGER_TABLE", help="DynamoDB table of the ledger."
    ),
    endpoint_url: str | None = typer.Option(
        None,
        "--endpoint-url",
        envvar="AWS_ENDPOINT_URL",
        help="DynamoDB endpoint (a local server); default: AWS's for the region.",
    ),
    region: str | None = typer.Option(
        None,
        "--region",
        envvar=["AWS_REGION", "AWS_DEFAULT_REGION"],
        help="AWS region; default: the profile's.",
    ),
    profile: str | None = typer.Option(
        None, "--profile", envvar="AWS_PROFILE", help="AWS profile for credentials and region."
    ),
    shard_count: int | None = typer.Option(
        None,
        "--shard-count",
        help="Shards of the list indexes; default: the table's descriptor (must agree).",
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one line."),
    store: str | None = typer.Option(
        None,
        "--store",
        envvar="SANDBOX_LEDGER_STORE",
        help="Store URL instead of a table: dynamodb://TABLE, sqlite:///PATH, "
        "postgresql://..., memory://.",
    ),
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """Operate sandbox ledgers on DynamoDB, SQLite or PostgreSQL. With no table or store
    configured, an embedded local DynamoDB (moto) serves the command and is gone when it
    ends. Exit codes: 0 ok, 1 failed, 2 usage, 3 not found, 4 partly failed (docs/cli.md)."""
    target = from_environment(
        _from_command_line(ctx, "table", table),
        _from_command_line(ctx, "endpoint_url", endpoint_url),
        _from_command_line(ctx, "region", region),
        _from_command_line(ctx, "profile", profile),
        shard_count,
        debug,
        _from_command_line(ctx, "store", store),
    )
    _state["target"] = target
    ctx.call_on_close(target.close)


def handled(fn: F) -> F:
    """One clear line on stderr and the documented exit code for every failure (--debug
    re-raises); a closed stdout ends the command quietly."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        target = _state.get("target")
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):  # usage errors: click's
            raise
        except BrokenPipeError:
            quiet_stdout()
            raise typer.Exit(ExitCode.CLOSED_PIPE) from None
        except Exception as exc:
            if target is not None and target.debug:
                raise
            code, line = _failure(exc, target)
            # Whatever the message quotes (a driver's error, a URL), no password or AWS secret.
            secrets = (target.store, target.endpoint_url) if target is not None else ()
            err().print(f"error: {scrub(line, *secrets)}", markup=False, soft_wrap=True)
            raise typer.Exit(code) from exc

    return wrapper  # type: ignore[return-value]


def _failure(exc: BaseException, target: Target | None) -> tuple[ExitCode, str]:
    """The exit code and the one line for a failure."""
    from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as SDKConnectionError

    from sandbox_ledger.errors import translate_client_error

    sdk = exc if isinstance(exc, ClientError | BotoCoreError) else exc.__cause__
    if isinstance(exc, LedgerError) or not isinstance(sdk, ClientError | BotoCoreError):
        error: BaseException = exc
    else:
        error = translate_client_error(sdk)
    text = " ".join(str(error).split())
    if isinstance(error, CommandError):
        return error.exit_code, text
    if isinstance(error, TableNotFoundError) and target is not None and target.table:
        return ExitCode.NOT_FOUND, (
            f"table {target.table} not found {target.place()}; create it with "
            f"`{target.command('table create')}` (or deploy the stack)"
        )
    if isinstance(error, InvalidInputError) and error.field == "table_name" and target:
        return ExitCode.USAGE, f"{target.table_source()}: {text.split(': ', 1)[-1]}"
    if isinstance(error, InvalidInputError):
        # Only our own input checks are usage errors: a bare ValueError is a failure (a bug,
        # a store read going wrong), not something the user can fix in the command line.
        return ExitCode.USAGE, text
    if not isinstance(error, LedgerError | OSError | ClientError | BotoCoreError):
        # Not a failure the library reports (a bug, a bare ValueError): say what it was.
        return ExitCode.FAILED, f"{text} ({type(error).__name__}; --debug shows the traceback)"
    if target is None or not isinstance(sdk, ClientError | BotoCoreError):
        return ExitCode.FAILED, text
    response = getattr(sdk, "response", None) or {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    details = response.get("Error", {})
    message, code = str(details.get("Message", "")), str(details.get("Code", ""))
    # botocore uses the HTTP status as the code when the body holds no AWS error (a proxy's
    # 404, a server's 500 page): the endpoint is not DynamoDB, or not for this region.
    not_dynamodb = code.isdigit() or message.lstrip().startswith("<") or status >= 500
    if isinstance(sdk, ClientError) and not_dynamodb:
        return ExitCode.FAILED, (
            f"DynamoDB at {target.where()} answered HTTP {status} with no DynamoDB error in it; "
            "check the endpoint and the region"
        )
    if isinstance(sdk, SDKConnectionError | HTTPClientError):
        return ExitCode.FAILED, (
            f"cannot reach DynamoDB at {target.where()}: {' '.join(str(sdk).split())}"
        )
    if isinstance(error, AccessDeniedError) and target.table:
        return ExitCode.FAILED, (
            f"{text} on {target.describe()}: the credentials' IAM policy must allow it (the "
            "stack's WorkerPolicyArn covers the ledger); check AWS_PROFILE or --profile"
        )
    if target.table:
        return ExitCode.FAILED, f"{text} ({target.describe()})"
    return ExitCode.FAILED, text


def _target(store: str | None = None, writes: str | None = None) -> Target:
    """The command's target; a ``--store`` given after the command wins over the root's; a
    command that ``writes`` refuses the embedded server."""
    target = _state["target"]
    if store:
        target.store = store
        target.store_from_env = False
        if target.table_from_env:
            target.table = None
    if writes is not None and not target.table and not target.store:
        raise CommandError(
            f"{writes} writes data: name a table with --table NAME or SANDBOX_LEDGER_TABLE, or a "
            "store with --store URL (the embedded DynamoDB would lose it when the command ends)",
            ExitCode.USAGE,
        )
    if writes is not None and target.store:
        from sandbox_ledger.stores import is_ephemeral

        if is_ephemeral(target.store):
            raise CommandError(
                f"{writes} writes data: {target.store} lives only as long as this command; "
                "name a database file or server (sqlite:///ledger.db, postgresql://..., "
                "dynamodb://TABLE)",
                ExitCode.USAGE,
            )
    target.resolve()
    return target


# Ledger commands accept --store after their name too (`sandbox-ledger export --store URL`).
_STORE = typer.Option(None, "--store", help="Store URL, as the root option --store.")
_JSON = typer.Option(False, "--json", help="Print JSON (the wire shape, camelCase).")
_NAME = typer.Argument(..., metavar="NAME", help="The sandbox name of the session.")
_SANDBOX_ID = typer.Argument(..., metavar="SANDBOX_ID", help="The session's sandboxId.")


def _ledger(
    target: Target, *, interactive: bool = True, writes: bool = False
) -> SyncTransferAdapter:
    """The command's ledger. A command that ``writes`` entries (import) writes with the
    table's recorded retention unless the dynamodb:// URL names one (which must agree)."""
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    other = target.sql_or_memory_store()
    if other is not None:
        return other

    def adapter(retention: timedelta | None) -> SyncDynamoDBAdapter:
        return SyncDynamoDBAdapter(
            target.table or "",
            session=target.boto3_session(),
            retention=retention,
            **target.kwargs(interactive=interactive),
        )

    ledger = adapter(target.retention)
    if target.embedded:
        from sandbox_ledger.deployment import SweepSettings

        ledger.create_table(sweep=SweepSettings())
    elif writes and target.retention is None:
        recorded = _recorded_retention(ledger)
        if recorded is not None:
            ledger.close()
            ledger = adapter(recorded)
    return ledger


def _recorded_retention(ledger: SyncDynamoDBAdapter) -> timedelta | None:
    """The ledger retention the table's descriptor records (None: keep forever, no descriptor
    or no table yet, which the command's own requests then report)."""
    from datetime import timedelta

    from sandbox_ledger.deployment import read_descriptor
    from sandbox_ledger.errors import TableNotFoundError

    try:
        descriptor = read_descriptor(ledger.client(), ledger.table_name)
    except TableNotFoundError:
        return None
    seconds = descriptor.ledger_retention_seconds if descriptor is not None else None
    return None if seconds is None else timedelta(seconds=seconds)


def _store(target: Target) -> SyncResourceRecordStore:
    from sandbox_ledger.resources import SyncResourceRecordStore

    target.require_dynamodb("resource records")
    if target.embedded:
        _ledger(target)
    return SyncResourceRecordStore(
        target.table or "", session=target.boto3_session(), **target.kwargs()
    )


def _missing_session(target: Target, name: str, sandbox_id: str, what: str) -> CommandError:
    return CommandError(
        f"no session {name}/{sandbox_id} in {target.describe()}{what}; list the sessions of "
        f"{name} with `{target.command('ls', '--name', _quote(name))}`",
        ExitCode.NOT_FOUND,
    )


def _pasted(cursor: str | None) -> str | None:
    """A cursor as pasted: the whitespace around it (a copied line's end) is no part of it."""
    return None if cursor is None else cursor.strip()


def _quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


def _clip(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(*columns: str, title: str | None = None) -> Any:
    from rich.table import Table

    return Table(*columns, title=title)


@app.command()
@handled
def demo(
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
) -> None:
    """Simulate a fleet end to end, then sweep expired resource records through the
    handler; prints a summary of operations, requests, latency and outcomes."""
    from sandbox_ledger.cli.demo import DemoConfig, render, report_json, run_demo

    target = _target()
    target.require_dynamodb("the demo")
    config = DemoConfig(
        sandboxes=sandboxes,
        execs=execs,
        branches=branches,
        concurrency=concurrency,
        dead_owner_share=dead_owners,
    )
    report = run_demo(target, config, err() if as_json else out())
    if as_json:
        emit(report_json(report))
    else:
        render(report, out())


_SWEEP_FLAGS = {
    "event_bus_name": "--event-bus",
    "stale_after_seconds": "--stale-after",
    "retain_failed_seconds": "--retain-failed",
}


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
) -> None:
    """Create the table (as the CDK stack does) if it does not exist; wait until ACTIVE. Its
    descriptor records the resource sweep's bus and windows, so `resources sweep` needs no
    flags (a table that records them already keeps its own)."""
    from sandbox_ledger.deployment import DeploymentMismatchError, SweepSettings, read_descriptor
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    target = _target(writes="table create")
    target.require_dynamodb("table create")
    settings = SweepSettings(event_bus, stale_after, retain_failed)
    ledger = SyncDynamoDBAdapter(
        target.table or "",
        session=target.boto3_session(),
        retention=target.retention,
        **target.kwargs(),
    )
    created = ledger.create_table(sweep=settings)
    described = read_descriptor(ledger.client(), ledger.table_name)
    for name, flag in _SWEEP_FLAGS.items():
        given = _from_command_line(ctx, flag.lstrip("-").replace("-", "_"), getattr(settings, name))
        recorded = getattr(described, name) if described is not None else None
        if given is not None and recorded is not None and given != recorded:
            raise DeploymentMismatchError(flag, given, recorded, target.table or "")
    if as_json:
        emit({"table": target.table, "created": created, "sweep": _sweep_json(described)})
    else:
        out().print(f"table {target.table}: {'created' if created else 'already exists'}")
        if described is not None and described.describes_sweep:
            out().print(
                f"resource sweep: bus {described.event_bus_name}, live records expire "
                f"{described.stale_after_seconds} s without heartbeat, failed ones "
                + (
                    f"after {described.retain_failed_seconds} s"
                    if described.retain_failed_seconds
                    else "never"
                ),
                markup=False,
            )


def _sweep_json(described: Any) -> dict[str, Any] | None:
    if described is None or not described.describes_sweep:
        return None
    return {
        "eventBus": described.event_bus_name,
        "staleAfterSeconds": described.stale_after_seconds,
        "retainFailedSeconds": described.retain_failed_seconds,
    }


@app.command("ls")
@handled
def ls(
    name: str | None = typer.Option(None, "--name", help="Only sessions of this sandbox name."),
    status: SandboxStatus | None = typer.Option(None, "--status", help="Only this status."),
    before: str | None = typer.Option(
        None,
        "--before",
        metavar="TIME",
        help="Only sessions started before TIME: Unix milliseconds, or ISO 8601 with a zone "
        "(2026-12-01T12:00:00Z, ...+02:00; a time without a zone is refused).",
    ),
    limit: int = typer.Option(50, "--limit", min=0, help="Sessions per page; 0: no limit."),
    store: str | None = _STORE,
    cursor: str | None = typer.Option(
        None, "--cursor", help="Resume where the previous page ended (it prints the cursor)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help='Print {"sessions": [...], "cursor": ...} in the wire shape.'
    ),
) -> None:
    """Sessions, newest first, one page; prints the cursor of the next page. Times are UTC."""
    from sandbox_ledger.models import ListSandboxOptions

    before_ms = None if before is None else parse_time(before)
    ledger = _ledger(_target(store))
    opts = ListSandboxOptions(status=status, before=before_ms, limit=limit, cursor=_pasted(cursor))
    page = ledger.list_sandbox_page(name, opts) if name else ledger.list_all_sandbox_page(opts)
    rows = page.sessions
    if as_json:
        emit({"sessions": [d.wire() for d in rows], "cursor": page.cursor})
        return
    table = _table("name", "sandboxId", "status", "started", "completed", "execs")
    for d in rows:
        table.add_row(
            d.name,
            d.sandbox_id,
            str(d.status),
            when(d.started_at),
            when(d.completed_at),
            str(d.exec_count),
        )
    out().print(table)
    out().print(f"{len(rows)} session(s)")
    if page.cursor:
        out().print(f"next page: --cursor {page.cursor}", markup=False)


@app.command()
@handled
def show(
    name: str = _NAME,
    sandbox_id: str = _SANDBOX_ID,
    as_json: bool = typer.Option(
        False, "--json", help="JSON lines: one entry per line in the wire shape, as export."
    ),
    store: str | None = _STORE,
) -> None:
    """A session's ledger as a timeline (times in UTC)."""
    target = _target(store)
    entries = _ledger(target).read_all(name, sandbox_id)
    if not entries:
        raise _missing_session(target, name, sandbox_id, "")
    if as_json:
        for e in entries:
            sys.stdout.write(json.dumps(e.wire(), ensure_ascii=False) + "\n")
        return
    table = _table("time", "step", "branch", "event", "payload", "error")
    for e in entries:
        table.add_row(
            when(e.ts),
            str(e.step_index),
            "" if e.branch is None else str(e.branch),
            e.event,
            "" if e.payload is None else _clip(e.payload),
            e.error or "",
        )
    out().print(table)


@app.command()
@handled
def checkpoints(
    name: str = _NAME,
    sandbox_id: str = _SANDBOX_ID,
    store: str | None = _STORE,
    as_json: bool = typer.Option(
        False, "--json", help="Print a JSON array of checkpoints in the wire shape."
    ),
) -> None:
    """A session's checkpoints in creation order."""
    rows = _ledger(_target(store)).list_checkpoints(name, sandbox_id)
    if as_json:
        emit([c.wire() for c in rows])
        return
    table = _table("created", "snapshotId", "tag")
    for c in rows:
        table.add_row(when(c.created_at), c.snapshot_id or "-", c.tag or "-")
    out().print(table)
    out().print(f"{len(rows)} checkpoint(s)")


@app.command()
@handled
def envs(
    store: str | None = _STORE,
    as_json: bool = typer.Option(
        False, "--json", help="Print a JSON array of environment records in the wire shape."
    ),
) -> None:
    """Environment records, newest builtAt first."""
    rows = _ledger(_target(store)).list_environments()
    if as_json:
        emit([r.wire() for r in rows])
        return
    table = _table("name", "built", "other fields")
    for r in rows:
        extra = {key: v for key, v in r.wire().items() if key not in ("name", "builtAt")}
        table.add_row(r.name, when(r.built_at), _clip(extra) if extra else "")
    out().print(table)


@app.command()
@handled
def rm(
    name: str = _NAME,
    sandbox_id: str = _SANDBOX_ID,
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    store: str | None = _STORE,
    as_json: bool = typer.Option(
        False, "--json", help='Print {"name", "sandboxId", "deleted": true} when done.'
    ),
) -> None:
    """Delete a session and every entry of it."""
    target = _target(store, writes="rm")
    ledger = _ledger(target)
    if ledger.get_sandbox_details(name, sandbox_id) is None and not ledger.read_all(
        name, sandbox_id
    ):
        raise _missing_session(target, name, sandbox_id, ": nothing to delete")
    if not yes and not typer.confirm(f"Delete {name}/{sandbox_id} and all its entries?"):
        raise typer.Abort
    from sandbox_ledger.cli.progress import deleting

    with deleting(ledger, f"deleting {name}/{sandbox_id}", err()):
        ledger.delete_sandbox(name, sandbox_id)
    if as_json:
        emit({"name": name, "sandboxId": sandbox_id, "deleted": True})
    else:
        out().print(f"deleted {name}/{sandbox_id}", markup=False)


@app.command("export")
@handled
def export(
    name: str | None = typer.Option(None, "--name", help="Only sessions of this name."),
    sandbox_id: str | None = typer.Option(
        None, "--sandbox-id", help="Only this session (with --name)."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write to this file (replaced on success); default: stdout."
    ),
    store: str | None = _STORE,
) -> None:
    """Entries as JSON lines in the TypeScript wire shape, one entry per line: every session
    that has entries, listed or not (a parallel Scan of the table), each in append order;
    without --name, the environment records follow. A file is replaced only when the export
    succeeds."""
    from sandbox_ledger.cli.transfer import NothingToExport, export_to

    if sandbox_id and not name:
        raise InvalidInputError("--sandbox-id", "needs --name")
    target = _target(store)
    try:
        sessions, count, environments = export_to(
            _ledger(target), name=name, sandbox_id=sandbox_id, output=output, err=err()
        )
    except NothingToExport as nothing:
        if nothing.sandbox_id is not None:
            unchanged = f" ({output} is unchanged)" if output else ""
            raise _missing_session(target, nothing.name, nothing.sandbox_id, unchanged) from None
        raise CommandError(
            f"no sessions named {nothing.name} in {target.describe()}"
            + (f"; {output} is unchanged" if output else ""),
            ExitCode.NOT_FOUND,
        ) from None
    err().print(
        f"exported {count} entries of {sessions} session(s)"
        + (f" and {environments} environment record(s)" if environments else "")
    )


@app.command("import")
@handled
def import_(
    path: str = typer.Argument(..., metavar="PATH", help="JSON lines as exported; - for stdin."),
    store: str | None = _STORE,
    as_json: bool = typer.Option(
        False,
        "--json",
        help='Print {"new", "present", "expired", "failed": [{"line", "reason"}], '
        '"environments": {...}}.',
    ),
) -> None:
    """Reconcile JSON lines (as exported) into the table: each entry of the file is stored
    exactly once however often, in whatever order or overlap it is imported; entries the
    table holds are not duplicated. Failed lines are reported with their numbers; the valid
    ones are kept; the exit code is 4 when any line failed."""
    from sandbox_ledger.cli.transfer import import_from

    # Anything readable is a source (a file, a pipe, /dev/stdin, <(zcat f.gz), a FIFO), not
    # only a regular file; a directory or a missing path is refused before anything is written.
    if path != "-" and Path(path).is_dir():
        raise typer.BadParameter(f"{path}: is a directory, not a file", param_hint="PATH")
    if path != "-" and not Path(path).exists():
        raise typer.BadParameter(f"{path}: no such file", param_hint="PATH")
    ledger = _ledger(_target(store, writes="import"), interactive=False, writes=True)
    label = "<stdin>" if path == "-" else path
    with contextlib.ExitStack() as stack:
        source = sys.stdin.buffer if path == "-" else stack.enter_context(Path(path).open("rb"))
        report = import_from(ledger, source, label=label, err=err())
    err().print(f"imported {label}: {report.summary()}", markup=False)
    if as_json:
        failed = [{"line": f.number, "reason": f.reason} for f in report.failed]
        env = report.environments
        environments = {
            "new": env.new,
            "updated": env.updated,
            "present": env.present,
            "kept": env.kept,
        }
        emit(
            {
                "new": report.new,
                "present": report.present,
                "expired": report.expired,
                "failed": failed,
                "environments": environments,
            }
        )
    if report.failed:
        raise typer.Exit(ExitCode.PARTIAL)


class PhaseChoice(StrEnum):
    """The seed's phases (``sandbox_ledger.resources.models.Phase``), for option parsing
    without loading the models."""

    allocating = "allocating"
    ready = "ready"
    closing = "closing"
    cleanup_failed = "cleanup-failed"
    allocation_uncertain = "allocation-uncertain"


@resources_app.command("ls")
@handled
def resources_ls(
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
) -> None:
    """Resource activity records, newest updatedAt first, one page."""
    page = _store(_target()).list(
        phase=None if phase is None else phase.value,
        provider=provider,
        limit=limit,
        cursor=_pasted(cursor),
    )
    if as_json:
        emit(
            {
                "records": [v.record.wire() for v in page.records],
                "unreadable": [{"id": u.record_id, "reason": u.reason} for u in page.unreadable],
                "cursor": page.cursor,
            }
        )
        return
    table = _table("id", "phase", "provider", "pid", "updated", "operations", "workspace")
    for v in page.records:
        r = v.record
        ops = ", ".join(f"{o.kind} x{o.count}" for o in r.operations) or "-"
        table.add_row(
            r.id, r.phase, r.sandbox_provider, str(r.pid), r.updated_at, ops, _clip(r.workspace, 40)
        )
    for bad in page.unreadable:
        table.add_row(bad.record_id, "unreadable", "-", "-", "-", "-", _clip(bad.reason, 80))
    out().print(table)
    out().print(
        f"{len(page.records)} record(s)"
        + (f", {len(page.unreadable)} unreadable" if page.unreadable else "")
    )
    if page.cursor:
        out().print(f"next page: --cursor {page.cursor}", markup=False)


@resources_app.command("sweep")
@handled
def resources_sweep(
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
) -> None:
    """Expire stale records now, as the scheduled handler does: with the deployment's bus
    and windows (from the table's descriptor); a flag that disagrees is refused, and a table
    that describes none needs all three flags. Exit code 4 when any record failed."""
    from datetime import UTC, datetime

    import boto3

    from sandbox_ledger.cli.progress import sweeping
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
        names=_SWEEP_FLAGS,
    )
    session = target.boto3_session() or boto3.session.Session()
    events = session.client("events", endpoint_url=target.endpoint_url, region_name=target.region)
    if target.embedded and plan.event_bus_name != "default":
        events.create_event_bus(Name=plan.event_bus_name)
    if not dry_run:
        _require_bus(events, plan.event_bus_name, target)
    with sweeping(store, err()) as counted:
        result = sweep(
            counted,
            EventPublisher(events, plan.event_bus_name),
            now=datetime.now(UTC),
            policy=plan.policy,
            dry_run=dry_run,
        )
    if as_json:
        emit({**result.to_dict(), "eventBus": plan.event_bus_name})
    else:
        verb = "would expire" if dry_run else "expired"
        for record_id in result.expired:
            out().print(f"{verb} {record_id}: {result.reasons[record_id]}", markup=False)
        out().print(
            f"{len(result.expired)} {verb}, {len(result.skipped)} skipped (not stale, or "
            f"another sweep's), {len(result.failed)} failed (bus {plan.event_bus_name})",
            markup=False,
        )
        if result.due:
            out().print(
                f"{len(result.due)} record(s) unchanged since a sweep observed them: if they "
                f"stay so, the first sweep from {min(result.due.values())} on expires the "
                "first of them (each one a whole window after its observation)",
                markup=False,
            )
    if result.failed:
        raise typer.Exit(ExitCode.PARTIAL)


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


def main() -> None:
    """Console-script entry point: a closed stdout (``| head``) ends it quietly with 141."""
    try:
        try:
            app()
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
        raise SystemExit(ExitCode.CLOSED_PIPE) from None
    except SystemExit as done:
        # click ends a closed pipe met while it prints (--help) with 1, its stdout wrapped.
        if done.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
            quiet_stdout()
            raise SystemExit(ExitCode.CLOSED_PIPE) from None
        raise


# Commands defined in their own modules register on the apps above.
from sandbox_ledger.cli import live, resource_files  # noqa: E402, F401
