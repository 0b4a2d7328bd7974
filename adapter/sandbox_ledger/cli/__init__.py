"""The ``sandbox-ledger`` operator command line (needs the ``cli`` extra)."""

from __future__ import annotations

import sys
from typing import Any

# What the command line needs beyond the library's own dependencies: the `cli` extra.
CLI_MODULES = frozenset({"typer", "click", "rich", "moto", "werkzeug", "aws_lambda_powertools"})
MISSING_EXTRA = (
    "sandbox-ledger: the command line needs the 'cli' extra: "
    "pip install 'sandbox-ledger-dynamodb[cli]' (missing module: {name})"
)


def main() -> None:
    """The console script: one line naming the extra to install if the CLI's packages are
    missing, instead of a traceback."""
    try:
        from sandbox_ledger.cli.app import main as run
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in CLI_MODULES:
            raise
        print(MISSING_EXTRA.format(name=exc.name), file=sys.stderr)
        raise SystemExit(1) from None
    run()


def __getattr__(name: str) -> Any:
    if name == "app":
        from sandbox_ledger.cli.app import app

        return app
    raise AttributeError(name)


__all__ = ["app", "main"]
