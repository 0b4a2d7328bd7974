"""The sources an adjustment is checked against are read as ``inspect.getsource`` reads them,
each file's classes located once."""

from __future__ import annotations

import importlib.util
import inspect
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox_ledger.local import adjustments

MODULE = """
import functools


class Plain:
    x = 1


@functools.total_ordering
class Decorated:
    def __lt__(self, other):
        return False


class Outer:
    class Inner:
        def method(self):
            return 1


def factory():
    class Local:
        pass

    return Local


class Plain:  # a second class of the same name: inspect finds the first
    y = 2
"""


def test_every_adjusted_moto_source_reads_as_inspect_reads_it() -> None:
    sources = [s for a in adjustments.all_adjustments() for s in a.sources().values()]
    assert any(inspect.isclass(s) for s in sources)
    for source in sources:
        assert adjustments.source_text(source) == inspect.getsource(source)


def test_classes_nested_decorated_local_and_renamed(tmp_path: Path) -> None:
    path = tmp_path / "fingerprint_sample.py"
    path.write_text(textwrap.dedent(MODULE))
    spec = importlib.util.spec_from_file_location("fingerprint_sample", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fingerprint_sample"] = module
    try:
        spec.loader.exec_module(module)
        classes = [
            module.Plain,
            module.Decorated,
            module.Outer,
            module.Outer.Inner,
            module.factory(),
            module.Outer.Inner.method,
        ]
        for cls in classes:
            assert adjustments.source_text(cls) == inspect.getsource(cls)
        assert "@functools.total_ordering" in adjustments.source_text(module.Decorated)
        assert "x = 1" in adjustments.source_text(module.Plain)
    finally:
        del sys.modules["fingerprint_sample"]


def test_a_source_inspect_cannot_read_fails_as_inspect_does() -> None:
    with pytest.raises(TypeError):
        adjustments.source_text(int)
