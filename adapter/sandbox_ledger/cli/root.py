"""The ``sandbox-ledger`` command tree and its root options: the command modules register
on the Typer apps defined here, and the root callback puts the command's :class:`Target`
on the click context (``ctx.obj``), where :func:`sandbox_ledger.cli.connect.target` finds
it."""

from __future__ import annotations

from typing import Any

import typer

from sandbox_ledger.cli.context import from_environment

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


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"sandbox-ledger {version(PACKAGE)}")
        raise typer.Exit


def from_command_line(ctx: typer.Context, name: str, value: Any) -> Any:
    """The value if it was given on the command line (not read from its variable nor a
    default): the environment is applied by :func:`from_environment`, with its precedence."""
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
    """Operate sandbox ledgers on DynamoDB, SQLite or PostgreSQL. Name one with --table or
    --store (or SANDBOX_LEDGER_TABLE, SANDBOX_LEDGER_STORE); `sandbox-ledger local` serves a
    local DynamoDB; `sandbox-ledger demo` needs nothing. Exit codes: 0 ok, 1 failed, 2 usage,
    3 not found, 4 partly failed (docs/cli.md)."""
    _telemetry()
    target = from_environment(
        from_command_line(ctx, "table", table),
        from_command_line(ctx, "endpoint_url", endpoint_url),
        from_command_line(ctx, "region", region),
        from_command_line(ctx, "profile", profile),
        shard_count,
        debug,
        from_command_line(ctx, "store", store),
    )
    ctx.obj = target
    ctx.call_on_close(target.close)


def _telemetry() -> None:
    """OpenTelemetry export when the SDK's standard variables ask for it (cli/otel.py); a bad
    exporter name is a usage error."""
    import os

    from sandbox_ledger.cli.otel import configure

    try:
        configure(os.environ)
    except ValueError as exc:
        typer.echo(f"sandbox-ledger: {exc}", err=True)
        raise typer.Exit(2) from exc
