"""The embedded server's CPU for the demo's own requests, with and without the hot-path
patches of ``sandbox_ledger.local`` (parsed update expressions, static checks, the
serializer's keys), in one process and one run.

First the demo runs once against an embedded server that records every request it serves
(headers and body). Then this process replays that recording into moto's WSGI application
directly (no sockets, no client), ``--rounds`` times per side, alternating: the server as
``LocalDynamoDB`` patches it, and the same with moto's own parser, validator and serializer
put back (``local._STOCK_HOT_PATH``). moto is reset before each replay, so every replay
serves the same requests on the same data. It reports each side's CPU time (the smallest
of its rounds, then per request of each operation) and how many responses differ between
the sides (those with a creation time or a random id in them, nothing else).

    .venv/bin/python benchmarks/server_replay.py             # records the demo, replays 5 + 5
    .venv/bin/python benchmarks/server_replay.py --rounds 3 --keep /tmp/demo-requests.json
    .venv/bin/python benchmarks/server_replay.py --requests /tmp/demo-requests.json
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The embedded server's child, recording each request before serving it.
RECORDER = """
import base64, io, json, os, sys, threading
import sandbox_ledger.local as local
log = []
KEEP = ("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "CONTENT_TYPE", "CONTENT_LENGTH",
        "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL", "SCRIPT_NAME", "REMOTE_ADDR",
        "wsgi.url_scheme")

def _serialized(app):
    lock = threading.Lock()
    def handle(environ, start_response):
        with lock:
            body = environ["wsgi.input"].read()
            environ["wsgi.input"] = io.BytesIO(body)
            kept = {k: v for k, v in environ.items()
                    if isinstance(v, str) and (k.startswith("HTTP_") or k in KEEP)}
            log.append([kept, base64.b64encode(body).decode()])
            return list(app(environ, start_response))
    return handle

local._serialized = _serialized
server = local.LocalDynamoDB("127.0.0.1", 0)
print(server.start(), flush=True)
sys.stdin.read()
with open(sys.argv[1], "w") as out:
    json.dump(log, out)
sys.stdout.flush()
os._exit(0)
"""


def record(path: Path) -> None:
    """Run ``sandbox-ledger demo`` once, its embedded server writing its requests to ``path``."""
    import sandbox_ledger.local as local
    from sandbox_ledger.cli.app import main as cli

    script = path.with_suffix(".recorder.py")
    script.write_text(RECORDER)
    real = subprocess.Popen

    def popen(command: list[str], *a: Any, **kw: Any) -> Any:
        if "sandbox_ledger.local" in command:
            command = [sys.executable, str(script), str(path)]
        return real(command, *a, **kw)

    module: Any = local
    module.subprocess.Popen = popen
    sys.argv = ["sandbox-ledger", "demo", "--json"]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            cli()
    finally:
        module.subprocess.Popen = real
    for _ in range(100):  # the child writes the recording as it ends
        if path.exists() and path.stat().st_size:
            break
        time.sleep(0.1)


def replay(app: Any, requests: list[Any]) -> tuple[dict[str, float], list[tuple[str, bytes]]]:
    """Serve every request; CPU seconds per operation, and each (status, body)."""
    from moto.moto_api._internal.models import moto_api_backend

    moto_api_backend.reset()
    cpu: dict[str, float] = collections.Counter()
    answers = []
    for kept, body in requests:
        environ = dict(kept)
        environ.update(
            {
                "wsgi.input": io.BytesIO(base64.b64decode(body)),
                "wsgi.errors": sys.stderr,
                "wsgi.version": (1, 0),
                "wsgi.multithread": False,
                "wsgi.multiprocess": False,
                "wsgi.run_once": False,
                "wsgi.input_terminated": True,
            }
        )
        status: list[str] = []
        start = time.process_time()
        chunks = list(app(environ, lambda s, h, *_: status.append(s)))
        operation = kept.get("HTTP_X_AMZ_TARGET", "?").rpartition(".")[2]
        cpu[operation] += time.process_time() - start
        answers.append((status[0], b"".join(chunks)))
    return cpu, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="replays per side")
    parser.add_argument("--requests", type=Path, help="replay this recording (no demo run)")
    parser.add_argument("--keep", type=Path, help="where to keep the recording")
    args = parser.parse_args()

    path = args.requests or args.keep or Path(tempfile.mkdtemp()) / "demo-requests.json"
    if args.requests is None:
        record(path)
    requests = json.loads(path.read_text())

    import logging

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    import sandbox_ledger.local as local

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    local._local_credentials()
    local.install_moto_patches()
    patched = [(owner, name, vars(owner)[name]) for owner, name, _ in local._STOCK_HOT_PATH]
    sides = {"patched": patched, "moto's own": local._STOCK_HOT_PATH}
    app = local._DynamoDBFirst(DomainDispatcherApplication(create_backend_app))
    replay(app, requests)  # warm up: moto loads its service models on first use

    best: dict[str, tuple[float, dict[str, float]]] = {}
    answers: dict[str, list[tuple[str, bytes]]] = {}
    for _ in range(args.rounds):
        for side, values in sides.items():
            for owner, name, value in values:
                setattr(owner, name, value)
            cpu, answers[side] = replay(app, requests)
            total = sum(cpu.values())
            if side not in best or total < best[side][0]:
                best[side] = (total, cpu)
    for owner, name, value in patched:
        setattr(owner, name, value)

    counts = collections.Counter(
        kept.get("HTTP_X_AMZ_TARGET", "?").rpartition(".")[2] for kept, _ in requests
    )
    shown = [op for op, _ in counts.most_common() if counts[op] >= 30]
    print(f"{len(requests)} requests of one demo run, {args.rounds} replays per side")
    print("| side | CPU s (least of the rounds) | " + " | ".join(f"{op} ms" for op in shown) + " |")
    print("|---|---:|" + "---:|" * len(shown))
    for side, (total, cpu) in best.items():
        per = " | ".join(f"{cpu[op] / counts[op] * 1000:.2f}" for op in shown)
        print(f"| {side} | {total:.2f} | {per} |")
    differing = [
        requests[i][0].get("HTTP_X_AMZ_TARGET", "?")
        for i, (a, b) in enumerate(zip(answers["patched"], answers["moto's own"], strict=True))
        if a != b
    ]
    print(f"responses that differ between the sides: {len(differing)} {sorted(set(differing))}")


if __name__ == "__main__":
    main()
