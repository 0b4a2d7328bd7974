"""A response class's methods are listed once.

moto lists a response class's methods (``inspect.getmembers``) on every request to find the
one that serves it, about a sixth of a DynamoDB request's time; a class's methods do not
change, so the list is kept per class.
"""

from __future__ import annotations

import functools
from typing import Any

from . import Adjustment, active

NAME = "method_lists"
KNOWN_SOURCES = {"method_names_from_class": frozenset({"7632eba0f5cb5de9"})}


def _sources() -> dict[str, Any]:
    from moto.core import responses

    return {"method_names_from_class": responses.method_names_from_class}  # type: ignore[attr-defined]


def _install(stock: dict[str, Any]) -> None:
    from moto.core import responses

    stock_names = stock["method_names_from_class"]
    cached = functools.cache(stock_names)

    def method_names_from_class(cls: Any) -> Any:
        return cached(cls) if active(NAME) is not None else stock_names(cls)

    responses.method_names_from_class = method_names_from_class  # type: ignore[attr-defined,assignment]


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="a response class's methods are listed once, not on every request",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
