"""Lambda entry point of the TTL stream handler (see sandbox_ledger.handlers.on_ttl_expiry)."""

from sandbox_ledger.handlers.on_ttl_expiry import handler

__all__ = ["handler"]
