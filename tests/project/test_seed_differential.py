"""The seed's own MemoryAdapter (TypeScript, compiled with esbuild, run by node) beside ours.

Random traces of contract calls run on both; every result must be equal as JSON, except where
the README lists a deliberate difference, which the generator stays clear of: sandboxIds are
unique across names (the seed groups by sandboxId alone) and by-name listings carry no
``limit`` (the seed cuts before filtering by name). What the traces do cover: ties in ts and
in ``builtAt`` (first-saved order), out-of-order created/closed, deletes and re-creation,
unknown events, entry fields of a newer client (``traceId``), environment fields with null,
and every listing filter.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sandbox_ledger import (
    EnvironmentRecord,
    LedgerEntry,
    ListSandboxOptions,
    MemoryAdapter,
)
from sandbox_ledger.dynamodb import DynamoDBAdapter

ROOT = Path(__file__).resolve().parents[2]
SEED_DIR = Path(__file__).resolve().parent / "seed"
SEED_DOC = ROOT.parent / "shared" / "seeds" / "000_7f54b9888fed0c74.txt"

Trace = list[list[Any]]


@pytest.fixture(scope="module")
def seed_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver bundled with the esbuild pinned in package.json (installed by npm ci)."""
    if shutil.which("node") is None:
        pytest.fail("node is required (Node 20): the seed's adapter runs on it")
    esbuild = ROOT / "node_modules" / ".bin" / "esbuild"
    if not esbuild.exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=ROOT, check=True, timeout=600)
    out = tmp_path_factory.mktemp("seed") / "driver.js"
    subprocess.run(
        [
            str(esbuild),
            str(SEED_DIR / "driver.ts"),
            "--bundle",
            "--platform=node",
            "--format=cjs",
            "--log-level=warning",
            f"--alias:@alineo-labs/core={SEED_DIR / 'core.ts'}",
            f"--outfile={out}",
        ],
        check=True,
        timeout=120,
    )
    return out


def run_seed(driver: Path, traces: list[Trace]) -> list[list[Any]]:
    done = subprocess.run(
        ["node", str(driver)],
        input=json.dumps(traces),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    results: list[list[Any]] = json.loads(done.stdout)
    return results


def as_json(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return json.loads(json.dumps(value.wire()))


async def run_ours(
    adapter: Any, trace: Trace, settled: Callable[[Any], Awaitable[None]] | None = None
) -> list[Any]:
    """The trace's calls on ``adapter``; a listing after ``settled(adapter)`` (the seed's
    listings are consistent: an eventually consistent store's are compared settled)."""
    results = []
    for method, *args in trace:
        if settled is not None and method.startswith("list") and "Sandbox" in method:
            await settled(adapter)
        if method == "append":
            result = await adapter.append(LedgerEntry.model_validate(args[0]))
        elif method == "saveEnvironment":
            result = await adapter.save_environment(EnvironmentRecord.model_validate(args[0]))
        elif method == "listSandboxDetails":
            opts = ListSandboxOptions.model_validate(args[1]) if len(args) > 1 else None
            result = await adapter.list_sandbox_details(args[0], opts)
        elif method == "listAllSandboxDetails":
            opts = ListSandboxOptions.model_validate(args[0]) if args else None
            result = await adapter.list_all_sandbox_details(opts)
        else:
            snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in method)
            result = await getattr(adapter, snake)(*args)
        results.append(as_json(result))
    return results


_NAMES = ["alpha", "beta", "名前#1"]
_EVENTS = [
    "sandbox.created",
    "sandbox.closed",
    "exec.started",
    "exec.complete",
    "exec.complete",
    "exec.failed",
    "sandbox.checkpoint_created",
    "sandbox.hibernated.v2",
]


def _payload(rng: random.Random) -> Any:
    return rng.choice(
        [
            {"cmd": "make", "exitCode": rng.randint(0, 2)},
            ["a", 1, True, None, {"x": [None]}],
            "ünïcode ✓ 🚀",
            rng.randint(-(2**40), 2**40),
            {"nested": {"deep": [1, {"y": None}]}, "": ""},
        ]
    )


def make_trace(rng: random.Random, length: int) -> Trace:
    trace: Trace = []
    used_started: set[int] = set()
    sessions = [(name, f"{name}-sb{i}") for name in _NAMES for i in range(3)]
    for _ in range(length):
        roll = rng.random()
        name, sid = rng.choice(sessions)
        if roll < 0.55:
            event = rng.choice(_EVENTS)
            ts = rng.randint(0, 40) * 10
            if event == "sandbox.created":
                ts = rng.choice([t for t in range(5, 2000, 7) if t not in used_started])
                used_started.add(ts)
            entry: dict[str, Any] = {
                "ts": ts,
                "name": name,
                "sandboxId": sid,
                "stepIndex": rng.randint(-1, 4),
                "event": event,
            }
            if event == "sandbox.checkpoint_created":
                entry["payload"] = {"snapshotId": f"snap-{rng.randint(0, 9)}"}
                if rng.random() < 0.5:
                    entry["payload"]["name"] = f"tag-{rng.randint(0, 3)}"
            elif rng.random() < 0.6:
                entry["payload"] = _payload(rng)
            if rng.random() < 0.3:
                entry["branch"] = rng.randint(0, 2)
            if rng.random() < 0.15:
                entry["error"] = "exit status 2"
            if rng.random() < 0.15:
                entry["traceId"] = f"{rng.getrandbits(64):016x}"
            trace.append(["append", entry])
        elif roll < 0.62:
            trace.append(["readAll", name, sid])
        elif roll < 0.66:
            trace.append(["lastCheckpoint", name, sid])
        elif roll < 0.69:
            trace.append(["listCheckpoints", name, sid])
        elif roll < 0.73:
            trace.append(["getSandboxDetails", name, sid])
        elif roll < 0.78:
            trace.append(["listSandboxDetails", name, _opts(rng, limit=False)])
        elif roll < 0.84:
            trace.append(["listAllSandboxDetails", _opts(rng, limit=True)])
        elif roll < 0.86:
            trace.append(["deleteSandbox", name, sid])
        elif roll < 0.93:
            record: dict[str, Any] = {
                "name": rng.choice(["py", "node", "rust", "go"]),
                "builtAt": rng.randint(1, 3),
            }
            if rng.random() < 0.5:
                record["snapshotId"] = rng.choice([None, "snap-env"])
            if rng.random() < 0.3:
                record["spec"] = {"cpu": rng.randint(1, 4), "gpu": None}
            trace.append(["saveEnvironment", record])
        elif roll < 0.95:
            trace.append(["deleteEnvironment", rng.choice(["py", "node", "rust", "go"])])
        elif roll < 0.97:
            trace.append(["getEnvironment", rng.choice(["py", "node", "rust", "go"])])
        else:
            trace.append(["listEnvironments"])
    trace += [["listAllSandboxDetails", {}], ["listEnvironments"]]
    trace += [["readAll", name, sid] for name, sid in sessions]
    return trace


def _opts(rng: random.Random, *, limit: bool) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if rng.random() < 0.4:
        opts["status"] = rng.choice(["running", "completed"])
    if rng.random() < 0.4:
        opts["before"] = rng.choice([0, rng.randint(5, 2000)])
    if limit and rng.random() < 0.5:
        opts["limit"] = rng.randint(0, 4)
    return opts


def test_the_vendored_adapter_is_the_seeds() -> None:
    if not SEED_DOC.exists():
        pytest.skip(f"the seed document is not beside the repository ({SEED_DOC})")
    vendored = (SEED_DIR / "MemoryAdapter.ts").read_text()
    code = vendored.split("\n", 2)[2]  # after the two comment lines
    assert code.strip() in SEED_DOC.read_text()


async def test_memory_adapter_agrees_with_the_seed(seed_driver: Path) -> None:
    rng = random.Random(20261201)
    traces = [make_trace(rng, 80) for _ in range(40)]
    expected = run_seed(seed_driver, traces)
    for number, (trace, theirs) in enumerate(zip(traces, expected, strict=True)):
        ours = await run_ours(MemoryAdapter(), trace)
        for step, (call, a, b) in enumerate(zip(trace, ours, theirs, strict=True)):
            assert a == b, f"trace {number}, step {step}: {call}"


async def test_dynamodb_adapter_agrees_with_the_seed(
    seed_driver: Path,
    moto_endpoint: str,
    sync_table: str,
    listings_settled: Callable[[Any], Awaitable[None]],
) -> None:
    rng = random.Random(7)
    traces = [make_trace(rng, 60) for _ in range(2)]
    expected = run_seed(seed_driver, traces)
    for number, (trace, theirs) in enumerate(zip(traces, expected, strict=True)):
        table = f"{sync_table}-{number}"
        async with DynamoDBAdapter(table, endpoint_url=moto_endpoint) as adapter:
            await adapter.create_table()
            ours = await run_ours(adapter, trace, listings_settled)
        for step, (call, a, b) in enumerate(zip(trace, ours, theirs, strict=True)):
            assert a == b, f"trace {number}, step {step}: {call}"
