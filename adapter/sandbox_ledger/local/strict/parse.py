"""The strict profile as text, ``name=value[,name=value...]``: what ``sandbox-ledger local
--strict-option``, ``SANDBOX_LEDGER_TEST_STRICT`` and the child process server read
(:meth:`StrictProfile.parse <sandbox_ledger.local.strict.StrictProfile.parse>`), and what
the serving line says (:func:`profile_text`).

Each field is read by its type: a number of seconds or a scale (``rate_scale=0.01``), a count
(``shard_records=10``), ``index_delay=LOW:HIGH`` seconds, ``ttl_delay=none`` (never) or
seconds, ``shard_key=item|partition``. Each value is then checked by the profile itself.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from ...errors import InvalidInputError

if TYPE_CHECKING:
    from collections.abc import Callable

    from . import StrictProfile

__all__ = ["FORMAT", "parse_profile", "profile_text"]

FORMAT = (
    "name=value joined by commas, e.g. rate_scale=0.01,index_delay=0:0,ttl_delay=none,"
    "shard_key=partition"
)
"""The syntax, as a refusal of text that is not ``name=value`` states it."""


def _number(value: str) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(value)
    return number


def _seconds(value: str) -> float:
    try:
        return _number(value)
    except ValueError:
        raise ValueError("a finite number") from None


def _count(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError("a whole number") from None


def _range(value: str) -> tuple[float, float]:
    low, colon, high = value.partition(":")
    try:
        if not colon:
            raise ValueError(value)
        return _number(low), _number(high)
    except ValueError:
        raise ValueError("LOW:HIGH seconds (e.g. 0:0.1)") from None


def _seconds_or_none(value: str) -> float | None:
    if value.lower() == "none":
        return None
    try:
        return _number(value)
    except ValueError:
        raise ValueError("a finite number of seconds or none") from None


def _word(value: str) -> str:
    return value


_READERS: dict[str, Callable[[str], Any]] = {
    "float": _seconds,
    "int": _count,
    "tuple[float, float]": _range,
    "float | None": _seconds_or_none,
    "str": _word,
}
"""A field's reader by its annotation (``StrictProfile``'s module reads annotations as text)."""


def _readers() -> dict[str, Callable[[str], Any]]:
    """Each field of :class:`StrictProfile` with the reader of its values."""
    from . import StrictProfile

    return {field.name: _READERS[str(field.type)] for field in dataclasses.fields(StrictProfile)}


def parse_profile(text: str) -> StrictProfile:
    """The profile ``text`` describes (``name=value[,name=value...]``; every field not named
    keeps its default).

    Raises:
        InvalidInputError: naming the field (``strict`` for text that names none) and quoting
            the text given, for a part that is not ``name=value``, a name that is no field, a
            field named twice, or a value that is not of the field's type or out of its range.
    """
    from . import StrictProfile

    fields = _readers()
    values: dict[str, Any] = {}
    given: dict[str, str] = {}
    parts = text.split(",")
    for part in parts:
        name, equals, value = (piece.strip() for piece in part.partition("="))
        if not equals or not name:
            raise InvalidInputError(
                "strict", f"{part.strip()!r} is not name=value (in {text!r}; {FORMAT})"
            )
        if name not in fields:
            raise InvalidInputError(
                name,
                f"not a field of the strict profile (in {text!r}; its fields: {', '.join(fields)})",
            )
        if name in given:
            raise InvalidInputError(name, f"given twice (in {text!r})")
        given[name] = value
        try:
            values[name] = fields[name](value)
        except ValueError as exc:
            raise InvalidInputError(name, f"{value!r} is not {exc} (in {text!r})") from None
    try:
        return StrictProfile(**values)
    except InvalidInputError as exc:
        message = str(exc).split(": ", 1)[-1]
        raise InvalidInputError(
            exc.field, f"{message}, not {given.get(exc.field, '')!r} (in {text!r})"
        ) from None


def profile_text(profile: StrictProfile, *, every: bool = False) -> str:
    """``profile`` as :func:`parse_profile` reads it: the fields that differ from the
    defaults (every field with ``every``), in the profile's order; ``""`` for the defaults."""
    from . import StrictProfile

    default = StrictProfile()
    return ",".join(
        f"{field.name}={_text(getattr(profile, field.name))}"
        for field in dataclasses.fields(profile)
        if every or getattr(profile, field.name) != getattr(default, field.name)
    )


def _text(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ":".join(_text(v) for v in value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)
    return str(value)
