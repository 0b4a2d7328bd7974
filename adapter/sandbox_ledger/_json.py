"""JSON payload rules shared by every model: what JSON can carry, checked before any write."""

from __future__ import annotations

import functools
import json
import math
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

# The TypeScript client's numbers are IEEE doubles; a ts beyond this is not an integer there.
MAX_SAFE_INTEGER = 2**53 - 1


MAX_INT_DIGITS = 4300
"""The most decimal digits a JSON integer may have: CPython's default int-string limit
(``sys.get_int_max_str_digits()``), so every Python process with default settings writes and
reads it back. A fixed number, not this process's setting, so a ledger one process writes is
read by every other; a process that lowers the limit refuses from its own limit on (it could not
write such a number), one that raises it (or sets 0, no limit) still refuses beyond 4,300."""


def _int_digits() -> int:
    limit = sys.get_int_max_str_digits()
    return MAX_INT_DIGITS if limit == 0 else min(limit, MAX_INT_DIGITS)


@functools.cache
def _largest(digits: int) -> int:
    power: int = 10**digits
    return power - 1


def _largest_int() -> int:
    return _largest(_int_digits())


def check_json_value(value: Any, field: str) -> Any:
    """Return ``value`` with tuples made lists.

    Raises ValueError naming the path of the first part that JSON cannot carry, or no store
    can (an integer of more than :data:`MAX_INT_DIGITS` digits).
    """
    if value is None:
        return None
    largest = _largest_int()
    try:
        return _check(value, None, 0, largest)
    except _Refused:
        # Walked again to name the first part refused: the same checks, in the same order,
        # this time building each part's path (a path string per part took most of the
        # time of every valid payload's walk).
        return _check(value, field, 0, largest)


class _Refused(Exception):
    """:func:`_check`, walking without a path, met a part it refuses."""


def _check(value: Any, path: str | None, depth: int, largest: int) -> Any:
    """``value`` with tuples made lists, or a refusal: a ValueError naming ``path`` and why,
    or :class:`_Refused` when ``path`` is None (no path is built below it either)."""
    if depth > 200:
        raise _Refused if path is None else ValueError(f"{path}: nested more than 200 levels deep")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > largest:
        raise _Refused if path is None else ValueError(f"{path}: {_too_many_digits()}")
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise (
                _Refused()
                if path is None
                else ValueError(
                    f"{path}: {value!r} is not a JSON number (NaN and Infinity are refused)"
                )
            )
        return value
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise (
                    _Refused()
                    if path is None
                    else ValueError(f"{path}: object key {key!r} is not a string")
                )
            inner = None if path is None else f"{path}.{key}" if key else f"{path}['']"
            out[key] = _check(item, inner, depth + 1, largest)
        return out
    if isinstance(value, (list, tuple)):
        return [
            _check(item, None if path is None else f"{path}[{i}]", depth + 1, largest)
            for i, item in enumerate(value)
        ]
    raise (
        _Refused()
        if path is None
        else ValueError(f"{path}: a {type(value).__name__} cannot be carried by JSON")
    )


def find_surrogate(value: Any, path: str) -> str | None:
    """The path of the first string (or object key) in ``value`` holding a lone UTF-16
    surrogate, which UTF-8, and so DynamoDB and PostgreSQL, cannot store; None if none."""
    found = find_unstorable(value, path)
    return found[0] if found is not None and found[1] == _SURROGATE else None


def find_unstorable(value: Any, path: str) -> tuple[str, str] | None:
    """The path of the first part of ``value`` no store can hold, and why: a string or object
    key with a lone surrogate, or an integer past :data:`MAX_INT_DIGITS` digits (a payload
    changed in place after it was validated); None if every part is storable."""
    if isinstance(value, (dict, list)) and _storable_at_once(value):
        return None  # a container: one pass in C; a scalar's walk is one check already
    return _find_unstorable(value, path)


def encoder_checks_digits() -> bool:
    """Whether ``json.dumps`` refuses exactly the integers no store can hold (this process's
    integer-string limit is the stores' :data:`MAX_INT_DIGITS` rule), so an encoded value
    needs no walk for them: a limit set, and not past :data:`MAX_INT_DIGITS` (then
    :func:`_int_digits` is that limit)."""
    return 0 < sys.get_int_max_str_digits() <= MAX_INT_DIGITS


def _storable_at_once(value: Any) -> bool:
    """Whether ``value`` is storable, judged in one pass of the C encoder (what every write
    pays, instead of a walk in Python): its JSON text encodes as UTF-8 (no lone surrogate)
    and every integer converts within the limit. False means "walk it" (something is
    unstorable, or not JSON, or this process's integer limit is not the stores' limit)."""
    if not encoder_checks_digits():
        return False  # no limit, or one past MAX_INT_DIGITS: the encoder would accept more
    try:
        _UNICODE.encode(value).encode("utf-8")
    except (ValueError, TypeError, RecursionError):  # UnicodeEncodeError is a ValueError
        return False
    return True


def _find_unstorable(value: Any, path: str) -> tuple[str, str] | None:
    if isinstance(value, str):
        return (path, _SURROGATE) if _has_surrogate(value) else None
    if isinstance(value, int) and not isinstance(value, bool):
        return (path, _too_many_digits()) if abs(value) > _largest_int() else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _has_surrogate(key):
                return f"{path} (an object key)", _SURROGATE
            found = _find_unstorable(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _find_unstorable(item, f"{path}[{i}]")
            if found:
                return found
    return None


_SURROGATE = "contains a lone UTF-16 surrogate (not storable as UTF-8)"


def _too_many_digits() -> str:
    return (
        f"an integer of more than {_int_digits()} digits (Python's limit on integer-string "
        "conversion: no store could write it or read it back)"
    )


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# Encoders built once: json.dumps given any setting builds a JSONEncoder per call, which took
# about two thirds of a small payload's encoding (each entry an import or export writes).
_COMPACT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_CANONICAL = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True
)
_UNICODE = json.JSONEncoder(ensure_ascii=False)


def _one_shot(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode``, calling the C encoder straight: ``encode`` and ``iterencode`` set
    it up in Python on every call (a fifth of a small value's encoding; an import encodes
    two values per entry). Each call still builds its own C encoder with a fresh table of the
    containers being encoded, as ``iterencode`` does, so a value that holds itself is named a
    circular reference at its first repeat, and calls from many threads share nothing."""
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    if make is None or encoder.indent is not None or not encoder.check_circular:
        return encoder.encode
    string = (
        json.encoder.encode_basestring_ascii
        if encoder.ensure_ascii
        else json.encoder.encode_basestring
    )
    settings = (
        encoder.default,
        string,
        None,  # indent
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )

    def one_shot(value: Any) -> str:
        return "".join(make({}, *settings)(value, 0))

    return one_shot


_compact = _one_shot(_COMPACT)
_canonical = _one_shot(_CANONICAL)
ascii_text = _one_shot(json.JSONEncoder(separators=(",", ":")))
"""Compact JSON text in ASCII (every other character escaped, lone surrogates included)."""


def dumps(value: Any) -> bytes:
    """Serialize checked JSON compactly, keeping unicode and refusing NaN."""
    return _compact(value).encode()


def text(value: Any) -> str:
    """:func:`dumps`' text, not encoded (a lone surrogate is not refused here)."""
    return _compact(value)


def canonical(value: Any) -> str:
    """:func:`dumps`' text with every object's keys sorted: one text per JSON value."""
    return _canonical(value)


def unicode_text(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)``: the JSON text with unicode kept."""
    return _UNICODE.encode(value)


def loads(data: bytes | str) -> Any:
    """Parse JSON written by :func:`dumps`."""
    return json.loads(data)


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice: JSON parsers keep one of the two values (Python's
    and pydantic's the last) without a word, so text taken from outside that does is refused."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} appears twice in one object")
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return out


def loads_unique(data: bytes | str) -> Any:
    """``json.loads``, refusing an object that names a key twice: every reader of JSON the
    product takes from outside parses with it, or checks with :func:`refuse_duplicate_keys`.

    Raises:
        DuplicateKeyError: naming the key (a ValueError).
        ValueError: not JSON (``json.JSONDecodeError``).
        RecursionError: nested deeper than the decoder recurses.
    """
    return json.loads(data, object_pairs_hook=_unique_pairs)


def object_keys(value: Any) -> int:
    """How many keys the objects of a parsed JSON value hold, at every level."""
    # Loops rather than sum() over generators: an import counts every entry's payload.
    count = 0
    if value.__class__ is dict:
        count = len(value)
        for item in value.values():
            if item.__class__ is dict or item.__class__ is list:
                count += object_keys(item)
    elif value.__class__ is list:
        for item in value:
            if item.__class__ is dict or item.__class__ is list:
                count += object_keys(item)
    return count


def refuse_duplicate_keys(text: str | bytes) -> None:
    """Parse ``text`` again with :func:`loads_unique` to find a key named twice (text that
    json cannot read is left to the caller's parser).

    A reader that parses with another parser (pydantic's, which keeps the last value of a key
    named twice) calls it only when the text could name one: every key in JSON text is followed
    by a colon, so text with no more colons than its parse holds keys (:func:`object_keys`)
    names none twice. That check is exact and costs a count; only text with a colon inside a
    string, or a key named twice, is parsed again.

    Raises:
        DuplicateKeyError: naming the key.
    """
    try:
        loads_unique(text)
    except DuplicateKeyError:
        raise
    except (ValueError, RecursionError):
        return
