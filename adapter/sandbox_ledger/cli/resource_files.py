"""``resources import|show|export``: Outpost's resources directories and single records."""

from __future__ import annotations

import json
from pathlib import Path  # noqa: TC003 - typer reads the annotation at run time

import typer

from sandbox_ledger.cli import connect, render
from sandbox_ledger.cli.failures import handled
from sandbox_ledger.cli.output import CommandError, ExitCode, err, json_text, kind_of, out, say
from sandbox_ledger.cli.render import OUTPUT, QUERY, Format, View
from sandbox_ledger.cli.root import resources_app


@resources_app.command("import")
@handled
def resources_import(
    ctx: typer.Context,
    directory: Path = typer.Argument(..., help="An Outpost resources directory (*.json)."),
    as_json: bool = typer.Option(
        False,
        "--json",
        help='Print {"written": [...], "unchanged": [...], "failed": {file: reason}}.',
    ),
    output: Format | None = OUTPUT,
    query: str | None = QUERY,
) -> None:
    """Load every <id>.json record of DIRECTORY; a newer record in the table is kept.
    Exit code 4 when any file failed (the others are loaded)."""
    from sandbox_ledger.cli.progress import per_file
    from sandbox_ledger.resources.files import import_directory

    target = connect.target(ctx, writes="resources import")  # a store named first
    if not directory.is_dir():
        raise CommandError(
            f"DIRECTORY: {directory} is {kind_of(directory)}, not a directory", ExitCode.USAGE
        )
    store = connect.resource_store(target)
    total = len(list(directory.glob("*.json"))) if directory.is_dir() else 0
    with per_file("importing records", err(), total) as on_file:
        report = import_directory(store, directory, on_file=on_file)
    for reason in report.failed.values():
        say(f"error: {reason}")
    say(
        f"{len(report.written)} written, {len(report.unchanged)} unchanged "
        f"(the table's version is as new or newer), {len(report.failed)} failed"
    )
    if as_json or output is not None or query is not None:  # the summary says the rest
        doc = {"written": report.written, "unchanged": report.unchanged, "failed": report.failed}
        render.show(View(doc), render.choose(as_json, output), query)
    if report.failed:
        raise typer.Exit(ExitCode.PARTIAL)


@resources_app.command("show")
@handled
def resources_show(
    ctx: typer.Context,
    record_id: str = typer.Argument(..., metavar="ID", help="The record's id."),
    as_json: bool = typer.Option(
        False, "--json", help="Print the record file's JSON (the seed's exact shape)."
    ),
    output: Format | None = OUTPUT,
    query: str | None = QUERY,
) -> None:
    """One record: its fields, revision and expiry, or its file JSON with --json. A record
    this version cannot read (a newer writer's, or an id an older version stored in another
    spelling of a UUID) is shown as stored, with why: exit code 4."""
    from sandbox_ledger.resources import Unreadable

    target = connect.target(ctx)
    stored = connect.resource_store(target).inspect(record_id)
    if isinstance(stored, Unreadable):
        doc = {"id": stored.record_id, "unreadable": stored.reason, "stored": stored.body}
        note = "unreadable by this version: shown as stored (not expired, nor changed)"
        # As JSON string contents: a body's control characters (a terminal's escapes) are
        # shown escaped, never sent to the terminal.
        shown = [
            [key, "-" if v is None else json.dumps(v, ensure_ascii=False)[1:-1]]
            for key, v in doc.items()
        ]
        view = View(doc, ("field", "value"), shown, [note])
        render.show(view, render.choose(as_json, output), query)
        raise typer.Exit(ExitCode.PARTIAL)
    if stored is None:
        raise CommandError(
            f"no resource record {record_id} in {target.describe()}; list the records with "
            f"`{target.command('resources ls')}`",
            ExitCode.NOT_FOUND,
        )
    fmt = render.choose(as_json, output)
    if fmt is Format.json and query is None:
        # The file's JSON (indented as the file), terminal-safe as every JSON output.
        out().print(json_text(stored.record.wire(), indent=2), markup=False)
        return
    record = stored.record
    last_op, last_failure = record.last_operation, record.last_failure
    rows = {
        "id": record.id,
        "phase": record.phase,
        "provider": record.sandbox_provider,
        "placement": record.placement,
        "pid": str(record.pid),
        "workspace": record.workspace,
        "created": record.created_at,
        "updated": record.updated_at,
        "operations": ", ".join(f"{o.kind} x{o.count}" for o in record.operations) or "-",
        "last operation": json.dumps(last_op.wire()) if last_op else "-",
        "last failure": json.dumps(last_failure.wire()) if last_failure else "-",
        "revision": str(stored.revision),
        "being expired": stored.expiring or "no",
    }
    view = View(stored.record.wire(), ("field", "value"), [[k, v] for k, v in rows.items()])
    render.show(view, fmt, query)


@resources_app.command("export")
@handled
def resources_export(
    ctx: typer.Context,
    directory: Path = typer.Argument(..., help="Where to write <id>.json files."),
    as_json: bool = typer.Option(
        False,
        "--json",
        help='Print {"directory": ..., "files": [...], "unreadable": {id: reason}}.',
    ),
    output: Format | None = OUTPUT,
    query: str | None = QUERY,
) -> None:
    """Write every record of the table to DIRECTORY, one <id>.json file each. A record this
    version cannot read is named on stderr, no file written for it: exit code 4. The records
    are read by a Scan of the table (its cost grows with the table), so a record in a phase
    this version does not know is reported, never missed."""
    from sandbox_ledger.cli.progress import per_file
    from sandbox_ledger.resources.files import export_directory

    target = connect.target(ctx)  # a store named first
    if directory.exists() and not directory.is_dir():
        raise CommandError(
            f"DIRECTORY: {directory} is {kind_of(directory)}, not a directory", ExitCode.USAGE
        )
    store = connect.resource_store(target)
    with per_file("exporting records", err(), None) as on_file:
        report = export_directory(store, directory, on_file=on_file)
    for record_id, reason in report.unreadable.items():
        say(f"error: record {record_id} not exported: {reason}")
    say(
        f"exported {len(report.written)} record(s) to {directory}"
        + (
            f"; {len(report.unreadable)} unreadable record(s) not exported (written by a newer "
            "version, or damaged)"
            if report.unreadable
            else ""
        )
    )
    if as_json or output is not None or query is not None:  # the summary says the rest
        doc = {
            "directory": str(directory),
            "files": report.written,
            "unreadable": report.unreadable,
        }
        render.show(View(doc), render.choose(as_json, output), query)
    if report.unreadable:
        raise typer.Exit(ExitCode.PARTIAL)
