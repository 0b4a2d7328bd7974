"""Putting a defect (a mutant) back in process: a textual change to one function's source,
compiled in its own module's namespace and installed where that function is looked up (by
every module that imported it by name). Used by the defect-class tests
(tests/verification/test_defect_classes.py) and the mutation tripwire
(tests/verification/mutation/test_tripwire.py)."""

from __future__ import annotations
import __future__

import importlib
import inspect
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass(frozen=True)
class Patch:
    """Replace ``old`` (exactly once in the source of ``module``'s ``qualname``) by ``new``."""

    module: str
    qualname: str
    old: str
    new: str


def install(patch: Patch, monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(patch.module)
    *path, name = patch.qualname.split(".")
    owner: Any = module
    for part in path:
        owner = getattr(owner, part)
    original = owner.__dict__[name] if path else getattr(module, name)
    source = textwrap.dedent(inspect.getsource(original))
    wrapped = getattr(original, "__wrapped__", None)
    if not path and source.lstrip().startswith("@") and inspect.isfunction(wrapped):
        # A decorated function (functools.wraps: a span around it): the mutant is its own
        # body, its decorators left out, and takes the place of the function they wrap, so
        # that every caller of the wrapper, one that imported it by name included, runs it.
        lines = source.splitlines(keepends=True)
        while lines and not lines[0].startswith(("def ", "async def ")):
            lines.pop(0)
        source, original = "".join(lines), wrapped
    assert source.count(patch.old) == 1, (
        f"{patch.module}.{patch.qualname} no longer holds the defect's text {patch.old!r}: "
        "rewrite the defect against today's code"
    )
    code = compile(
        source.replace(patch.old, patch.new),
        inspect.getsourcefile(original) or patch.module,
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )
    namespace: dict[str, Any] = {}
    exec(code, module.__dict__, namespace)  # the function's own source, changed
    mutant = namespace[name]
    if (
        not path
        and inspect.isfunction(original)
        and not source.lstrip().startswith("@")
        and mutant.__code__.co_freevars == original.__code__.co_freevars
    ):
        # The function object itself takes the mutant's code: every reference to it, a
        # module first imported while the mutant is in place included, runs the mutant, and
        # gets the original back when the test ends.
        monkeypatch.setattr(original, "__code__", mutant.__code__)
        monkeypatch.setattr(original, "__defaults__", mutant.__defaults__)
        monkeypatch.setattr(original, "__kwdefaults__", mutant.__kwdefaults__)
        return
    monkeypatch.setattr(owner, name, mutant)
    if not path:  # modules that imported the function by name call it under their own name
        for other in list(sys.modules.values()):
            ours = (other.__name__ or "").startswith("sandbox_ledger") and other is not module
            if ours and getattr(other, name, None) is original:
                monkeypatch.setattr(other, name, mutant)
