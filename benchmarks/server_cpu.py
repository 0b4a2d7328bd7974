"""The embedded DynamoDB's own CPU per request, which the machine's load moves far less than
wall time.

``LocalDynamoDBProcess`` serves in a child process; this client sends ``--requests``
sequential GetItem, then as many PutItem (200-byte items), and reads the child's CPU time
(user + system, from ``/proc/<pid>/stat``) before and after each series. To compare two
versions of the server, run it with each tree on ``PYTHONPATH``, interleaved:

    .venv/bin/python benchmarks/server_cpu.py
    PYTHONPATH=/tmp/before/adapter .venv/bin/python benchmarks/server_cpu.py   # git archive
"""

from __future__ import annotations

import argparse
import os

import boto3

import sandbox_ledger
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.local import LocalDynamoDBProcess


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    server = LocalDynamoDBProcess()
    endpoint = server.start()
    try:
        assert server._child is not None  # white-box: the old tree has no public pid either
        pid = server._child.pid
        client = boto3.client(
            "dynamodb",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
        SyncDynamoDBAdapter(
            "bench-cpu", endpoint_url=endpoint, region_name="us-east-1"
        ).create_table()
        key = {"PK": {"S": "x"}, "SK": {"S": "y"}}
        for _ in range(20):  # warm up: the first requests load moto's service models
            client.get_item(TableName="bench-cpu", Key=key)
        n = args.requests
        start = _cpu_seconds(pid)
        for _ in range(n):
            client.get_item(TableName="bench-cpu", Key=key)
        middle = _cpu_seconds(pid)
        for i in range(n):
            item = {"PK": {"S": f"x{i}"}, "SK": {"S": "y"}, "v": {"S": "z" * 200}}
            client.put_item(TableName="bench-cpu", Item=item)
        end = _cpu_seconds(pid)
    finally:
        server.stop()
    print(
        f"{sandbox_ledger.__file__}: server CPU per GetItem {(middle - start) / n * 1000:.2f} ms, "
        f"per PutItem {(end - middle) / n * 1000:.2f} ms ({n} each)"
    )


if __name__ == "__main__":
    main()
