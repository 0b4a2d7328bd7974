"""The content digest as it was before the import's fast path (df193f5): the reference that
``sandbox_ledger.transfer.content_digest`` is held to for every entry."""

from __future__ import annotations

import hashlib
import json
import warnings

from sandbox_ledger import LedgerEntry

_CANONICAL = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True
)


def old_canonical(entry: LedgerEntry) -> str:
    """The canonical text of ``entry.wire()`` (its keys sorted at every level)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic's serializer warns of a None in a str field
        return _CANONICAL.encode(entry.wire())


def old_digest(entry: LedgerEntry) -> str:
    """df193f5's ``content_digest``: the digest of :func:`old_canonical`."""
    return hashlib.sha256(old_canonical(entry).encode("utf-8", "surrogatepass")).hexdigest()[:32]
