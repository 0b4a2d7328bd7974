"""The streaming import against df193f5's (the code before issue 26's last speed-up),
differentially (from the red team's pass rt14).

Random files (interleaved sessions, sessions returning after their batch, duplicate lines,
bad lines, environment lines between entries, lone surrogates and NULs, unknown fields,
entries already stored, expired entries) are imported by df193f5's code (``git archive``)
and this tree's, each in a subprocess, with small ``batch_entries``; the report, the
progress total, and the store's export must be the same. Held (no difference found) on
memory, memory with retention and SQLite over several hundred seeds."""

# The two programs below (a file generator, an import run in a subprocess) keep the red
# team's long lines.
# ruff: noqa: E501

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASELINE = "df193f5"

GEN = r"""
import json, random, sys
def gen(seed):
    r = random.Random(seed)
    names = [("job", "a"), ("job", "b"), ("job", "c"), ("x", "a"), ("job", "é"), ("j\ud800", "a"), ("job", "a\u0000")]
    pool = []
    for i in range(r.randint(1, 12)):
        n, s = r.choice(names)
        w = {"ts": r.choice([1, 2, 5, 10**12, 4102444800000]), "name": n, "sandboxId": s, "stepIndex": r.choice([-1, 0, 1]),
             "event": r.choice(["sandbox.created", "exec.started", "x"])}
        if r.random() < .5: w["payload"] = r.choice([{"a": 1}, [1, 2], "s", None, {"b": {"c": [1.5]}}, "ü", {"k\u00e9": "\ud800"}, {"\ud800": 1}, "a\u0000b", {"x": "\u2028"}, ["\udfff"], "\U0001F600"])
        if r.random() < .2: w["branch"] = r.choice([0, 1])
        if r.random() < .2: w["error"] = r.choice(["", "boom", "ñ", "\ud800", "a\u0000"])
        if r.random() < .1: w["traceId"] = r.choice([None, "t", 1, "\ud800", {"é": [1]}])
        pool.append(w)
    lines = []
    for i in range(r.randint(0, 60)):
        k = r.random()
        if k < .75:
            w = dict(r.choice(pool))
            if r.random() < .3: w = dict(reversed(list(w.items())))
            lines.append(json.dumps(w, ensure_ascii=r.random() < .5))
        elif k < .82:
            lines.append(r.choice(["not json", "{}", '{"ts": -1, "name": "job", "sandboxId": "a", "stepIndex": 0, "event": "e"}', "", "  ", "[1]"]))
        else:
            lines.append(json.dumps({"kind": "environment", "record": {"name": r.choice(["e1", "e2"]), "builtAt": r.choice([1, 2, 3]), "x": r.choice([1, 2, "é", "\ud800", {"a\u0000": 1}])}}))
    pre = []
    for w in r.sample(pool, min(len(pool), r.randint(0, 3))):
        pre.append((w, r.choice([1, 1, 2])))
    pre_env = [{"name": "e1", "builtAt": 2, "x": 1}] if r.random() < .5 else []
    return {"lines": lines, "pre": pre, "pre_env": pre_env, "batch": r.choice([1, 2, 3, 5, 1000])}
"""

RUN = r'''
"""Run one import (argv: case json path, store kind, tmpdir) and print its outcome as JSON."""
import json, sys, tempfile, os
from sandbox_ledger import LedgerEntry
from sandbox_ledger.blocking import BlockingAdapter
from sandbox_ledger.memory import MemoryAdapter
from sandbox_ledger import transfer
from sandbox_ledger._import_stream import stream_import
case = json.load(open(sys.argv[1])); kind = sys.argv[2]
if kind == "sqlite":
    from sandbox_ledger.sqlite import SQLiteAdapter
    t = BlockingAdapter(SQLiteAdapter(os.path.join(tempfile.mkdtemp(), "l.db")))
elif kind == "memret":
    from datetime import timedelta
    t = BlockingAdapter(MemoryAdapter(retention=timedelta(days=1)))
else:
    t = BlockingAdapter(MemoryAdapter())
for w, occ in case["pre"]:
    try: t.append_once(LedgerEntry.model_validate(w), occ)
    except Exception as x: print("pre refused", type(x).__name__, file=sys.stderr)
for r in case.get("pre_env", []):
    from sandbox_ledger.models import EnvironmentRecord
    try: t.save_environment(EnvironmentRecord.model_validate(r))
    except Exception as x: print("pre env refused", type(x).__name__, file=sys.stderr)
lines = [l.encode("utf-8", "surrogatepass") for l in case["lines"]]
rep = transfer.ImportReport()
prog = []
try:
    stream_import(t, transfer._parsed(lines), rep, progress=prog.append, batch_entries=case["batch"])
    raised = None
except Exception as x:
    raised = f"{type(x).__name__}: {x}"
sessions = sorted(t.scan_sessions()) if hasattr(t, "scan_sessions") else []
out = {
  "report": [rep.new, rep.present, rep.expired, [(f.number, f.reason) for f in rep.failed],
             [rep.environments.new, rep.environments.updated, rep.environments.present, rep.environments.kept]],
  "progress_total": sum(prog), "raised": raised,
  "export": list(transfer.export_lines(t, sessions, t.list_environments())),
}
print(json.dumps(out, sort_keys=True))
t.close()
'''


@pytest.fixture(scope="module")
def old_adapter(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("git") is None:
        pytest.skip("git not found")
    out = tmp_path_factory.mktemp("old")
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", BASELINE, "adapter"], capture_output=True, check=False
    )
    if tar.returncode:
        pytest.skip(f"{BASELINE} not in this repository")
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        archive.extractall(out)
    return str(out / "adapter")


def _run(adapter: str, case: Path, kind: str, runner: Path) -> Any:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", str(runner), str(case), kind],
        env={**os.environ, "PYTHONPATH": adapter},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("kind", ["memory", "memret", "sqlite"])
@pytest.mark.parametrize("seed", [3, 17, 42, 101, 256, 407])
def test_import_equals_df193f5s(old_adapter: str, tmp_path: Path, kind: str, seed: int) -> None:
    space: dict[str, Any] = {}
    exec(GEN, space)
    case = tmp_path / "case.json"
    case.write_text(json.dumps(space["gen"](seed)))
    runner = tmp_path / "run_import.py"
    runner.write_text(RUN)
    assert _run(str(ROOT / "adapter"), case, kind, runner) == _run(old_adapter, case, kind, runner)
