"""``sandbox-ledger local --data`` at real size, as a new user runs it (issue 41, item 5).

Each step is the CLI in its own process, as in a shell:

1. ``local --data FILE --save-every S`` on an empty FILE; ``import`` of ``--entries`` lines
   (sessions of 6, ``benchmarks/bench_transfer.py``'s file) while a probe sends a GetItem
   every 50 ms: the import's rate, and the slowest probe (how long a save or anything else
   held a request up);
2. the seconds from the import's end (every entry acknowledged) until FILE holds every
   entry (at most S plus a save's own time), then ``kill -9`` of the server: the entries
   FILE holds;
3. the server again on that FILE: seconds until it serves (its export lines printed) and
   its CPU for the load; then its CPU over 10 idle seconds;
4. ``export`` of everything from it: seconds, and whether it completed;
5. Ctrl-C: seconds until the server has exited, and its last line.

``--export-entries N`` (default: none) then starts a server on a FILE of N entries written
directly (an export's lines are a data file) and exports them: an export of 200,000 entries
from a loaded server, without importing them over HTTP first. ``--restart-entries N``
(default: none) starts a server on a FILE of N entries written directly (no ``.FILE.image``:
every session built), waits for it to write the image, stops it, and starts it again on the
same FILE (every session from the image): the starts alone (``--entries 0`` skips the
import).

    .venv/bin/python benchmarks/local_data.py                      # 100,000 entries
    .venv/bin/python benchmarks/local_data.py --entries 20000 --export-entries 200000
    .venv/bin/python benchmarks/local_data.py --entries 0 --restart-entries 100000
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_transfer import write_file

CLI = [sys.executable, "-m", "sandbox_ledger.cli"]


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """``sandbox-ledger local --data FILE`` in a child process, and the environment its
    lines set."""

    def __init__(self, data: Path, save_every: float) -> None:
        started = time.perf_counter()
        self.process = subprocess.Popen(
            [*CLI, "local", "--port", "0", "--data", str(data), "--save-every", str(save_every)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stdout is not None
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        while not (line := self.process.stdout.readline()).startswith("export SANDBOX_LEDGER"):
            if not line:
                raise RuntimeError(self.process.stderr.read() if self.process.stderr else "")
            if line.startswith("export "):
                key, _, value = line[len("export ") :].strip().partition("=")
                self.env[key] = value
        self.env["SANDBOX_LEDGER_TABLE"] = line.strip().partition("=")[2]
        self.env.pop("SANDBOX_LEDGER_STORE", None)
        self.serving_after = time.perf_counter() - started
        self.load_cpu = _cpu_seconds(self.process.pid)

    def cli(self, *argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
        started = time.perf_counter()
        done = subprocess.run(
            [*CLI, *argv], env=self.env, capture_output=True, text=True, check=False
        )
        return done, time.perf_counter() - started

    def idle_cpu(self, seconds: float = 10) -> float:
        before = _cpu_seconds(self.process.pid)
        time.sleep(seconds)
        return (_cpu_seconds(self.process.pid) - before) / seconds

    def interrupt(self) -> tuple[float, str]:
        started = time.perf_counter()
        self.process.send_signal(signal.SIGINT)
        _, stderr = self.process.communicate(timeout=600)
        return time.perf_counter() - started, stderr.strip().splitlines()[-1]


class Probe:
    """A GetItem every 50 ms on its own client: the slowest one while it runs."""

    def __init__(self, env: dict[str, str]) -> None:
        import boto3

        self.client = boto3.client(
            "dynamodb",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name=env["AWS_REGION"],
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
        self.table = env["SANDBOX_LEDGER_TABLE"]
        self.slowest = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        key = {"PK": {"S": "probe"}, "SK": {"S": "probe"}}
        while not self.stop.wait(0.05):
            started = time.perf_counter()
            self.client.get_item(TableName=self.table, Key=key)
            self.slowest = max(self.slowest, time.perf_counter() - started)

    def end(self) -> float:
        self.stop.set()
        self.thread.join()
        return self.slowest


def _count(data: Path) -> int:
    """The entries the data file holds: 0 before the server's first save has written it
    (a slow machine acknowledges the import before that save)."""
    from sandbox_ledger.local.persist import read_data

    if not data.exists():
        return 0
    return read_data(data).entries


def run(entries: int, save_every: float, work: Path) -> dict[str, Any]:
    source = work / f"ledger-{entries}.jsonl"
    write_file(source, entries)
    data = work / "dev.jsonl"
    result: dict[str, Any] = {"entries": entries, "save_every": save_every}
    server = Server(data, save_every)
    probe = Probe(server.env)
    imported, seconds = server.cli("import", str(source))
    result["import_s"] = round(seconds, 1)
    result["import_lines_per_s"] = round(entries / seconds)
    result["import_ok"] = imported.returncode == 0
    acknowledged = time.perf_counter()
    result["slowest_request_during_import_s"] = round(probe.end(), 3)
    while _count(data) < entries and time.perf_counter() - acknowledged < 120:
        time.sleep(0.2)
    result["in_file_after_acknowledged_s"] = round(time.perf_counter() - acknowledged, 1)
    server.process.kill()
    server.process.wait()
    result["kept_after_kill_9"] = _count(data)

    server = Server(data, save_every)
    result["restart_serves_after_s"] = round(server.serving_after, 1)
    result["restart_cpu_s"] = round(server.load_cpu, 1)
    result["idle_cpu_share"] = round(server.idle_cpu(), 4)
    exported, seconds = server.cli("export", "-o", str(work / "out.jsonl"))
    result["export_s"] = round(seconds, 1)
    result["export_ok"] = exported.returncode == 0 and _count(work / "out.jsonl") == entries
    seconds, last = server.interrupt()
    result["ctrl_c_s"] = round(seconds, 2)
    result["ctrl_c_said"] = last
    return result


def run_export(entries: int, work: Path) -> dict[str, Any]:
    data = work / "big.jsonl"
    write_file(data, entries)
    server = Server(data, 5)
    result: dict[str, Any] = {
        "entries": entries,
        "serves_after_s": round(server.serving_after, 1),
        "load_cpu_s": round(server.load_cpu, 1),
    }
    exported, seconds = server.cli("export", "-o", str(work / "big-out.jsonl"))
    result["export_s"] = round(seconds, 1)
    result["export_ok"] = exported.returncode == 0 and _count(work / "big-out.jsonl") == entries
    result["export_said"] = exported.stderr.strip().splitlines()[-1:]
    seconds, _ = server.interrupt()
    result["ctrl_c_s"] = round(seconds, 2)
    return result


def run_restart(entries: int, work: Path) -> dict[str, Any]:
    """A server started on a FILE of ``entries`` written directly (no image of it yet), then
    again on that FILE (its image written by the first): for each, when it serves, its CPU
    for the load, an ``ls`` from it, and Ctrl-C."""
    data = work / "restart.jsonl"
    write_file(data, entries)
    result: dict[str, Any] = {"entries": entries}
    for name in ("first_start", "restart"):
        server = Server(data, 5)
        run: dict[str, Any] = {
            "serves_after_s": round(server.serving_after, 1),
            "load_cpu_s": round(server.load_cpu, 1),
        }
        image = data.with_name(f".{data.name}.image")
        waited = time.perf_counter()
        while not image.exists() and time.perf_counter() - waited < 120:
            time.sleep(0.2)  # the first start writes it once it serves
        run["image_after_s"] = round(time.perf_counter() - waited + server.serving_after, 1)
        listed, seconds = server.cli("ls", "--name", "job-01")
        run["ls_s"] = round(seconds, 2)
        run["ls_ok"] = listed.returncode == 0
        seconds, _ = server.interrupt()
        run["ctrl_c_s"] = round(seconds, 2)
        result[name] = run
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--save-every", type=float, default=5.0)
    parser.add_argument("--export-entries", type=int, default=0)
    parser.add_argument("--restart-entries", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        if args.entries:
            print(json.dumps(run(args.entries, args.save_every, Path(work))), flush=True)
        if args.export_entries:
            print(json.dumps({"export": run_export(args.export_entries, Path(work))}), flush=True)
        if args.restart_entries:
            restart = run_restart(args.restart_entries, Path(work))
            print(json.dumps({"restart": restart}), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
