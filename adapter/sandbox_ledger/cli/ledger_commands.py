"""The ledger's commands: ``ls``, ``show``, ``checkpoints``, ``envs``, ``rm``, ``export``
and ``import``."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import typer

from sandbox_ledger._enums import SandboxStatus  # noqa: TC001 - typer reads it at run time
from sandbox_ledger.cli import connect, render
from sandbox_ledger.cli.failures import handled
from sandbox_ledger.cli.output import (
    CommandError,
    ExitCode,
    err,
    parse_time,
    say,
    summary,
    visible,
    when,
)
from sandbox_ledger.cli.render import OUTPUT, QUERY, Format, View
from sandbox_ledger.cli.root import app
from sandbox_ledger.errors import InvalidInputError

# Ledger commands accept --store after their name too (`sandbox-ledger export --store URL`).
_STORE = typer.Option(None, "--store", help="Store URL, as the root option --store.")
_NAME = typer.Argument(..., metavar="NAME", help="The sandbox name of the session.")
_SANDBOX_ID = typer.Argument(..., metavar="SANDBOX_ID", help="The session's sandboxId.")


@app.command("ls")
@handled
def ls(
    ctx: typer.Context,
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
    output: Format | None = OUTPUT,
    query: str | None = QUERY,
) -> None:
    """Sessions, newest first, one page; prints the cursor of the next page. Times are UTC."""
    from pydantic import ValidationError

    from sandbox_ledger.models import ListSandboxOptions

    before_ms = None if before is None else parse_time(before)
    ledger = connect.ledger(connect.target(ctx, store))
    try:
        opts = ListSandboxOptions(
            status=status, before=before_ms, limit=limit, cursor=connect.pasted(cursor)
        )
    except ValidationError as exc:  # a flag's value the contract refuses, named by its flag
        first = exc.errors()[0]
        flag = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "option"
        raise InvalidInputError(flag, f"{first['msg']} (got {first.get('input')!r})") from None
    page = ledger.list_sandbox_page(name, opts) if name else ledger.list_all_sandbox_page(opts)
    rows = page.sessions
    view = View(
        {"sessions": [d.wire() for d in rows], "cursor": page.cursor},
        ("name", "sandboxId", "status", "started", "completed", "execs"),
        [
            [
                d.name,
                d.sandbox_id,
                str(d.status),
                when(d.started_at),
                when(d.completed_at),
                str(d.exec_count),
            ]
            for d in rows
        ],
        [f"{len(rows)} session(s)"]
        + ([f"next page: --cursor {page.cursor}"] if page.cursor else []),
        drop=("execs", "status", "completed"),  # `completed` says the status too
    )
    render.show(view, render.choose(as_json, output), query)


@app.command()
@handled
def show(
    ctx: typer.Context,
    name: str = _NAME,
    sandbox_id: str = _SANDBOX_ID,
    as_json: bool = typer.Option(
        False, "--json", help="JSON lines: one entry per line in the wire shape, as export."
    ),
    store: str | None = _STORE,
    output: Format | None = OUTPUT,
    query: str | None = QUERY,
) -> None:
    """A session's ledger as a timeline (times in UTC)."""
    target = connect.target(ctx, store)
    entries = connect.ledger(target).read_all(name, sandbox_id)
    if not entries:
        raise connect.missing_session(target, name, sandbox_id, "")
    rows = [
        [
            when(e.ts),
            str(e.step_index),
            "" if e.branch is None else str(e.branch),
            e.event,
            "" if e.payload is None else json.dumps(e.payload, ensure_ascii=False),
            e.error or "",
        ]
        for e in entries
    ]
    columns = ("time", "step", "branch", "event", "payload", "error")
    drop = ("branch", "step", "error", "payload")
    view = View([e.wire() for e in entries], columns, rows, json_lines=True, drop=drop)
    render.show(view, render.choose(as_json, output), query)


@app.command()
@handled
def checkpoints(
    ctx: typer.Context,
    name: str = _NAME,
    sandbox_id: str = _SANDBOX_ID,
    store: str | None = _STORE,
    as_json: bool = typer.Option(
        False, "--json", help="Print a JSON array of checkpoints in the wire shape."
    ),
    output: Format | None = OUTPUT,
    query: str | None = QUERY,
) -> None:
    """A session's checkpoints in creation order (exit code 3 if the session does not exist)."""
    target = connect.target(ctx, store)
    ledger = connect.ledger(target)
    rows = ledger.list_checkpoints(name, sandbox_id)
    missing = not rows and ledger.get_sandbox_details(name, sandbox_id) is None
    if missing and not ledger.read_all(name, sandbox_id):
        raise connect.missing_session(target, name, sandbox_id, "")
    view = View(
        [c.wire() for c in rows],
        ("created", "snapshotId", "tag"),
        [[when(c.created_at), c.snapshot_id or "-", c.tag or "-"] for c in rows],
        [f"{len(rows)} checkpoint(s)"],
        drop=("tag",),
    )
    render.show(view, render.choose(as_json, output), query)


@app.command()
@handled
def envs(
    ctx: typer.Context,
    names: list[str] | None = typer.Argument(
        None, metavar="[NAME]...", help="Only these records (exit code 3 if one is missing)."
    ),
    store: str | None = _STORE,
    as_json: bool = typer.Option(
        False, "--json", help="Print a JSON array of environment records in the wire shape."
    ),
    output: Format | None = OUTPUT,
    query: str | None = QUERY,
) -> None:
    """Environment records, newest builtAt first; with NAMEs, those records."""
    target = connect.target(ctx, store)
    ledger = connect.ledger(target)
    if names:
        found = {n: ledger.get_environment(n) for n in dict.fromkeys(names)}
        missing = [n for n, r in found.items() if r is None]
        if missing:
            named = ", ".join(map(visible, missing))
            raise CommandError(
                f"no environment record {named} in {target.describe()}; list them with "
                f"`{target.command('envs')}`",
                ExitCode.NOT_FOUND,
            )
        rows = [r for r in found.values() if r is not None]
    else:
        rows = ledger.list_environments()
    extra = [{k: v for k, v in r.wire().items() if k not in ("name", "builtAt")} for r in rows]
    view = View(
        [r.wire() for r in rows],
        ("name", "built", "other fields"),
        [
            [r.name, when(r.built_at), json.dumps(x, ensure_ascii=False) if x else ""]
            for r, x in zip(rows, extra, strict=True)
        ],
        [f"{len(rows)} environment record(s)"],
    )
    render.show(view, render.choose(as_json, output), query)


@app.command()
@handled
def rm(
    ctx: typer.Context,
    name: str = _NAME,
    sandbox_id: str = _SANDBOX_ID,
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    store: str | None = _STORE,
    as_json: bool = typer.Option(
        False, "--json", help='Print {"name", "sandboxId", "deleted": true} when done.'
    ),
    output: Format | None = OUTPUT,
    query: str | None = QUERY,
) -> None:
    """Delete a session and every entry of it."""
    target = connect.target(ctx, store, writes="rm")
    ledger = connect.ledger(target, writes=True)
    if ledger.get_sandbox_details(name, sandbox_id) is None and not ledger.read_all(
        name, sandbox_id
    ):
        raise connect.missing_session(target, name, sandbox_id, ": nothing to delete")
    shown = visible(f"{name}/{sandbox_id}")  # a CR or an escape never changes what is asked
    if not yes and not typer.confirm(f"Delete {shown} and all its entries?"):
        raise typer.Abort
    from sandbox_ledger.cli.progress import deleting

    with deleting(ledger, f"deleting {shown}", err()):
        ledger.delete_sandbox(name, sandbox_id)
    doc = {"name": name, "sandboxId": sandbox_id, "deleted": True}
    view = View(doc, notes=[f"deleted {name}/{sandbox_id}"])
    render.show(view, render.choose(as_json, output), query)


@app.command("export")
@handled
def export(
    ctx: typer.Context,
    name: str | None = typer.Option(None, "--name", help="Only sessions of this name."),
    sandbox_id: str | None = typer.Option(
        None, "--sandbox-id", help="Only this session (with --name)."
    ),
    file: Path | None = typer.Option(
        None,
        "-o",
        "--file",
        metavar="FILE",
        help="Write to FILE (replaced on success; - is stdout); default: stdout.",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="--output json: JSON lines, what export always writes."
    ),
    output: str | None = typer.Option(
        None,
        "--output",
        metavar="[json|text|table]",
        help="The format, as on every command: export writes JSON lines (json); text and "
        "table are refused. The file is -o FILE.",
    ),
    segments: int | None = typer.Option(
        None,
        "--segments",
        min=1,
        max=64,
        help="DynamoDB: Scan segments read in parallel (1-64; default 4). Other stores "
        "list their sessions with one query and ignore it.",
    ),
    store: str | None = _STORE,
    query: str | None = typer.Option(
        None,
        "--query",
        help="A JMESPath expression over each line's JSON (an entry, or an environment "
        "line's {kind, record}): its result is written as the line; a line whose result is "
        "null or false is left out (--query \"event == 'exec.complete' && @\" filters).",
    ),
) -> None:
    """Entries as JSON lines in the TypeScript wire shape, one entry per line: every session
    that has entries, listed or not (a parallel Scan of the table), each in append order;
    without --name, the environment records follow. A file is replaced only when the export
    succeeds."""
    from sandbox_ledger.cli.transfer import NothingToExport, export_file, export_to

    if sandbox_id and not name:
        raise InvalidInputError("--sandbox-id", "needs --name")
    output_file = export_file(file, output, as_json=as_json)
    select = render.line_query(query) if query is not None else None
    target = connect.target(ctx, store)

    def replaced() -> None:  # from here on, an interruption no longer leaves FILE as it was
        target.so_far = lambda: f"the export was complete: {output_file} was replaced by it"

    try:
        sessions, count, environments, written = export_to(
            connect.ledger(target),
            name=name,
            sandbox_id=sandbox_id,
            output=output_file,
            err=err(),
            select=select,
            segments=segments,
            replaced=replaced,
        )
    except NothingToExport as nothing:
        unchanged = f"; {output_file} is unchanged" if output_file else ""
        if nothing.name is not None and nothing.sandbox_id is not None:
            raise connect.missing_session(
                target,
                nothing.name,
                nothing.sandbox_id,
                f" ({output_file} is unchanged)" if output_file else "",
            ) from None
        what = (
            f"no sessions named {visible(nothing.name)}"
            if nothing.name is not None
            else "nothing to export: no session has an entry and there are no environment records"
        )
        raise CommandError(
            f"{what} in {target.describe()}{unchanged}", ExitCode.NOT_FOUND
        ) from None
    summary(
        f"exported {count} entries of {sessions} session(s)"
        + (f" and {environments} environment record(s)" if environments else "")
        + (f"; --query kept {written} line(s)" if select is not None else "")
    )


@app.command("import")
@handled
def import_(
    ctx: typer.Context,
    path: str = typer.Argument(..., metavar="PATH", help="JSON lines as exported; - for stdin."),
    store: str | None = _STORE,
    as_json: bool = typer.Option(
        False,
        "--json",
        help='Print {"new", "present", "expired", "failed": [{"line", "reason"}], '
        '"environments": {...}}.',
    ),
    output: Format | None = OUTPUT,
    query: str | None = QUERY,
) -> None:
    """Reconcile JSON lines (as exported) into the table: each entry of the file is stored
    exactly once however often, in whatever order or overlap it is imported; entries the
    table holds are not duplicated. Failed lines are reported with their numbers; the valid
    ones are kept; the exit code is 4 when any line failed."""
    from sandbox_ledger.cli.interrupt import ImportStatus
    from sandbox_ledger.cli.transfer import import_from

    # Anything readable is a source (a file, a pipe, /dev/stdin, <(zcat f.gz), a FIFO), not
    # only a regular file; a directory or a missing path is refused before anything is written.
    # One `error:` line, as every other failure (not click's usage block), exit code 2.
    if path != "-" and Path(path).is_dir():
        raise CommandError(f"{visible(path)}: is a directory, not a file", ExitCode.USAGE)
    if path != "-" and not Path(path).exists():
        raise CommandError(f"{visible(path)}: no such file", ExitCode.USAGE)
    target = connect.target(ctx, store, writes="import")
    ledger = connect.ledger(target, interactive=False, writes=True)
    label = "<stdin>" if path == "-" else path
    with contextlib.ExitStack() as stack:
        source = sys.stdin.buffer if path == "-" else stack.enter_context(Path(path).open("rb"))
        status = ImportStatus()
        target.so_far, target.after_failure = status.describe, status.after_failure
        report = import_from(ledger, source, label=label, err=err(), status=status)
    say(f"imported {label}: {report.summary()}")
    if as_json or output is not None or query is not None:  # the summary says the rest
        failed = [{"line": f.number, "reason": f.reason} for f in report.failed]
        env = report.environments
        environments = {
            "new": env.new,
            "updated": env.updated,
            "present": env.present,
            "kept": env.kept,
        }
        doc = {
            "new": report.new,
            "present": report.present,
            "expired": report.expired,
            "failed": failed,
            "environments": environments,
        }
        render.show(View(doc), render.choose(as_json, output), query)
    if report.failed:
        raise typer.Exit(ExitCode.PARTIAL)
