"""The ``sandbox-ledger`` console script: the command tree of :mod:`sandbox_ledger.cli.root`
with every command module registered on it.

Imports are lazy: ``--help`` and ``--version`` load typer alone; each command loads what it
uses (boto3, rich, pydantic, moto) when it runs.
"""

from __future__ import annotations

import sys

# Each command module registers its commands on the apps of root.py when imported.
from sandbox_ledger.cli import (  # noqa: F401
    ledger_commands,
    live,
    local_command,
    resource_commands,
    resource_files,
    setup_commands,
    ui_command,
    watch,
)
from sandbox_ledger.cli.interrupt import raise_on_sigterm
from sandbox_ledger.cli.output import ExitCode, quiet_stdout, say
from sandbox_ledger.cli.root import app

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point: a closed stdout (``| head``) ends it quietly with 141."""
    import logging

    # psycopg's pool logs each failed connection attempt as a multi-line warning, which
    # Python's last-resort handler would print: the command's one error line says it.
    logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())
    raise_on_sigterm()
    try:
        try:
            code = _run()
        finally:
            sys.stdout.flush()
        raise SystemExit(code)
    except BrokenPipeError:
        quiet_stdout()
        raise SystemExit(ExitCode.CLOSED_PIPE) from None
    except SystemExit as done:
        # click ends a closed pipe met while it prints (--help) with 1, its stdout wrapped.
        if done.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
            quiet_stdout()
            raise SystemExit(ExitCode.CLOSED_PIPE) from None
        raise


def _run() -> int:
    """Run the command; its exit code. A usage error that click finds (a mistyped option,
    command or value, a missing argument) is one `error:` line naming the help to read, as
    every other error, not click's usage block; a command given without its arguments prints
    its help, and a declined confirmation `Aborted!` (exit 1), as click does."""
    import typer

    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        say("Aborted!")
        return ExitCode.FAILED
    except typer.TyperException as exc:  # click's exceptions, as typer ships click
        context = getattr(exc, "ctx", None)
        message = exc.format_message()
        if context is not None and message == context.get_help():  # no arguments: the help
            print(message, file=sys.stderr)
            return exc.exit_code
        line = " ".join(message.split())
        if context is not None:
            line += f" (`{context.command_path} --help` lists what it takes)"
        say(f"error: {line}")
        return exc.exit_code
    return code if isinstance(code, int) else ExitCode.OK
