"""A second signal while a command says it was interrupted (Ctrl-C, then
SIGTERM a moment later, as a supervisor sends): seen in 5 of 120 runs of ``export -o`` with
two quick signals, a traceback of ``Terminated`` and exit 1 instead of the one line and 130
or 143."""

from __future__ import annotations

import os
import signal

import pytest
import typer

from sandbox_ledger.cli import failures
from sandbox_ledger.cli.interrupt import raise_on_sigterm


@pytest.fixture
def sigterm_raises():  # type: ignore[no-untyped-def]
    before = signal.getsignal(signal.SIGTERM)
    raise_on_sigterm()
    yield
    signal.signal(signal.SIGTERM, before)


def test_a_sigterm_while_the_interrupted_line_is_said_exits_by_a_signal_code(
    sigterm_raises: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []

    def say(line: str) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the line is being written
        said.append(line)

    monkeypatch.setattr(failures, "say", say)

    @failures.handled
    def command() -> None:
        raise KeyboardInterrupt

    raised: BaseException | None = None
    try:
        command()
    except BaseException as exc:  # a Terminated escaping is the defect
        raised = exc
    assert isinstance(raised, typer.Exit), repr(raised)
    assert raised.exit_code in (130, 143)
