"""A soak run as the tests start it: ``python -m sandbox_ledger.soak ARGS --out DIR``."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def run_soak(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the soak with ``args``, its history and files in ``out``; its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "sandbox_ledger.soak", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
