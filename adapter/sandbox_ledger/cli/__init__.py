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
        run = _app_module().main
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in CLI_MODULES:
            raise
        print(MISSING_EXTRA.format(name=exc.name), file=sys.stderr)
        raise SystemExit(1) from None
    run()


def _app_module() -> Any:
    """Import the commands (and typer) on first use, so that a missing extra can be named."""
    import importlib

    module = importlib.import_module("sandbox_ledger.cli.app")
    # Importing the submodule binds its name on this package: bind the Typer app instead.
    globals()["app"] = module.app
    return module


def __getattr__(name: str) -> Any:
    if name == "app":
        return _app_module().app
    raise AttributeError(name)


__all__ = ["app", "main"]
