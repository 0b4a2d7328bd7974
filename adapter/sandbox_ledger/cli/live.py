"""``tail``: a session's ledger as it grows (``sandbox-ledger tail NAME SANDBOX_ID --follow``).

Each entry is printed on its own line as soon as it is stored (text: time, step, branch,
event, payload, error; ``--json``: the wire shape, one JSON object per line), flushed. Ctrl-C
or a closed pipe ends it cleanly, and the position to resume from is printed on stderr with
the command that resumes there (``--after POSITION``).
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Protocol, TypeVar

import typer

from sandbox_ledger.cli import connect
from sandbox_ledger.cli.failures import handled
from sandbox_ledger.cli.ledger_commands import _NAME, _SANDBOX_ID, _STORE
from sandbox_ledger.cli.output import (
    CommandError,
    ExitCode,
    clip,
    json_text,
    quiet_stdout,
    say,
    shell_word,
    visible,
    when,
)
from sandbox_ledger.cli.root import app

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from sandbox_ledger.cli.context import Target
    from sandbox_ledger.follow import FollowedEntry
    from sandbox_ledger.models import LedgerEntry


class _Positioned(Protocol):
    @property
    def position(self) -> str: ...


T = TypeVar("T", bound=_Positioned)

INTERRUPTED = 130
"""Ended by Ctrl-C: 128 + SIGINT, as for other Unix tools."""


def entry_line(entry: LedgerEntry, *, as_json: bool) -> str:
    """One printed line of an entry (without its newline): text shows the stored fields
    :func:`~sandbox_ledger.cli.output.visible`, JSON exactly."""
    if as_json:
        return json_text(entry.wire())
    branch = "" if entry.branch is None else str(entry.branch)
    payload = "" if entry.payload is None else clip(entry.payload)
    event = visible(entry.event)
    fields = (when(entry.ts), f"{entry.step_index:>4}", f"{branch:>3}", f"{event:<22}")
    return "  ".join((*fields, payload, visible(entry.error or ""))).rstrip()


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
    output: str = typer.Option("text", "--output", help="text or json (as --json)."),
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
    refuse_ephemeral(target, "tail --follow")
    _follow(target, ledger, name, sandbox_id, after, until_closed=not forever, as_json=as_json)


def refuse_ephemeral(target: Target, command: str) -> None:
    """Following (``command``) waits for other writers: a store that lives only as long as
    this command (the embedded DynamoDB, memory://) would have none: it would never end."""
    from sandbox_ledger.stores import is_ephemeral

    if target.embedded or (target.store and is_ephemeral(target.store)):
        raise CommandError(
            f"{command} waits for what other programs write: name their table with "
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
    stream = ledger.follow(name, sandbox_id, after=after, until_closed=until_closed)
    words = ("tail", shell_word(name), shell_word(sandbox_id), "--follow")
    line = functools.partial(_followed_line, as_json=as_json)
    print_live(stream, line, target, after, words, what="entry")


def _followed_line(followed: FollowedEntry, *, as_json: bool) -> str:
    return entry_line(followed.entry, as_json=as_json)


def print_live(
    stream: Generator[T, None, None],
    line: Callable[[T], str],
    target: Target,
    after: str | None,
    words: tuple[str, ...],
    *,
    what: str,
) -> None:
    """Print ``line`` of each item of ``stream`` (a follower, a change feed: items with a
    ``position``) as it comes, flushed; Ctrl-C or a closed pipe ends it with the position to
    resume from on stderr and the command (``words``, ``--after POSITION``) resuming there."""
    position = after
    try:
        for item in stream:
            sys.stdout.write(line(item) + "\n")
            sys.stdout.flush()
            position = item.position
    except KeyboardInterrupt:
        _resume_hint(target, words, position, what)
        raise typer.Exit(INTERRUPTED) from None
    except BrokenPipeError:
        quiet_stdout()
        _resume_hint(target, words, position, what)
        raise typer.Exit(ExitCode.CLOSED_PIPE) from None
    finally:
        stream.close()


def _resume_hint(target: Target, words: tuple[str, ...], position: str | None, what: str) -> None:
    if position is None:
        say(f"stopped before any {what}: run the same command to start again")
        return
    say(f"position: {position}")
    resume = target.command(*words, "--after", position)
    say(f"resume with: {resume}")
