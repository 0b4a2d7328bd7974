"""Paging cursors, a part of the conformance suite."""


class CursorContract:
    """Cursor tests; :class:`~sandbox_ledger.testing.StorageAdapterContract` includes them."""
