"""Adjustments of moto for the embedded DynamoDB, each checked and applied on its own.

Stock moto is slow as an embedded server (costs that grow with the table, work repeated on
every request) and differs from DynamoDB in a few places. Each module here adjusts one thing:

- :mod:`.transactions`: a transaction's rollback snapshots the items it names, not every
  table it touches (fixes behaviour too: a request refused for two operations in one action
  is undone whole).
- :mod:`.streams`: a table's stream keeps its newest records, and a stream turned off stops
  its records (fixes behaviour: stock moto keeps every record and then fails every write).
- :mod:`.stream_sizes`: a stream record's size is measured when it is first read, not as it
  is written.
- :mod:`.instances`: model objects (items, stream records, tables) are freed after their
  last use, not listed for moto's dashboard (stock moto keeps every one ever created).
- :mod:`.item_sizes`: an item's size is summed once as its attributes are built, not once
  per attribute.
- :mod:`.queries`: a Query reads its partition, not the whole table sorted.
- :mod:`.scans`: a Scan page reads its page, not the whole table sorted.
- :mod:`.dispatch`: moto's choice of service app is remembered for DynamoDB requests.
- :mod:`.method_lists`: the list of a response class's methods is computed once.
- :mod:`.update_expressions`: an update expression is parsed once, its static checks run once
  per shape, and its tree copied without ``copy.deepcopy``'s bookkeeping.
- :mod:`.new_item_updates`: an update that creates its item is validated once, not twice,
  when none of its names is a key attribute.
- :mod:`.update_traversal`: an update expression's validation passes look up each node's
  processor once per node type.
- :mod:`.conditions`: a condition expression's text is split into tokens once.
- :mod:`.condition_trees`: a condition expression is parsed once per text, names and values.
- :mod:`.serializer`: the keys moto's response serializer tries for a member are worked out
  once per member.

An adjustment takes effect only while an embedded server serves a request (:func:`serving`):
its hooks on moto's classes defer to moto's own code everywhere else in the process
(``mock_aws``, another moto server, a test calling moto directly). Each one is written against
the moto source it replaces or relies on, checked by a fingerprint of that source
(:func:`prepare`): one whose moto code differs is left off with a
:class:`MotoAdjustmentWarning` naming it, and the server still starts, with moto's own code
there (slower, or, for an adjustment that fixes behaviour, with moto's behaviour, which the
warning names).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import inspect
import linecache
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator, Mapping

WRITTEN_FOR = ("5.2.1", "5.2.5", "5.2.6")
"""The moto releases whose source the fingerprints are taken from (identical there)."""


HOT_PATH = frozenset(
    {
        "item_sizes",
        "stream_sizes",
        "update_expressions",
        "new_item_updates",
        "update_traversal",
        "conditions",
        "condition_trees",
        "serializer",
    }
)
"""The adjustments of moto's per-request parsing, validation and serialization: the ones
``benchmarks/server_replay.py`` and ``tests/local`` compare with moto's own code."""


class MotoAdjustmentWarning(UserWarning):
    """An adjustment of moto was left off: the installed moto's code differs from its own."""


class Mismatch(Exception):
    """Raised by an adjustment's ``sources`` when moto lacks or changed what it relies on."""


@dataclass(frozen=True)
class Settings:
    """What one embedded server applies while it serves a request."""

    on: frozenset[str]
    stream_records: int | None
    strict: bool = False
    """The strict profile checks item sizes itself, exactly as DynamoDB counts them
    (:mod:`sandbox_ledger.local.strict`): moto's own limit (405,000 bytes by its own
    formula) is not applied to an item built whole, nor to the item an update leaves."""


@dataclass
class Adjustment:
    """One adjustment: what it buys, what differs without it, the moto code it relies on."""

    name: str
    gain: str
    # None: only speed; else what behaves otherwise when the adjustment is off.
    behaviour: str | None
    # The moto objects the adjustment replaces or relies on, by name (raises Mismatch).
    sources: Callable[[], dict[str, Any]]
    # The fingerprints of each source in the releases of WRITTEN_FOR.
    known: Mapping[str, frozenset[str]]
    # Puts the adjustment's hooks in place, given moto's own objects from ``sources``.
    install: Callable[[dict[str, Any]], None]


_serving = threading.local()


@contextlib.contextmanager
def serving(settings: Settings) -> Iterator[None]:
    """Apply ``settings`` in this thread for the duration of the block (one request)."""
    outer = getattr(_serving, "settings", None)
    _serving.settings = settings
    try:
        yield
    finally:
        _serving.settings = outer


def active(name: str) -> Settings | None:
    """The settings of the request this thread serves, if adjustment ``name`` is on for it."""
    settings: Settings | None = getattr(_serving, "settings", None)
    return settings if settings is not None and name in settings.on else None


def fingerprint(source: Any) -> str:
    """A digest of a function's or class's source, blind to indentation and blank lines."""
    lines = (line.strip() for line in source_text(source).splitlines())
    return hashlib.sha256("\n".join(line for line in lines if line).encode()).hexdigest()[:16]


def source_text(source: Any) -> str:
    """``inspect.getsource(source)``, each file's classes located once: inspect parses the
    whole file again for every class (15 ms each in moto's serializer module, 0.15 s of a
    server's start)."""
    file = inspect.getsourcefile(source) if inspect.isclass(source) else None
    start = _class_starts(file).get(source.__qualname__) if file else None
    if file is None or start is None:
        return inspect.getsource(source)
    module = inspect.getmodule(source, file)
    lines = linecache.getlines(file, module.__dict__) if module else linecache.getlines(file)
    return "".join(inspect.getblock(lines[start:]))


@functools.cache
def _class_starts(file: str) -> dict[str, int]:
    """Where each class of ``file`` starts (its first decorator's line, 0-based), by
    qualified name, as ``inspect.findsource`` finds it (the first of a name wins)."""
    starts: dict[str, int] = {}
    stack: list[str] = []

    class Finder(ast.NodeVisitor):
        def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
            stack.extend((node.name, "<locals>"))
            self.generic_visit(node)
            del stack[-2:]

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_ClassDef(self, node: ast.ClassDef) -> None:
            stack.append(node.name)
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            starts.setdefault(".".join(stack), first - 1)
            self.generic_visit(node)
            stack.pop()

    linecache.checkcache(file)
    Finder().visit(ast.parse("".join(linecache.getlines(file))))
    return starts


def all_adjustments() -> tuple[Adjustment, ...]:
    """Every adjustment, in the order they are checked and installed."""
    from . import (
        condition_trees,
        conditions,
        dispatch,
        instances,
        item_sizes,
        method_lists,
        new_item_updates,
        queries,
        scans,
        serializer,
        stream_sizes,
        streams,
        transactions,
        update_expressions,
        update_traversal,
    )

    modules = (
        transactions,
        streams,
        stream_sizes,
        instances,
        queries,
        scans,
        dispatch,
        method_lists,
        update_expressions,
        new_item_updates,
        update_traversal,
        conditions,
        condition_trees,
        serializer,
        # Last: it replaces Item.__init__, which new_item_updates relies on as moto wrote it.
        item_sizes,
    )
    return tuple(module.ADJUSTMENT for module in modules)


_lock = threading.Lock()
_stock: dict[str, dict[str, Any]] = {}  # adjustment -> moto's own objects, before its hooks
_digests: dict[str, dict[str, str]] = {}  # adjustment -> fingerprint of each of those
_installed: set[str] = set()


def prepare(leave_off: Collection[str] = ()) -> tuple[frozenset[str], dict[str, str]]:
    """Install every adjustment that matches the installed moto (once per process), except
    those in ``leave_off``; return the names on, and each name off with the warning given
    for it (empty for those in ``leave_off``).

    Warns (:class:`MotoAdjustmentWarning`), once per call, for each adjustment left off
    because moto's code differs from its own.
    """
    on: set[str] = set()
    off: dict[str, str] = {}
    with _lock:
        for adjustment in all_adjustments():
            why = _mismatch(adjustment)
            if why is None and adjustment.name not in _installed:
                # Every adjustment that fits is installed, in this order, whatever
                # ``leave_off`` says (its hooks serve only requests it is on for): hooks
                # wrap the ones installed before them, so one installed later than an
                # adjustment after it in the order would replace that one's hooks.
                adjustment.install(_stock[adjustment.name])
                _installed.add(adjustment.name)
            if adjustment.name in leave_off:
                off[adjustment.name] = ""
            elif why is not None:
                off[adjustment.name] = _left_off(adjustment, why)
                warnings.warn(off[adjustment.name], MotoAdjustmentWarning, stacklevel=3)
            else:
                on.add(adjustment.name)
    return frozenset(on), off


def _mismatch(adjustment: Adjustment) -> str | None:
    """Why ``adjustment`` does not fit the installed moto, or None when it does."""
    if adjustment.name not in _stock:
        try:
            stock = adjustment.sources()
        except (Mismatch, ImportError, AttributeError) as exc:
            return str(exc)
        digests = {}
        for name, source in stock.items():
            try:
                digests[name] = fingerprint(source)
            except (OSError, TypeError):
                digests[name] = "no source"
        _stock[adjustment.name], _digests[adjustment.name] = stock, digests
    digests = _digests[adjustment.name]
    unknown = [
        f"{name} ({digest})"
        for name, digest in digests.items()
        if digest not in adjustment.known.get(name, frozenset())
    ]
    if not unknown:
        return None
    releases = f"{', '.join(WRITTEN_FOR[:-1])} and {WRITTEN_FOR[-1]}"
    return f"the code of {', '.join(unknown)} differs from moto {releases}'s"


def _left_off(adjustment: Adjustment, why: str) -> str:
    import moto

    consequence = (
        f"Behaviour differs from DynamoDB: {adjustment.behaviour}."
        if adjustment.behaviour
        else "The server answers the same, slower."
    )
    return (
        f"sandbox_ledger.local: the embedded DynamoDB's adjustment {adjustment.name!r} "
        f"({adjustment.gain}) is left off for moto {moto.__version__}: {why}. {consequence}"
    )
