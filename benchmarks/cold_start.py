"""Cold start of the Lambda handlers: the time to import each handler module in a fresh
interpreter (median of 5, as ``python -X importtime`` sees it), its largest imports, and the
size of the Lambda asset the CDK stack bundles.

    python benchmarks/cold_start.py            # imports, and the bundled asset (needs PyPI)
    python benchmarks/cold_start.py --no-asset # imports only

Each handler is imported with ``SANDBOX_LEDGER_TRACING`` off (the default) and on (in a
Lambda-like environment, where Powertools' Tracer loads the X-Ray SDK and patches botocore),
beside ``python -c pass`` in the same run as the baseline.

The import is what a cold start pays before the first invocation, besides the runtime's own
start; the handlers' module scope also builds their clients (no request is made).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HANDLERS = ("expire_stale_resources", "on_ttl_expiry")

_CHILD = """
import importlib.util, json, sys, time
start = time.perf_counter()
spec = importlib.util.spec_from_file_location("handler", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""


TRACING = {"off": {}, "on": {"SANDBOX_LEDGER_TRACING": "true", "AWS_LAMBDA_FUNCTION_NAME": "bench"}}


def baseline_ms() -> float:
    """Milliseconds for ``python -c pass`` in a new process (the interpreter alone)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return (time.perf_counter() - start) * 1000


def import_once(handler: str, tracing: str = "off") -> tuple[float, dict[str, float]]:
    """(seconds to import the handler, cumulative ms per top-level import) in a new process."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "SANDBOX_LEDGER_TRACING"},
        **TRACING[tracing],
        "TABLE_NAME": "bench",
        "EVENT_BUS_NAME": "default",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            _CHILD,
            str(ROOT / "lambdas" / handler / "handler.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    )
    seconds = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
    tops: dict[str, float] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        # The entry point imports sandbox_ledger.handlers.<name>: report what that imports.
        if depth in (0, 1, 2) and not name.strip().startswith("sandbox_ledger.handlers"):
            tops[name.strip()] = int(cumulative) / 1000
    return seconds, tops


def imports_report(runs: int) -> None:
    base = statistics.median(baseline_ms() for _ in range(runs))
    print(f"`python -c pass` in a new process: {base:.0f} ms (median of {runs})\n")
    print(
        f"| handler | tracing | import ms (median of {runs}) | min | max | largest imports (ms) |"
    )
    print("|---|---|---:|---:|---:|---|")
    for handler in HANDLERS:
        for tracing in TRACING:
            samples = [import_once(handler, tracing) for _ in range(runs)]
            times = [s * 1000 for s, _ in samples]
            names = {n for _, tops in samples for n in tops}
            medians = {n: statistics.median(t.get(n, 0.0) for _, t in samples) for n in names}
            largest = sorted(medians.items(), key=lambda kv: -kv[1])[:5]
            parts = ", ".join(f"{n} {ms:.0f}" for n, ms in largest)
            print(
                f"| {handler} | {tracing} | {statistics.median(times):.0f} | {min(times):.0f} "
                f"| {max(times):.0f} | {parts} |"
            )


def asset_report() -> None:
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    sys.path.insert(0, str(ROOT))
    from infra.bundling import PipBundling
    from infra.stack import PYTHON_VERSION

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "asset"
        out.mkdir()
        PipBundling(python_version=PYTHON_VERSION).try_bundle(str(out))
        unzipped = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        archive = shutil.make_archive(str(Path(tmp) / "asset"), "zip", out)
        zipped = Path(archive).stat().st_size
    print(
        f"\nLambda asset (one asset, shared by both functions: {', '.join(HANDLERS)}), "
        f"Python {PYTHON_VERSION} arm64: {zipped / 1e6:.1f} MB zipped, "
        f"{unzipped / 1e6:.1f} MB unzipped."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-asset", action="store_true")
    args = parser.parse_args()
    print(f"Handler imports, Python {sys.version.split()[0]} ({args.runs} fresh processes)\n")
    imports_report(args.runs)
    if not args.no_asset:
        asset_report()


if __name__ == "__main__":
    main()
