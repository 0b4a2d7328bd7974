"""``tail``: a session's ledger as it grows (``sandbox-ledger tail NAME SANDBOX_ID --follow``).

Each entry is printed on its own line as soon as it is stored (text: time, step, branch,
event, payload, error; ``--json``: the wire shape, one JSON object per line), flushed. Ctrl-C
or a closed pipe ends it cleanly, and the position to resume from is printed on stderr with
the command that resumes there (``--after POSITION``).
"""

from __future__ import annotations

import json
import shlex
import sys
from typing import TYPE_CHECKING

import typer

from sandbox_ledger.cli import connect
from sandbox_ledger.cli.failures import handled
from sandbox_ledger.cli.ledger_commands import _NAME, _SANDBOX_ID, _STORE
from sandbox_ledger.cli.output import CommandError, ExitCode, clip, err, quiet_stdout, when
from sandbox_ledger.cli.root import app

if TYPE_CHECKING:
    from sandbox_ledger.cli.context import Target
    from sandbox_ledger.models import LedgerEntry

INTERRUPTED = 130
"""Ended by Ctrl-C: 128 + SIGINT, as for other Unix tools."""


def entry_line(entry: LedgerEntry, *, as_json: bool) -> str:
    """One printed line of an entry (without its newline)."""
    if as_json:
        return json.dumps(entry.wire(), ensure_ascii=False)
    branch = "" if entry.branch is None else str(entry.branch)
    payload = "" if entry.payload is None else clip(entry.payload)
    fields = (when(entry.ts), f"{entry.step_index:>4}", f"{branch:>3}", f"{entry.event:<22}")
    return "  ".join((*fields, payload, entry.error or "")).rstrip()


@app.command()
@handled
def tail(
    ctx: typer.Context,
    name: str = _NAME,
    sandbox_id: str = _SANDBOX_ID,
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing entries as they are appended."
    ),
    forever: bool = typer.Option(
        False, "--forever", help="With --follow: go on after sandbox.closed (until Ctrl-C)."
    ),
    after: str | None = typer.Option(
        None, "--after", metavar="POSITION", help="Start just after this position (implies -f)."
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON line per entry (wire shape)."),
    output: str = typer.Option("text", "--output", "-o", help="text or json (as --json)."),
    store: str | None = _STORE,
) -> None:
    """A session's ledger, one line per entry; with --follow, as it grows (ends after
    sandbox.closed or when the session is deleted; Ctrl-C prints where to resume)."""
    if output not in ("text", "json"):
        raise CommandError(f"--output: expected text or json, got {output!r}", ExitCode.USAGE)
    as_json = as_json or output == "json"
    after = connect.pasted(after)
    target = connect.target(ctx, store)
    ledger = connect.ledger(target)
    if not (follow or after or forever):
        entries = ledger.read_all(name, sandbox_id)
        if not entries:
            raise connect.missing_session(target, name, sandbox_id, "")
        for entry in entries:
            sys.stdout.write(entry_line(entry, as_json=as_json) + "\n")
        return
    _refuse_ephemeral(target)
    _follow(target, ledger, name, sandbox_id, after, until_closed=not forever, as_json=as_json)


def _refuse_ephemeral(target: Target) -> None:
    """Following waits for other writers: a store that lives only as long as this command
    (the embedded DynamoDB, memory://) would have none, and the wait would never end."""
    from sandbox_ledger.stores import is_ephemeral

    if target.embedded or (target.store and is_ephemeral(target.store)):
        raise CommandError(
            "tail --follow waits for entries other programs append: name their table with "
            "--table NAME (or SANDBOX_LEDGER_TABLE) or their store with --store URL; this "
            "store lives only as long as this command",
            ExitCode.USAGE,
        )


def _follow(
    target: Target,
    ledger: object,
    name: str,
    sandbox_id: str,
    after: str | None,
    *,
    until_closed: bool,
    as_json: bool,
) -> None:
    from sandbox_ledger.protocol import SyncFollowAdapter

    if not isinstance(ledger, SyncFollowAdapter):
        raise CommandError(f"{target.describe()} cannot follow a session")
    position = after
    stream = ledger.follow(name, sandbox_id, after=after, until_closed=until_closed)
    try:
        for followed in stream:
            sys.stdout.write(entry_line(followed.entry, as_json=as_json) + "\n")
            sys.stdout.flush()
            position = followed.position
    except KeyboardInterrupt:
        _resume_hint(target, name, sandbox_id, position)
        raise typer.Exit(INTERRUPTED) from None
    except BrokenPipeError:
        quiet_stdout()
        _resume_hint(target, name, sandbox_id, position)
        raise typer.Exit(ExitCode.CLOSED_PIPE) from None
    finally:
        stream.close()


def _resume_hint(target: Target, name: str, sandbox_id: str, position: str | None) -> None:
    if position is None:
        err().print("stopped before any entry: run the same command to start again")
        return
    err().print(f"position: {position}", markup=False, soft_wrap=True)
    resume = target.command(
        "tail", shlex.quote(name), shlex.quote(sandbox_id), "--follow", "--after", position
    )
    err().print(f"resume with: {resume}", markup=False, soft_wrap=True)
