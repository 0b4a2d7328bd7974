"""A package's public names, imported on first use and written once: as the imports of the
package's ``if TYPE_CHECKING:`` block (``from m import Name as Name``).

Type checkers read that block; at run time :func:`exports` reads the same block from the
package's source, so the list a reader, mypy and ``__getattr__`` see is one list. ``ast`` is
already loaded by then in every process that imports pydantic or botocore (``inspect``
imports it); parsing the block costs well under a millisecond.
"""

from __future__ import annotations

import ast
import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


def _typing_imports(source: str, filename: str) -> dict[str, str]:
    """Each name imported in the module's top-level ``if TYPE_CHECKING:`` block, mapped to
    the module it is imported from."""
    where: dict[str, str] = {}
    for node in ast.parse(source, filename).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if not isinstance(statement, ast.ImportFrom) or statement.module is None:
                    raise ValueError(f"{filename}: only 'from m import Name as Name' belongs here")
                for alias in statement.names:
                    if alias.asname != alias.name:
                        # mypy --strict re-exports a name only when it is written twice.
                        raise ValueError(f"{filename}: write '{alias.name} as {alias.name}'")
                    where[alias.name] = statement.module
    return where


def exports(
    package: str, init_file: str, *also: str
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``__all__``, ``__getattr__`` and ``__dir__`` for ``package`` (whose ``__init__.py`` is
    ``init_file``): the names of its ``TYPE_CHECKING`` block, plus ``also`` (names the
    package defines itself, e.g. ``__version__``)."""
    with open(init_file, encoding="utf-8") as source:  # pathlib costs a cold start 3 ms
        where = _typing_imports(source.read(), init_file)
    public = sorted([*where, *also])

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next lookup does not come here
        return value

    def __dir__() -> list[str]:
        # The public names, imported yet or not, the public subpackages already loaded,
        # and none of the package's own helpers.
        namespace = vars(sys.modules[package])
        loaded = {
            n
            for n, v in namespace.items()
            if not n.startswith("_") and getattr(v, "__name__", "") == f"{package}.{n}"
        }
        return sorted(set(public) | loaded | {n for n in namespace if n.startswith("__")})

    return public, __getattr__, __dir__
