"""A command on a SQL store does not load the DynamoDB stack: boto3 is a tenth of a second of
every such command's start (and of every CLI test that runs one as a process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from sandbox_ledger.cli import main
sys.argv = ["sandbox-ledger", "--store", sys.argv[1], *sys.argv[2:]]
try:
    main()
except SystemExit as done:
    code = done.code
loaded = sorted(m for m in ("boto3", "botocore.client", "aioboto3") if m in sys.modules)
print(code, loaded, file=sys.stderr)
"""


def test_sql_commands_do_not_import_boto3(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    for argv in (
        ["import", str(ROOT / "examples" / "ledger.jsonl")],
        ["ls"],
        ["show", "build", "sb-1"],
        ["export", "-o", str(tmp_path / "out.jsonl")],
        ["rm", "build", "sb-1", "--yes"],
    ):
        done = subprocess.run(
            [sys.executable, "-c", PROBE, store, *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.stderr.splitlines()[-1] in ("0 []", "None []"), (argv, done.stderr)
