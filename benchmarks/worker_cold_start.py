"""Cold start of a worker: importing the library and its first append, against a raw boto3
``put_item`` worker, each in fresh processes with the Lambda's packages only.

    python benchmarks/worker_cold_start.py            # median of 7 of each
    python benchmarks/worker_cold_start.py --runs 15

The worker's packages are the base install built for this machine (``worker_bundle.build``
without the Lambda platform, boto3 and its dependencies left out) and, as the Lambda runtime
ships it, boto3 in a folder of its own. Each run is a fresh ``python -I -S`` whose
``sys.path`` is those folders, against one local DynamoDB (moto, in a child process):

* worker: ``import`` of ``sandbox_ledger`` and ``SyncDynamoDBAdapter``, the adapter built,
  its first ``append`` (which reads the table's descriptor, then writes the entry);
* raw: ``import boto3``, a DynamoDB client, one ``put_item`` of a comparable item;
* raw + pydantic: the same, after importing pydantic and validating the entry with a model of
  LedgerEntry's required fields: the part of the worker's cost that any worker validating
  its input with pydantic pays, whatever the library does;
* the worker's imports alone, to tell the import's share from the first append's.

The two alternate, so that the machine's load falls on both alike; wall and CPU (user+sys)
medians are printed, and the worker's excess over raw and over raw + pydantic.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from worker_bundle import build, remove_runtime_packages

TABLE = "cold-start"

_TIMER = """
import json, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
endpoint, table = sys.argv[1], sys.argv[2]
t0, c0 = time.perf_counter(), cpu()
"""
_DONE = """
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": cpu() - c0}))
"""
IMPORT = """
from sandbox_ledger import LedgerEntry
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
"""
WORKER = (
    IMPORT
    + """
ledger = SyncDynamoDBAdapter(table, endpoint_url=endpoint)
ledger.append(LedgerEntry(ts=int(time.time() * 1000), name="cold", sandbox_id=str(t0),
                          step_index=-1, event="sandbox.created"))
"""
)
RAW = """
import boto3
client = boto3.client("dynamodb", endpoint_url=endpoint)
client.put_item(TableName=table, Item={"PK": {"S": "raw#" + str(t0)}, "SK": {"S": "0"},
                "event": {"S": "sandbox.created"}, "ts": {"N": str(int(time.time() * 1000))}})
"""
RAW_PYDANTIC = """
import boto3
from pydantic import BaseModel
class Entry(BaseModel):
    ts: int
    name: str
    sandbox_id: str
    step_index: int
    event: str
entry = Entry(ts=int(time.time() * 1000), name="cold", sandbox_id=str(t0), step_index=-1,
              event="sandbox.created")
client = boto3.client("dynamodb", endpoint_url=endpoint)
client.put_item(TableName=table, Item={"PK": {"S": "raw#" + entry.sandbox_id}, "SK": {"S": "1"},
                "event": {"S": entry.event}, "ts": {"N": str(entry.ts)}})
"""


def run(paths: list[Path], body: str, endpoint: str) -> dict[str, float]:
    """Seconds (wall, CPU) of ``body`` in a fresh process on ``paths`` alone."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "AWS_REGION": "us-east-1",  # as Lambda sets both
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_LAMBDA_FUNCTION_NAME": "bench",
    }
    code = f"import sys; sys.path[:0] = {[str(p) for p in paths]!r}\n" + _TIMER + body + _DONE
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, endpoint, TABLE],
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()

    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.local import LocalDynamoDBProcess

    with tempfile.TemporaryDirectory() as tmp:
        worker, runtime = Path(tmp) / "bundle", Path(tmp) / "runtime"
        build(worker, platform=())
        remove_runtime_packages(worker)
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
        subprocess.run(
            [*pip, "install", "--no-compile", "--target", str(runtime), "boto3>=1.40"],
            check=True,
            capture_output=True,
        )
        # Bytecode for both trees, as a deployment package would ship it: the first
        # import compiles no source in either.
        subprocess.run([sys.executable, "-m", "compileall", "-q", tmp], check=True)
        server = LocalDynamoDBProcess()
        endpoint = server.start()
        try:
            with SyncDynamoDBAdapter(TABLE, endpoint_url=endpoint) as admin:
                admin.create_table()
            samples: dict[str, list[dict[str, float]]] = {
                "worker": [],
                "raw": [],
                "raw + pydantic": [],
                "worker, import only": [],
            }
            for _ in range(args.runs):
                samples["worker"].append(run([worker, runtime], WORKER, endpoint))
                samples["raw"].append(run([runtime], RAW, endpoint))
                # The bundle holds pydantic; nothing of sandbox_ledger is imported.
                samples["raw + pydantic"].append(run([worker, runtime], RAW_PYDANTIC, endpoint))
                samples["worker, import only"].append(run([worker, runtime], IMPORT, endpoint))
        finally:
            server.stop()
    medians = {
        name: {key: statistics.median(s[key] for s in runs) * 1000 for key in ("wall", "cpu")}
        for name, runs in samples.items()
    }
    print(f"median of {args.runs}, ms{'':<14}wall   cpu")
    for name, values in medians.items():
        print(f"{name:<26}{values['wall']:>7.0f}{values['cpu']:>6.0f}")
    for baseline in ("raw", "raw + pydantic"):
        excess = {key: medians["worker"][key] - medians[baseline][key] for key in ("wall", "cpu")}
        print(f"{'worker - ' + baseline:<26}{excess['wall']:>7.0f}{excess['cpu']:>6.0f}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
