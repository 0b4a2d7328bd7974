"""Opaque paging cursors: a small JSON state, URL-safe base64, tagged with the kind of listing.

Every adapter's cursor is built and read here, so a malformed or foreign cursor is refused the
same way everywhere: :class:`~sandbox_ledger.errors.InvalidInputError` naming ``cursor``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from sandbox_ledger.errors import InvalidInputError


def encode_cursor(kind: str, state: dict[str, Any]) -> str:
    """A cursor carrying ``state`` for a listing of ``kind`` (e.g. ``"memory-sessions"``)."""
    raw = json.dumps({"k": kind, "s": state}, separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(kind: str, cursor: object) -> dict[str, Any]:
    """The state of a cursor made by :func:`encode_cursor` for the same ``kind``.

    Raises:
        InvalidInputError: not a string, not a cursor, or a cursor of another listing.
    """
    if not isinstance(cursor, str) or not cursor:
        raise InvalidInputError("cursor", "must be a non-empty string returned by a listing")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        body = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError) as exc:
        raise InvalidInputError("cursor", "not a cursor returned by a listing") from exc
    if not isinstance(body, dict) or not isinstance(body.get("s"), dict):
        raise InvalidInputError("cursor", "not a cursor returned by a listing")
    if body.get("k") != kind:
        raise InvalidInputError("cursor", "belongs to another listing or adapter")
    state: dict[str, Any] = body["s"]
    return state
