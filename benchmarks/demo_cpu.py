"""Where `sandbox-ledger demo` spends its CPU: the client (this process) and the embedded
server (its child), and with ``--profile`` the server's own profile.

    .venv/bin/python benchmarks/demo_cpu.py              # client and server CPU, append p50
    .venv/bin/python benchmarks/demo_cpu.py --profile    # + the server's top functions

The profile is taken inside the server's request lock (one request at a time), so it counts
exactly the work the server does for requests; cProfile's own overhead inflates the absolute
times several-fold, so read the shares, not the seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHILD = """
import cProfile, os, sys, threading
import sandbox_ledger.local.dynamodb as server_module
from sandbox_ledger.local import LocalDynamoDB, adjustments
prof = cProfile.Profile()

def _serialized(app, settings, *_):  # the server's own lock and observers: unused here
    lock = threading.Lock()
    def handle(environ, start_response):
        with lock, adjustments.serving(settings):
            prof.enable()
            try:
                return list(app(environ, start_response))
            finally:
                prof.disable()
    return handle

server_module._serialized = _serialized
server = LocalDynamoDB("127.0.0.1", 0)
print(server.start())
print(flush=True)  # no adjustment left off (see LocalDynamoDBProcess.start)
sys.stdin.read()
prof.dump_stats(sys.argv[1])
sys.stdout.flush()
os._exit(0)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="profile the server's requests")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    import sandbox_ledger.local.dynamodb as server_module
    from sandbox_ledger.cli.app import main as cli

    folder = Path(tempfile.mkdtemp(prefix="demo-cpu-"))
    stats = folder / "server.prof"
    if args.profile:
        script = folder / "child.py"
        script.write_text(CHILD)
        real = subprocess.Popen

        def popen(command: list[str], *a: Any, **kw: Any) -> Any:
            if "sandbox_ledger.local" in command:
                command = [sys.executable, str(script), str(stats)]
            return real(command, *a, **kw)

        module: Any = server_module
        module = module.subprocess  # what LocalDynamoDBProcess.start() starts its child with
        module.Popen = popen

    sys.argv = ["sandbox-ledger", "demo", "--json"]
    start = time.perf_counter()
    summary = io.StringIO()
    with contextlib.redirect_stdout(summary), contextlib.suppress(SystemExit):
        cli()
    wall = time.perf_counter() - start
    me = resource.getrusage(resource.RUSAGE_SELF)
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    demo = json.loads(summary.getvalue())
    append = demo["operations"]["append"]
    print(f"load average {os.getloadavg()[0]:.1f}; demo wall {wall:.1f} s")
    print(
        f"demo's own: elapsedSeconds {demo['elapsedSeconds']:.1f}, "
        f"append p50 {append['p50Ms']} ms, p99 {append['p99Ms']} ms"
    )
    print(f"client CPU: user {me.ru_utime:.1f} s, sys {me.ru_stime:.1f} s")
    print(f"server CPU: user {child.ru_utime:.1f} s, sys {child.ru_stime:.1f} s")
    if args.profile:
        import pstats

        for _ in range(50):  # the child writes its profile as it ends
            if stats.exists():
                break
            time.sleep(0.1)
        report = pstats.Stats(str(stats))
        report.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
