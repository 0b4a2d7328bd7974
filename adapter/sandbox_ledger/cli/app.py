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
    watch,
)
from sandbox_ledger.cli.interrupt import raise_on_sigterm
from sandbox_ledger.cli.output import ExitCode, quiet_stdout
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
            app()
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
        raise SystemExit(ExitCode.CLOSED_PIPE) from None
    except SystemExit as done:
        # click ends a closed pipe met while it prints (--help) with 1, its stdout wrapped.
        if done.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
            quiet_stdout()
            raise SystemExit(ExitCode.CLOSED_PIPE) from None
        raise
