"""What every command shares: the consoles (made on first use, so ``--help`` never loads
rich), JSON output, times with their zone, exit codes, and the one-line error."""

from __future__ import annotations

import functools
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from sandbox_ledger.errors import InvalidInputError, LedgerError

if TYPE_CHECKING:
    from rich.console import Console


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

    return Stdout(highlight=False, soft_wrap=True, width=_width())


@functools.cache
def err() -> Console:
    """stderr: summaries, notes, errors and progress (shown only when it is a terminal)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, width=_width())


def say(line: str) -> None:
    """One line on stderr, as written: no markup, no wrapping."""
    err().print(line, markup=False, soft_wrap=True)


def summary(line: str) -> None:
    """A command's summary on stderr, after what it wrote on stdout: stdout is flushed first,
    so a reader that went away (``| head``) ends the command quietly (BrokenPipeError, exit
    141) before the summary is said, however stdout is buffered."""
    sys.stdout.flush()
    say(line)


def emit(value: Any) -> None:
    """One JSON document on stdout, one line."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")


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
    """A value as one table cell of at most ``width`` characters (JSON if not a string)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def new_table(*columns: str, title: str | None = None) -> Any:
    """A rich table with these columns (rich loaded on first use)."""
    from rich.table import Table

    return Table(*columns, title=title)


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
