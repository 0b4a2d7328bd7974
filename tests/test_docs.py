"""Every Python block in README.md and docs/ is a complete program that runs as written (twice,
as a user re-running it would), or is marked as a fragment on the line before it with
``<!-- fragment: why -->``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_ledger.local import LocalDynamoDB

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
FRAGMENT = re.compile(r"<!-- fragment: [^>]+ -->\s*$")


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """(line number, code, marked as a fragment) of each ```python block."""
    found = []
    for match in BLOCK.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        line = text.count("\n", 0, match.start()) + 1
        found.append((line, match.group(1), bool(FRAGMENT.search(before))))
    return found


SAMPLES = [
    pytest.param(doc, line, code, id=f"{doc.relative_to(ROOT)}:{line}")
    for doc in DOCUMENTS
    for line, code, fragment in python_blocks(doc.read_text(encoding="utf-8"))
    if not fragment
]


def test_blocks_are_found_and_fragments_are_marked() -> None:
    readme = python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(readme) >= 3
    assert any(fragment for _, _, fragment in readme)
    assert python_blocks("x\n<!-- fragment: shown -->\n```python\na\n```\n") == [(3, "a\n", True)]


@pytest.mark.parametrize(("doc", "line", "code"), SAMPLES)
def test_sample_runs_as_written(doc: Path, line: int, code: str, tmp_path: Path) -> None:
    compile(code, f"{doc.name}:{line}", "exec")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    server = LocalDynamoDB()
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": server.start(),
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    env.pop("AWS_PROFILE", None)
    try:
        for run in (1, 2):  # a second run must work too: samples are idempotent
            done = subprocess.run(
                [sys.executable, "-c", code],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, f"{doc.name}:{line}, run {run}:\n{done.stderr}"
    finally:
        server.stop()
