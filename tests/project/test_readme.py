"""The README's SQL-store code samples run as written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from cli.processes import COMMAND, python

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _samples(marker: str) -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    return [b for b in blocks if marker in b]


def test_open_store_sample_runs(tmp_path: Path) -> None:
    [sample] = _samples("open_store")
    for _ in range(2):  # re-run, as a reader would: still one session, created once
        done = python(sample, dict(os.environ), cwd=tmp_path, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["sqlite running 0", "postgresql running 0"]
    assert (tmp_path / "ledger.db").exists()
    [created] = re.findall(r'name="(\w+)", sandbox_id="([\w-]+)"', sample)
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert _session(store, *created, _clean_env(tmp_path)) == ["sandbox.created"]


def _clean_env(home: Path) -> dict[str, str]:
    """A shell with nothing set, as ``env -i HOME=... PATH=/usr/bin:/bin`` gives (and this
    checkout's PYTHONPATH, where the tests import the code from one)."""
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def _development_loop() -> list[str]:
    """The commands of the README's development loop (its first ```sh block), comments off."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## The development loop") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def _session(store: str, name: str, sandbox_id: str, env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [str(COMMAND), "--store", store, "show", name, sandbox_id, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line)["event"] for line in done.stdout.splitlines()]


def test_the_development_loop_runs_as_written_in_a_clean_shell(tmp_path: Path) -> None:
    """After `make demo` (its .venv, here this venv), the loop's commands run as the README
    says in shells with nothing set: the server in one, the example ledger and the DynamoDB
    sample (twice) in a second. The sample's session is its own, with one sandbox.created."""
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    [sample] = _samples("DynamoDBAdapter(")
    (tmp_path / "sample.py").write_text(sample, encoding="utf-8")
    commands = _development_loop()
    *before, serve = commands
    assert re.fullmatch(r"(\.venv/bin/)?sandbox-ledger local --data dev\.jsonl", serve), serve
    # Port 0 rather than 8000 (other tests run at once); exec: SIGTERM reaches the server.
    script = "\n".join([*before, f"exec {serve} --port 0"])
    env = _clean_env(tmp_path)
    server = subprocess.Popen(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        exports = []
        while not exports or not exports[-1].startswith("export SANDBOX_LEDGER_TABLE="):
            line = server.stdout.readline()
            assert line, f"the server stopped: {server.communicate(timeout=30)[1]}"
            exports.append(line.rstrip("\n"))
        activate = [c for c in before if "activate" in c]  # shell 2 activates it as shell 1
        second = "\n".join(
            [
                "set -e",
                *activate,
                *exports,
                "sandbox-ledger import examples/ledger.jsonl",
                "python sample.py",
                "python sample.py",
            ]
        )
        done = subprocess.run(
            ["bash", "-c", second],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        local = dict(env)
        for line in exports:
            if line.startswith("export "):
                key, _, value = line.removeprefix("export ").partition("=")
                local[key] = value
        table = f"dynamodb://{local['SANDBOX_LEDGER_TABLE']}"
        [created] = re.findall(r'name="(\w+)", sandbox_id="([\w-]+)"', sample)
        assert created not in {("build", "sb-1"), ("build", "sb-2")}  # examples/ledger.jsonl's
        assert _session(table, *created, local) == ["sandbox.created"]
        assert len(_session(table, "build", "sb-1", local)) == 5  # the example's, alone
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert server.returncode == 0
    assert (tmp_path / "dev.jsonl").exists()


def test_the_docs_say_where_the_command_is_before_first_using_it() -> None:
    """`make demo` puts sandbox-ledger in .venv, not on PATH: the README and docs/cli.md say
    so (activate it, or .venv/bin/sandbox-ledger) before a shell first runs it bare."""
    for doc in (README, ROOT / "docs" / "cli.md"):
        text = doc.read_text(encoding="utf-8")
        bare = re.search(r"(?:^|`)sandbox-ledger ", text, re.M)
        told = re.search(r"\.venv/bin/(?:activate|sandbox-ledger)", text)
        assert bare is not None and told is not None, doc.name
        assert told.start() < bare.start(), f"{doc.name}: {text[bare.start() : bare.end() + 30]}"
