"""Ctrl-C and SIGTERM: one line saying how far the command got and what re-running does,
then exit 130 (SIGINT) or 143 (SIGTERM), as a shell reports a process its signal ended."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox_ledger.protocol import SyncTransferAdapter


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

    lines: int | None = None
    """Lines read from the file (None: still reading it)."""
    total: int = 0
    done: int = 0
    new: int = 0

    def describe(self) -> str:
        resume = "re-running the same import resumes without duplicates"
        if self.lines is None:
            return f"while reading the file, before any write; {resume}"
        return (
            f"{self.lines} line(s) read, {self.done} of {self.total} entries and environment "
            f"records handled: {self.new} new, {self.done - self.new} already present (or "
            f"expired); {resume} (what is stored is recognised, not written again)"
        )

    def counting(self, ledger: SyncTransferAdapter) -> SyncTransferAdapter:
        """``ledger``, counting the entries its ``append_once`` stores."""
        return _Counting(ledger, self)


class _Counting:
    def __init__(self, ledger: SyncTransferAdapter, status: ImportStatus) -> None:
        self._ledger, self._status = ledger, status

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def append_once(self, entry: Any, occurrence: int) -> bool:
        stored = self._ledger.append_once(entry, occurrence)
        self._status.new += int(stored)
        return stored
