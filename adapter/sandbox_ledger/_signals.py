"""Holding signals over a step that must not be cut in two (a file created and its removal
armed; a file renamed into place and the rename recorded).

``pthread_sigmask`` cannot do it in a process with more than one thread: a signal sent to the
process goes to any thread that does not block it (a store's event loop, a pool's workers),
and Python then runs the handler in the main thread at its next instruction, mask or no mask.
:func:`deferred` holds a signal where Python runs its handler instead: for the block's
duration the signal's handler only records it, and the block's end puts the handlers back and
delivers what was recorded to them.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

__all__ = ["deferred", "handling", "removed_on_termination"]


@contextlib.contextmanager
def deferred(numbers: Iterable[int]) -> Iterator[None]:
    """Hold the signals ``numbers`` until the block ends, whichever thread the kernel gives
    them to, then deliver each one received (once, in arrival order) to the handler it had
    before: a Python handler's exception is raised where the block ends; a default that ends
    the process ends it there. Every one received reaches its handler, as if they had come
    one after the other at the block's end: one whose handler raises does not stop the next
    from being delivered (whose exception, if it raises too, is the one that propagates,
    the earlier one its ``__context__``, as Python would have it). A signal that is ignored
    stays ignored. Off the main thread, where no handler can be set, it holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def record(number: int, _frame: object) -> None:
        if number not in received:
            received.append(number)

    try:
        with handling([n for n in numbers if signal.getsignal(n) is not signal.SIG_IGN], record):
            yield
    finally:
        _deliver(received)


@contextlib.contextmanager
def handling(numbers: Iterable[int], handler: Callable[[int, Any], None]) -> Iterator[None]:
    """``handler`` for the signals ``numbers`` while the block runs, then each one's handler
    before put back. Each handler is noted before any is replaced, and replaced inside the
    ``try``: a signal that comes (its handler raising) while they are being set or put back
    leaves none of them replaced for good."""
    previous = [(number, signal.getsignal(number)) for number in numbers]
    try:
        for number, _ in previous:
            signal.signal(number, handler)
        yield
    finally:
        _restore(previous)


def _restore(handlers: list[tuple[int, Any]]) -> None:
    """Put each handler back, each in a ``finally`` of the one before, so that a signal
    coming meanwhile (a second Ctrl-C, its handler raising where its own handler is back)
    does not leave a later one replaced."""
    if not handlers:
        return
    (number, handler), rest = handlers[0], handlers[1:]
    try:
        # None: a handler not set from Python, which cannot be put back; the default.
        signal.signal(number, signal.SIG_DFL if handler is None else handler)
    finally:
        _restore(rest)


def _deliver(numbers: list[int]) -> None:
    """Each signal of ``numbers`` to its handler, in order, an exception of one not stopping
    the rest."""
    if numbers:
        try:
            signal.raise_signal(numbers[0])  # its handler runs here
        finally:
            _deliver(numbers[1:])


@contextlib.contextmanager
def removed_on_termination(remove: Callable[[], None]) -> Iterator[None]:
    """SIGTERM or SIGHUP while the block runs calls ``remove`` (a temporary file's removal:
    what it has created so far), then ends the process by the same signal. Only a signal
    that would end the process is caught: one ignored (nohup's SIGHUP) or handled by the
    caller (the CLI's SIGTERM, which unwinds as an exception) keeps its disposition. Off the
    main thread it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # None: a handler not installed from Python, which cannot be put back; the default then.
    ending = [
        n for n in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(n) in (signal.SIG_DFL, None)
    ]

    def terminate(number: int, _frame: object) -> None:
        remove()
        signal.signal(number, signal.SIG_DFL)
        signal.raise_signal(number)

    with handling(ending, terminate):
        yield
