"""The built wheel, installed with its runtime dependencies alone (what a Lambda worker gets):
every public module a worker uses imports, and what needs an extra says which one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Imported in the fresh environment: every module, each either importing or failing with a
# message that names the extra to install.
PROBE = r"""
import importlib, pkgutil, sys
import sandbox_ledger
extras = {}
for info in pkgutil.walk_packages(sandbox_ledger.__path__, "sandbox_ledger."):
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as exc:
        extras[info.name] = str(exc)
for name, message in sorted(extras.items()):
    print(f"{name}\t{message}")
"""


@pytest.mark.slow
def test_wheel_with_runtime_dependencies_only(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", tmp_path, ROOT],
        check=True,
    )
    [wheel] = tmp_path.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = venv / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "--quiet", wheel], check=True)
    installed = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    ).stdout
    assert not any(
        line.lower().startswith(("typer", "moto", "pytest", "aws-cdk"))
        for line in installed.splitlines()
    )

    probe = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    needing_extras = dict(line.split("\t", 1) for line in probe.stdout.splitlines())
    for module, message in needing_extras.items():
        assert module.startswith(
            ("sandbox_ledger.cli.", "sandbox_ledger.testing", "sandbox_ledger.handlers")
        ), module
        assert "pip install 'sandbox-ledger-dynamodb[" in message or module.startswith(
            "sandbox_ledger.cli."
        ), (module, message)
    assert "[testing]" in needing_extras["sandbox_ledger.testing"]
    assert "[lambda]" in needing_extras["sandbox_ledger.handlers"]

    command = subprocess.run(
        [venv / "bin" / "sandbox-ledger", "--help"], capture_output=True, text=True
    )
    assert command.returncode == 1
    assert command.stdout == ""
    assert command.stderr.strip().splitlines() == [
        "sandbox-ledger: the command line needs the 'cli' extra: "
        "pip install 'sandbox-ledger-dynamodb[cli]' (missing module: typer)"
    ]


def test_cli_without_its_extra_prints_one_line() -> None:
    code = (
        "import sys\n"
        "sys.modules['typer'] = None\n"  # as if the `cli` extra were not installed
        "from sandbox_ledger.cli import main\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "sandbox-ledger: the command line needs the 'cli' extra: "
        "pip install 'sandbox-ledger-dynamodb[cli]' (missing module: typer)"
    ]
