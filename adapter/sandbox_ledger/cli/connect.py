"""The running command's target (carried on the click context by the root callback) and the
ledger or resource store it opens."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox_ledger.cli.context import Target
from sandbox_ledger.cli.output import CommandError, ExitCode, shell_word, visible

if TYPE_CHECKING:
    from datetime import timedelta

    import typer

    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.protocol import SyncTransferAdapter
    from sandbox_ledger.resources import SyncResourceRecordStore


def current_target(ctx: typer.Context) -> Target:
    """The target the root callback made for the running command."""
    found = ctx.find_object(Target)
    if found is None:
        raise RuntimeError(f"no target on the context of {ctx.command_path}: no root callback")
    return found


NOTHING_CONFIGURED = (
    "no table or store configured: name one with --table NAME or --store URL (or set "
    "SANDBOX_LEDGER_TABLE or SANDBOX_LEDGER_STORE), or start a local one with "
    "`sandbox-ledger local` and paste the export lines it prints"
)


def target(
    ctx: typer.Context,
    store: str | None = None,
    writes: str | None = None,
    *,
    embedded: bool = False,
) -> Target:
    """The command's target; a ``--store`` given after the command wins over the root's.
    With nothing configured, only a command that allows the ``embedded`` server (the demo)
    runs, on one that lives as long as it; a command that ``writes`` refuses a store that
    lives only as long as the command.

    Raises:
        CommandError: (exit 2) nothing configured, or a write to an ephemeral store.
    """
    found = current_target(ctx)
    if store:
        found.store = store
        found.store_from_env = False
        if found.table_from_env:
            found.table = None
    if not embedded and not found.table and not found.store:
        raise CommandError(NOTHING_CONFIGURED, ExitCode.USAGE)
    if writes is not None and found.store:
        from sandbox_ledger.stores import is_ephemeral

        if is_ephemeral(found.store):
            raise CommandError(
                f"{writes} writes data: {found.store} lives only as long as this command; "
                "name a database file or server (sqlite:///ledger.db, postgresql://..., "
                "dynamodb://TABLE)",
                ExitCode.USAGE,
            )
    found.resolve()
    return found


def ledger(
    target: Target, *, interactive: bool = True, writes: bool = False
) -> SyncTransferAdapter:
    """The command's ledger. A command that does not ``write`` opens a SQL store read-only
    (it creates, migrates and records nothing); one that writes entries (import, rm) writes
    with the table's recorded retention unless the dynamodb:// URL names one (which must
    agree)."""
    other = target.sql_or_memory_store(read_only=not writes)
    if other is not None:
        return other  # without importing boto3 (a tenth of a second of every SQL command)
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    def adapter(retention: timedelta | None, *, budget: bool) -> SyncDynamoDBAdapter:
        return SyncDynamoDBAdapter(
            target.table or "",
            session=target.boto3_session(),
            retention=retention,
            **target.kwargs(interactive=budget),
        )

    retention = target.retention
    if writes or not interactive:
        # The table's descriptor, read with the interactive budget: an unreachable endpoint
        # fails in seconds, before a bulk command's client (the library's retries) is made.
        probe = adapter(None, budget=True)
        try:
            recorded = _recorded_retention(probe)
        finally:
            probe.close()
        retention = retention if retention is not None else recorded
    return adapter(retention, budget=interactive)


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


def resource_store(target: Target) -> SyncResourceRecordStore:
    """The table's resource records (a DynamoDB target only)."""
    from sandbox_ledger.resources import SyncResourceRecordStore

    target.require_dynamodb("resource records")
    return SyncResourceRecordStore(
        target.table or "", session=target.boto3_session(), **target.kwargs()
    )


def missing_session(target: Target, name: str, sandbox_id: str, what: str) -> CommandError:
    """Exit 3 naming the session (visible), the store and how to list the sessions of
    ``name`` (a command that names it when pasted)."""
    listing = target.command("ls", "--name", shell_word(name))
    return CommandError(
        f"no session {visible(name)}/{visible(sandbox_id)} in {target.describe()}{what}; list "
        f"the sessions of {visible(name)} with `{listing}`",
        ExitCode.NOT_FOUND,
    )


def pasted(cursor: str | None) -> str | None:
    """A cursor as pasted: the whitespace around it (a copied line's end) is no part of it."""
    return None if cursor is None else cursor.strip()
