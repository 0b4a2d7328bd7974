"""The ``sandbox-ledger`` operator command line."""

from sandbox_ledger.cli.app import app, main

__all__ = ["app", "main"]
