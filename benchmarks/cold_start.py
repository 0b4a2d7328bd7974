"""Cold start of the Lambda handlers, with the Lambda's packages only.

    python benchmarks/cold_start.py             # imports, first-invocation setup, the asset
    python benchmarks/cold_start.py --no-asset  # without the arm64 asset's size
    python benchmarks/cold_start.py --before /tmp/before  # also another checkout's handlers

The handlers are measured on the Lambda asset's own contents, built for this machine
(``sandbox_ledger_cdk.bundling.PipBundling`` for the host's platform and Python, with the
tracing extras) plus boto3, which the Lambda runtime provides: each run is a fresh ``python -I -S -X
importtime`` whose ``sys.path`` is those two folders, as on Lambda, so the development
environment's 200-odd distributions (which pydantic's plugin loader scans) play no part.

For each handler and setting, the median of ``--runs`` fresh processes of:

* import: the entry point (``<handler>/handler.py``, the function's ``Handler``), wall and CPU
  (user+sys, which another process's load moves much less than the wall time);
* the same with boto3 imported first (the runtime ships boto3; this is our code's share);
* setup: ``dependencies()`` after the import, what the first invocation adds before its first
  request (settings, the boto3 session and clients);
* where the import's time goes: ``-X importtime``'s *self* times summed by distribution (a
  module's cumulative time also counts whatever it happened to import first).

The machine's load average is printed with the results, beside ``python -c pass``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HANDLERS = ("expire_stale_resources", "on_ttl_expiry")
# The Lambda runtime's own packages (boto3 and what it pulls in); not in the asset.
RUNTIME_REQUIREMENTS = ("boto3>=1.40",)

_CHILD = """
import importlib, json, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
handler, boto3_first = sys.argv[1], sys.argv[2] == "1"
if boto3_first:
    import boto3
sys.stderr.write("-- the handler --\\n")
t0, c0 = time.perf_counter(), cpu()
importlib.import_module(handler + ".handler")
t1, c1 = time.perf_counter(), cpu()
sys.stderr.write("-- its setup --\\n")
sys.modules["sandbox_ledger.handlers." + handler].dependencies()
t2, c2 = time.perf_counter(), cpu()
print(json.dumps({"import": t1 - t0, "import_cpu": c1 - c0, "setup": t2 - t1,
                  "setup_cpu": c2 - c1}))
"""

SETTINGS = {
    "off": {},
    "on": {"SANDBOX_LEDGER_TRACING": "true"},
    "off, boto3 imported first": {},
}

# What the Lambda runtime sets that these imports read. LAMBDA_TASK_ROOT matters most: the
# X-Ray SDK takes it (not AWS_LAMBDA_FUNCTION_NAME) as the sign that it runs on Lambda, and
# elsewhere builds a centralized-sampling client for the X-Ray API at import (about 100 ms,
# and a botocore client Lambda never builds): without it, "tracing on" measured that too.
LAMBDA_ENVIRONMENT = {
    "AWS_LAMBDA_FUNCTION_NAME": "bench",
    "AWS_EXECUTION_ENV": f"AWS_Lambda_python{sys.version_info.major}.{sys.version_info.minor}",
}

# Distributions by top-level module, for the self-time breakdown.
GROUPS = {
    "pydantic": ("pydantic", "pydantic_core", "annotated_types", "typing_inspection"),
    "botocore": ("botocore", "jmespath", "dateutil", "six", "urllib3", "s3transfer"),
    "boto3": ("boto3",),
    "powertools": ("aws_lambda_powertools",),
    "X-Ray SDK": ("aws_xray_sdk", "wrapt"),
    "sandbox_ledger": ("sandbox_ledger", *HANDLERS),
}


def _group(module: str) -> str:
    top = module.split(".")[0]
    for group, tops in GROUPS.items():
        if top in tops:
            return group
    return "stdlib" if top in sys.stdlib_module_names or top.startswith("_") else top


def build_packages(where: Path, before: Path | None) -> dict[str, list[Path]]:
    """The asset's contents for this machine, and the runtime's boto3: the ``sys.path`` of
    this tree's handlers and, with ``before``, of that tree's handlers on the same packages."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    sys.path.insert(0, str(ROOT))
    from sandbox_ledger_cdk.bundling import PipBundling

    machine = {"x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}[platform.machine()]
    asset, runtime = where / "asset", where / "runtime"
    asset.mkdir()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    bundling = PipBundling(
        python_version=version, platform=f"manylinux2014_{machine}", tracing=True
    )
    bundling.try_bundle(str(asset))
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # capture_output: pip warns about the development environment's packages.
    subprocess.run(
        [*pip, "--target", str(runtime), *RUNTIME_REQUIREMENTS], check=True, capture_output=True
    )
    trees = {"now": [asset, runtime]}
    if before is not None:
        code = where / "before"
        shutil.copytree(before / "adapter" / "sandbox_ledger", code / "sandbox_ledger")
        for handler in HANDLERS:
            shutil.copytree(before / "lambdas" / handler, code / handler)
        trees["before"] = [code, asset, runtime]  # its code first, on the same packages
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(where)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return trees


def run_once(
    paths: list[Path], handler: str, setting: str
) -> tuple[dict[str, float], dict[str, float]]:
    """(the child's seconds, self ms of the import by distribution) in a new process."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        **LAMBDA_ENVIRONMENT,
        "LAMBDA_TASK_ROOT": str(paths[0]),
        **SETTINGS[setting],
        "TABLE_NAME": "bench",
        "EVENT_BUS_NAME": "default",
        "UNREPORTED_BUCKET": "bench-unreported",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }
    boto3_first = "1" if "boto3" in setting else "0"
    # -I -S: no site-packages, no PYTHONPATH; the child puts the two folders on sys.path.
    code = f"import sys; sys.path[:0] = {[str(p) for p in paths]!r}\n" + _CHILD
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", "-c", code, handler, boto3_first],
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{handler} ({setting}) failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    groups: dict[str, float] = defaultdict(float)
    # Only the handler's import: not what the child imported before (boto3 first, its own
    # modules), nor what the setup imports (boto3, for the stream handler).
    handlers_part = done.stderr.split("-- the handler --\n", 1)[1].split("-- its setup --")[0]
    for line in handlers_part.splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            own, _, name = line.removeprefix("import time:").split("|")
            groups[_group(name.strip())] += int(own) / 1000
    return result, groups


def baseline(runs: int) -> tuple[float, float]:
    """Median (wall ms, CPU ms) of ``python -I -S -c pass``, the interpreter alone."""
    walls, cpus = [], []
    for _ in range(runs):
        start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        walls.append((time.perf_counter() - start) * 1000)
        used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        cpus.append(used * 1000)
    return statistics.median(walls), statistics.median(cpus)


Sample = tuple[dict[str, float], dict[str, float]]


def _row(tree: str, handler: str, setting: str, samples: list[Sample]) -> str:
    def median(key: str) -> str:
        return f"{statistics.median(s[key] for s, _ in samples) * 1000:.0f}"

    names = {n for _, g in samples for n in g}
    groups = {n: statistics.median(g.get(n, 0.0) for _, g in samples) for n in names}
    ranked = sorted(groups.items(), key=lambda kv: -kv[1])
    parts = ", ".join(f"{n} {ms:.0f}" for n, ms in ranked if ms >= 1)
    return (
        f"| {handler} | {tree} | {setting} | {median('import')} | {median('import_cpu')} "
        f"| {median('setup')} | {median('setup_cpu')} | {parts} |"
    )


def imports_report(trees: dict[str, list[Path]], runs: int) -> None:
    load = os.getloadavg()[0]
    wall, cpu = baseline(runs)
    print(f"Load average {load:.1f} at the start ({os.cpu_count()} cores).")
    print(f"`python -I -S -c pass`: {wall:.0f} ms wall, {cpu:.0f} ms CPU (median of {runs})\n")
    print(
        "| handler | tree | tracing | import ms | import CPU ms | setup ms | setup CPU ms "
        f"| import self ms by distribution (median of {runs}) |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|")
    for handler in HANDLERS:
        for setting in SETTINGS:
            samples: dict[str, list[Sample]] = {tree: [] for tree in trees}
            for _ in range(runs):  # the trees interleaved, so that a change of load hits both
                for tree, paths in trees.items():
                    samples[tree].append(run_once(paths, handler, setting))
            for tree in trees:
                print(_row(tree, handler, setting, samples[tree]))
    print(f"\nLoad average {os.getloadavg()[0]:.1f} at the end.")


# botocore.client imports botocore.waiter, which imports botocore.docs (docstrings only). To
# see what that costs, a child replaces the package's __init__ (which loads every
# documenter) and botocore.docs.docstring with stand-ins; botocore's own imports of other
# botocore.docs modules still load them. A measurement only: nothing ships this.
_WITHOUT_DOCS = """
import sys, types
docs = types.ModuleType("botocore.docs")
docs.__path__ = [sys.argv[1]]
docstring = types.ModuleType("botocore.docs.docstring")
class _Doc(str):
    def __new__(cls, *args, **kwargs):
        return str.__new__(cls, "")
docstring.WaiterDocstring = docstring.ClientMethodDocstring = _Doc
docstring.PaginatorDocstring = _Doc
sys.modules.update({"botocore.docs": docs, "botocore.docs.docstring": docstring})
"""
_BOTOCORE = """
import sys
sys.path[:0] = sys.argv[2:]
import botocore.session
botocore.session.Session().create_client("events", region_name="us-east-1",
    aws_access_key_id="bench", aws_secret_access_key="bench")
print(len(sys.modules))
"""


def botocore_docs_report(paths: list[Path], runs: int) -> None:
    """CPU of importing botocore and creating a client, with and without botocore.docs."""
    docs_dir = next(p / "botocore" / "docs" for p in paths if (p / "botocore").is_dir())
    cpus: dict[str, list[float]] = {"with": [], "without": []}
    modules: dict[str, str] = {}
    for _ in range(runs):
        for kind, code in (("with", _BOTOCORE), ("without", _WITHOUT_DOCS + _BOTOCORE)):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run(
                [sys.executable, "-I", "-S", "-c", code, str(docs_dir), *map(str, paths)],
                capture_output=True,
                text=True,
                check=True,
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            cpus[kind].append(used * 1000)
            modules[kind] = done.stdout.strip()
    with_docs, without = (statistics.median(cpus[k]) for k in ("with", "without"))
    print(
        f"\nbotocore.docs: `import botocore.session` and one client, CPU ms (median of {runs}): "
        f"{with_docs:.0f} with it ({modules['with']} modules), {without:.0f} without it "
        f"({modules['without']} modules)."
    )


def asset_report() -> None:
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    sys.path.insert(0, str(ROOT))
    from sandbox_ledger_cdk.bundling import PipBundling
    from sandbox_ledger_cdk.deployment import PYTHON_VERSION

    for tracing in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "asset"
            out.mkdir()
            PipBundling(python_version=PYTHON_VERSION, tracing=tracing).try_bundle(str(out))
            unzipped = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
            archive = shutil.make_archive(str(Path(tmp) / "asset"), "zip", out)
            zipped = Path(archive).stat().st_size
        print(
            f"\nLambda asset, tracing {'on' if tracing else 'off'} (one asset, shared by both "
            f"functions: {', '.join(HANDLERS)}), Python {PYTHON_VERSION} arm64: "
            f"{zipped / 1e6:.1f} MB zipped, {unzipped / 1e6:.1f} MB unzipped."
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-asset", action="store_true")
    parser.add_argument(
        "--before", type=Path, help="another checkout: its handlers measured beside these"
    )
    args = parser.parse_args()
    print(f"Handler cold starts, Python {sys.version.split()[0]} ({args.runs} fresh processes)\n")
    with tempfile.TemporaryDirectory() as tmp:
        trees = build_packages(Path(tmp), args.before)
        imports_report(trees, args.runs)
        botocore_docs_report(trees["now"], args.runs * 3)
    if not args.no_asset:
        asset_report()


if __name__ == "__main__":
    main()
