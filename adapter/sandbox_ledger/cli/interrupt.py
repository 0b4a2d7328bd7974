"""Ctrl-C and SIGTERM: one line saying how far the command got and what re-running does,
then exit 130 (SIGINT) or 143 (SIGTERM), as a shell reports a process its signal ended."""

from __future__ import annotations

import contextlib
import signal
import threading
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sandbox_ledger.transfer import ImportReport


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so the command unwinds (temporary files removed,
    connections closed) as it does for Ctrl-C's KeyboardInterrupt."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number


def raise_on_sigterm() -> None:
    """Make SIGTERM unwind the process as :class:`Terminated` (the console script's start)."""

    def terminate(number: int, _frame: object) -> None:
        raise Terminated(number)

    signal.signal(signal.SIGTERM, terminate)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold off Ctrl-C and SIGTERM while a step that must be counted whole runs (an
    import's batch: its writes and its counts), then raise the first one received; a second
    signal meanwhile stops at once, as an impatient user means. Off the main thread (where
    no signal handler runs) it holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(number: int, _frame: object) -> None:
        if pending:
            raise _stop(number)
        pending.append(number)

    previous = {number: signal.getsignal(number) for number in _HELD}
    for number in _HELD:
        signal.signal(number, hold)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if pending:
        raise _stop(pending[0])


_HELD = (signal.SIGINT, signal.SIGTERM)


def _stop(number: int) -> BaseException:
    return KeyboardInterrupt() if number == signal.SIGINT else Terminated(number)


def signal_number(stop: BaseException) -> int:
    return stop.number if isinstance(stop, Terminated) else int(signal.SIGINT)


# What an interrupted command leaves behind, by command (``import`` says its own counts).
AFTERMATH = MappingProxyType(
    {
        "ls": "nothing was changed",
        "show": "nothing was changed",
        "checkpoints": "nothing was changed",
        "envs": "nothing was changed",
        "export": "nothing was changed; an -o FILE is left as it was (stdout may hold part "
        "of the export)",
        "rm": "the session may be partly deleted; re-running rm deletes the rest",
        "table create": "re-running table create finishes it (it creates only what is missing)",
        "demo": "the demo's data is gone with it",
        "resources ls": "nothing was changed",
        "resources show": "nothing was changed",
        "resources sweep": "records expired so far stay expired; re-running sweeps the rest, "
        "expiring none twice",
        "resources import": "the files loaded so far are stored; re-running loads the rest "
        "(a stored record is not written again)",
        "resources export": "the files written so far are complete; re-running writes them all",
    }
)


def interrupted_line(command: str, number: int, so_far: str | None) -> str:
    """``interrupted by SIGINT: <how far>; <what re-running does>``."""
    name = signal.Signals(number).name
    done = so_far if so_far is not None else AFTERMATH.get(command, "it stopped where it was")
    return f"interrupted by {name}: {done}"


@dataclass
class ImportStatus:
    """How far an import got, for the line an interruption prints."""

    lines: int = 0
    """Lines read from the file so far."""
    report: ImportReport | None = None
    """The importer's running report: what the batches written so far did."""

    def describe(self) -> str:
        resume = (
            "re-running the same import resumes without duplicates (what is stored is "
            "recognised, not written again)"
        )
        report = self.report
        if report is None:
            return f"before any write; {resume}"
        return f"{self.lines} line(s) read; written so far: {report.summary()}; {resume}"
