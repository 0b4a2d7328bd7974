"""Ctrl-C and SIGTERM: one line saying how far the command got and what re-running does,
then exit 130 (SIGINT) or 143 (SIGTERM), as a shell reports a process its signal ended."""

from __future__ import annotations

import contextlib
import signal
import threading
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sandbox_ledger._signals import handling

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import FrameType

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

    with handling(_HELD, hold):
        yield
    if pending:
        raise _stop(pending[0])


_HELD = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """Ctrl-C, SIGTERM and SIGHUP as a request to stop a loop that waits between rounds of
    work (``sandbox-ledger local``): :meth:`wait` returns at once when one arrives.

    The handler touches no lock. One that sets a :class:`threading.Event` can deadlock: a
    process-directed signal taken by another thread (a server's) does not wake the main
    thread's wait, whose handler then runs at its next instruction, often just after
    ``Event.wait`` took back the event's own lock, and ``Event.set`` waits for that lock
    forever. Here the C-level handler writes the signal's number to a wake-up socket
    whichever thread takes the signal (``signal.set_wakeup_fd``), and the waiting is a
    ``select`` on it. Use on the main thread, where Python installs signal handlers."""

    def __init__(self) -> None:
        import socket

        self._received: list[int] = []
        self._reader, self._writer = socket.socketpair()
        for end in (self._reader, self._writer):
            end.setblocking(False)
        self._previous_fd = -1
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def __enter__(self) -> StopSignals:
        self._previous_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        for number in self._stopping():
            self._previous[number] = signal.signal(number, self._handle)
        return self

    @staticmethod
    def _stopping() -> tuple[int, ...]:
        """Ctrl-C, SIGTERM, and SIGHUP (the terminal closed) unless it is ignored (nohup)."""
        hangup = signal.getsignal(signal.SIGHUP) in (signal.SIG_DFL, None)
        return (*_HELD, signal.SIGHUP) if hangup else _HELD

    def __exit__(self, *_: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        signal.set_wakeup_fd(self._previous_fd)
        self._reader.close()
        self._writer.close()

    def _handle(self, number: int, _frame: object) -> None:
        self._received.append(number)

    @property
    def received(self) -> int | None:
        """The first stopping signal received, or None."""
        return self._received[0] if self._received else None

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True once a stopping signal has arrived."""
        import select

        if not self._received and select.select([self._reader], [], [], timeout)[0]:
            woken = b""
            with contextlib.suppress(BlockingIOError):
                while chunk := self._reader.recv(512):
                    woken += chunk
            # The Python handler runs at the main thread's next check for signals, which
            # need not come before this line: the numbers written say it already.
            self._received.extend(n for n in woken if n in self._previous)
        return bool(self._received)


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
    cut: bool = False
    """A second signal stopped a batch being written: it may be stored, uncounted."""

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """:func:`held` over one batch of the import (its ``guard``), remembering a batch
        that a second signal cut short."""
        with held():
            try:
                yield
            except (KeyboardInterrupt, Terminated):
                self.cut = True
                raise

    def describe(self) -> str:
        resume = (
            "re-running the same import resumes without duplicates (what is stored is "
            "recognised, not written again)"
        )
        report = self.report
        if report is None:
            return f"before any write; {resume}"
        if self.cut:  # the batch may still commit after the line is printed
            return (
                f"{self.lines} line(s) read; written so far: at least {report.summary()}, and "
                f"the batch being written when the second signal came may be stored too; {resume}"
            )
        return f"{self.lines} line(s) read; written so far: {report.summary()}; {resume}"

    def after_failure(self) -> str | None:
        """How far it got, for the line a failure prints once something was counted (a
        failure before any write says nothing more than the failure)."""
        report = self.report
        if report is None or not (report.new or report.present or report.expired):
            return None
        return self.describe()
