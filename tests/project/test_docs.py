"""Every Python block in README.md and docs/ is a complete program that runs as written (twice,
as a user re-running it would), or is marked as a fragment on the line before it with
``<!-- fragment: why -->``. Every ```console block is a transcript: each ``$ command`` is run
in order and must print exactly the lines shown under it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli.processes import python
from sandbox_ledger.local import LocalDynamoDB

ROOT = Path(__file__).resolve().parents[2]
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
            done = python(code, env, cwd=tmp_path, timeout=300)
            assert done.returncode == 0, f"{doc.name}:{line}, run {run}:\n{done.stderr}"
    finally:
        server.stop()


CONSOLE = re.compile(r"^```console\n(.*?)^```", re.S | re.M)


def transcripts(text: str) -> list[list[tuple[str, list[str]]]]:
    """Each ```console block as (command, expected output lines) pairs."""
    blocks = []
    for match in CONSOLE.finditer(text):
        steps: list[tuple[str, list[str]]] = []
        for line in match.group(1).splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                assert steps, f"output before any command: {line!r}"
                steps[-1][1].append(line)
        blocks.append(steps)
    return blocks


CONSOLE_DOCS = [
    pytest.param(doc, id=str(doc.relative_to(ROOT)))
    for doc in DOCUMENTS
    if transcripts(doc.read_text(encoding="utf-8"))
]


def test_transcripts_are_found() -> None:
    assert any(doc.values[0].name == "cli.md" for doc in CONSOLE_DOCS)
    assert transcripts("```console\n$ a\nb\n$ c\n```\n") == [[("a", ["b"]), ("c", [])]]


@pytest.mark.parametrize("doc", CONSOLE_DOCS)
def test_cli_output_is_as_shown(doc: Path, tmp_path: Path) -> None:
    """The commands run in a fresh folder (with examples/), on the stores they name."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_LEDGER_")}
    env.pop("AWS_ENDPOINT_URL", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for steps in transcripts(doc.read_text(encoding="utf-8")):
        for command, expected in steps:
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=120,
            )
            shown = [line.rstrip() for line in done.stdout.splitlines()]
            assert shown == [line.rstrip() for line in expected], f"{doc.name}: $ {command}"
