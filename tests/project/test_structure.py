"""Structure rules the code keeps: a leading underscore means private to its package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Shipped code: the library, the handlers and the CDK app. The tests and the benchmarks are
# white-box tools and may import the private modules of the package they examine.
SHIPPED = ("adapter", "lambdas", "infra")


def _module_name(path: Path, root: Path) -> str:
    base = root / "adapter" if path.is_relative_to(root / "adapter") else root
    relative = path.relative_to(base)
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_modules(tree: ast.AST, importer: str, is_package: bool) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = importer.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append(base)
            found += [f"{base}.{alias.name}" for alias in node.names]
    return found


def _is_module(root: Path, dotted: str) -> bool:
    relative = Path(*dotted.split("."))
    return any((base / relative).with_suffix(".py").is_file() for base in (root / "adapter", root))


def private_import_violations(root: Path = ROOT) -> list[str]:
    """Imports of an underscore module (or name) from outside the package that owns it."""
    violations = []
    for top in SHIPPED:
        for path in sorted((root / top).rglob("*.py")):
            importer = _module_name(path, root)
            tree = ast.parse(path.read_text(), filename=str(path))
            for module in _imported_modules(tree, importer, path.name == "__init__.py"):
                parts = module.split(".")
                for i, part in enumerate(parts):
                    if part.startswith("_") and not part.startswith("__"):
                        owner = ".".join(parts[:i])
                        if _is_module(root, owner):  # a private name of a module belongs to
                            owner = owner.rpartition(".")[0]  # the module's package
                        if not (importer == owner or importer.startswith(owner + ".")):
                            violations.append(f"{path.relative_to(root)}: imports {module}")
                        break
    return violations


def test_private_modules_are_imported_only_inside_their_package() -> None:
    assert private_import_violations() == []


def test_the_rule_catches_a_cross_package_private_import(tmp_path: Path) -> None:
    package = tmp_path / "adapter" / "sandbox_ledger"
    (package / "resources").mkdir(parents=True)
    (package / "dynamodb").mkdir()
    (package / "resources" / "sweep.py").write_text(
        "from sandbox_ledger.dynamodb import _ops\nfrom sandbox_ledger import _json\n"
    )
    (package / "dynamodb" / "adapter.py").write_text("from . import _ops\n")
    (package / "dynamodb" / "_ops.py").write_text("_helper = 1\n")
    (package / "dynamodb" / "twin.py").write_text(
        "from sandbox_ledger.dynamodb._ops import _helper\n"
    )
    (package / "resources" / "store.py").write_text(
        "from sandbox_ledger.dynamodb.adapter import _x\n"
    )
    for top in SHIPPED[1:]:
        (tmp_path / top).mkdir()
    assert private_import_violations(tmp_path) == [
        "adapter/sandbox_ledger/resources/store.py: imports sandbox_ledger.dynamodb.adapter._x",
        "adapter/sandbox_ledger/resources/sweep.py: imports sandbox_ledger.dynamodb._ops",
    ]


def _declared_methods(root: Path) -> set[str]:
    """The methods of the Protocols in ``protocol.py``: the capabilities an adapter declares
    (but ``connect`` and ``close``, names every file and WSGI iterable shares)."""
    tree = ast.parse((root / "adapter" / "sandbox_ledger" / "protocol.py").read_text())
    return {
        item.name
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and any(
            isinstance(b, ast.Name) and b.id.endswith(("Protocol", "Adapter")) for b in node.bases
        )
        for item in node.body
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
    } - {"connect", "close"}


def capability_probes(root: Path = ROOT) -> list[str]:
    """``getattr``/``hasattr`` calls in shipped code that look up a declared method by name:
    an adapter declares what it can do (``protocol.py``), callers never ask."""
    declared = _declared_methods(root)
    probes = []
    for top in SHIPPED:
        for path in sorted((root / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in {"getattr", "hasattr"}
                    and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in declared
                ):
                    where = f"{path.relative_to(root)}:{node.lineno}"
                    probes.append(f"{where}: {node.func.id}(..., {node.args[1].value!r})")
    return probes


def test_no_shipped_code_probes_a_declared_capability() -> None:
    assert {"scan_sessions", "append_once", "read_stored", "append"} <= _declared_methods(ROOT)
    assert capability_probes() == []


def test_the_rule_catches_a_capability_probe(tmp_path: Path) -> None:
    package = tmp_path / "adapter" / "sandbox_ledger"
    package.mkdir(parents=True)
    (package / "protocol.py").write_text(
        "class TransferAdapter(StorageAdapter, Protocol):\n"
        "    async def scan_sessions(self): ...\n"
        "class Other:\n"
        "    def not_declared(self): ...\n"
    )
    (package / "transfer.py").write_text(
        "scan = getattr(store, 'scan_sessions', None)\n"
        "ok = getattr(exc, 'response', None) or getattr(store, 'not_declared', None)\n"
        "if hasattr(store, 'scan_sessions'):\n"
        "    pass\n"
    )
    for top in SHIPPED[1:]:
        (tmp_path / top).mkdir()
    assert capability_probes(tmp_path) == [
        "adapter/sandbox_ledger/transfer.py:1: getattr(..., 'scan_sessions')",
        "adapter/sandbox_ledger/transfer.py:3: hasattr(..., 'scan_sessions')",
    ]


# Public names written once: a package's lazy exports are the imports of its TYPE_CHECKING
# block (read by mypy), and __all__, __getattr__ and __dir__ come from that same block.
LAZY_PACKAGES = ("sandbox_ledger", "sandbox_ledger.resources")


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_each_lazy_export_is_the_name_its_module_defines(package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        value = getattr(module, name)  # each name resolves
        if name != "__version__" and hasattr(value, "__qualname__"):
            # By name, not identity: the tripwire puts mutants back in process.
            origin = importlib.import_module(value.__module__)
            assert getattr(origin, name).__qualname__ == value.__qualname__
    public = {n for n in dir(module) if not n.startswith("_")}
    assert public - set(module.__all__) <= {
        n for n in public if type(getattr(module, n)) is type(ast)
    }
    with pytest.raises(AttributeError, match="nope"):
        module.nope  # noqa: B018


def test_a_lazy_export_must_be_written_as_a_re_export(tmp_path: Path) -> None:
    from sandbox_ledger._lazy import exports

    init = tmp_path / "__init__.py"
    init.write_text("if TYPE_CHECKING:\n    from json import dumps as dumps\n")
    names, getattr_, _ = exports("json", str(init))
    assert names == ["dumps"] and getattr_("dumps").__name__ == "dumps"
    init.write_text("if TYPE_CHECKING:\n    from json import dumps\n")
    with pytest.raises(ValueError, match="'dumps as dumps'"):
        exports("json", str(init))
    init.write_text("if TYPE_CHECKING:\n    import json\n")
    with pytest.raises(ValueError, match="only 'from m import Name as Name'"):
        exports("json", str(init))


def test_the_version_is_written_once() -> None:
    import importlib.metadata
    import tomllib

    import sandbox_ledger

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert importlib.metadata.version("sandbox-ledger-dynamodb") == sandbox_ledger.__version__


def test_the_tests_mirror_the_package() -> None:
    tests = ROOT / "tests"
    top = sorted(p.name for p in tests.iterdir() if p.name != "__pycache__")
    assert len(top) <= 10, top
    assert not [p.name for p in tests.glob("*.py") if p.name != "conftest.py"]
    folders = {p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == {
        "cli",
        "contract",
        "deploy",
        "dynamodb",
        "local",
        "project",
        "resources",
        "sql",
        "verification",
    }


def test_the_readme_introduces_and_links() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    for page in ("architecture", "library", "cli", "deploy", "benchmarks"):
        assert f"(docs/{page}.md)" in readme, page


def test_each_sql_dialect_keeps_only_its_hooks() -> None:
    """The contract is written once in sql/; a dialect adapter is its connection, retries,
    migrations and statements (issue 24, part 3)."""
    package = ROOT / "adapter" / "sandbox_ledger"
    for dialect in ("sqlite", "postgres"):
        adapter = package / dialect / "adapter.py"
        assert len(adapter.read_text(encoding="utf-8").splitlines()) < 350, adapter
