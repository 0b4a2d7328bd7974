"""The operator CLI run as a real process: the command, the repository root, a shell with
AWS credentials and a region but no table or store configured, and one run of a command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

COMMAND = Path(sys.executable).parent / "sandbox-ledger"
ROOT = Path(__file__).resolve().parents[2]


def bare_env(**extra: str) -> dict[str, str]:
    """A shell with AWS credentials and a region but no table or store configured."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SANDBOX_LEDGER_", "AWS_", "PG"))
    }
    return {
        **env,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        **extra,
    }


def run(
    argv: list[str], env: dict[str, str], *, cwd: Path | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COMMAND), *argv],
        env=env,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# Every command but `demo` and `local`, each needing a table or a store.
EVERY_COMMAND_BUT_DEMO_AND_LOCAL = [
    ["ls"],
    ["show", "job", "sb-1"],
    ["checkpoints", "job", "sb-1"],
    ["envs"],
    ["rm", "job", "sb-1", "--yes"],
    ["export"],
    ["export", "-o", "backup.jsonl"],
    ["import", "-"],
    ["table", "create"],
    ["resources", "ls"],
    ["resources", "show", "0b7f6f4e-2f7a-4c55-9a59-3f1d7c2f8e10"],
    ["resources", "sweep"],
    ["resources", "sweep", "--dry-run"],
    ["resources", "import", "records"],
    ["resources", "export", "out"],
]
