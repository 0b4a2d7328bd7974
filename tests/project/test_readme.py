"""The README's SQL-store code samples run as written."""

from __future__ import annotations

import os
import re
from pathlib import Path

from cli.processes import python

README = Path(__file__).resolve().parents[2] / "README.md"


def _samples(marker: str) -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    return [b for b in blocks if marker in b]


def test_open_store_sample_runs(tmp_path: Path) -> None:
    [sample] = _samples("open_store")
    done = python(sample, dict(os.environ), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["sqlite running 0", "postgresql running 0"]
    assert (tmp_path / "ledger.db").exists()
