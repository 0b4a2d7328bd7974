"""The cost model of docs/table-design.md ("Capacity per operation") against the strict
embedded DynamoDB's meter, through benchmarks/strict_cost.py's own core at a tiny scale: the
write units the table gives each append and resource write are what they consume, table and
indexes, and the benchmark's units per session are the meter's, a session's appends within
the table's figure. Not timed: three sandboxes alone, then one step of two, no throttling
(``rate_scale`` 1)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sandbox_ledger.local import LocalDynamoDB

ROOT = Path(__file__).resolve().parents[2]
EXECS = 3  # a checkpoint at the third step (the demo's)


def load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "strict_cost", ROOT / "benchmarks" / "strict_cost.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark()


@pytest.fixture(scope="module")
def run(bench: ModuleType) -> Iterator[tuple[Any, LocalDynamoDB]]:
    server = LocalDynamoDB(strict=bench.profile(1.0))
    server.start()
    try:
        result = asyncio.run(
            bench.measure(
                rates=[4.0],
                seconds=0.5,
                execs=EXECS,
                exec_seconds=0.0,
                rate_scale=1.0,
                calibrate=3,  # 0 never closed, 1 closed, 2 a live resource owner (the demo's)
                server=server,
            )
        )
        yield result, server
    finally:
        server.stop()


def test_each_operation_consumes_what_the_table_design_says(
    bench: ModuleType, run: tuple[Any, LocalDynamoDB]
) -> None:
    result, _ = run
    units = bench.documented_writes()
    for prefix, ops in bench.ROWS.items():
        for op in ops:
            if op == "append exec.failed":
                continue  # one step in seven of the demo's: not among these sandboxes' steps
            assert result.calibration.calls[op], op
            measured = sum(result.calibration.per_call(op, i).write for i in bench.INDEXES)
            assert measured == units[op], (prefix, op, measured, units[op])
    used, estimate = bench.canonical(result.calibration, EXECS)
    assert estimate == EXECS * (6 + 8) + 8 + 10 + 12 == used.write
    assert used.read == 1  # the strongly consistent Query of the last mark before created
    design = bench.DESIGN.read_text(encoding="utf-8")
    assert "`N\u00d7(6+8) + 8 + 10 + 12` WCU and 1 RCU" in design  # the multiplication sign


def test_units_per_session_are_the_meter_s(
    bench: ModuleType, run: tuple[Any, LocalDynamoDB]
) -> None:
    result, server = run
    [step] = result.steps
    assert step.sessions == 2 and not step.throttles and not step.failed
    metered = server.meter()  # reset after the calibration: the step's sessions only
    per = result.per_session
    assert per.write * step.sessions == pytest.approx(sum(u.write for u in metered.values()))
    assert per.read * step.sessions == pytest.approx(sum(u.read for u in metered.values()))
    for index in bench.INDEXES:
        mine = sum(u.write for (_, i, _), u in metered.items() if i == index)
        assert per.index.get(index, bench.Usage()).write * step.sessions == pytest.approx(mine)
    # A session's own appends (its key and its index entries) within the documented
    # figure: at most a whole session's, at least one never closed (the demo's sandbox 0 of
    # every six).
    _, whole = bench.canonical(result.calibration, EXECS)
    closed = bench.documented_writes()["append sandbox.closed"]
    assert whole - closed <= per.kinds["session"].write <= whole
    assert bench.dollars_per_thousand(per.read, per.write) == pytest.approx(
        (per.read * 0.125 + per.write * 0.625) / 1000
    )
