"""What a command prints, in the format asked: ``--output json|text|table`` (``--json`` is
``--output json``), ``table`` on a terminal and tab-separated ``text`` when stdout is piped,
and ``--query`` (JMESPath, as the AWS CLI's) over the JSON shape. Text and table output show
every value :func:`~sandbox_ledger.cli.output.visible` (control characters as escapes) and
literally (never read as markup); JSON output is exact."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import typer

from sandbox_ledger.cli.output import clip, emit, out, plain, summary, visible
from sandbox_ledger.errors import InvalidInputError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from rich.console import Console
    from rich.text import Text


class Format(StrEnum):
    json = "json"
    text = "text"
    table = "table"


OUTPUT = typer.Option(
    None,
    "--output",
    help="json, text (tab-separated) or table; default: table on a terminal, text when piped.",
)
QUERY = typer.Option(
    None, "--query", help="A JMESPath expression over the JSON output (as the AWS CLI's)."
)


@dataclass
class View:
    """A command's result: its JSON shape, and the rows a table or text shows."""

    doc: Any
    columns: tuple[str, ...] = ()
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Summary lines: under the table; on stderr with text (stdout stays rows only)."""
    json_lines: bool = False
    """``doc`` is a list printed one item per line (``show``, as ``export``)."""
    clip_width: int = 60
    drop: tuple[str, ...] = ()
    """The columns a table too wide for the terminal leaves out first, least useful first
    (then as :func:`fit` says)."""


def choose(as_json: bool, output: Format | None) -> Format:
    """The format: ``--json``, else ``--output``, else by whether stdout is a terminal."""
    if as_json:
        if output not in (None, Format.json):
            raise InvalidInputError("--json, --output", f"--json is --output json, not {output}")
        return Format.json
    if output is not None:
        return output
    return Format.table if sys.stdout.isatty() else Format.text


def show(view: View, fmt: Format, query: str | None) -> None:
    """Print ``view`` as ``fmt``, or what ``query`` selects of its JSON shape."""
    if query is not None:
        _show_value(_search(query, view.doc), fmt)
        return
    if fmt is Format.json:
        if view.json_lines:
            for item in view.doc:
                emit(item)
        else:
            emit(view.doc)
        return
    if not view.columns:
        if fmt is Format.text:
            _text(view.doc)
        for note in view.notes:
            if fmt is Format.text:
                summary(note)
            else:
                out().print(plain(note), soft_wrap=True)
        return
    if fmt is Format.text:
        for row in view.rows:
            _line(row)
        for note in view.notes:
            summary(note)
        return
    cells = [[_table_cell(c, view.clip_width) for c in r] for r in view.rows]
    print_table(view.columns, cells, view.drop)
    for note in view.notes:
        out().print(plain(note), soft_wrap=True)


def _search(query: str, doc: Any) -> Any:
    return _compiled(query).search(doc)


def _compiled(query: str) -> Any:
    """``query`` compiled, or InvalidInputError naming ``--query``."""
    import jmespath
    from jmespath.exceptions import JMESPathError

    try:
        return jmespath.compile(query)
    except JMESPathError as exc:
        reason = " ".join(str(exc).split())
        raise InvalidInputError(
            "--query", f"{query!r} is not a JMESPath expression ({reason})"
        ) from None


def line_query(query: str) -> Callable[[str], str | None]:
    """``export --query``: ``query`` over each JSON line, as a function from a line to the
    line it gives (its result as JSON, as export writes its lines), or None for a line left
    out (a result that is null or false, so ``event == 'exec.complete' && @`` filters).
    A bad expression is refused here, before anything is read or written."""
    from jmespath.exceptions import JMESPathError

    compiled = _compiled(query)
    number = 0

    def select(line: str) -> str | None:
        nonlocal number
        number += 1
        try:
            found = compiled.search(json.loads(line))
            if found is None or found is False:
                return None
            # As export writes its lines; a number JSON cannot carry (Infinity) is refused.
            return json.dumps(found, ensure_ascii=False, allow_nan=False) + "\n"
        except (JMESPathError, ValueError) as exc:
            reason = clip(" ".join(str(exc).split()), 200)
            raise InvalidInputError(
                "--query", f"{query!r} fails on exported line {number}: {reason}"
            ) from None

    return select


def _show_value(value: Any, fmt: Format) -> None:
    if fmt is Format.json:
        emit(value)
    elif fmt is Format.text:
        _text(value)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        columns = list(dict.fromkeys(k for v in value for k in v))
        print_table(columns, [[_table_cell(_cell(v.get(k)), None) for k in columns] for v in value])
    else:
        _text(value)


# What a table on a terminal keeps whole (never cut: a row is named by it) and what it folds
# over lines (free text), by column name; any other column is short and dropped whole
# rather than cut when the table does not fit.
_IDENTIFYING = frozenset({"name", "sandboxId", "id", "record", "operation", "snapshotId", "field"})
_TIMES = frozenset({"time", "started", "completed", "created", "updated", "built"})
_FOLDED = frozenset({"payload", "error", "other fields", "operations", "workspace", "value", "why"})
_FOLDED_MIN = 12
"""The narrowest a folded column gets before columns are dropped instead."""
_EMPTY = frozenset({"", "-"})


def fit(
    columns: Sequence[str], rows: Sequence[Sequence[Text]], width: int, drop: Sequence[str] = ()
) -> Fitted:
    """How a table of ``columns`` and ``rows`` fits ``width`` terminal columns: the width of
    each column kept, and the columns left out. Nothing changes when it fits as it is. Else
    free text (:data:`_FOLDED`) folds over lines down to a few characters, then whole columns
    are left out, the least useful first: those holding nothing, then ``drop`` in its order,
    then the other columns from the right, then the times from the right; the columns
    naming a row (:data:`_IDENTIFYING`) never, and no kept column but free text is ever
    cut."""
    from rich.cells import cell_len

    count = len(columns)
    natural = [
        max([cell_len(str(columns[i])), *(row[i].cell_len for row in rows)]) for i in range(count)
    ]
    folded = [c in _FOLDED for c in columns]
    minimum = [
        min(natural[i], max(cell_len(str(columns[i])), _FOLDED_MIN)) if folded[i] else natural[i]
        for i in range(count)
    ]

    def overhead(kept: int) -> int:  # a border before each column and after the last, padding
        return 3 * kept + 1

    if sum(natural) + overhead(count) <= width:
        return Fitted(list(natural), [], natural=True)
    empty = [i for i in range(count) if rows and all(r[i].plain in _EMPTY for r in rows)]
    others = [i for i in reversed(range(count)) if columns[i] not in _IDENTIFYING | _TIMES]
    times = [i for i in reversed(range(count)) if columns[i] in _TIMES]
    chosen = [columns.index(c) for c in drop if c in columns and c not in _IDENTIFYING]
    candidates = list(dict.fromkeys([*empty, *chosen, *others, *times]))
    kept = list(range(count))
    while sum(minimum[i] for i in kept) + overhead(len(kept)) > width and candidates:
        kept.remove(candidates.pop(0))
    spare = width - overhead(len(kept)) - sum(minimum[i] for i in kept)
    widths = {i: minimum[i] for i in kept}
    for i in kept:  # the room left widens free text back towards its natural width
        if folded[i] and spare > 0:
            extra = min(spare, natural[i] - minimum[i])
            widths[i] += extra
            spare -= extra
    dropped = [str(columns[i]) for i in range(count) if i not in widths]
    return Fitted([widths.get(i) for i in range(count)], dropped)


@dataclass
class Fitted:
    """:func:`fit`'s answer: each column's width (None: left out), and the names left out."""

    widths: list[int | None]
    dropped: list[str]
    natural: bool = False
    """It fits as it is: rich lays it out as usual."""


def print_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Text]],
    drop: Sequence[str] = (),
    *,
    title: str | None = None,
    console: Console | None = None,
) -> None:
    """A table on ``console`` (stdout) that fits its width (:func:`fit`): a note under it
    names the columns left out. Give the cells as :func:`plain` text."""
    from rich.table import Column, Table

    console = console or out()
    fitted = fit(columns, rows, console.width, drop)
    kept = [i for i, w in enumerate(fitted.widths) if w is not None]
    table = Table(
        *(
            Column(
                plain(columns[i]),
                width=None if fitted.natural else fitted.widths[i],
                no_wrap=columns[i] not in _FOLDED,
                overflow="fold" if columns[i] in _FOLDED else "ellipsis",
            )
            for i in kept
        ),
        title=title,
    )
    for row in rows:
        table.add_row(*(row[i] for i in kept))
    console.print(table)
    if fitted.dropped:  # wrapped at the terminal's width, as the table
        shown = ", ".join(fitted.dropped)
        console.print(
            plain(f"left out to fit {console.width} columns: {shown} (--output text has them)"),
            soft_wrap=False,
        )


def _cell(value: Any) -> str:
    """A value in text or a table cell: a string as itself, anything else as its JSON
    (``null``, ``true``, ``false``, numbers, compact objects and arrays), never Python's
    spelling."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _table_cell(value: str, width: int | None) -> Any:
    """A table cell: ``value`` visible, clipped to ``width``, as rich text (never markup)."""
    return plain(value if width is None else clip(value, width))


def _line(cells: list[str]) -> None:
    # Visible: a tab or line break inside a value (shown as \t, \n) never splits it.
    sys.stdout.write("\t".join(visible(c) for c in cells) + "\n")


def _text(value: Any) -> None:
    """The AWS CLI's text shape, simplified: a list of objects is one line per object (its
    values, tab-separated), a list of scalars one line, an object one ``key<TAB>value`` line
    per key, a scalar itself; nested values are compact JSON."""
    if isinstance(value, list):
        if all(not isinstance(v, dict | list) for v in value):
            _line([_cell(v) for v in value])
            return
        for item in value:
            values = item.values() if isinstance(item, dict) else item
            _line([_cell(v) for v in (values if isinstance(values, list) else list(values))])
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _line([key, _cell(item)])
        return
    _line([_cell(value)])
