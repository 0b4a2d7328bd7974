"""``watch``: the fleet's changes as they happen (``sandbox-ledger watch [--after POSITION]``).

Each change is printed on its own line as soon as it is read, flushed: ``--output json`` one
JSON object per line (``kind``, ``id``, ``at``, ``name``/``sandboxId`` or ``recordId``,
``position``), ``text`` tab-separated fields, ``table`` aligned columns under one header.
Ctrl-C or a closed pipe ends it cleanly, and the position to resume from is printed on stderr
with the command that resumes there. Changes come at least once: drop repeats by ``id``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from sandbox_ledger.cli import connect
from sandbox_ledger.cli.failures import handled
from sandbox_ledger.cli.ledger_commands import _STORE
from sandbox_ledger.cli.live import print_live, refuse_ephemeral
from sandbox_ledger.cli.output import CommandError, json_text, out, plain, visible, when
from sandbox_ledger.cli.render import OUTPUT, Format, choose
from sandbox_ledger.cli.root import app

if TYPE_CHECKING:
    from sandbox_ledger.changes import Change

_COLUMNS = ("AT", "KIND", "NAME", "SANDBOX/RECORD", "ID")
_WIDTHS = (23, 21, 20, 36, 0)


def _cells(change: Change) -> tuple[str, ...]:
    subject = change.record_id if change.record_id is not None else change.sandbox_id
    return (when(change.at), change.kind.value, change.name or "-", subject or "", change.id)


def change_line(change: Change, fmt: Format) -> str:
    """One printed line of a change (without its newline): text and table show the stored
    fields :func:`~sandbox_ledger.cli.output.visible`, JSON exactly."""
    if fmt is Format.json:
        return json_text(change.wire())
    cells = [visible(c) for c in _cells(change)]
    if fmt is Format.text:
        return "\t".join(cells)
    return "  ".join(c.ljust(w) for c, w in zip(cells, _WIDTHS, strict=True)).rstrip()


@app.command()
@handled
def watch(
    ctx: typer.Context,
    after: str | None = typer.Option(
        None, "--after", metavar="POSITION", help="Start just after this position."
    ),
    as_json: bool = typer.Option(False, "--json", help="--output json."),
    output: Format | None = OUTPUT,
    store: str | None = _STORE,
) -> None:
    """The fleet's changes as they happen: sessions created, closed, deleted and expired,
    resource records expired (oldest kept first; Ctrl-C prints where to resume)."""
    from sandbox_ledger.blocking import BlockingAdapter
    from sandbox_ledger.protocol import ChangesAdapter, SyncChangesAdapter

    fmt = choose(as_json, output)
    after = connect.pasted(after)
    target = connect.target(ctx, store)
    refuse_ephemeral(target, "watch")
    ledger = connect.ledger(target)
    inner = ledger.adapter if isinstance(ledger, BlockingAdapter) else ledger
    if not isinstance(ledger, SyncChangesAdapter) or not (
        inner is ledger or isinstance(inner, ChangesAdapter)
    ):
        raise CommandError(f"{target.describe()} has no change feed (not built yet)")
    stream = ledger.changes(after=after)
    if fmt is Format.table:
        header = "  ".join(c.ljust(w) for c, w in zip(_COLUMNS, _WIDTHS, strict=True))
        out().print(plain(header.rstrip()), highlight=False)
    print_live(stream, lambda c: change_line(c, fmt), target, after, ("watch",), what="change")
