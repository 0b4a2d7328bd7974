"""Lambda entry point of the scheduled sweeper.

The module is :mod:`sandbox_ledger.handlers.expire_stale_resources`; tests and the demo import it.
"""

from sandbox_ledger.handlers.expire_stale_resources import handler

__all__ = ["handler"]
