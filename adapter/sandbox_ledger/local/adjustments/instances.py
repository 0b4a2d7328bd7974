"""Model objects are not kept after their last use.

moto keeps every model object it ever creates in a list on its class (``instances_tracked``),
for its ``/moto-api/data.json`` dashboard: every item written (each overwrite and each
update makes a new one), every stream record, every table, deleted ones included. An
embedded server's memory therefore grows with everything ever written to it and never
shrinks, and Python's garbage collector walks all of it, ever more slowly. Here objects
created while an embedded server serves a request are not listed; they live as long as the
tables, items and streams that hold them. The server's ``/moto-api/data.json`` dashboard
therefore lists only objects created outside such requests (with this adjustment on it shows
an embedded server's tables and items as none); ``/moto-api/reset`` works as before.
"""

from __future__ import annotations

from typing import Any

from . import Adjustment, active

NAME = "instances"
KNOWN_SOURCES = {"BaseModel.__new__": frozenset({"9aec1acda3b15208"})}


def _sources() -> dict[str, Any]:
    from moto.core.common_models import BaseModel

    return {"BaseModel.__new__": BaseModel.__new__}


def _install(stock: dict[str, Any]) -> None:
    from moto.core.common_models import BaseModel

    stock_new = stock["BaseModel.__new__"]

    def __new__(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if active(NAME) is None:
            return stock_new(cls, *args, **kwargs)
        return super(BaseModel, cls).__new__(cls)

    BaseModel.__new__ = staticmethod(__new__)  # type: ignore[method-assign]


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="model objects are freed after their last use, not listed for moto's dashboard",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
