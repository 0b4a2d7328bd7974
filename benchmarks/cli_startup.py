"""How fast ``sandbox-ledger --help`` answers: wall time and CPU (user + sys) of the command,
median of N runs, beside the interpreter's own start (``python -c pass``) measured in the same
run, and the import time of the CLI as ``python -X importtime -m sandbox_ledger.cli --help``
reports it (cumulative ms of the top-level imports).

    python benchmarks/cli_startup.py           # 5 runs of each
    python benchmarks/cli_startup.py --runs 9
    # and an older version beside it, from its source tree:
    mkdir /tmp/before && git archive 39c5243 adapter | tar -x -C /tmp/before
    python benchmarks/cli_startup.py --before /tmp/before/adapter

On a shared machine the wall time moves with the load; the CPU time moves much less, so
both are printed.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
# The console script's own code, for a source tree given by PYTHONPATH.
RUN_CLI = (
    "import sys; sys.argv = ['sandbox-ledger', *sys.argv[1:]]\n"
    "from sandbox_ledger.cli import main\nmain()"
)


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(wall seconds, user + sys CPU seconds, stderr) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stderr


def imports(stderr: str) -> dict[str, float]:
    """Cumulative ms of each top-level import in ``-X importtime`` output."""
    found: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if name.startswith(" ") and not name.startswith("  "):  # depth 0
            try:
                found[name.strip()] = int(cumulative.strip()) / 1000
            except ValueError:  # the header line
                continue
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--before", type=Path, help="the adapter/ folder of an older source tree, run beside"
    )
    args = parser.parse_args()
    cases: dict[str, tuple[list[str], dict[str, str] | None]] = {
        "python -c pass": ([sys.executable, "-c", "pass"], None),
        "sandbox-ledger --help": ([str(BIN / "sandbox-ledger"), "--help"], None),
        "sandbox-ledger --version": ([str(BIN / "sandbox-ledger"), "--version"], None),
    }
    if args.before:
        env = {**os.environ, "PYTHONPATH": str(args.before)}
        cases["sandbox-ledger --help (--before tree)"] = (
            [sys.executable, "-c", RUN_CLI, "--help"],
            env,
        )
    print(f"load average {os.getloadavg()[0]:.1f}; median of {args.runs} runs")
    print("| command | wall s | user+sys s | min wall | max wall |\n|---|---:|---:|---:|---:|")
    for label, (argv, env) in cases.items():
        runs = [timed(argv, env) for _ in range(args.runs)]
        walls = [w for w, _, _ in runs]
        cpus = [c for _, c, _ in runs]
        print(
            f"| `{label}` | {statistics.median(walls):.3f} | {statistics.median(cpus):.3f} "
            f"| {min(walls):.3f} | {max(walls):.3f} |"
        )
    argv = [sys.executable, "-X", "importtime", "-m", "sandbox_ledger.cli", "--help"]
    runs = [imports(timed(argv)[2]) for _ in range(args.runs)]
    totals = [sum(r.values()) for r in runs]
    print(f"\n`{' '.join(['python', *argv[1:]])}`: all imports {statistics.median(totals):.0f} ms")
    heaviest = sorted(runs[0], key=lambda name: -statistics.median(r.get(name, 0) for r in runs))
    for name in heaviest[:6]:
        print(f"- {name}: {statistics.median(r.get(name, 0) for r in runs):.0f} ms")


if __name__ == "__main__":
    main()
