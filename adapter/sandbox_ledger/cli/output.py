"""What every command shares: the consoles (made on first use, so ``--help`` never loads
rich), stored text made safe to show (:func:`visible`, :func:`plain`), JSON output, times with
their zone, exit codes, and the one-line error."""

from __future__ import annotations

import functools
import json
import os
import shlex
import sys
import unicodedata
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sandbox_ledger.errors import InvalidInputError, LedgerError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text


class ExitCode(IntEnum):
    """The exit codes of every command (docs/cli.md has the table)."""

    OK = 0
    FAILED = 1
    """The store failed or could not be reached; credentials, region, permissions."""
    USAGE = 2
    """A bad option, argument or value (nothing was written)."""
    NOT_FOUND = 3
    """The table, session, record or event bus named does not exist."""
    PARTIAL = 4
    """Some items (import lines, record files, swept records) failed; the rest were done."""
    INTERRUPTED = 130
    """Ctrl-C (SIGINT): 128 + 2, after one line saying how far the command got."""
    TERMINATED = 143
    """SIGTERM: 128 + 15, after the same line."""
    CLOSED_PIPE = 141
    """The reader of stdout went away (``| head``): 128 + SIGPIPE, as for other Unix tools."""


class CommandError(LedgerError):
    """A failure the command itself detects, with its exit code."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.exit_code = code


# Shown as visible escapes: characters that move the cursor, ring, start escape sequences
# (C0, DEL, C1), reorder text (bidi embeddings, overrides, isolates and marks), hide it (zero
# width spaces, tag characters and other format characters), break lines (U+2028, U+2029) or
# cannot be written at all (lone surrogates). The zero width (non-)joiners stay: emoji
# sequences and several scripts need them, and they neither move nor hide other text.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_KEPT = frozenset({"\u200c", "\u200d"})
_NAMED = MappingProxyType({"\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    point = ord(char)
    if point < 0x100:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def visible(text: str) -> str:
    """``text`` (a stored name, id, payload, error) as it is safe to show on a terminal: control
    characters, escape sequences and characters that reorder or hide text become visible
    escapes (``\\x1b``, ``\\r``, ``\\u202e``), so stored data never drives the terminal nor
    splits a line or a cell. Everything else is kept as is (a backslash too: JSON output is
    the exact form)."""
    if text.isprintable():  # the common case: nothing to escape
        return text
    return "".join(
        _escape(c) if c not in _KEPT and unicodedata.category(c) in _HIDDEN_CATEGORIES else c
        for c in text
    )


def _json_escape(char: str) -> str:
    encoded = char.encode("utf-16-le", "surrogatepass")  # astral: a surrogate pair, as JSON
    units = [int.from_bytes(encoded[i : i + 2], "little") for i in range(0, len(encoded), 2)]
    return "".join(f"\\u{unit:04x}" for unit in units)


def json_text(value: Any, **dumps: Any) -> str:
    """``value`` as JSON text (``json.dumps`` with ``ensure_ascii=False`` and ``dumps``) that
    reads back exactly and is still safe on a terminal: what :func:`visible` would escape
    (JSON leaves C1 controls, DEL and bidi characters raw) is written as a ``\\uXXXX``
    escape, which a JSON reader decodes to the same character."""
    return json_safe(json.dumps(value, ensure_ascii=False, **dumps))


def json_safe(text: str) -> str:
    """JSON text (lines of it) with what :func:`visible` would escape written as ``\\uXXXX``
    escapes: the same values, read back, and safe on a terminal (see :func:`json_text`)."""
    if (text[:-1] if text[-1:] == "\n" else text).isprintable():
        return text  # the common case: one line, nothing to escape
    # Outside its strings JSON holds only ASCII punctuation, digits, letters and whitespace
    # (line feeds and spaces kept: a raw control character is in no JSON string).
    return "".join(
        _json_escape(c)
        if c not in _KEPT and c != "\n" and unicodedata.category(c) in _HIDDEN_CATEGORIES
        else c
        for c in text
    )


def shell_word(text: str) -> str:
    """``text`` as one word of a suggested command line that stays :func:`visible` and still
    names ``text`` when pasted: quoted as ``shlex.quote`` does, or as ``$'...'`` (bash, zsh,
    ksh) when it holds characters that :func:`visible` escapes."""
    if visible(text) == text:
        return shlex.quote(text)
    return "$'" + visible(text.replace("\\", "\\\\").replace("'", "\\'")) + "'"


def plain(text: str) -> Text:
    """``text`` made :func:`visible`, as a rich ``Text``: rich shows it literally (no markup
    such as ``[bold]``, no emoji codes such as ``:smile:``), in a table cell or printed."""
    from rich.text import Text

    return Text(visible(text))


# Piped output (files, tests, other tools) gets wide tables, so ids are never cut.
def _width() -> int | None:
    return None if sys.stdout.isatty() else 200


@functools.cache
def out() -> Console:
    """stdout: tables and messages (writes to whatever ``sys.stdout`` is at the time)."""
    from rich.console import Console

    class Stdout(Console):
        def on_broken_pipe(self) -> None:
            # rich's own handling exits with 1, as for a failure.
            quiet_stdout()
            raise SystemExit(ExitCode.CLOSED_PIPE)

    # No markup, emoji codes or highlighting: what is printed is shown as it is (stored text
    # is passed as :func:`plain` besides, so no setting can make rich interpret it).
    return Stdout(highlight=False, markup=False, emoji=False, soft_wrap=True, width=_width())


@functools.cache
def err() -> Console:
    """stderr: summaries, notes, errors and progress (shown only when it is a terminal)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, markup=False, emoji=False, width=_width())


def say(line: str, console: Console | None = None) -> None:
    """One line on stderr (or ``console``), as written but :func:`visible` (whatever stored
    text it quotes): no markup, no wrapping."""
    (console or err()).print(plain(line), soft_wrap=True)


def summary(line: str) -> None:
    """A command's summary on stderr, after what it wrote on stdout: stdout is flushed first,
    so a reader that went away (``| head``) ends the command quietly (BrokenPipeError, exit
    141) before the summary is said, however stdout is buffered."""
    sys.stdout.flush()
    say(line)


def emit(value: Any) -> None:
    """One JSON document on stdout, one line (:func:`json_text`: exact, and terminal-safe)."""
    sys.stdout.write(json_text(value) + "\n")


def when(ms: int | None) -> str:
    """Unix milliseconds as ISO 8601 in UTC with its zone (``2026-12-01T03:20:00.000Z``):
    what ``--before`` accepts back."""
    if ms is None:
        return "-"
    moment = datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time(text: str, option: str = "--before") -> int:
    """Unix milliseconds, or ISO 8601 with a zone (``Z`` or an offset), as Unix milliseconds.

    A time without a zone is refused rather than guessed (local time or UTC?).
    Raises:
        InvalidInputError: the text is neither, or has no zone (field ``option``).
    """
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInputError(
            option,
            f"{text!r} is neither Unix milliseconds nor an ISO 8601 time "
            "(e.g. 2026-12-01T12:00:00Z)",
        ) from None
    if moment.tzinfo is None:
        raise InvalidInputError(
            option, f"{text!r} has no time zone; add Z for UTC or an offset such as +02:00"
        )
    delta = moment - _EPOCH
    # Strictly before a fractional millisecond t is the same as before ceil(t).
    ms, rest = divmod(delta, timedelta(milliseconds=1))
    return ms + (1 if rest else 0)


def quiet_stdout() -> None:
    """The reader closed stdout: point it at /dev/null so no later flush (ours, or the
    interpreter's at exit) reports a broken pipe."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test runner's buffer)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def clip(value: Any, width: int = 60) -> str:
    """A value as one table cell of at most ``width`` characters (JSON if not a string),
    :func:`visible`."""
    text = visible(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return text if len(text) <= width else text[: width - 1] + "…"


def new_table(*columns: str, title: str | None = None) -> Any:
    """A rich table with these columns (rich loaded on first use), the headers shown as
    written; give its cells as :func:`plain` (a string cell would be read as markup)."""
    from rich.table import Column, Table

    return Table(*(Column(plain(c)) for c in columns), title=title)


def kind_of(path: Any) -> str:
    """What is at ``path``, for messages: ``a directory``, ``a FIFO``, ``a file``, ``a
    device``, ``a socket`` or ``nothing``."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "nothing"
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISREG, "a file"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "a device"
