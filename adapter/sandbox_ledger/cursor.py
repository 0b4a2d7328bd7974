"""Opaque paging cursors: a small JSON state, sealed with a digest, in URL-safe base64.

Every listing's cursor is built and read here, so a damaged, altered or foreign cursor is
refused the same way everywhere: :class:`~sandbox_ledger.errors.InvalidInputError` naming
``cursor``, before any request.

A cursor carries the kind of listing (``"memory-sessions"``), a tag of the listing it belongs
to (a digest of the store and the listing's parameters: name, status, before...), the state
and a digest over all three. The digest is **keyless** (BLAKE2b with a fixed
personalization): cursors must work across processes and machines (the CLI prints one, the
next invocation reads it) and the stores share no secret to key it with. It stops accidents
and naive edits (a flipped byte, a changed number, a cursor of another listing or store);
a determined forger can recompute it, so every listing also validates the types and shapes of
the state it decodes: a forged but well-formed cursor can at worst start the listing at
another valid position of the same listing, never cause a backend error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from typing import TYPE_CHECKING, Any

from sandbox_ledger._json import loads_unique
from sandbox_ledger.errors import InvalidInputError

if TYPE_CHECKING:
    from collections.abc import Sequence

_PERSON = b"sl-cursor-v1"
_FIELDS = frozenset({"k", "l", "s", "h"})


def _digest(value: Any, size: int) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    raw = hashlib.blake2b(canonical.encode(), digest_size=size, person=_PERSON).digest()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def listing_tag(listing: Sequence[Any]) -> str:
    """The tag of a listing: a digest of JSON values naming the store and the listing's
    parameters, so a cursor of one listing is refused by every other."""
    return _digest(list(listing), 9)


def seal(body: dict[str, Any]) -> str:
    """The cursor of ``body`` (``k``: kind, ``l``: listing tag, ``s``: state), with its digest."""
    sealed = {"k": body["k"], "l": body["l"], "s": body["s"]}
    sealed["h"] = _digest(sealed, 12)
    raw = json.dumps(sealed, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def unseal(cursor: object) -> dict[str, Any]:
    """The body of a cursor :func:`seal` made, unaltered (``k``, ``l``, ``s``).

    Raises:
        InvalidInputError: not a string, not a cursor, or altered since it was made.
    """
    if not isinstance(cursor, str) or not cursor:
        raise InvalidInputError("cursor", "must be a non-empty string returned by a listing")
    damaged = InvalidInputError("cursor", "damaged or altered: not as a listing returned it")
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        body = loads_unique(raw)  # a key named twice: damaged, as any other change
    except (ValueError, binascii.Error, RecursionError) as exc:
        raise damaged from exc
    # Base64 ignores the unused bits of its last character: only the one spelling is a cursor.
    if base64.urlsafe_b64encode(raw).decode().rstrip("=") != cursor:
        raise damaged
    if not isinstance(body, dict) or set(body) != _FIELDS:
        raise damaged
    kind, tag, state, digest = body["k"], body["l"], body["s"], body["h"]
    if not (isinstance(kind, str) and isinstance(tag, str) and isinstance(digest, str)):
        raise damaged
    if not isinstance(state, dict):
        raise damaged
    expected = _digest({"k": kind, "l": tag, "s": state}, 12)
    # As bytes: compare_digest refuses str holding anything but ASCII.
    if not hmac.compare_digest(digest.encode(), expected.encode()):
        raise damaged
    return {"k": kind, "l": tag, "s": state}


def encode_cursor(kind: str, state: dict[str, Any], listing: Sequence[Any] = ()) -> str:
    """A cursor carrying ``state`` for a listing of ``kind`` (e.g. ``"memory-sessions"``)
    identified by ``listing`` (JSON values: the store and the listing's parameters)."""
    return seal({"k": kind, "l": listing_tag(listing), "s": state})


def decode_cursor(kind: str, cursor: object, listing: Sequence[Any] = ()) -> dict[str, Any]:
    """The state of a cursor made by :func:`encode_cursor` for the same ``kind`` and
    ``listing``; the caller still validates the state's types and shapes.

    Raises:
        InvalidInputError: not a string, not a cursor, altered, or a cursor of another listing
            or store.
    """
    body = unseal(cursor)
    if body["k"] != kind or body["l"] != listing_tag(listing):
        raise InvalidInputError(
            "cursor",
            "belongs to another listing (another name, status, before or store): pass it back "
            "to the listing that returned it",
        )
    state: dict[str, Any] = body["s"]
    return state


def bad_position() -> InvalidInputError:
    """The error of a cursor whose state is not a position of the listing it names."""
    return InvalidInputError("cursor", "not a position of this listing")


def check_int(value: object, low: int, high: int) -> int:
    """``value`` if it is an integer (not a bool) in ``[low, high]``.

    Raises:
        InvalidInputError: naming ``cursor``.
    """
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    raise bad_position()
