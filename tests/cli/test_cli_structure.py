"""The command line's own structure (issue 25, item 9): small modules, no import cycle among
them, no module-level mutable state (the click context carries the target), one sync bridge,
no ``type: ignore``."""

from __future__ import annotations

import ast
from pathlib import Path

from project.test_structure import ROOT, _imported_modules, _module_name

CLI = ROOT / "adapter" / "sandbox_ledger" / "cli"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    return {_module_name(path, ROOT): path for path in sorted(CLI.rglob("*.py"))}


def test_no_cli_module_is_over_400_lines() -> None:
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_type_ignore_in_the_cli() -> None:
    found = [
        f"{path.name}:{number}"
        for path in _modules().values()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "type: ignore" in line
    ]
    assert found == []


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = _imported_modules(tree, name, path.name == "__init__.py")
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every module that can reach itself, with the path (imports inside functions count:
    they are a cycle too, only a later one)."""
    cycles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append([*path, start])
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    return cycles


def test_no_import_cycle_among_the_cli_modules() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_rule_catches_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) != []


MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "Counter", "OrderedDict", "deque"}


def _mutable_module_state(tree: ast.Module) -> list[str]:
    found = []
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if value is None:
            continue
        mutable = isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            mutable = mutable or value.func.id in MUTABLE_CALLS
        name = ast.unparse(node).split("=")[0].strip()
        if mutable and name != "__all__":
            found.append(name)
    return found


def test_no_module_level_mutable_state_in_the_cli() -> None:
    found = {
        name: names
        for name, path in _modules().items()
        if (names := _mutable_module_state(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert found == {}


def test_the_state_rule_catches_a_module_dict() -> None:
    assert _mutable_module_state(ast.parse("_state: dict[str, int] = {}\nX = (1, 2)")) == [
        "_state: dict[str, int]"
    ]


def test_one_sync_bridge() -> None:
    """The CLI drives async stores through sandbox_ledger.blocking, never a loop of its own."""
    found = [
        path.name
        for path in _modules().values()
        if "run_coroutine_threadsafe" in (text := path.read_text(encoding="utf-8"))
        or "class BlockingStore" in text
    ]
    assert found == []
