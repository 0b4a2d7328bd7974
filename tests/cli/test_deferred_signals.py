"""``deferred`` when a signal comes while it puts the handlers back (a
second Ctrl-C just as the block ends), or while it sets them up."""

from __future__ import annotations

import os
import signal
import time

import pytest

from sandbox_ledger import _signals


class Terminated(Exception):
    pass


@pytest.fixture
def handlers():  # type: ignore[no-untyped-def]
    saved = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)


def _arriving_after(
    monkeypatch: pytest.MonkeyPatch, when: int, arriving: int, *, restoring: bool
) -> None:
    """The signal ``arriving`` comes (from another process, as a second Ctrl-C would) just
    after ``deferred`` sets the handler of ``when`` (to its recorder, or back)."""
    real = signal.signal
    sets: list[int] = []

    def setting(number: int, handler: object) -> object:
        previous = real(number, handler)
        if number == when:
            sets.append(number)
            if len(sets) == (2 if restoring else 1):
                signal.raise_signal(arriving)
        return previous

    monkeypatch.setattr(_signals.signal, "signal", setting)


def test_a_signal_while_the_handlers_are_put_back_leaves_none_recording(
    handlers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM held; a second SIGINT arrives just after SIGINT's handler is put back (its
    KeyboardInterrupt raised there): SIGTERM's handler must still be put back (else every
    later SIGTERM is recorded and dropped) and the held SIGTERM delivered."""
    seen: list[int] = []

    def terminated(number: int, _frame: object) -> None:
        seen.append(number)
        raise Terminated

    signal.signal(signal.SIGTERM, terminated)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _arriving_after(monkeypatch, signal.SIGINT, signal.SIGINT, restoring=True)
    raised: BaseException | None = None
    try:
        with _signals.deferred((signal.SIGINT, signal.SIGTERM)):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
    except BaseException as exc:
        raised = exc
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGTERM) is terminated, signal.getsignal(signal.SIGTERM)
    assert seen == [signal.SIGTERM]
    assert raised is not None


def test_a_signal_while_the_handlers_are_set_leaves_none_recording(
    handlers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM comes just after SIGINT's handler became the recorder, before SIGTERM's did:
    its handler raises there; SIGINT's handler must not stay the recorder (every later
    Ctrl-C would be dropped)."""

    def terminated(number: int, _frame: object) -> None:
        raise Terminated

    signal.signal(signal.SIGTERM, terminated)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _arriving_after(monkeypatch, signal.SIGINT, signal.SIGTERM, restoring=False)
    with pytest.raises(Terminated), _signals.deferred((signal.SIGINT, signal.SIGTERM)):
        pass
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("restoring", [False, True], ids=["setting", "putting-back"])
def test_the_cli_hold_and_the_removal_on_termination_put_every_handler_back(
    handlers: None, monkeypatch: pytest.MonkeyPatch, restoring: bool
) -> None:
    """``held`` (an import's batch) and ``removed_on_termination`` (a file being written) set
    handlers the way ``deferred`` does: a Ctrl-C arriving just after the first handler is set,
    or put back, raises there and must not leave the other signal's handler replaced."""
    from sandbox_ledger.cli.interrupt import held

    def terminated(number: int, _frame: object) -> None:
        raise Terminated

    blocks = [
        (held, signal.SIGTERM, terminated),
        (lambda: _signals.removed_on_termination(lambda: None), signal.SIGHUP, signal.SIG_DFL),
    ]
    for block, other, before in blocks:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(other, before)
        first = signal.SIGINT if block is held else signal.SIGTERM
        if block is not held:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _arriving_after(monkeypatch, first, signal.SIGINT, restoring=restoring)
        with pytest.raises(KeyboardInterrupt), block():
            pass
        monkeypatch.undo()
        assert signal.getsignal(other) is before, (block, signal.getsignal(other))
        assert signal.getsignal(first) in (signal.default_int_handler, signal.SIG_DFL)
