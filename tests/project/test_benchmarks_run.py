"""Every benchmark runs, at its smallest size, against the code as it is (slow: CI runs
these). benchmarks/replay.py called a function renamed weeks earlier and failed at its first
operation, unnoticed, while docs/benchmarks.md still quoted its figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SMOKE = {
    "bench.py": ["--quick"],
    "bench_follow.py": ["--quick"],
    "bench_sql.py": ["--quick"],
    "bench_sql_retention.py": ["--quick"],
    "bench_transfer.py": [
        "--lines",
        "600",
        "--stores",
        "sqlite",
        "postgres",
        "memory",
        "dynamodb",
        "--dynamodb-lines",
        "600",
    ],
    "client_setup.py": ["--runs", "3"],
    "cli_startup.py": ["--runs", "1"],
    "cold_start.py": ["--no-asset", "--runs", "1"],
    "demo_cpu.py": [],
    "embedded.py": [
        "--appends",
        "200",
        "--window",
        "100",
        "--stock-appends",
        "50",
        "--stock-window",
        "25",
    ],
    "local_data.py": ["--entries", "600", "--save-every", "1", "--export-entries", "600"],
    "peers.py": ["--quick"],
    "replay.py": ["--runs", "5"],
    "server_cpu.py": ["--requests", "50"],
    "server_replay.py": ["--rounds", "1"],
    "strict_cost.py": [
        "--rates",
        "2",
        "--seconds",
        "1",
        "--execs",
        "3",
        "--exec-seconds",
        "0",
        "--calibrate",
        "2",
    ],
    "strict_ttl_import.py": ["--entries", "200", "--step", "100"],
    "telemetry_cost.py": ["--runs", "7"],
    "ui_fleet.py": ["--sessions", "2000", "--entries", "500", "--runs", "3", "--idle-seconds", "2"],
    "wire_decoding.py": ["--runs", "3"],
    "worker_cold_start.py": ["--runs", "1"],
}
NOT_RUN = {"worker_bundle.py": "builds the Lambda bundle with pip for another platform"}


def test_every_benchmark_is_listed() -> None:
    found = {p.name for p in (ROOT / "benchmarks").glob("*.py")}
    assert found == set(SMOKE) | set(NOT_RUN)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMOKE))
def test_the_benchmark_runs(script: str) -> None:
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "adapter")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *SMOKE[script]],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip()
